"""Client quotas (KIP-13, KIP-55, KIP-124) for rafka's own producers and consumers, which
send their requests to the replica hosts' channel, not to a broker's Kafka listener. Pure:
the host passes its requests, answers and clock in.

Kafka keeps quotas per broker. A rafka broker serves its clients' data from its replica
hosts (``num.replica.hosts``, one per CPU by default), each for the partitions it holds: each
host measures its own part of a client's rate, and every quota window (1 s) the broker tells
each host what the others measured (``usage_elsewhere``), which it adds to its own. A client
spread over several hosts of a broker is held to the broker's quota, as from Kafka, within
a window's lag.

Who a request is held to quotas as: a Ray door client as the principal its broker signed it
in as; a holder of the host's token (rafka's clients on an open cluster) as Kafka's
``User:ANONYMOUS``, with its ``client.id``. A broker's listener names no client id (it
holds its Kafka clients to their quotas itself), nor does a follower's fetch (Kafka's client
quotas never apply to replication)."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from actors.broker.client_quota_manager import NANOS_TO_PERCENTAGE_PER_SECOND, BrokerQuotas
from protocols.messages import FetchManyRequest, FetchManyResponse

ANONYMOUS = "User:ANONYMOUS"

Subject = tuple[str, str]   # (principal, client id)


class HostQuotas:
    def __init__(self, clock_ms: Callable[[], int]):
        self._image: dict = {"client_quotas": []}
        self.quotas = BrokerQuotas(lambda: self._image, clock_ms)

    def update(self, client_quotas: list) -> None:
        """The cluster's client quotas (as the metadata image holds them)."""
        self._image = {"client_quotas": list(client_quotas)}   # a new image: read again

    def subject(self, client_id: str | None, caller: object = None,
                replica_id: int = -1) -> Subject | None:
        """Who a request is held to quotas as; None: it is not (see the module)."""
        if replica_id >= 0 or not self.quotas.any():
            return None
        if caller is not None:
            return caller.principal, client_id or ""
        return None if client_id is None else (ANONYMOUS, client_id)

    def cap_fetch(self, request: FetchManyRequest, subject: Subject | None
                  ) -> FetchManyRequest:
        """A fetch asks no more than the consumer's quota allows in one go (Kafka's
        getMaxValueInQuotaWindow), nor waits for more than that."""
        most = None if subject is None else self.quotas.max_fetch_bytes(*subject)
        if most is None or request.max_bytes <= most:
            return request
        most = max(1, most)
        return replace(request, max_bytes=most, min_bytes=min(request.min_bytes, most))

    def produced(self, subject: Subject | None, size: int, spent_ns: int, acks: int) -> int:
        """producer_byte_rate: the request's bytes, once handled; request_percentage: the
        host's work on it (acks=0 is exempt, as Kafka's); the longer throttle time."""
        if subject is None:
            return 0
        throttle_ms = self.quotas.record(self.quotas.produce, *subject, size)
        if acks == 0:
            return throttle_ms
        return max(throttle_ms, self._worked(subject, spent_ns))

    def fetched(self, subject: Subject | None, response: FetchManyResponse, spent_ns: int
                ) -> FetchManyResponse:
        """consumer_byte_rate: the records answered; request_percentage: the host's work
        on the request. A consumer over either quota is answered no records (with
        everything else: its fetch session has sent them), their bytes taken back from its
        rate, and the longer throttle time (Kafka's handleFetchRequest)."""
        if subject is None:
            return response
        size = sum(len(r.records) for _, _, r in response.results
                   if r.error is None and r.records)
        throttle_ms = max(self.quotas.record(self.quotas.fetch, *subject, size),
                          self._worked(subject, spent_ns))
        if not throttle_ms:
            return response
        if size:
            self.quotas.unrecord(self.quotas.fetch, *subject, size)
        return replace(response, throttle_time_ms=throttle_ms, results=tuple(
            (t, p, replace(r, records=b"") if r.records else r)
            for t, p, r in response.results))

    def _worked(self, subject: Subject, spent_ns: int) -> int:
        """request_percentage: the host's work reading the request and appending or
        reading its logs when it came (not the waits for replication or long polls)."""
        return self.quotas.record(self.quotas.request, *subject,
                                  spent_ns * NANOS_TO_PERCENTAGE_PER_SECOND)
