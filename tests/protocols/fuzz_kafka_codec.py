"""Fuzz the Kafka request decoder a long while (the suite runs a short hypothesis form):

    .venv/bin/python -m tests.protocols.fuzz_kafka_codec --inputs 1000000 --seed 1

Inputs are random frames and valid frames of every served API and version with bytes
flipped, cut or inserted. Each must decode to a Request or raise CloseConnection (what the
socket server turns into a closed connection and a log line); anything else is a crash and
is printed with the frame. A progress line every 100,000 inputs.
"""
from __future__ import annotations

import argparse
import random
import struct
import sys
import time

from actors.broker.kafka_apis import SUPPORTED
from protocols.kafka.codec import CloseConnection, parse_request
from tests.kafka_wire import request_bytes


def seeds() -> list[bytes]:
    """One valid frame per served (API, version), with one topic where it names topics."""
    return [request_bytes(key, version, {"topics": [{"name": "t"}]}, client_id="fuzz")[4:]
            for key, (lo, hi) in sorted(SUPPORTED.items()) for version in range(lo, hi + 1)]


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.5 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op < 0.7 and data:
            del data[rng.randrange(len(data)):]
        else:
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(data)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    valid = seeds()
    started = time.monotonic()
    decoded = closed = 0
    for i in range(1, args.inputs + 1):
        if rng.random() < 0.2:
            key = rng.choice(sorted(SUPPORTED) + [rng.randrange(-5, 100)])
            frame = struct.pack(">hhi", key, rng.randrange(-2, 20), i) + rng.randbytes(
                rng.randint(0, 64))
        else:
            frame = mutate(rng, rng.choice(valid))
        try:
            parse_request(frame, SUPPORTED)
            decoded += 1
        except CloseConnection:
            closed += 1
        except Exception as e:   # a crash: the finding
            print(f"CRASH on input {i}: {type(e).__name__}: {e}\n  frame: {frame.hex()}")
            return 1
        if i % 100_000 == 0:
            print(f"  {i:,} inputs, {time.monotonic() - started:.0f} s", file=sys.stderr,
                  flush=True)
    print(f"{args.inputs:,} inputs (seed {args.seed}): {decoded:,} decoded, {closed:,} "
          f"closed the connection, 0 crashes, {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
