"""Reading a coordinator's internal partition (``__consumer_offsets``,
``__transaction_state``) from its start, as a coordinator does when it becomes the
partition's leader: every ``(key, value)`` in offset order, for its pure core to fold."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from protocols.control_records import COMMIT, control_record_type
from protocols.records import iter_batches

log = logging.getLogger(__name__)
RETRY_S = 0.5


async def read_partition(replica: Any, load_buffer: int,
                         transactional: bool = False) -> list[tuple]:
    """The replica's records from its log start to its log end, ``load_buffer`` bytes
    a read (Kafka's ``*.load.buffer.size``): ``(key, value)`` each, control batches left
    out. With ``transactional`` (``__consumer_offsets``, where transactions commit offsets)
    each is ``(key, value, producer id, None)``, the producer id -1 outside transactions,
    and each marker is ``(None, None, producer id, True for COMMIT / False for ABORT)``."""
    state = await replica.describe.remote()
    offset, end = state["log_start_offset"], state["log_end_offset"]
    records: list[tuple] = []
    while offset < end:
        data = await replica.read_local.remote(offset, load_buffer)
        last = None
        for batch in iter_batches(data):
            if batch.is_control:
                if transactional and batch.last_offset >= offset:
                    for _off, _ts, key, _value, _headers in batch.record_tuples():
                        records.append((None, None, batch.producer_id,
                                        control_record_type(key) == COMMIT))
            else:
                pid = batch.producer_id if batch.is_transactional else -1
                for off, _ts, key, value, _headers in batch.record_tuples():
                    if off >= offset:
                        records.append((key, value, pid, None) if transactional
                                       else (key, value))
            last = batch.last_offset
        if last is None:
            break
        offset = last + 1
    return records


async def read_until_done(replica: Callable[[], Awaitable[Any]], forget: Callable[[], None],
                          load_buffer: int, what: str, transactional: bool = False
                          ) -> list[tuple]:
    """``read_partition`` of the replica ``replica()`` finds, tried again every half
    second while it fails (the replica still starting); ``forget()`` drops a handle that
    failed. Cancel the task to stop (the partition moved)."""
    while True:
        try:
            return await read_partition(await replica(), load_buffer, transactional)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("loading %s failed (%r); retrying", what, e)
            forget()
            await asyncio.sleep(RETRY_S)


class LedPartitions:
    """The internal partitions a coordinator leads, seen from its actor: a handle on this
    broker's (leader) replica of each, and the task loading each after an election."""

    def __init__(self, namespace: str, topic: str, broker_id: int, load_buffer: int,
                 transactional: bool = False):
        self.transactional = transactional
        self.namespace = namespace
        self.topic = topic
        self.broker_id = broker_id
        self.load_buffer = load_buffer
        self.loading: dict[int, asyncio.Task] = {}
        self._replicas: dict[int, Any] = {}

    async def replica(self, partition: int) -> Any:
        from actors.replica.locate import locate_replica_async
        handle = self._replicas.get(partition)
        if handle is None:
            handle = self._replicas[partition] = await locate_replica_async(
                self.namespace, self.topic, partition, self.broker_id)
        return handle

    def replica_failed(self, partition: int) -> None:
        """A call to the replica failed: it is located again next time."""
        self._replicas.pop(partition, None)

    def forget(self, partition: int) -> None:
        """The partition moved (or is loaded afresh): its load stops, its handle goes."""
        task = self.loading.pop(partition, None)
        if task is not None:
            task.cancel()
        self._replicas.pop(partition, None)

    def load(self, partition: int, leader_epoch: int,
             loaded: Callable[[list[tuple[bytes | None, bytes | None]]], None]) -> None:
        """Read the partition afresh (``read_until_done``), then ``loaded(records)``."""
        self.forget(partition)
        self.loading[partition] = asyncio.get_running_loop().create_task(
            self._load(partition, leader_epoch, loaded))

    async def _load(self, partition: int, leader_epoch: int, loaded) -> None:
        name = f"{self.topic}-{partition}"
        try:
            records = await read_until_done(lambda: self.replica(partition),
                                            lambda: self.replica_failed(partition),
                                            self.load_buffer, name, self.transactional)
            loaded(records)
            log.info("coordinator %d: loaded %s (epoch %d): %d records", self.broker_id,
                     name, leader_epoch, len(records))
        finally:
            if self.loading.get(partition) is asyncio.current_task():
                del self.loading[partition]

    async def wait_loaded(self, partition: int) -> None:
        task = self.loading.get(partition)
        if task is not None:
            await asyncio.shield(task)
