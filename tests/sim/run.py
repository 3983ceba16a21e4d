"""Run the replication simulator over many seeds, or replay one.

    python -m tests.sim.run --seeds 100000          # seeds 0..99999
    python -m tests.sim.run --seed 4242 --verbose   # replay one, printing its schedule
    python -m tests.sim.run --seeds 1000 --no-epochs  # pre-KIP-101 truncation: finds losses
    python -m tests.sim.run --seeds 10000 --transactions   # with a transaction coordinator
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from tests.sim.cluster import InvariantViolation, Simulation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=500, help="run seeds 0..N-1")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--no-epochs", action="store_true",
                        help="truncate to the HW instead of using leader epochs")
    parser.add_argument("--transactions", action="store_true",
                        help="transactional producers and a transaction coordinator in the "
                             "schedule (tests.sim.transactions)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    failures, started = 0, time.perf_counter()
    exercised: Counter = Counter()
    for i, seed in enumerate(seeds, 1):
        try:
            sim = Simulation(seed, epochs=not args.no_epochs, steps=args.steps,
                             transactions=args.transactions).run()
            exercised.update(sim.stats)
            if args.verbose:
                print(f"seed {seed}: {' | '.join(sim.trace)}")
        except InvariantViolation as e:
            failures += 1
            print(f"FAILED {e}", flush=True)
        if i % 1000 == 0:
            print(f"{i} seeds, {failures} failed, {time.perf_counter() - started:.0f} s",
                  flush=True)
    elapsed = time.perf_counter() - started
    print(f"{len(seeds) - failures} passed, {failures} failed in {elapsed:.0f} s "
          f"({len(seeds) / elapsed:.1f} seeds/s)")
    print("exercised (passing seeds): " + ", ".join(f"{n} {what}"
                                                    for what, n in sorted(exercised.items())))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
