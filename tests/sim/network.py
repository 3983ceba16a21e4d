"""A simulated network for the cluster simulator.

Every message between two endpoints (brokers, the controller, a replaced controller) travels
a directed link with its own latency. Broker-to-broker links add random jitter, so answers
overtake each other; controller links are FIFO, as Kafka's controller channel is (one queue
per broker), and so are the messages a sender names one connection for (``order_key``): a
follower host's requests to a leader ride one TCP connection of the hosts' channel, and the
leader's host starts serving them in the order they were sent. A link can be cut (what is on it or sent over it is lost) or made slow (a slow
follower), and healed. Messages are delivered in order of arrival time; the simulator's clock
jumps to each arrival.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

Endpoint = Hashable


@dataclass
class Link:
    latency_ms: int
    jitter_ms: int
    fifo: bool
    down: bool = False
    last_arrival_ms: int = 0


@dataclass(order=True)
class Message:
    arrival_ms: int
    seq: int
    src: Endpoint = field(compare=False)
    dst: Endpoint = field(compare=False)
    kind: str = field(compare=False)
    payload: Any = field(compare=False)
    # The receiver's incarnation the sender addressed: an answer to (or a command for) a
    # process that has since died is not delivered to its successor.
    dst_life: int | None = field(compare=False, default=None)


class Network:
    BASE_LATENCY_MS = 2
    JITTER_MS = 6

    def __init__(self, rng: random.Random, clock: Callable[[], int],
                 fifo: Callable[[Endpoint, Endpoint], bool],
                 on_lost: Callable[[Message], None] = lambda m: None):
        """``on_lost``: told of every message lost on a cut link, as a sender whose call
        fails learns it."""
        self.rng = rng
        self.on_lost = on_lost
        self.clock = clock
        self._fifo = fifo
        self.links: dict[tuple[Endpoint, Endpoint], Link] = {}
        self.queue: list[Message] = []
        # The last arrival on each connection named by an ``order_key``.
        self._connections: dict[Hashable, int] = {}
        self._seq = 0
        self.sent = self.lost = 0

    def link(self, src: Endpoint, dst: Endpoint) -> Link:
        link = self.links.get((src, dst))
        if link is None:
            fifo = self._fifo(src, dst)
            link = self.links[(src, dst)] = Link(self.BASE_LATENCY_MS,
                                                 0 if fifo else self.JITTER_MS, fifo)
        return link

    def send(self, src: Endpoint, dst: Endpoint, kind: str, payload: Any,
             dst_life: int | None = None, delay_ms: int = 0,
             order_key: Hashable | None = None) -> None:
        """``delay_ms``: the sender holds the message that long first (a backoff).
        ``order_key``: the connection it travels on; it arrives after every message sent
        earlier on that connection (a retry after a timeout follows the late original)."""
        self.sent += 1
        link = self.link(src, dst)
        self._seq += 1
        if link.down:
            self.lost += 1
            self.on_lost(Message(self.clock(), self._seq, src, dst, kind, payload, dst_life))
            return
        arrival = self.clock() + delay_ms + link.latency_ms + \
            self.rng.randint(0, link.jitter_ms)
        if link.fifo:
            arrival = max(arrival, link.last_arrival_ms)
            link.last_arrival_ms = arrival
        if order_key is not None:
            arrival = max(arrival, self._connections.get(order_key, 0))
            self._connections[order_key] = arrival
        heapq.heappush(self.queue, Message(arrival, self._seq, src, dst, kind, payload,
                                           dst_life))

    def next_arrival_ms(self) -> int | None:
        return self.queue[0].arrival_ms if self.queue else None

    def pop(self) -> Message | None:
        """The next message to arrive, or None; a message whose link was cut meanwhile is
        lost on the way."""
        while self.queue:
            m = heapq.heappop(self.queue)
            if not self.link(m.src, m.dst).down:
                return m
            self.lost += 1
            self.on_lost(m)
        return None

    def cut(self, a: Endpoint, b: Endpoint) -> None:
        self.link(a, b).down = True
        self.link(b, a).down = True

    def slow(self, a: Endpoint, b: Endpoint, latency_ms: int) -> None:
        for link in (self.link(a, b), self.link(b, a)):
            link.latency_ms = latency_ms

    def heal(self) -> None:
        for link in self.links.values():
            link.down = False
            link.latency_ms = self.BASE_LATENCY_MS
