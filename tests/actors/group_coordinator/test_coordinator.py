"""The group coordinator's core without Ray (Kafka's GroupCoordinatorTest and
GroupMetadataManagerTest cases for what a coordinator adds to one group's decisions): it
owns the offsets and the parked requests, writes a stable generation and every commit to
``__consumer_offsets`` before answering, and loads both back on failover. The effects it
returns are performed here by hand: replies collected, writes completed or failed, as the
actor does over Ray."""
from __future__ import annotations

import pytest

from actors.group_coordinator.coordinator import Effects, GroupCoordinator, Write
from actors.group_coordinator.group import GroupConfig, GroupState
from protocols.errors import (CoordinatorLoadInProgressError, GroupIdNotFoundError,
                              GroupSubscribedToTopicError,
                              IllegalGenerationError, InvalidCommitOffsetSizeError,
                              MemberIdRequiredError, NonEmptyGroupError, NotCoordinatorError,
                              NotLeaderOrFollowerError, RebalanceInProgressError,
                              RecordTooLargeError)
from protocols.messages import JoinResponse, SyncResponse
from protocols.topics import TopicPartition

RANGE = [("range", b"meta")]


class Shell:
    """Performs a core's effects as the actor does: replies by request id, writes queued
    until the test completes them, ticks remembered."""

    def __init__(self, core: GroupCoordinator):
        self.core = core
        self.replies: dict[int, object] = {}
        self.writes: list[Write] = []
        self.ticks: dict[str, int] = {}
        self.log: list[tuple[bytes | None, bytes | None]] = []   # what reached the log

    def perform(self, effects: Effects) -> None:
        for request, reply in effects.replies:
            self.replies[request] = reply
        self.writes += effects.writes
        self.ticks.update(effects.ticks)

    def call(self, result: tuple[int, Effects]) -> int:
        request, effects = result
        self.perform(effects)
        return request

    def complete_writes(self, error: BaseException | None = None) -> None:
        writes, self.writes = self.writes, []
        for write in writes:
            if error is None:
                self.log += [(r.key, r.value) for r in write.records]
            self.perform(self.core.on_write_done(write, error))


def coordinator(delay_ms: int = 0) -> tuple[GroupCoordinator, Shell]:
    core = GroupCoordinator(1, 1, GroupConfig(initial_rebalance_delay_ms=delay_ms))
    shell = Shell(core)
    effects, load = core.on_election(0, leader_epoch=5)
    assert load and core.loading == {0}
    shell.perform(effects)
    shell.perform(core.on_loaded(0, 5, [], now_ms=0))
    return core, shell


def join(shell: Shell, member_id: str = "", now: int = 0) -> int:
    return shell.call(shell.core.join_group("g", member_id, "consumer", RANGE, now,
                                            client_id="c"))


def first_join(shell: Shell, now: int = 0) -> tuple[str, int]:
    """KIP-394's two steps: MEMBER_ID_REQUIRED with an id, then the join with it."""
    answer = shell.replies[join(shell, now=now)]
    assert isinstance(answer.error, MemberIdRequiredError)
    return answer.member_id, join(shell, answer.member_id, now)


def stable_member(shell: Shell) -> str:
    member_id, request = first_join(shell)
    generation = shell.replies[request].generation_id
    shell.call(shell.core.sync_group("g", member_id, generation, {member_id: b"a"}, 0))
    shell.complete_writes()
    return member_id


def test_a_stable_generation_is_in_the_log_before_the_sync_is_answered():
    core, shell = coordinator()
    member_id, request = first_join(shell)
    joined = shell.replies[request]
    assert joined.error is None and joined.leader_id == member_id
    sync = shell.call(core.sync_group("g", member_id, joined.generation_id,
                                      {member_id: b"p0"}, 0))
    assert sync not in shell.replies and len(shell.writes) == 1   # storeGroup first
    shell.complete_writes()
    assert shell.replies[sync] == SyncResponse(None, b"p0", "range")
    assert core.groups["g"].state is GroupState.STABLE and shell.log


def test_a_failed_store_answers_the_sync_with_the_coordinator_error():
    core, shell = coordinator()
    member_id, request = first_join(shell)
    sync = shell.call(core.sync_group("g", member_id, shell.replies[request].generation_id,
                                      {member_id: b"p0"}, 0))
    shell.complete_writes(NotLeaderOrFollowerError("the replica moved"))
    assert isinstance(shell.replies[sync].error, NotCoordinatorError)


