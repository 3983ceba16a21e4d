"""Fetch sessions (KIP-227) on the fetcher's side: Kafka's FetchSessionHandler, pure.

It remembers what the leader's session holds and turns the partitions a fetcher wants next
into a request: a full one (every partition; epoch 0 asks for a session) until the leader
has given a session id, then incremental ones naming only the partitions added or changed
since the last request and forgetting those no longer wanted. Any trouble (a session error,
a failed request, a session closed by the leader) leads back to a full request.
"""
from __future__ import annotations

from protocols.errors import FetchSessionIdNotFoundError
from protocols.messages import FetchManyResponse, FetchRequest
from protocols.topics import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1



def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1, 2, ... wrapping past the int32 maximum to 1."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class FetchSessionHandler:
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        # What the leader's session holds (as of the last request built).
        self.session_partitions: dict[TopicPartition, FetchRequest] = {}

    @property
    def full(self) -> bool:
        """The next request is a full one."""
        return self.next_epoch == INITIAL_EPOCH

    def build(self, wanted: dict[TopicPartition, FetchRequest], changed=None
              ) -> tuple[tuple, tuple, int, int]:
        """(partitions to name, partitions to forget, session id, session epoch) for a
        request fetching ``wanted``. With ``changed``, the caller vouches that no other
        partition's request changed since the last build (an idle fetcher's incremental
        request then costs nothing per partition)."""
        if self.full:
            self.session_partitions = dict(wanted)
            # Epoch 0 with our old id (if any): the leader closes it and opens a new one.
            return (tuple((t, p, r) for (t, p), r in wanted.items()), (), self.session_id,
                    INITIAL_EPOCH)
        if changed is not None:
            held = self.session_partitions
            named, forgotten = [], []
            for key in changed:
                request, old = wanted.get(key), held.get(key)
                if request is None:
                    if old is not None:
                        forgotten.append(key)
                        del held[key]
                elif old is not request and old != request:
                    named.append((key[0], key[1], request))
                    held[key] = request
            return tuple(named), tuple(forgotten), self.session_id, self.next_epoch
        previous, self.session_partitions = self.session_partitions, dict(wanted)
        # Identity first: a follower's unchanged partition hands back the same request.
        named = tuple((t, p, r) for (t, p), r in wanted.items()
                      if (old := previous.get((t, p))) is not r and old != r)
        forgotten = tuple(key for key in previous if key not in wanted)
        return named, forgotten, self.session_id, self.next_epoch

    def handle_response(self, response: FetchManyResponse, was_full: bool) -> bool:
        """Move the session on; False when the response is a session error (its results,
        none, are not to be applied)."""
        if response.error is not None:
            if isinstance(response.error, FetchSessionIdNotFoundError):
                self.session_id = INVALID_SESSION_ID
            self.next_epoch = INITIAL_EPOCH
            return False
        if response.session_id == INVALID_SESSION_ID:
            # No slot for a session, or the leader closed ours: full requests from now on.
            self.session_id, self.next_epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif was_full:
            self.session_id, self.next_epoch = response.session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.next_epoch = next_epoch(self.next_epoch)
        return True

    def handle_error(self) -> None:
        """The request failed as a whole: the leader may or may not have seen it, so the
        next request is full (closing this session)."""
        self.next_epoch = INITIAL_EPOCH
