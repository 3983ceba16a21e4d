"""ClientQuotaManager: a broker's byte-rate and request-time quotas (KIP-13, KIP-55,
KIP-124), pure (no Ray, no I/O, the clock passed in): each client's usage is recorded in
the rate its quota is kept under (Kafka's quota sensor: ``quota.window.num`` samples of
``quota.window.size.seconds``), and a client over its quota is given the time to stay
away that brings the rate back to the quota (Kafka's QuotaUtils.throttleTime)."""
from __future__ import annotations

from collections import Counter
from typing import Callable, Mapping, Sequence

from protocols.kafka.client_quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE,
                                           REQUEST_PERCENTAGE, Quotas, quota_bound)

# Kafka's quota.window.num and quota.window.size.seconds defaults.
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_SECONDS = 1
# A rate no request recorded into for this long is dropped (Kafka's sensors expire after an
# hour of inactivity).
INACTIVE_RATE_MS = 3_600_000
# Kafka's ClientRequestQuotaManager: request time recorded as a percentage of one second.
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9


class Rate:
    """Kafka's Rate over a SampledStat: the sum of the values recorded in the last
    ``samples`` windows, divided by the time they span (at least samples - 1 windows, so
    that a new rate does not read as a burst)."""

    def __init__(self, samples: int = QUOTA_WINDOW_NUM,
                 window_ms: int = QUOTA_WINDOW_SIZE_SECONDS * 1000):
        self.samples, self.window_ms = samples, window_ms
        self._windows: list[list[float]] = []   # [start ms, last event ms, value]
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._windows:
            self._windows.append([now_ms, now_ms, 0.0])
        window = self._windows[self._current]
        if now_ms - window[0] >= self.window_ms:
            # One window more than the samples: the one the monitored span starts in.
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._windows):
                window = [now_ms, now_ms, 0.0]
                self._windows.append(window)
            else:
                window = self._windows[self._current]
                window[:] = [now_ms, now_ms, 0.0]
        window[2] += value
        window[1] = now_ms
        self.last_record_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for window in self._windows:
            if now_ms - window[1] >= expire:
                window[:] = [now_ms, now_ms, 0.0]

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        oldest = min((w[0] for w in self._windows), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(int(elapsed), 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        size = self.window_size_ms(now_ms)
        return sum(w[2] for w in self._windows) / (size / 1000)


class ClientQuotaManager:
    """One quota key's manager (``producer_byte_rate``, ``consumer_byte_rate`` or
    ``request_percentage``) over the quotas of the metadata image (``quotas()``)."""

    def __init__(self, key: str, quotas: Callable[[], Quotas],
                 samples: int = QUOTA_WINDOW_NUM,
                 window_s: int = QUOTA_WINDOW_SIZE_SECONDS):
        self.key = key
        self.quotas = quotas
        # What the broker's other replica hosts measured of each rate, per second: each
        # serves rafka's own clients for the partitions it holds, and a quota is the
        # broker's (actors.replica.host_quotas).
        self.elsewhere: dict[tuple[str, str], float] = {}
        self.elsewhere_at_ms = 0   # when told: forgotten after two windows untold
        self.samples, self.window_ms = samples, window_s * 1000
        # The rate of each (user, client id) a quota is kept under (its metric tags).
        self._rates: dict[tuple[str, str], Rate] = {}
        # Request quotas cap a throttle at one window (ClientRequestQuotaManager).
        self.max_throttle_ms = self.window_ms if key == REQUEST_PERCENTAGE else None

    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float,
                                   now_ms: int) -> int:
        """Record ``value`` (bytes; for request_percentage, the percentage of a second
        the request took) for the client; the throttle time it earned, 0 within its
        quota or without one."""
        bound, tags = quota_bound(self.quotas(), self.key, user, client_id)
        if bound is None:
            return 0
        rate = self._rates.get(tags)
        if rate is None:
            self._expire(now_ms)
            rate = self._rates[tags] = Rate(self.samples, self.window_ms)
        rate.record(value, now_ms)
        observed = rate.measure(now_ms)
        if now_ms - self.elsewhere_at_ms < 2 * self.window_ms:
            observed += self.elsewhere.get(tags, 0.0)
        if observed <= bound:
            return 0
        # O * W / (W + X) = T  ->  X = (O - T) / T * W.
        throttle = round((observed - bound) / bound * rate.window_size_ms(now_ms))
        return throttle if self.max_throttle_ms is None else min(throttle, self.max_throttle_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a value recorded (a throttled fetch answers no records: Kafka's
        unrecordQuotaSensor)."""
        _, tags = quota_bound(self.quotas(), self.key, user, client_id)
        rate = self._rates.get(tags)
        if rate is not None:
            rate.record(-value, now_ms)

    def quota(self, user: str, client_id: str) -> float | None:
        return quota_bound(self.quotas(), self.key, user, client_id)[0]

    def usage(self, now_ms: int) -> dict[tuple[str, str], float]:
        """Each rate recorded in the last window, per second (its metric tags')."""
        expire = self.samples * self.window_ms
        return {tags: rate.measure(now_ms) for tags, rate in self._rates.items()
                if now_ms - rate.last_record_ms < expire}

    def _expire(self, now_ms: int) -> None:
        for tags, rate in list(self._rates.items()):
            if now_ms - rate.last_record_ms >= INACTIVE_RATE_MS:
                del self._rates[tags]


def quota_user(principal: str) -> str:
    """The user a quota names for a principal (``User:alice`` -> ``alice``)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def quotas_of(image: Mapping) -> dict:
    """The image's client quotas as {entity: {key: value}} (the image holds them as
    [[[type, name], ...], {key: value}] pairs: msgpack keys are no tuples)."""
    return {tuple((t, n) for t, n in e): dict(values)
            for e, values in image.get("client_quotas", ())}


class BrokerQuotas:
    """A broker's three quota managers (Kafka's QuotaManagers: produce, fetch, request) over
    the client quotas of its metadata image, for requests by principal and client id."""

    def __init__(self, image: Callable[[], Mapping], clock_ms: Callable[[], int],
                 samples: int = QUOTA_WINDOW_NUM, window_s: int = QUOTA_WINDOW_SIZE_SECONDS):
        self._image = image
        self._seen: tuple[Mapping | None, dict] = (None, {})   # (the image read, its quotas)
        self.clock_ms = clock_ms
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, self.quotas, samples, window_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, self.quotas, samples, window_s)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, self.quotas, samples, window_s)

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request

    def usage(self) -> list[tuple[str, str, str, float]]:
        """(quota key, user, client id, per second) of each rate recorded here lately."""
        now = self.clock_ms()
        return [(m.key, user, client_id, value) for m in self.managers()
                for (user, client_id), value in m.usage(now).items()]

    def set_elsewhere(self, usage: list[tuple[str, str, str, float]]) -> None:
        """What the broker's other replica hosts measured (``usage_elsewhere``)."""
        by_key: dict[str, dict] = {m.key: {} for m in self.managers()}
        for key, user, client_id, value in usage:
            if key in by_key:
                by_key[key][(user, client_id)] = value
        now = self.clock_ms()
        for m in self.managers():
            m.elsewhere, m.elsewhere_at_ms = by_key[m.key], now

    def quotas(self) -> dict:
        image = self._image()
        if image is not self._seen[0]:   # a new image: its quotas read once
            self._seen = (image, quotas_of(image))
        return self._seen[1]

    def any(self) -> bool:
        """Whether any quota is set (none: nothing to record, the common case)."""
        return bool(self.quotas())

    def record(self, manager: ClientQuotaManager, principal: str, client_id: str | None,
               value: float) -> int:
        """The throttle time ``value`` earns the client (0 without quotas)."""
        if not self.any():
            return 0
        return manager.record_and_get_throttle_ms(quota_user(principal), client_id or "",
                                                  value, self.clock_ms())

    def unrecord(self, manager: ClientQuotaManager, principal: str, client_id: str | None,
                 value: float) -> None:
        if self.any():
            manager.unrecord(quota_user(principal), client_id or "", value, self.clock_ms())

    def record_fetch(self, principal: str, client_id: str | None, size: int) -> int:
        """consumer_byte_rate: ``size`` bytes of records answered. A consumer over its
        quota is answered none: the value recorded is taken back, as Kafka's throttled
        fetch's; the throttle time."""
        throttle_ms = self.record(self.fetch, principal, client_id, size)
        if throttle_ms:
            self.unrecord(self.fetch, principal, client_id, size)
        return throttle_ms

    def max_fetch_bytes(self, principal: str, client_id: str | None) -> int | None:
        """The most a fetch may answer without being throttled for sure (Kafka's
        getMaxValueInQuotaWindow): the consumer_byte_rate over samples - 1 windows; None
        without a quota."""
        if not self.any():
            return None
        bound = self.fetch.quota(quota_user(principal), client_id or "")
        if bound is None:
            return None
        return int(bound * (self.fetch.samples - 1) * self.fetch.window_ms / 1000)


def usage_elsewhere(usages: Sequence[Sequence[tuple[str, str, str, float]]]
                    ) -> list[list[tuple[str, str, str, float]]]:
    """For each of a broker's replica hosts' ``BrokerQuotas.usage()``, what the others
    measured of the same rates, summed: each host then holds a client to the broker's quota
    over all the hosts it sends to."""
    totals: Counter = Counter()
    for usage in usages:
        for key, user, client_id, value in usage:
            totals[(key, user, client_id)] += value
    out = []
    for usage in usages:
        own = {(key, user, client_id): value for key, user, client_id, value in usage}
        out.append([(*tags, total - own.get(tags, 0.0)) for tags, total in totals.items()
                    if total - own.get(tags, 0.0) > 0])
    return out