def test_a_retried_join_supersedes_the_parked_one_and_gets_the_answer():
    core, shell = coordinator(delay_ms=3000)
    member_id, first = first_join(shell)
    assert first not in shell.replies                  # parked: the initial delay runs
    again = join(shell, member_id, now=100)            # the client timed out and retried
    assert isinstance(shell.replies[first].error, RebalanceInProgressError)
    assert shell.ticks["g"] == 3000
    shell.perform(core.tick("g", 3000))
    assert shell.replies[again].error is None and shell.replies[again].member_id == member_id


def test_resignation_answers_parked_requests_and_forgets_the_groups():
    core, shell = coordinator(delay_ms=3000)
    _, parked = first_join(shell)
    shell.perform(core.on_resignation(0))
    assert shell.replies[parked] == JoinResponse(shell.replies[parked].error,
                                                 member_id=shell.replies[parked].member_id)
    assert isinstance(shell.replies[parked].error, NotCoordinatorError)
    assert "g" not in core.groups
    assert isinstance(shell.replies[join(shell)].error, NotCoordinatorError)
    effects, load = core.on_election(0, leader_epoch=6)
    shell.perform(effects)
    assert load
    assert isinstance(shell.replies[join(shell)].error, CoordinatorLoadInProgressError)


def test_commits_are_in_the_log_before_they_are_answered_and_fetched():
    core, shell = coordinator()
    # assign() and admin tools commit outside the group protocol (generation -1).
    commit = shell.call(core.commit_offsets("g", "", -1, [("t", 0, 42, 3, "m")], 7))
    assert commit not in shell.replies and core.fetch_offsets("g") == []
    shell.complete_writes()
    assert shell.replies[commit] is None
    assert core.fetch_offsets("g") == [("t", 0, 42, 3, "m")]
    assert core.fetch_offsets("g", [("t", 1)]) == [("t", 1, -1, -1, "")]
    late = shell.call(core.commit_offsets("other", "m-1", 4, [("t", 0, 1, -1, "")], 8))
    assert isinstance(shell.replies[late], IllegalGenerationError)   # unknown: past generation


def test_a_failed_commit_write_is_answered_with_its_error_and_changes_nothing():
    core, shell = coordinator()
    commit = shell.call(core.commit_offsets("g", "", -1, [("t", 0, 42, -1, "")], 7))
    shell.complete_writes(RecordTooLargeError("too big"))
    assert isinstance(shell.replies[commit], InvalidCommitOffsetSizeError)
    assert core.fetch_offsets("g") == []


def test_a_write_whose_partition_moved_meanwhile_fails_not_coordinator():
    core, shell = coordinator()
    commit = shell.call(core.commit_offsets("g", "", -1, [("t", 0, 42, -1, "")], 7))
    shell.perform(core.on_resignation(0))
    effects, _ = core.on_election(0, leader_epoch=6)    # led again, in a newer epoch
    shell.perform(effects)
    shell.complete_writes()                             # the append itself succeeded
    assert isinstance(shell.replies[commit], NotCoordinatorError)


def test_only_an_empty_group_is_deleted_and_only_once_its_tombstones_are_written():
    core, shell = coordinator()
    assert isinstance(shell.replies[shell.call(core.delete_group("nope"))],
                      GroupIdNotFoundError)
    member_id = stable_member(shell)
    assert isinstance(shell.replies[shell.call(core.delete_group("g"))], NonEmptyGroupError)
    shell.call(core.leave_group("g", member_id, 10))
    shell.complete_writes()                             # the Empty generation is stored
    delete = shell.call(core.delete_group("g"))
    assert "g" in core.groups
    shell.complete_writes()
    assert shell.replies[delete] is None and "g" not in core.groups
    assert shell.log[-1] == (shell.log[-1][0], None)   # the group metadata's tombstone


def test_a_new_coordinator_loads_the_groups_and_offsets_the_old_one_wrote():
    core, shell = coordinator()
    member_id = stable_member(shell)
    commit = shell.call(core.commit_offsets("g", member_id, core.groups["g"].generation_id,
                                            [("t", 0, 9, 1, "")], 5))
    shell.complete_writes()
    assert shell.replies[commit] is None
    successor = GroupCoordinator(2, 1, GroupConfig(initial_rebalance_delay_ms=0))
    successor.on_election(0, leader_epoch=6)
    effects = successor.on_loaded(0, 6, shell.log, now_ms=1_000)
    group = successor.groups["g"]
    assert group.state is GroupState.STABLE and list(group.members) == [member_id]
    assert successor.fetch_offsets("g") == [("t", 0, 9, 1, "")]
    assert effects.ticks == [("g", 1_000 + 45_000)]    # the member's session starts now
    assert successor.offsets["g"][TopicPartition("t", 0)].commit_timestamp == 5


