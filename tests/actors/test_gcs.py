"""GCS calls from actors (actors.gcs): each bounded, so none holds up the ones behind it."""
from __future__ import annotations

import asyncio
import os
import signal

import pytest

import rafka
from actors.gcs import gcs_backlog, gcs_call, gcs_get
from protocols.errors import BrokerNotAvailableError, KafkaTimeoutError

pytestmark = [pytest.mark.ray, pytest.mark.timeout(60)]


def _gcs_pid() -> int:
    import ray._private.worker as worker
    return worker._global_node.all_processes["gcs_server"][0].process.pid


def test_a_store_read_the_gcs_leaves_unanswered_frees_the_gcs_thread_at_its_timeout(
        ray_session):
    """Found by a long fault run: a broker's lease read went to the GCS while its host was cut
    off and never returned (Ray's own store reads wait for ever); every later GCS call of the
    broker waited behind it on its one GCS thread, 416 s and counting, and the broker never
    registered again. A read now fails at its timeout, and the thread goes on."""
    gcs = _gcs_pid()

    async def scenario() -> None:
        os.kill(gcs, signal.SIGSTOP)           # a GCS that does not answer
        try:
            with pytest.raises(Exception):     # noqa: B017 - Ray's RpcError or TimeoutError
                await gcs_get("rafka/tests/no-such-key", 1.0)
            # The GCS still does not answer, yet a call behind the read runs.
            assert await asyncio.wait_for(gcs_call(lambda: "ran"), 3.0) == "ran"
            assert gcs_backlog() == {"waiting": 0, "running": None, "running_s": 0.0}
        finally:
            os.kill(gcs, signal.SIGCONT)
        assert await gcs_get("rafka/tests/no-such-key", 5.0) is None
    asyncio.run(scenario())


def test_a_driver_the_gcs_leaves_unanswered_gets_kafkas_timeout_error_not_a_hang(ray_session):
    """The same for a driver: Cluster.connect read the cluster's record with Ray's own store
    read, which waits for ever when the head does not answer. It now answers
    TimeoutException (KafkaTimeoutError) naming the read, and works once the GCS answers."""
    gcs = _gcs_pid()
    os.kill(gcs, signal.SIGSTOP)
    try:
        with pytest.raises(KafkaTimeoutError, match="did not answer kv_get.*rafka/no-such/"):
            rafka.Cluster.connect("no-such")
    finally:
        os.kill(gcs, signal.SIGCONT)
    with pytest.raises(BrokerNotAvailableError, match="No rafka cluster named 'no-such'"):
        rafka.Cluster.connect("no-such")
    assert "no-such" not in rafka.Cluster.running()
