"""Catalogues of hostile values: edge ints, junk of every msgpack type, segment names, fds,
capabilities, queue handles' sender and tensor ids."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from tools.fuzz import targets
from tools.fuzz.case import Export
from tools.fuzz.draft import DELETE, Live

__all__ = [
    "EDGE_INTS",
    "TAGS",
    "capabilities",
    "edge_int",
    "fds",
    "junk",
    "names",
    "queue_handle",
    "queue_id",
    "queue_sender",
    "victim_handle",
]

EDGE_INTS = (
    *(0, 1, 2, 3, 7, 8, 15, 16, 63, 64, 255, 256, 4095, 4096, 4097, 65535, 65536),
    *(2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1),
    *(-1, -2, -128, -(2**31), -(2**63)),
)
TAGS = ("shm", "shm-slot", "inline", "queue", "cuda-shm", "cuda_shm", "", "SHM", "shm\x00", 0, None, DELETE)
_TOKEN = "0123456789abcdef" * 2
_STRINGS = ("", "\x00", "x", "tensor", "ndarray", "é", "\ud7ff", "a" * 300, "0", "-1", "NaN", "tw-1-x-1")


def edge_int(rng: random.Random) -> int:
    """An int at some boundary (or a small random one)."""
    return rng.choice(EDGE_INTS) if rng.random() < 0.85 else rng.randrange(-300, 300)


def junk(rng: random.Random, depth: int = 2) -> Any:
    """A random value of any msgpack type (containers at most ``depth`` deep)."""
    kind = rng.randrange(12 if depth > 0 else 9)
    if kind == 0:
        return edge_int(rng)
    if kind == 1:
        return rng.choice((0.0, -0.0, 1.5, float("nan"), float("inf"), float("-inf"), 1e308, 5e-324))
    if kind == 2:
        return rng.choice(_STRINGS)
    if kind == 3:
        return rng.randbytes(rng.choice((0, 1, 4, 16, 17, 100)))
    if kind == 4:
        return rng.choice((True, False))
    if kind == 5:
        return None
    if kind == 6:
        return msgspec.msgpack.Ext(rng.randrange(-128, 128), rng.randbytes(rng.choice((0, 1, 2, 4, 8, 16, 3))))
    if kind == 7:
        return msgspec.msgpack.Ext(rng.choice((1, 2)), rng.randbytes(rng.choice((0, 3, 4, 5, 8))))
    if kind == 8:
        return rng.randrange(2**64)
    if kind in (9, 10):
        return [junk(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {rng.choice(_STRINGS): junk(rng, depth - 1) for _ in range(rng.randrange(4))}


def _own_memfds(exports: list[Export]) -> list[int]:
    return [k for k, e in enumerate(exports) if e.mode in ("memfd", "cuda")]


def own_segments(exports: list[Export]) -> list[int]:
    """The worker's own exports that travel in shared-memory segments (their handles name one)."""
    return [k for k, e in enumerate(exports) if e.mode != "queue"]


def _own_queued(exports: list[Export]) -> list[int]:
    return [k for k, e in enumerate(exports) if e.mode == "queue"]


def names(rng: random.Random, exports: list[Export]) -> Any:
    """A segment name: a victim target's, a decoy's, one of an out-of-range pid, of another shape."""
    kind = rng.randrange(6)
    if kind == 0:
        which = rng.choice(("memfd", "named"))
        count = targets.MEMFD_SLOTS if which == "memfd" else targets.NAMED_SLOTS
        return Live(targets.slot(which, rng.randrange(count), "handle", "name"))
    if kind == 1:
        return Live(targets.oneshot(rng.randrange(targets.ONE_SHOTS), "handle", "name"))
    if kind == 2:
        return Live(targets.decoy(rng.choice(targets.DECOYS)))
    if kind == 3:
        template = rng.choice(
            (
                "tw-{victim_pid}-{victim_token}-fffff",
                "tw-{self_pid}-{self_token}-fffff",
                "tw-{victim_pid}-{self_token}-1",
                "tw-{victim_pid}-{victim_token}-1/../../x",
                "tw-{victim_pid}-{victim_token}-1\x00",
                "../tw-{victim_pid}-{victim_token}-1",
                "tw-{victim_pid}-{victim_token}-" + "f" * 17,
                "tw-0{victim_pid}-{victim_token}-1",
            )
        )
        return Live(["fmt", template])
    if kind == 4 and own_segments(exports):
        return Live(targets.own(rng.choice(own_segments(exports)), "handle", "name"))
    pid = rng.choice(("2147483648", "4194305", "4194304", "9999999999", "0", "1", "32769", "99999"))
    return rng.choice(
        (
            f"tw-{pid}-{_TOKEN}-1",
            "",
            ".",
            "..",
            "/",
            "../../etc/passwd",
            "/dev/null",
            "tw-1-abc-1",
            f"TW-1-{_TOKEN}-1",
            "tw-1-" + "g" * 32 + "-1",
            "\x00",
            "a" * 5000,
            f"tw-\u0663-{_TOKEN}-1",
            f"tw-1-{_TOKEN}-1\n",
        )
    )


