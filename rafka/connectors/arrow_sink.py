"""Rows in Arrow to a producer: what Spark's sink and Ray Data's datasink share.

The columns are Spark's Kafka sink's: ``value`` (string or binary, required), ``key``
(string or binary), ``topic`` (string), ``partition`` (int) and ``headers``
(array<struct<key: string, value: binary>>); other columns are ignored. Rows go to
``Producer.send_batch`` a group at a time, so no Python object is made per row on the common
path; a row whose ``partition`` is null is partitioned by its key (murmur2), else
stickily, as ``Producer.send`` does. Headers are encoded column by column too.
"""
from __future__ import annotations

from typing import Iterator

TOPIC_REQUIRED = ("topic option required when no 'topic' attribute is present. Use the topic "
                  "option for setting a topic.")


class SinkError(ValueError):
    """Rows a sink cannot send (Spark's Kafka sink's messages)."""


def split_rows(batch, topic: str | None) -> Iterator[tuple[str, int | None, object]]:
    """``(topic, partition or None, rows)`` groups of one Arrow record batch (or table),
    in an order that keeps every partition's rows in the order given (as a sink sending row
    by row would): per topic, runs of rows with and without a given partition, a run with
    one split by partition. ``topic``, when given, overrides the rows' topic column."""
    import numpy as np
    import pyarrow.compute as pc

    names = batch.schema.names
    if topic:
        groups = [(topic, batch)]
    else:
        if "topic" not in names:
            raise SinkError(TOPIC_REQUIRED)
        topics = batch.column(names.index("topic"))
        if topics.null_count:
            raise SinkError("null topic present in the data. Use the topic option for "
                            "setting a topic.")
        unique = pc.unique(topics).to_pylist()
        groups = [(unique[0], batch)] if len(unique) == 1 else \
            [(t, batch.filter(pc.equal(topics, t))) for t in unique]
    for target, rows in groups:
        given = rows.column(names.index("partition")) if "partition" in names else None
        if given is None or given.null_count == len(given):
            yield target, None, rows
            continue
        unset = pc.is_null(given).to_numpy(zero_copy_only=False)
        starts = [0, *(np.flatnonzero(np.diff(unset)) + 1).tolist(), len(rows)]
        for start, end in zip(starts, starts[1:]):
            run = rows.slice(start, end - start)
            if unset[start]:
                yield target, None, run
                continue
            in_run = given.slice(start, end - start)
            for p in pc.unique(in_run).to_pylist():
                yield target, p, run.filter(pc.equal(in_run, p))


def send_rows(producer, topic: str, partition: int | None, rows):
    """One group of rows to ``send_batch``: its future."""
    from protocols.arrow_records import as_binary

    names = rows.schema.names
    if "value" not in names:
        raise SinkError("Required attribute 'value' not found")
    values = as_binary(rows.column(names.index("value")))
    keys = as_binary(rows.column(names.index("key"))) if "key" in names else None
    headers = rows.column(names.index("headers")) if "headers" in names else None
    return producer.send_batch(topic, values, keys, partition, headers=headers)
