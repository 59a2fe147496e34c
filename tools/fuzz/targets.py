"""The victim's targets, as the generator names them symbolically (the victim builds exactly these).

The victim reports a table of this shape (capabilities zeroed, except the leaked message's)::

    {"pid": int, "token": str,
     "slots": {"memfd": [{"handle": {...}, "nbytes": n}] * MEMFD_SLOTS, "named": [...] * NAMED_SLOTS},
     "oneshots": [{"handle": {...}, "nbytes": n}] * ONE_SHOTS,
     "decoys": {kind: name for kind in DECOYS}, "decoy_nbytes": {kind: n},
     "fds": {kind: number for kind in FDS},
     "leaked": [{"handle": {...}, "nbytes": n}]}

Refs into it are ``["ctx", "victim", ...]`` paths (see ``tools.fuzz.materialize``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DECOYS",
    "EXACT_NBYTES",
    "FDS",
    "MEMFD_SLOTS",
    "NAMED_SLOTS",
    "ONE_SHOTS",
    "decoy",
    "fd",
    "leaked",
    "oneshot",
    "own",
    "slot",
]

MEMFD_SLOTS = 4
NAMED_SLOTS = 3
ONE_SHOTS = 3
# regular files of random bytes (one of a size a one-shot handle of EXACT_NBYTES expects), a FIFO,
# a symlink to a regular file, a directory, files with a valid-looking pool or one-shot control page
# under a capability nobody knows, and a file of another uid
DECOYS = ("file", "file_exact", "fifo", "symlink", "dir", "slotlike", "oneshotlike", "otheruid")
FDS = ("pipe", "pipe_w", "file", "socket", "null")
EXACT_NBYTES = 64


def slot(kind: str, index: int, *field: str | int) -> list[Any]:
    """A victim pool slot in flight (``kind`` "memfd" or "named"): its handle, or a field of it."""
    return ["ctx", "victim", "slots", kind, index, *field]


def oneshot(index: int, *field: str | int) -> list[Any]:
    """A victim one-shot segment nobody claimed."""
    return ["ctx", "victim", "oneshots", index, *field]


def decoy(kind: str) -> list[Any]:
    """The name of a decoy."""
    return ["ctx", "victim", "decoys", kind]


def fd(kind: str) -> list[Any]:
    """The number of one of the victim's non-memfd fds."""
    return ["ctx", "victim", "fds", kind]


def leaked(index: int, *field: str | int) -> list[Any]:
    """A buffer of the victim's leaked message (its real capability included)."""
    return ["ctx", "victim", "leaked", index, *field]


def own(index: int, *field: str | int) -> list[Any]:
    """The worker's own export ``index`` of the case (``"handle"``, a handle field, or ``"nbytes"``)."""
    return ["ctx", "own", index, *field]
