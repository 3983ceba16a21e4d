"""Fuzz every decoder that reads bytes from outside the process (the suite runs a short form):

    python -m tests.fuzz.run --inputs 1000000 --seed 1             # every target
    python -m tests.fuzz.run --target record_batch --inputs 20000  # one
    python -m tests.fuzz.run --target log_on_open --seed 1 --replay 4711   # one input again

Input ``i`` of seed ``S`` is drawn from its own generator, so ``--replay i`` repeats it.
A finding (a crash, a wrong answer, a refusal without a clear error) is printed with its
input number and stops the target. Each input runs under an alarm (``--hang-s``) and the
process under an address-space limit (``--max-gib``), so a hang or an unbounded allocation
is a finding too. A progress line every 100,000 inputs; one summary line per target.
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from tests.fuzz.targets import TARGETS, Finding, Target


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def input_rng(seed: int, i: int) -> random.Random:
    return random.Random(seed * 1_000_003 + i)


def run_target(target: Target, inputs: int, seed: int, hang_s: float, first: int = 1,
               out=sys.stdout) -> tuple[bool, Counter, float]:
    """Run ``inputs`` inputs from number ``first``; (no finding, outcomes, slowest input s)."""
    outcomes: Counter = Counter()
    slowest = 0.0
    started = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)
    for i in range(first, first + inputs):
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, hang_s)
        try:
            outcomes[target.one(input_rng(seed, i))] += 1
        except Hang:
            print(f"FINDING {target.name} input {i} (seed {seed}): no answer within {hang_s} s",
                  file=out, flush=True)
            return False, outcomes, hang_s
        except MemoryError:
            signal.setitimer(signal.ITIMER_REAL, 0)
            print(f"FINDING {target.name} input {i} (seed {seed}): MemoryError (an "
                  f"allocation beyond the address-space limit)", file=out, flush=True)
            return False, outcomes, slowest
        except Finding as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            print(f"FINDING {target.name} input {i} (seed {seed}): {e}", file=out, flush=True)
            return False, outcomes, slowest
        except Exception as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            print(f"FINDING {target.name} input {i} (seed {seed}): crash, "
                  f"{type(e).__name__}: {e}", file=out, flush=True)
            traceback.print_exc(file=out)
            return False, outcomes, slowest
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.perf_counter() - t0)
        if (i - first + 1) % 100_000 == 0:
            print(f"  {target.name}: {i - first + 1:,} inputs, "
                  f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
            gc.collect()
    return True, outcomes, slowest


def summary(name: str, inputs: int, seed: int, outcomes: Counter, slowest: float,
            elapsed: float) -> str:
    parts = ", ".join(f"{n:,} {what}" for what, n in outcomes.most_common())
    return (f"{name}: {inputs:,} inputs (seed {seed}), 0 findings, {elapsed:.0f} s, slowest "
            f"input {slowest * 1000:.1f} ms: {parts}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS),
                        help="a target (repeatable); every target by default")
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", type=int, help="run only this input number")
    parser.add_argument("--hang-s", type=float, default=10.0)
    parser.add_argument("--max-gib", type=float, default=6.0,
                        help="address-space limit of this process")
    parser.add_argument("--workdir", default="/dev/shm" if Path("/dev/shm").is_dir()
                        else tempfile.gettempdir())
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)   # recovery's warnings, by the thousand: the outcomes say it
    limit = int(args.max_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    names = args.target or sorted(TARGETS)
    workdir = Path(tempfile.mkdtemp(prefix="rafka-fuzz-", dir=args.workdir))
    failed = False
    try:
        for name in names:
            target = TARGETS[name](workdir)
            try:
                started = time.monotonic()
                first, count = (args.replay, 1) if args.replay else (1, args.inputs)
                ok, outcomes, slowest = run_target(target, count, args.seed, args.hang_s,
                                                   first)
                if ok:
                    print(summary(name, count, args.seed, outcomes, slowest,
                                  time.monotonic() - started), flush=True)
                failed |= not ok
            finally:
                target.close()
    finally:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"pid {os.getpid()}: {'FINDINGS' if failed else 'no findings'} over "
          f"{len(names)} targets")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
