"""LogManager: every partition log in one broker's log directory.

It keeps Kafka's directory-level files: ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint`` (``topic partition offset`` lines) and the
``.kafka_cleanshutdown`` marker. On start-up without the marker, each log is recovered from
its checkpointed recovery point; with it, logs open without re-validation.
"""
from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Any, Mapping

from protocols.errors import InvalidTopicError
from protocols.topics import TopicPartition, parse_partition_dir_name, partition_dir_name
from storage.checkpoint import OffsetCheckpointFile
from storage.cleaner import Cleaner, CleanerStats
from storage.config import LogConfig
from storage.log import Clock, Log, Scheduler, wall_clock_ms

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"  # high watermarks
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"


class LogManager:
    def __init__(self, log_dir: Path | str, broker_config: Mapping[str, Any] | None = None, *,
                 clock: Clock | None = None, scheduler: Scheduler | None = None):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.broker_config = dict(broker_config or {})
        self.clock = clock or wall_clock_ms
        self.scheduler = scheduler
        self.logs: dict[TopicPartition, Log] = {}
        self._recovery_points = OffsetCheckpointFile(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        self._log_start_offsets = OffsetCheckpointFile(
            self.log_dir / LOG_START_OFFSET_CHECKPOINT)
        self._high_watermarks = OffsetCheckpointFile(self.log_dir / REPLICATION_OFFSET_CHECKPOINT)
        self._cleaner_offsets = OffsetCheckpointFile(self.log_dir / CLEANER_OFFSET_CHECKPOINT)
        self.first_dirty_offsets: dict[TopicPartition, int] = self._cleaner_offsets.read()
        self.cleaner = Cleaner()
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        self.had_clean_shutdown = marker.exists()
        # While we run, a crash must look unclean to the next start.
        marker.unlink(missing_ok=True)

    def default_config(self, overrides: Mapping[str, Any] | None = None) -> LogConfig:
        return LogConfig.from_props(overrides or {}, broker=self.broker_config)

    def load_logs(self, topic_configs: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Open every ``<topic>-<partition>`` directory found on disk."""
        topic_configs = topic_configs or {}
        recovery_points = self._recovery_points.read()
        log_starts = self._log_start_offsets.read()
        high_watermarks = self._high_watermarks.read()
        for path in sorted(self.log_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)  # a topic deletion that was cut short
                continue
            try:
                tp = parse_partition_dir_name(path.name)
            except InvalidTopicError:
                log.warning("%s: ignoring directory %s, not a partition", self.log_dir, path)
                continue
            self.logs[tp] = Log.open(
                path, self.default_config(topic_configs.get(tp.topic)),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                high_watermark=high_watermarks.get(tp),
                clean_shutdown=self.had_clean_shutdown, clock=self.clock,
                scheduler=self.scheduler)

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self.logs.get(TopicPartition(*tp))

    def get_or_create_log(self, tp: TopicPartition,
                          topic_config: Mapping[str, Any] | None = None) -> Log:
        tp = TopicPartition(*tp)
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        # partition_dir_name validates the topic name before it becomes a path.
        directory = self.log_dir / partition_dir_name(tp.topic, tp.partition)
        created = Log.open(directory, self.default_config(topic_config), clock=self.clock,
                           scheduler=self.scheduler, clean_shutdown=not directory.exists())
        self.logs[tp] = created
        return created

    def delete_log(self, tp: TopicPartition) -> None:
        """Remove a partition: rename its directory aside (atomic), then delete it."""
        tp = TopicPartition(*tp)
        victim = self.logs.pop(tp, None)
        if victim is None:
            return
        for seg in victim.segments:
            seg.close_handlers()
        doomed = victim.dir.with_name(f"{victim.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        victim.dir.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        self.checkpoint()

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """One retention pass over every log (log.retention.check.interval.ms)."""
        return sum(lg.delete_old_segments(now_ms) for lg in self.logs.values())

    def clean_logs(self, now_ms: int | None = None) -> dict[TopicPartition, CleanerStats]:
        """One compaction pass over every compacted log whose dirty ratio calls for it."""
        done: dict[TopicPartition, CleanerStats] = {}
        for tp, lg in self.logs.items():
            first_dirty = self.first_dirty_offsets.get(tp)
            if self.cleaner.needs_cleaning(lg, first_dirty, now_ms):
                stats = self.cleaner.clean(lg, first_dirty, now_ms)
                self.first_dirty_offsets[tp] = stats.end_offset
                done[tp] = stats
        if done:
            self._cleaner_offsets.write({tp: o for tp, o in self.first_dirty_offsets.items()
                                         if tp in self.logs})
        return done

    def flush_dirty_logs(self, now_ms: int | None = None) -> int:
        return sum(1 for lg in self.logs.values() if lg.flush_if_due(now_ms))

    def checkpoint_high_watermarks(self) -> None:
        """replica.high.watermark.checkpoint.interval.ms: what a restarted replica trusts."""
        self._high_watermarks.write({tp: lg.high_watermark for tp, lg in self.logs.items()})

    def checkpoint(self) -> None:
        self.checkpoint_high_watermarks()
        self._recovery_points.write({tp: lg.recovery_point for tp, lg in self.logs.items()})
        self._log_start_offsets.write({tp: lg.log_start_offset
                                       for tp, lg in self.logs.items()})

    def shutdown(self) -> None:
        """Flush and close every log, checkpoint, and mark the shutdown clean."""
        for lg in self.logs.values():
            lg.close()
        self.checkpoint()
        (self.log_dir / CLEAN_SHUTDOWN_FILE).touch()
        self.logs.clear()
