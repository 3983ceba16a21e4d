"""The fuzz targets' short form (the long runs: ``python -m tests.fuzz.run --inputs 1000000``):
every decoder of outside bytes answers each input with its value or a clear Kafka error."""
from __future__ import annotations

import io

import pytest

from tests.fuzz.run import run_target
from tests.fuzz.targets import TARGETS

SHORT = {"log_on_open": 600,     # ~4 ms each: a directory copied and a log opened per input
         "tls_request": 1500}    # ~5 ms each: a TLS connection made again after each close


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_no_input_crashes_or_gets_a_wrong_answer(name, tmp_path):
    target = TARGETS[name](tmp_path)
    out = io.StringIO()
    try:
        ok, outcomes, _ = run_target(target, SHORT.get(name, 3000), seed=20261126, hang_s=10,
                                     out=out)
    finally:
        target.close()
    assert ok, out.getvalue()
    # Both kinds of answer occur, or the target no longer reaches past the first check.
    assert outcomes["accepted"] > 0 and any(k.startswith("refused") for k in outcomes), outcomes
