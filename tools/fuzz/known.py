"""Hand-written cases for the bug classes known before the fuzzer existed (the regression corpus's seeds).

``write(directory)`` saves them as case files; ``tests/hostile/corpus`` holds them, with every
input the fuzzer ever saved.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from tools.fuzz import rawmp, seeds, targets
from tools.fuzz.case import Case, Found, dump, file_name
from tools.fuzz.draft import BODY, BUFFERS, Draft, Live, LiveHandle, encode, finish, start
from tools.fuzz.ops_tensors import pack, unpack

__all__ = ["cases", "write"]

_TOKEN = "0123456789abcdef" * 2
_PLAIN = 0  # a seed without tensors: no descriptor in the body
_EMPTY = 3  # the seed whose first tensor is an empty one (an ext(3) of no bytes)
_VALUE = 11  # an rpc.Value seed
_INLINE = (seeds.ALL_INLINE, 0)  # every tensor in an inline frame (empty ones inside frame 0)


def _draft(seed: int, layout: seeds.Layout, decoder: int = 0) -> Draft:
    d = start(random.Random(0), "known", seeds.template(seed, layout), [])
    d.decoder = decoder
    return d


def _ext_chain(prefix: bytes) -> Case:
    d = _draft(_VALUE, _INLINE)
    body = d.get(BODY)
    body["value"] = msgspec.Raw(rawmp.ext_chain([(2, prefix)] * 100_000, encode([])))
    d.put(BODY, msgspec.Raw(encode(body)))
    return finish(d, f"tree tuples nested 100,000 deep (ext(2, {prefix.hex() or 'ext'}...))")


def _shape(shape: list[int], strides: list[int]) -> Case:
    d = _draft(_EMPTY, _INLINE)
    body = d.get(BODY)
    first = body["output"][0]  # torch.zeros(0): an ext(3) of no bytes of frame 0's data
    desc = unpack(first)
    assert desc is not None and first.code == 3 and desc.offset == desc.nbytes == 0
    body["output"][0] = pack(replace(desc, rank=len(shape), flags=1, shape=tuple(shape), strides=tuple(strides)))
    d.put(BODY, msgspec.Raw(encode(body)))
    return finish(d, f"an empty tensor of shape {shape}")


def _forged(handle: dict[str, Any] | LiveHandle, nbytes: Any, label: str, decoder: int) -> Case:
    """A message whose only buffer is ``handle`` (no descriptors: nothing stops the import, which
    happens after the body)."""
    d = _draft(_PLAIN, _INLINE, decoder)
    d.put(BUFFERS, [[nbytes, handle]])
    return finish(d, label)


def _decoy(kind: str) -> Case:
    handle = {"transport": "shm", "name": Live(targets.decoy(kind)), "capability": bytes(16)}
    nbytes = Live(["ctx", "victim", "decoy_nbytes", kind])
    return _forged(handle, nbytes, f"a forged one-shot handle naming the victim's decoy {kind}", 2)


def _slot(kind: str) -> Case:
    handle = LiveHandle(targets.slot(kind, 0, "handle"), {"capability": bytes(range(16))})
    label = f"a forged handle naming the victim's {kind} slot in flight, with a wrong capability"
    return _forged(handle, Live(targets.slot(kind, 0, "nbytes")), label, 2 if kind == "named" else 0)


def _pid(transport: str) -> Case:
    handle: dict[str, Any] = {"transport": transport, "name": f"tw-2147483648-{_TOKEN}-1", "capability": bytes(16)}
    if transport == "shm-slot":
        handle.update(offset=0, generation=1, fd=3)
    return _forged(handle, 64, f"a {transport} handle whose name has pid 2147483648", 2)


def _fd(which: str) -> Case:
    handle = LiveHandle(targets.slot("memfd", 0, "handle"), {"fd": Live(targets.fd(which))})
    label = f"a slot handle of the victim whose fd is the victim's {which}"
    return _forged(handle, Live(targets.slot("memfd", 0, "nbytes")), label, 0)


def cases() -> list[Case]:
    """Every known-bug case."""
    makers: list[Callable[[], Case]] = [
        lambda: _ext_chain(b""),
        lambda: _ext_chain(b"\x91"),
        lambda: _shape([0, 2**63], [1, 1]),
        lambda: _shape([2**63, 0], [1, 1]),
        lambda: _shape([2**40, 2**40, 0], [0, 0, 1]),
        *(lambda k=kind: _decoy(k) for kind in targets.DECOYS),
        lambda: _slot("memfd"),
        lambda: _slot("named"),
        lambda: _pid("shm"),
        lambda: _pid("shm-slot"),
        *(lambda w=which: _fd(w) for which in ("pipe", "socket", "file", "null")),
    ]
    return [make() for make in makers]


def write(directory: Path) -> list[Path]:
    """Save every known-bug case in ``directory``; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for case in cases():
        path = directory / file_name(case, "known")
        path.write_bytes(dump(case, Found("known", case.label)))
        paths.append(path)
    return paths
