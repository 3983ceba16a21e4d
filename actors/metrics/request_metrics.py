"""RequestMetrics: the time a Kafka request took, from its arrival to its answer written
(Kafka's TotalTimeMs), by request name, kept as bucket counts until the broker's report
hands them to Ray's histogram (pure: no Ray)."""
from __future__ import annotations

import bisect
import collections
import functools

from protocols.kafka.api_keys import ApiKey

# Upper bounds in ms: Ray's histogram needs them fixed, and positive.
BOUNDARIES_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


@functools.cache
def request_name(api_key: int, from_follower: bool = False) -> str:
    """Kafka's ``request`` label: the API's name (``ApiKeys.name``: OffsetCommit), a Fetch
    told apart by who sent it."""
    try:
        name = "".join(w.capitalize() for w in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)
    if name == "Fetch":
        return "FetchFollower" if from_follower else "FetchConsumer"
    return name


def bucket_value(index: int) -> float:
    """What an observation in bucket ``index`` is reported as: inside the bucket, so that
    Ray's histogram puts it back in the same one."""
    if index >= len(BOUNDARIES_MS):
        return BOUNDARIES_MS[-1] * 2
    low = BOUNDARIES_MS[index - 1] if index else 0.0
    return (low + BOUNDARIES_MS[index]) / 2


class RequestMetrics:
    def __init__(self) -> None:
        self._counts: collections.Counter[tuple[str, int]] = collections.Counter()

    def observe(self, request: str, total_ms: float) -> None:
        self._counts[request, bisect.bisect_left(BOUNDARIES_MS, total_ms)] += 1

    def take(self) -> dict[tuple[str, int], int]:
        """{(request, bucket index): count} since the last take."""
        taken, self._counts = self._counts, collections.Counter()
        return dict(taken)