def test_a_member_whose_session_expires_is_removed_at_the_tick():
    core, shell = coordinator()
    member_id = stable_member(shell)
    heartbeat = shell.call(core.heartbeat("g", member_id, core.groups["g"].generation_id, 100))
    assert shell.replies[heartbeat] is None and shell.ticks["g"] == 45_000
    shell.perform(core.tick("g", 100 + 45_000))
    shell.complete_writes()                             # the emptied group is stored
    assert core.groups["g"].state is GroupState.EMPTY and not core.groups["g"].members


@pytest.mark.parametrize("group_id", ["", "g"])
def test_a_coordinator_that_does_not_own_the_partition_refuses(group_id):
    core = GroupCoordinator(1, 1, GroupConfig())
    request, effects = core.heartbeat(group_id, "m", 1, 0)
    (answered, error), = effects.replies
    assert answered == request and error.code in (24, 16)   # INVALID_GROUP_ID, NOT_COORD.


# ---- OffsetDelete (KIP-496), after Kafka's GroupCoordinatorTest testDeleteOffset* -----------

def consumer_group_member(shell: Shell, topics: list[str], protocol_type: str = "consumer"
                          ) -> str:
    """A stable member subscribing to ``topics`` in Kafka's ConsumerProtocol."""
    from protocols.consumer_protocol import encode_subscription
    protocols = [("range", encode_subscription(topics))]
    answer = shell.replies[shell.call(shell.core.join_group(
        "g", "", protocol_type, protocols, 0, client_id="c"))]
    member_id = answer.member_id
    joined = shell.replies[shell.call(shell.core.join_group(
        "g", member_id, protocol_type, protocols, 0, client_id="c"))]
    shell.call(shell.core.sync_group("g", member_id, joined.generation_id, {member_id: b""},
                                     0))
    shell.complete_writes()
    return member_id


def commit(shell: Shell, *partitions: tuple[str, int]) -> None:
    request = shell.call(shell.core.commit_offsets(
        "g", "", -1, [(t, p, 10, -1, "") for t, p in partitions], 1))
    shell.complete_writes()
    assert shell.replies[request] is None


def test_delete_offset_of_non_existing_group():
    core, shell = coordinator()
    answer = shell.replies[shell.call(core.delete_offsets("g", [("t", 0)]))]
    assert isinstance(answer, GroupIdNotFoundError)


def test_delete_offset_of_empty_group_removes_every_requested_offset():
    core, shell = coordinator()
    commit(shell, ("t", 0), ("t", 1), ("u", 0))
    request = shell.call(core.delete_offsets("g", [("t", 0), ("u", 0), ("v", 3)]))
    assert request not in shell.replies and len(shell.writes) == 1   # tombstones first
    shell.complete_writes()
    assert shell.replies[request] == [("t", 0, 0), ("u", 0, 0), ("v", 3, 0)]
    assert core.fetch_offsets("g") == [("t", 1, 10, -1, "")]
    assert shell.log[-2:] == [(shell.log[-2][0], None), (shell.log[-1][0], None)]


def test_delete_offset_of_stable_consumer_group_keeps_subscribed_topics():
    core, shell = coordinator()
    commit(shell, ("t", 0), ("u", 0))       # while empty, as admin tools do
    consumer_group_member(shell, ["t"])
    request = shell.call(core.delete_offsets("g", [("t", 0), ("u", 0)]))
    shell.complete_writes()
    assert shell.replies[request] == [("t", 0, GroupSubscribedToTopicError.code),
                                      ("u", 0, 0)]
    assert core.fetch_offsets("g") == [("t", 0, 10, -1, "")]


def test_delete_offset_of_non_empty_non_consumer_group():
    core, shell = coordinator()
    commit(shell, ("u", 0))
    consumer_group_member(shell, ["t"], protocol_type="connect")
    answer = shell.replies[shell.call(core.delete_offsets("g", [("u", 0)]))]
    assert isinstance(answer, NonEmptyGroupError)
    assert core.fetch_offsets("g") == [("u", 0, 10, -1, "")]