def fds(rng: random.Random, exports: list[Export]) -> Any:
    """An fd number: one of the victim's (memfd or not), one of the worker's own memfds, an edge."""
    kind = rng.randrange(5)
    if kind == 0:
        return Live(targets.fd(rng.choice(targets.FDS)))
    if kind == 1:
        return Live(targets.slot("memfd", rng.randrange(targets.MEMFD_SLOTS), "handle", "fd"))
    if kind == 2:
        return Live(targets.leaked(0, "handle", "fd"))
    own = _own_memfds(exports)
    if kind == 3 and own:
        return Live(targets.own(rng.choice(own), "handle", "fd"))
    return rng.choice((0, 1, 2, 3, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**64 - 1, "3", None, DELETE, True))


def capabilities(rng: random.Random, exports: list[Export]) -> Any:
    """A capability: random, all zero, of the wrong length or type, another handle's."""
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(16)
    if kind == 1:
        return bytes(16)
    if kind == 2:
        return b"\xff" * 16
    if kind == 3:
        return rng.randbytes(rng.choice((0, 1, 15, 17, 32, 64)))
    if kind == 4:
        return Live(targets.leaked(rng.randrange(2), "handle", "capability"))
    if kind == 5 and own_segments(exports):
        return Live(targets.own(rng.choice(own_segments(exports)), "handle", "capability"))
    return rng.choice(("x" * 16, None, DELETE, 0, [0] * 16))


_SENDERS = ("{queue_sender}-1", "{queue_sender}x", "{self_pid}-000000000000", "{victim_pid}-{victim_token}")
QUEUE_DELTAS = (-2, -1, 1, 2, 1 << 20, -(1 << 20))  # from one of the worker's own ids: consumed, never issued


def queue_sender(rng: random.Random, exports: list[Export]) -> Any:
    """A queue handle's sender: the worker's own (a stream with tensors on the queue), another
    stream's or process's that never sent here, an odd string, not a string."""
    kind = rng.randrange(5)
    own = _own_queued(exports)
    if kind == 0 and own:
        return Live(targets.own(rng.choice(own), "handle", "sender"))
    if kind == 1:
        return Live(["fmt", "{queue_sender}"])
    if kind == 2:
        return Live(["fmt", rng.choice(_SENDERS)])
    if kind == 3:
        return rng.choice(("", "\x00", "a" * 5000, "0-0", "é", "{queue_sender}"))
    return rng.choice((0, -1, None, b"sender", ["s"], True, DELETE))


def queue_id(rng: random.Random, exports: list[Export], field: str) -> Any:
    """A queue handle's ``field`` ("message" or "tensor"): one of the worker's own moved by a delta
    (one older, taken already, or never issued), an edge int (negative, past 2**63), not an int."""
    kind = rng.randrange(4)
    own = _own_queued(exports)
    if kind < 2 and own:
        ref = targets.own(rng.choice(own), "handle", field)
        return Live(ref if kind == 0 else ["add", ref, rng.choice(QUEUE_DELTAS)])
    if kind == 2:
        return edge_int(rng)
    return rng.choice(("0", None, 1.5, True, [0], b"\x00", DELETE))


def queue_handle(rng: random.Random, exports: list[Export]) -> dict[str, Any]:
    """A whole queue handle of hostile fields (an extra field now and then)."""
    handle: dict[str, Any] = {
        "transport": "queue",
        "sender": queue_sender(rng, exports),
        "message": queue_id(rng, exports, "message"),
        "tensor": queue_id(rng, exports, "tensor"),
    }
    if rng.random() < 0.05:
        handle[rng.choice(("name", "capability", "extra"))] = junk(rng)
    return handle


def victim_handle(rng: random.Random) -> tuple[list[Any], list[Any]]:
    """A victim target that holds bytes: ``(ref of its handle, ref of its nbytes)``."""
    kind = rng.randrange(4)
    if kind == 0:
        base = targets.slot("memfd", rng.randrange(targets.MEMFD_SLOTS))
    elif kind == 1:
        base = targets.slot("named", rng.randrange(targets.NAMED_SLOTS))
    elif kind == 2:
        base = targets.oneshot(rng.randrange(targets.ONE_SHOTS))
    else:
        base = targets.leaked(rng.randrange(2))
    return [*base, "handle"], [*base, "nbytes"]
