"""The broker's metrics report (the shell around ``actors.metrics``): on its node's timer,
it takes its replica hosts' counts and logs, reads the gauges off its metadata image, takes
the listener's request times, and, for the groups its coordinator owns, asks the partitions'
leaders for their log end offsets to report consumer lag; then hands all of it to Ray's
metrics (``actors.metrics.exporter``)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

from actors.metrics.broker_topic_stats import TopicDeltas
from actors.metrics.consumer_lag import OffsetTimeline, lag_sums, partition_lags
from actors.metrics.exporter import MetricsExporter
from actors.metrics.gauges import replica_manager_gauges
from protocols.messages import LATEST_TIMESTAMP

log = logging.getLogger(__name__)

# How long a report waits for a host's counts, and for its groups' lag (a report comes every
# half of Ray's export interval, 5 s by default).
CALL_S = 2.0


class BrokerMetricsReport:
    def __init__(self, broker_id: int, namespace: str, exporter: MetricsExporter,
                 replica_manager, image: Callable[[], Mapping[str, Any]], socket_server,
                 listener_stats, coordinator: Callable[[], Any], default_min_isr: int):
        self.broker_id = broker_id
        self.namespace = namespace
        self.exporter = exporter
        self.replica_manager = replica_manager
        self.image = image
        self.socket_server = socket_server
        self.listener_stats = listener_stats   # the Kafka listener's BrokerTopicStats
        self.coordinator = coordinator   # this broker's group coordinator, None if none yet
        self.default_min_isr = default_min_isr
        self._brokers: dict[int, Any] = {}   # other brokers' handles, looked up once
        self.timeline = OffsetTimeline()     # when the log ends passed which offsets

    async def report(self) -> None:
        deltas, logs = TopicDeltas(), []
        answers = await asyncio.gather(*[asyncio.wait_for(h.take_metrics.remote(), CALL_S)
                                         for h in self.replica_manager.all_hosts()],
                                       return_exceptions=True)
        for answer in answers:
            if not isinstance(answer, BaseException):   # a host restarting: next time
                deltas.add(TopicDeltas.from_tuple(answer[0]))
                logs.extend(answer[1])
        deltas.add(self.listener_stats.take())   # the Kafka listener's fetch answers
        self.exporter.topic_deltas(deltas)
        self.exporter.logs(logs)
        self.exporter.replica_manager(replica_manager_gauges(
            self.image(), self.broker_id, self.default_min_isr))
        self.exporter.request_times(self.socket_server.request_metrics.take())
        try:
            # Bounded: a broker restarting must not hold up the gauges above next time.
            await asyncio.wait_for(self._consumer_lag(), CALL_S)
        except Exception as e:   # a coordinator or leader moving: the next report
            log.debug("broker %d: consumer lag not reported this time: %r", self.broker_id, e)

    async def _consumer_lag(self) -> None:
        coordinator = self.coordinator()
        if coordinator is None:
            return
        rows = await coordinator.committed_offsets.remote()
        if not rows:
            return
        wanted = {(topic, partition) for _, topic, partition, _ in rows}
        ends = await self._log_end_offsets(wanted)
        now_ms = time.time_ns() // 1_000_000
        self.timeline.record(ends, now_ms, wanted)
        lags = partition_lags(rows, ends)
        self.exporter.consumer_lag(lags, lag_sums(lags, rows), {
            (p.group, p.topic, p.partition): self.timeline.lag_ms((p.topic, p.partition),
                                                                  p.committed, now_ms)
            for p in lags})

    async def _log_end_offsets(self, tps: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """{(topic, partition): log end offset} from each partition's leader (ListOffsets
        latest: the high watermark); a partition whose leader did not answer is left out."""
        from actors.gcs import lookup
        from actors.names import broker_name
        from protocols.wire import decode
        topics = self.image().get("topics", {})
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in sorted(tps):
            entry = topics.get(topic, {}).get(partition)
            if entry is not None and entry["leader"] >= 0:
                by_leader.setdefault(entry["leader"], []).append((topic, partition))

        async def hosts(leader: int, leads: list) -> list:
            if leader == self.broker_id:
                return [self.replica_manager.host_of(t, p) for t, p in leads]
            broker = self._brokers.get(leader)
            if broker is None:
                broker = self._brokers[leader] = await lookup(broker_name(leader),
                                                              self.namespace)
            try:
                return await broker.replica_hosts.remote(leads)
            except Exception:
                self._brokers.pop(leader, None)   # gone or restarted: look it up again
                raise
        found = await asyncio.gather(*[hosts(b, leads) for b, leads in by_leader.items()],
                                     return_exceptions=True)
        by_host: dict[Any, list[tuple[str, int]]] = {}
        for leads, handles in zip(by_leader.values(), found):
            if isinstance(handles, BaseException):
                continue
            for tp, host in zip(leads, handles):
                if host is not None:
                    by_host.setdefault(host, []).append(tp)
        answers = await asyncio.gather(*[
            host.list_offsets_many.remote([(t, p, LATEST_TIMESTAMP, -1, 0) for t, p in leads])
            for host, leads in by_host.items()], return_exceptions=True)
        ends: dict[tuple[str, int], int] = {}
        for leads, answer in zip(by_host.values(), answers):
            if isinstance(answer, BaseException):
                continue
            for tp, encoded in zip(leads, answer):
                offset = decode(encoded)
                if isinstance(offset, (tuple, list)):
                    ends[tp] = offset[0]
        return ends
