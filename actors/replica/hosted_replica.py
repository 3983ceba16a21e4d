"""HostedReplica: one replica of one partition on one broker, living in a replica host.

The decisions are ``PartitionReplica``'s; this shell owns the replica's log directory, runs
the follower's fetch loop against the leader's replica, sends the leader's AlterPartition
proposals to the controller, and turns purgatory completions into answers (an acks=all
produce or a long-polled fetch is an awaited future completed by the timing wheel or by a
follower's fetch, never a sleep loop). It is not a Ray actor: a ``ReplicaHostActor`` holds
many and routes each call to one by topic-partition, on the host's event loop, so nothing
here may block that loop. Arguments and answers are msgpack (``protocols.wire``); Kafka
errors come back as values, with their classes and codes.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable


from actors.gcs import lookup
from actors.names import CONTROLLER
from actors.replica.alter_partition import AlterPartitionSender
from actors.replica.fetcher_manager import ReplicaFetcherManager
from actors.replica.partition import PartitionReplica, Purgatories, ReplicaConfig
from protocols.errors import KafkaError
from storage.partition_metadata import PartitionMetadataFile, claim
from protocols.messages import (DeleteRecordsResult, FetchRequest, FetchResult, LeaderAndIsr,
                                ProduceResult)
from protocols.wire import decode, encode
from storage import Log
from storage.cleaner import Cleaner
from storage.config import LogConfig
from storage.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)

# How long an AlterPartition waits for the controller before it is sent again (Kafka's
# broker-to-controller channel times out at request.timeout.ms).
ALTER_PARTITION_TIMEOUT_MS = 30_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def answer_future() -> tuple[asyncio.Future, Callable[[Any], None]]:
    """A future on the running loop, and the ``on_done`` callback a core's delayed operation
    answers through: it completes the future once (a later call finds it done)."""
    future = asyncio.get_running_loop().create_future()

    def done(result) -> None:
        if not future.done():
            future.set_result(result)
    return future, done


class HostedReplica:
    """Built off the event loop (opening a log may recover it from its files); every other
    method runs on the host's loop."""

    def __init__(self, namespace: str, broker_id: int, topic: str, partition: int,
                 log_dir: str, topic_config: dict, broker_log_config: dict,
                 config: ReplicaConfig, purgatories: Purgatories,
                 fetchers: ReplicaFetcherManager, recovery_point: int = 0,
                 log_start_offset: int = 0, high_watermark: int | None = None,
                 clean_shutdown: bool = False, topic_id: str | None = None,
                 failure_channel: LogDirFailureChannel | None = None,
                 flush_soon: Callable[[Callable[[], None]], None] | None = None):
        self.namespace = namespace
        self.broker_id = broker_id
        # Told of each ISR change the controller took: (ISR size before, after).
        self.on_isr_change: Callable[[int, int], None] | None = None
        self.broker_log_config = dict(broker_log_config)
        self.backoff_s = config.replica_fetch_backoff_ms / 1000
        self.fetchers = fetchers
        directory = Path(log_dir)
        # partition.metadata (KIP-516). A stray log (of a deleted topic of the same name) is
        # deleted first, and the broker's checkpoints of it no longer apply. The host writes
        # the file soon after (``ReplicaHostActor._flush_soon``), or ``stop`` does.
        self.metadata_file = PartitionMetadataFile(directory)
        if topic_id is not None and claim(self.metadata_file, topic_id):
            recovery_point, log_start_offset, high_watermark = 0, 0, None
        self.log = Log.open(directory, LogConfig.from_props(topic_config,
                                                            broker=broker_log_config),
                            recovery_point=recovery_point, log_start_offset=log_start_offset,
                            high_watermark=high_watermark,
                            clean_shutdown=clean_shutdown or not any(directory.glob("*.log")),
                            failure_channel=failure_channel)
        if flush_soon is not None:
            # A new epoch's checkpoint is written by the host's worker thread, not with an
            # fsync on the event loop per new leader (``storage.epoch``). ``flush_soon`` may
            # be called from any thread.
            self.log.leader_epoch_cache.on_dirty = \
                lambda _cache: flush_soon(self.flush_leader_epochs)
        # The host's config, purgatories (and their one timer) serve every hosted replica.
        self.replica = PartitionReplica(topic, partition, broker_id, self.log, clock=wall_ms,
                                        config=config, purgatories=purgatories)
        self.cleaner = Cleaner()
        self.first_dirty_offset: int | None = None
        self._controller = None
        # A controller that does not answer for this long is asked again.
        self.alter_timeout_s = ALTER_PARTITION_TIMEOUT_MS / 1000
        self.alter_sender = AlterPartitionSender(self.replica, wall_ms,
                                                 ALTER_PARTITION_TIMEOUT_MS)
        self._alter_task: asyncio.Task | None = None
        self._closed = False
        # Held by a retention or cleaning pass over this log (in a worker thread): ``stop``
        # waits for it before closing or removing the files under it.
        self._log_work = threading.Lock()

    # ---- control (from the broker) ---------------------------------------------------------
    def become(self, m: LeaderAndIsr) -> KafkaError | None:
        """Apply a LeaderAndIsr; a stale one is refused with FENCED_LEADER_EPOCH."""
        r = self.replica
        try:
            if r.apply_leader_and_isr(m.leader, m.leader_epoch, m.partition_epoch,
                                      list(m.isr), list(m.replicas)):
                # A new leader or epoch: truncate first, then fetch from the new leader's
                # host (the fetch in flight to the old one is not ours any more).
                self.fetchers.follow(r)
        except KafkaError as e:
            return e
        self.fetchers.ensure(r)
        return None

    async def stop(self, delete: bool = False) -> tuple[int, int, int]:
        """StopReplica: stop fetching and close the log (flushed); with ``delete`` remove it.
        Returns the checkpoint triple so the broker records it."""
        self._closed = True
        self.fetchers.unfollow(self.replica.topic, self.replica.partition)
        self.replica.make_offline()
        state = self.checkpoint_state()
        # A pass under way finishes first (Kafka's abortAndPauseCleaning waits likewise):
        # its reads of closed files, or its writes into a removed directory, would take
        # the log directory offline. Passes begun after it see the replica closed.
        if not self._log_work.acquire(blocking=False):
            await asyncio.to_thread(self._log_work.acquire)
        try:
            self.log.close()
        finally:
            self._log_work.release()
        if not delete:
            if self.metadata_file.dirty:
                await asyncio.to_thread(self.flush_metadata)
        else:
            self.metadata_file.discard()
            doomed = self.log.dir.with_name(self.log.dir.name + ".deleting-delete")
            self.log.dir.rename(doomed)
            await asyncio.to_thread(shutil.rmtree, doomed, True)
        return state

    def flush_leader_epochs(self) -> None:
        """Write the leader-epoch checkpoint if it lags (in a worker thread); a failed write
        takes the log directory offline."""
        try:
            self.log.leader_epoch_cache.flush_if_dirty()
        except OSError as e:
            self.log_dir_failed(f"Error while writing the leader epoch checkpoint of "
                                f"{self.log.dir}: {e}")

    def flush_metadata(self) -> None:
        """Write partition.metadata if its topic id is not written yet (in a worker thread);
        a failed write takes the log directory offline, as any other write's does."""
        try:
            self.metadata_file.maybe_flush()
        except OSError as e:
            self.log_dir_failed(f"Error while writing {self.metadata_file.directory}: {e}")

    def log_dir_failed(self, message: str) -> None:
        """A write outside the log's own operations (the cleaner's files) failed."""
        if self.log.failure_channel is not None:
            self.log.failure_channel.mark_offline(self.log.log_dir, message)

    def checkpoint_state(self) -> tuple[int, int, int]:
        """(high watermark, recovery point, log start offset) for the broker's files."""
        return (self.log.high_watermark, self.log.recovery_point, self.log.log_start_offset)

    def alter_config(self, topic_config: dict) -> None:
        self.log.update_config(LogConfig.from_props(topic_config,
                                                    broker=self.broker_log_config))

    def log_maintenance(self) -> int:
        """One pass of the broker's scheduled log work (log.retention.check.interval.ms):
        retention, delayed deletions, flush by time; the segments deleted. The host runs it
        in a worker thread, never on its event loop; the log's lock orders it with appends."""
        with self._log_work:
            if self._closed:
                return 0
            now = wall_ms()
            deleted = self.log.delete_old_segments(now)
            self.log.delete_pending_segments()
            self.log.flush_if_due(now)
            return deleted

    def log_cleaning(self) -> bool:
        """The cleaner's look at this log (every log.cleaner.backoff.ms): compacted when
        it is due (min.cleanable.dirty.ratio, the compaction lags). In a worker thread too
        (compaction takes seconds); whether it cleaned."""
        with self._log_work:
            if self._closed:
                return False
            now = wall_ms()
            if not self.cleaner.needs_cleaning(self.log, self.first_dirty_offset, now):
                return False
            stats = self.cleaner.clean(self.log, self.first_dirty_offset, now)
            self.first_dirty_offset = stats.end_offset
            return True

    async def maybe_shrink_isr(self) -> None:
        """The broker's ISR-expiry task (every replica.lag.time.max.ms / 2)."""
        if self.replica.maybe_shrink_isr() is not None:
            self.maybe_alter_partition()

    async def describe(self) -> dict:
        r = self.replica
        return {"role": r.role.value, "leader": r.leader_id, "leader_epoch": r.leader_epoch,
                "partition_epoch": r.partition_epoch, "isr": list(r.isr),
                "replicas": list(r.replicas), "log_end_offset": r.log_end_offset,
                "high_watermark": r.high_watermark, "log_start_offset": r.log.log_start_offset,
                "epochs": [(e.epoch, e.start_offset)
                           for e in r.log.leader_epoch_cache.epoch_entries()]}

    async def read_local(self, offset: int, max_bytes: int, max_offset: int | None = None
                         ) -> bytes:
        """This replica's own log bytes, whatever its role (replica verification)."""
        return self.log.read(offset, max_bytes, max_offset=max_offset)

    # ---- client requests -------------------------------------------------------------------
    def produce_result(self, records: bytes, acks: int, timeout_ms: int,
                       verified: dict | None = None
                       ) -> "ProduceResult | asyncio.Future[ProduceResult]":
        """Append now; the result, or a future of it when acks=all must wait for the ISR.
        The append happens before this returns: requests keep their order. ``verified``:
        the guards of the transactions' verifications (``PartitionReplica.produce``)."""
        future, done = answer_future()
        try:
            result = self.replica.produce(records, acks=acks, timeout_ms=timeout_ms,
                                          on_done=done, verified=verified)
        except KafkaError as e:
            return ProduceResult(error=e)
        return future if result is None else result

    def write_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool, timeout_ms: int
                         ) -> "ProduceResult | asyncio.Future[ProduceResult]":
        """The transaction coordinator's marker (``PartitionReplica.write_txn_marker``), as
        ``produce_result`` answers."""
        future, done = answer_future()
        try:
            result = self.replica.write_txn_marker(producer_id, producer_epoch,
                                                   coordinator_epoch, commit, timeout_ms,
                                                   on_done=done)
        except KafkaError as e:
            return ProduceResult(error=e)
        return future if result is None else result

    async def fetch(self, request: bytes) -> bytes:
        """A follower's or a consumer's fetch; long-polls in the purgatory."""
        req: FetchRequest = decode(request)
        future, done = answer_future()
        try:
            result = self.replica.fetch(req, on_done=done)
        except KafkaError as e:
            return encode(FetchResult(error=e, leader_epoch=self.replica.leader_epoch,
                                      fetch_offset=req.fetch_offset))
        if req.replica_id >= 0:
            self.maybe_alter_partition()
        if result is None:
            result = await future
        return encode(result)

    async def offsets_for_leader_epoch(self, epoch: int, current_leader_epoch: int = -1
                                       ) -> bytes:
        try:
            return encode(self.replica.offsets_for_leader_epoch(epoch, current_leader_epoch))
        except KafkaError as e:
            return encode(e)

    async def list_offsets(self, timestamp: int, current_leader_epoch: int = -1,
                           isolation_level: int = 0) -> bytes:
        """ListOffsets (``PartitionReplica.list_offsets``)."""
        try:
            return encode(self.replica.list_offsets(timestamp, current_leader_epoch,
                                                    isolation_level))
        except KafkaError as e:
            return encode(e)

    def active_producers(self) -> list | KafkaError:
        try:
            return self.replica.active_producers()
        except KafkaError as e:
            return e

    async def delete_records(self, offset: int, timeout_ms: int = 30_000) -> bytes:
        future, done = answer_future()
        try:
            result = self.replica.delete_records(offset, timeout_ms, on_done=done)
        except KafkaError as e:
            return encode(DeleteRecordsResult(error=e))
        if result is None:
            result = await future
        return encode(result)

    # ---- leader: ISR changes go to the controller ------------------------------------------
    def maybe_alter_partition(self) -> None:
        """Send the core's pending ISR change, if any, when no request is in flight
        (``AlterPartitionSender`` decides)."""
        if self._closed or (self._alter_task is not None and not self._alter_task.done()):
            return
        proposal = self.alter_sender.next_to_send()
        if proposal is not None:
            self._alter_task = asyncio.get_running_loop().create_task(
                self._send_alter_partition(proposal))

    async def _send_alter_partition(self, proposal) -> None:
        sender = self.alter_sender
        try:
            if self._controller is None:
                self._controller = await lookup(CONTROLLER, self.namespace)
                if self._controller is None:
                    raise LookupError("no controller at the moment")
            answer = decode(await asyncio.wait_for(
                self._controller.alter_partition.remote(encode(proposal)),
                self.alter_timeout_s))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # no controller at the moment, or no answer: try again
            log.debug("%s: AlterPartition failed: %r", self.replica.name, e)
            self._controller = None
            await asyncio.sleep(self.backoff_s)
            sender.on_failure(proposal)
        else:
            if isinstance(answer, KafkaError):
                sender.on_answer(proposal, None, -1, answer)
            else:
                isr, partition_epoch = answer
                before = len(self.replica.isr)
                sender.on_answer(proposal, list(isr), partition_epoch)
                if self.on_isr_change is not None:
                    self.on_isr_change(before, len(self.replica.isr))
        self._alter_task = None
        self.maybe_alter_partition()   # a newer proposal, or this one again
