"""Byte mutations for the fuzz targets: flips, cuts, inserts, and the integers that break
length and count fields (0, -1, the int32 edges, small values)."""
from __future__ import annotations

import random
import struct

INTERESTING_I32 = (0, 1, -1, 2**31 - 1, -2**31, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0xFFFF,
                   0x10000, 61, 62, 63, 64, 4096)
INTERESTING_I8 = (0, 1, 0x7F, 0x80, 0xFF)


def mutate(rng: random.Random, data: bytes, max_ops: int = 4) -> bytes:
    """``data`` changed by 1..max_ops mutations (never the same bytes back unless it is empty
    and nothing could be inserted)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, max_ops)):
        op = rng.random()
        if op < 0.35 and out:                       # one byte replaced
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif op < 0.45 and out:                     # one bit flipped
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        elif op < 0.6 and len(out) >= 4:            # an int32 field set to an edge value
            i = rng.randrange(len(out) - 3)
            out[i:i + 4] = struct.pack(">i", rng.choice(INTERESTING_I32))
        elif op < 0.65 and out:
            out[rng.randrange(len(out))] = rng.choice(INTERESTING_I8)
        elif op < 0.78 and out:                     # the end cut off (a torn write)
            del out[rng.randrange(len(out)):]
        elif op < 0.85 and len(out) > 1:            # a run deleted from the middle
            i = rng.randrange(len(out))
            del out[i:i + rng.randint(1, 16)]
        elif op < 0.93:                             # random bytes inserted
            i = rng.randrange(len(out) + 1)
            out[i:i] = rng.randbytes(rng.randint(1, 8))
        else:                                       # a run of the data repeated
            if out:
                i = rng.randrange(len(out))
                chunk = out[i:i + rng.randint(1, 32)]
                j = rng.randrange(len(out) + 1)
                out[j:j] = chunk
    return bytes(out)
