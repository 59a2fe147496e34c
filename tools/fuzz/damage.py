"""Byte-level damage: flipped, set, inserted, deleted or duplicated bytes, then an optional cut."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tools.fuzz.case import Damage

__all__ = ["KINDS", "apply", "draw"]

KINDS = ("flip", "set", "insert", "delete", "dup")


def draw(rng: random.Random, target: int, size: int, windows: Sequence[tuple[int, int]] = ()) -> Damage:
    """A few random edits of a ``size``-byte target (and sometimes a cut), mostly inside ``windows``
    (``(start, end)`` ranges of it) where there are any."""
    span = max(size, 1)
    edits = []
    for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
        if windows and rng.random() < 0.7:
            start, end = rng.choice(windows)
            where = rng.randrange(start, max(end, start + 1))
        else:
            where = rng.randrange(span) if rng.random() < 0.9 else rng.randrange(2**16)
        edits.append((rng.choice(KINDS), where, rng.randrange(256)))
    cut = rng.randrange(span + 1) if rng.random() < 0.2 else None
    return Damage(target, edits, cut)


def apply(data: bytes, damage: Damage) -> bytes:
    """``data`` with ``damage`` done to it (positions wrap around the current length)."""
    out = bytearray(data)
    for kind, where, byte in damage.edits:
        if kind == "insert":
            out.insert(where % (len(out) + 1), byte)
            continue
        if not out:
            continue
        pos = where % len(out)
        if kind == "flip":
            out[pos] ^= 1 << (byte % 8)
        elif kind == "set":
            out[pos] = byte
        elif kind == "delete":
            del out[pos]
        elif kind == "dup":
            out[pos:pos] = out[pos : pos + 1 + byte % 16]
    return bytes(out if damage.cut is None else out[: damage.cut])
