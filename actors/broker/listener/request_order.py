"""When a connection's next Produce for the same partitions may begin: once the earlier
one's batches are on their way to the hosts, in order, not once it is answered.

Kafka mutes a connection while a request is handled, so an acks=all Produce waits for the
one before it to be replicated, and a producer's in-flight requests to one broker are
replicated one after the other. Here the order that matters is the appends' order, and a
replica host appends a channel's Produce frames in the order they came, each before its
first wait (``ReplicaHostActor._serve_produce``); so a Produce naming a partition an earlier
one names may begin as soon as the earlier one's frames are written to the hosts'
channels. The socket server (which waits) and the Produce handler (which knows when the
frames are written) share this module: the server gives each Produce a callback in the
handler's context, and the handler calls ``appends_sent`` once the frames are written.
A transactional Produce does not call it (its first batches wait for their coordinator's
verification before the host appends them): the next one waits for its answer, as in
Kafka.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Callable

_sent: ContextVar[Callable[[], None] | None] = ContextVar("appends_sent", default=None)


def expect_appends_sent(callback: Callable[[], None]):
    """Set in the context a handler's task is then created in; the token for ``reset``."""
    return _sent.set(callback)


def reset(token) -> None:
    _sent.reset(token)


def appends_sent() -> None:
    """The Produce handled in this context has its batches on the hosts' channels."""
    callback = _sent.get()
    if callback is not None:
        callback()
