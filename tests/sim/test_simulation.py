"""The replication invariants hold over hundreds of seeded fault schedules, and after the
final heal every follower catches up (liveness)."""
from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.sim.cluster import InvariantViolation, Simulation

SEEDS = int(os.environ.get("RAFKA_SIM_SEEDS", "300"))
TXN_SEEDS = int(os.environ.get("RAFKA_SIM_TXN_SEEDS", "100"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_invariants_hold_for_every_seed():
    failed, exercised = [], Counter()
    for seed in range(SEEDS):
        try:
            exercised += Simulation(seed).run().stats
        except InvariantViolation as e:
            failed.append(str(e))
    # The schedule reaches what the production code must survive, so passing means something.
    for what in ("host crashes", "controlled stops with nothing led", "incremental fetches",
                 "OffsetsForLeaderEpoch requests", "FetchSessionIdNotFoundError",
                 "controller messages lost to live brokers"):
        assert exercised[what] > 0, f"no seed exercised {what}: {dict(exercised)}"
    assert not failed, f"{len(failed)} of {SEEDS} seeds failed; replay with " \
        f"`python -m tests.sim.run --seed N`:\n" + "\n".join(failed[:5])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_transaction_invariants_hold_for_every_seed():
    """Transactional producers, a transaction coordinator failing over, producers fenced
    (``tests.sim.transactions``): markers agree across partitions and with what producers
    were told, read_committed returns committed transactions only and whole, the LSO never
    passes an open transaction. (The long form: ``python -m tests.sim.run --seeds 10000
    --transactions``.)"""
    failed, exercised = [], Counter()
    for seed in range(1_000_000, 1_000_000 + TXN_SEEDS):
        try:
            exercised += Simulation(seed, transactions=True).run().stats
        except InvariantViolation as e:
            failed.append(str(e))
    for what in ("txn committed", "txn aborted", "txn coordinator failovers",
                 "txn client ProducerFencedError", "txn markers appended",
                 "txn batches refused by verification"):
        assert exercised[what] > 0, f"no seed exercised {what}: {dict(exercised)}"
    assert not failed, f"{len(failed)} of {TXN_SEEDS} seeds failed; replay with " \
        f"`python -m tests.sim.run --transactions --seed N`:\n" + "\n".join(failed[:5])


def test_the_simulator_finds_loss_without_leader_epochs():
    """The checker is not blind: with pre-KIP-101 truncation some schedule loses an
    acknowledged record or diverges."""
    for seed in range(3000):
        try:
            Simulation(seed, epochs=False).run()
        except InvariantViolation:
            return
    pytest.fail("no seed in 0..2999 broke an invariant with leader epochs switched off")


def test_seed_8101472_a_retried_fetch_arrives_after_the_one_that_timed_out():
    """A fetch held up on a slow link times out; its retry and the late original reach the
    leader on one connection, in the order they were sent (``fetch_many`` runs as a frame
    is read). Delivered the other way round, the original would set the follower's position
    back after its partition was parked in the retry's session, leaving the HW one short of
    the log end for good."""
    Simulation(8101472).run()
