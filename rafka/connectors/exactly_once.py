"""Exactly-once writes for the sinks (Spark's ``exactlyOnce`` option, Ray Data's
``write_topic(..., exactly_once=True)``), built on transactions.

Each write task writes its rows in one transaction, under a transactional id of its own
(``<prefix>-<task>``) that every attempt of the task shares, and commits with them, in the
same transaction, a marker: the offset ``sequence`` of the pseudo-partition
``(<prefix>, <task>)`` in the consumer group ``<prefix>`` (``send_offsets_to_transaction``,
so the marker and the records become visible together or not at all). An attempt:

1. ``init_transactions``: fences every older attempt of the task (a zombie's open
   transaction is aborted; a commit it had begun is finished first);
2. reads the marker, stable (``require_stable``: a commit in flight is waited for);
3. writes nothing if the marker says this task's rows of this ``sequence`` are in the log
   already, else writes them, the marker with them, and commits.

A task retried after its commit (its executor died before reporting), an aborted attempt,
a zombie attempt and a micro-batch run again after a driver restart from its checkpoint
therefore leave each row in the log once. This holds as long as a re-run task is given the
same rows as the first run of that task (Spark replays a micro-batch from its offset log
with the same plan; a plan whose partitioning is not deterministic is outside it).
``sequence`` is Spark's batch id + 1 for a streaming query, and 1 for a one-off job.

The same steps run through Ray (``write_exactly_once``: ``rafka.Producer`` and
``rafka.Admin``) or over the Kafka listener (``write_over_listener``: a Spark job naming the
cluster by ``kafka.bootstrap.servers`` alone, whose tasks have no Ray).
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from protocols.topics import TopicPartition
from rafka.connectors.arrow_sink import send_rows, split_rows


@dataclass(frozen=True)
class ExactlyOnceTask:
    prefix: str       # the sink's (per query, or per job): names its ids and its group
    task: int         # Spark's partition id, Ray Data's write task index
    sequence: int     # Spark's batch id + 1 for a streaming query, else 1

    @property
    def transactional_id(self) -> str:
        return f"{self.prefix}-{self.task}"

    @property
    def group_id(self) -> str:
        return self.prefix

    @property
    def marker(self) -> TopicPartition:
        return TopicPartition(self.prefix, self.task)


def already_written(admin, task: ExactlyOnceTask) -> bool:
    """Whether the task's rows of this sequence are committed (the marker, read stable by
    ``admin``: ``rafka.Admin`` or ``ListenerAdmin``)."""
    done = admin.list_consumer_group_offsets(
        task.group_id, [task.marker], require_stable=True).get(task.marker)
    return done is not None and done.offset >= task.sequence


def write_exactly_once(cluster, config: Mapping[str, Any], task: ExactlyOnceTask,
                       tables: Iterable, topic: str | None) -> int:
    """``write_in_transaction`` through Ray: ``config`` the client settings (its SASL ones
    sign in at the Ray door)."""
    import rafka
    return write_in_transaction(lambda c: rafka.Producer(cluster, c),
                                lambda: cluster.admin(config), config, task, tables, topic)


def write_over_listener(bootstrap_servers: str, config: Mapping[str, Any],
                        task: ExactlyOnceTask, tables: Iterable, topic: str | None) -> int:
    """``write_in_transaction`` over the cluster's Kafka listener (PLAINTEXT), no Ray."""
    from rafka.client.listener_admin import ListenerAdmin
    from rafka.client.listener_producer import ListenerProducer
    return write_in_transaction(
        lambda c: ListenerProducer(bootstrap_servers, c),
        lambda: ListenerAdmin(bootstrap_servers, client_id=config.get("client.id") or
                              "rafka-exactly-once"), config, task, tables, topic)


def write_in_transaction(producer_of: Callable[[Mapping[str, Any]], Any],
                         admin_of: Callable[[], Any], config: Mapping[str, Any],
                         task: ExactlyOnceTask, tables: Iterable, topic: str | None) -> int:
    """The task's rows (Arrow tables or record batches, the sinks' columns) in one
    transaction with its marker; the number of records this attempt wrote (0 when an
    earlier attempt or run had written them). ``producer_of(config)``: a producer of these
    settings (its transactional id the task's); ``admin_of()``: an admin to read the marker
    with, closed after."""
    from protocols.messages import OffsetAndMetadata

    tables = iter(tables)
    first = next((t for t in tables if t.num_rows), None)
    if first is None:
        return 0        # nothing to write, in this run as in any other
    producer = producer_of({**config, "transactional.id": task.transactional_id})
    try:
        producer.init_transactions()
        with admin_of() as admin:
            if already_written(admin, task):
                return 0
        producer.begin_transaction()
        count = 0
        for table in itertools.chain((first,), tables):
            if not table.num_rows:
                continue
            for target, partition, rows in split_rows(table, topic):
                send_rows(producer, target, partition, rows)
            count += table.num_rows
        metadata = json.dumps({"sequence": task.sequence, "records": count})
        producer.send_offsets_to_transaction(
            {task.marker: OffsetAndMetadata(task.sequence, metadata=metadata)}, task.group_id)
        producer.commit_transaction()    # raises if any record failed: the task fails
        return count
    finally:
        producer.close()                 # an open transaction is aborted
