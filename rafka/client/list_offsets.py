"""ListOffsets as Kafka's clients send it: one request per leader host carrying every
partition it leads, answered per partition; what the admin client and the consumer
(``beginning_offsets``, ``end_offsets``, ``offsets_for_times``, position resets) share.

A partition whose answer is retriable (a leader moving, a new leader still learning its
high watermark, a host restarting) is asked again, after ``backoff_s``, until the
deadline; the others keep their answers.
"""
from __future__ import annotations

import time
from typing import Mapping

from protocols.errors import KafkaError, LeaderNotAvailableError, UnknownTopicOrPartitionError
from protocols.topics import TopicPartition
from protocols.wire import decode
from rafka.client.retry import MIN_ATTEMPT_S, is_retriable


def list_offsets(metadata, wanted: Mapping[TopicPartition, int], timeout_s: float,
                 backoff_s: float, unknown_fails: bool = False, isolation_level: int = 0,
                 door=None) -> dict[TopicPartition, tuple[int, int]]:
    """``{partition: timestamp}`` (Kafka's EARLIEST_TIMESTAMP / LATEST_TIMESTAMP or a time
    in ms) -> ``{partition: (offset, timestamp)}`` from each partition's leader, through
    ``metadata`` (a ``ClientMetadata``). With ``unknown_fails`` (the admin client), a
    partition absent from fresh metadata fails at once with UNKNOWN_TOPIC_OR_PARTITION;
    without (the consumer), it is waited for until the deadline. ``isolation_level`` 1
    (read_committed): latest is the last stable offset. Through a guarded ``door`` (a
    RayDoor), each request is checked at its broker (DESCRIBE on each topic)."""
    import ray

    guarded = door is not None and door.guarded

    deadline = time.monotonic() + timeout_s
    answers: dict[TopicPartition, tuple[int, int]] = {}
    while True:
        pending = [tp for tp in wanted if tp not in answers]
        if not pending:
            return answers
        errors: dict[TopicPartition, BaseException] = {}
        leaders = metadata.leaders(pending, max(MIN_ATTEMPT_S, deadline - time.monotonic()))
        by_host: dict[str, tuple] = {}
        for tp in pending:
            info = leaders.get(tp)
            if info is None:
                errors[tp] = LeaderNotAvailableError(f"No leader for {tp.topic}-{tp.partition}")
                continue
            by_host.setdefault(info.handle.host_id, (info.handle.host, []))[1].append(tp)
        requests = [(tps, host, [(tp.topic, tp.partition, int(wanted[tp]), -1,
                                  isolation_level) for tp in tps])
                    for host, tps in by_host.values()]
        # Sent to every host (through the door, to its broker) before any answer is awaited.
        refs = (door.call_many("list_offsets", [(host, asked) for _, host, asked in requests])
                if guarded else [host.list_offsets_many.remote(asked)
                                 for _, host, asked in requests])
        for (tps, _, _), ref in zip(requests, refs):
            try:
                raw = ref if guarded else \
                    ray.get(ref, timeout=max(MIN_ATTEMPT_S, deadline - time.monotonic()))
                if isinstance(raw, BaseException) and not isinstance(raw, KafkaError):
                    raise raw
            except Exception as e:   # its host died or did not answer: ask again
                errors.update((tp, e) for tp in tps)
                continue
            if isinstance(raw, KafkaError):   # the door's answer for the whole request
                errors.update((tp, raw) for tp in tps)
                continue
            for tp, encoded in zip(tps, raw):
                answer = decode(encoded)
                if isinstance(answer, KafkaError):
                    errors[tp] = answer
                else:
                    answers[tp] = tuple(answer)
        if not errors:
            continue
        for tp, error in errors.items():
            if not is_retriable(error) or time.monotonic() >= deadline:
                raise error
            metadata.forget(tp)
        if unknown_fails:
            metadata.refresh()
            for tp in errors:
                if not metadata.knows(tp):
                    raise UnknownTopicOrPartitionError(
                        f"Unknown partition {tp.topic}-{tp.partition}")
        time.sleep(min(backoff_s, max(0.0, deadline - time.monotonic())))
