"""Fixtures for tests on a real rafka cluster: real Ray actors, real files, real processes."""
from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from typing import Callable

import pytest

import rafka

_names = itertools.count()

# Short timeouts so faults resolve within a test; everything else is Kafka's default.
FAST = {"broker.session.timeout.ms": 6000, "broker.heartbeat.interval.ms": 500,
        "replica.lag.time.max.ms": 3000, "replica.high.watermark.checkpoint.interval.ms": 500,
        "controlled.shutdown.retry.backoff.ms": 200,
        # Consumer groups: a small __consumer_offsets (quick to create and load) and a
        # short first-rebalance delay.
        "offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 2,
        "group.initial.rebalance.delay.ms": 500,
        # Transactions: a small __transaction_state likewise.
        "transaction.state.log.num.partitions": 3}


@contextmanager
def cluster_with(tmp_path, config: dict | None = None, brokers: int = 3):
    """A fresh cluster (FAST and ``config``) with its own name and data directory."""
    c = rafka.Cluster.start(brokers, tmp_path / "data", dict(FAST, **(config or {})),
                            name=f"t{next(_names)}")
    try:
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def module_cluster(request, ray_session, tmp_path_factory):
    """One 3-broker cluster for the tests of a module that share one (``SHARE_CLUSTER``),
    with the module's ``CLUSTER_CONFIG`` if it has one."""
    with cluster_with(tmp_path_factory.mktemp("shared"),
                      getattr(request.module, "CLUSTER_CONFIG", None)) as c:
        yield c


@pytest.fixture
def cluster(request, ray_session, tmp_path):
    """A fresh 3-broker cluster with its own name and data directory (and the module's
    ``CLUSTER_CONFIG``); in a module that sets ``SHARE_CLUSTER = True``, the module's one
    (each test its own topics and groups), unless the test is marked ``own_cluster``: it
    kills or stops brokers, or counts what a broker saw since it started. A cluster takes
    5-6 s of this machine's two cores to start."""
    if getattr(request.module, "SHARE_CLUSTER", False) and \
            request.node.get_closest_marker("own_cluster") is None:
        yield request.getfixturevalue("module_cluster")
        return
    with cluster_with(tmp_path, getattr(request.module, "CLUSTER_CONFIG", None)) as c:
        yield c


def collect(poll: Callable[[], list], expected: int, timeout_s: float = 60,
            settle_s: float = 2.0) -> list:
    """What ``poll`` returns, call after call, until ``expected`` items came and
    ``settle_s`` more passed without the test ending (any extra item is kept: the caller's
    assertion sees it), or until ``timeout_s``."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    settled = None
    while time.monotonic() < deadline:
        got.extend(poll())
        if len(got) >= expected:
            settled = settled or time.monotonic() + settle_s
            if time.monotonic() > settled:
                break
    return got