# ---- transactional offset commits (GroupMetadataManagerTest's txn cases, KIP-447) ----------

TXN = ("app", 77, 3)      # transactional id, producer id, producer epoch


def txn_commit(shell: Shell, offset: int, group_id: str = "g", txn=TXN) -> int:
    return shell.call(shell.core.commit_offsets(group_id, "", -1,
                                                [("t", 0, offset, -1, "")], 0,
                                                transaction=txn))


def test_txn_offsets_are_pending_until_the_marker_commits_them():
    """testTransactionalCommitOffsetCommitted / ...Aborted: a read_committed consumer's
    OffsetFetch (require_stable) hears UNSTABLE_OFFSET_COMMIT meanwhile."""
    core, shell = coordinator()
    shell.call(core.commit_offsets("g", "", -1, [("t", 0, 5, -1, "")], 0))
    shell.complete_writes()
    request = txn_commit(shell, 9)
    [write] = shell.writes
    assert write.transaction == TXN
    shell.complete_writes()
    assert shell.replies[request] is None
    assert core.fetch_offsets("g", [("t", 0)]) == [("t", 0, 5, -1, "")]
    [(_, _, unstable)] = core.fetch_offsets("g", [("t", 0)], require_stable=True)
    assert unstable.name == "UNSTABLE_OFFSET_COMMIT"
    core.complete_txn(0, 77, commit=False)                  # aborted: dropped
    assert core.fetch_offsets("g", [("t", 0)], require_stable=True) == [("t", 0, 5, -1, "")]
    txn_commit(shell, 11)
    shell.complete_writes()
    core.complete_txn(0, 77, commit=True)                   # committed: the group's offset
    assert core.fetch_offsets("g", [("t", 0)], require_stable=True) == [("t", 0, 11, -1, "")]
    assert core.pending_txn_offsets == {}


def test_a_failed_txn_offset_write_leaves_nothing_pending():
    core, shell = coordinator()
    request = txn_commit(shell, 9)
    shell.complete_writes(NotLeaderOrFollowerError("moved"))
    assert isinstance(shell.replies[request], NotCoordinatorError)
    assert core.pending_txn_offsets == {}


def test_txn_offset_commit_of_a_member_is_fenced_by_its_generation():
    """KIP-447: a TxnOffsetCommit naming a member and generation is checked like an
    OffsetCommit (a zombie of an older generation is ILLEGAL_GENERATION)."""
    core, shell = coordinator()
    member = stable_member(shell)
    generation = core.groups["g"].generation_id
    request = shell.call(core.commit_offsets("g", member, generation + 1,
                                             [("t", 0, 1, -1, "")], 0, transaction=TXN))
    assert isinstance(shell.replies[request], IllegalGenerationError)
    assert shell.writes == [] and core.pending_txn_offsets == {}
    request = shell.call(core.commit_offsets("g", member, generation,
                                             [("t", 0, 1, -1, "")], 0, transaction=TXN))
    shell.complete_writes()
    assert shell.replies[request] is None and 77 in core.pending_txn_offsets


def test_a_new_coordinator_loads_pending_and_settled_txn_offsets():
    """What the old coordinator wrote, read back with the transactions' markers
    (coordinator_load's transactional records): committed ones are offsets, aborted ones
    are gone, open ones are pending."""
    from protocols.wire import decode
    core, shell = coordinator()
    txn_commit(shell, 9, txn=("a", 70, 0))
    txn_commit(shell, 12, txn=("b", 71, 0))
    txn_commit(shell, 15, group_id="h", txn=("c", 72, 0))
    written = shell.writes
    shell.complete_writes()
    records = [(r.key, r.value, w.transaction[1], None) for w in written for r in w.records]
    records += [(None, None, 70, True), (None, None, 71, False)]   # 72's is still open
    fresh = GroupCoordinator(2, 1, GroupConfig())
    fresh.on_election(0, 6)
    fresh.on_loaded(0, 6, records, now_ms=0)
    assert fresh.fetch_offsets("g", [("t", 0)]) == [("t", 0, 9, -1, "")]
    assert list(fresh.pending_txn_offsets) == [72]
    fresh.complete_txn(0, 72, commit=True)
    assert fresh.fetch_offsets("h", [("t", 0)]) == [("t", 0, 15, -1, "")]
    assert decode(records[0][0])[1] == "g"
