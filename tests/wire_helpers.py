"""Helpers shared by the encoder/decoder tests: deep equality with tensors, segment counting, and
decoding in another process."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import numpy as np
import torch

from tensorwire.transports._reaper import held_memfds
from tensorwire.transports.shm import our_segments


def bits(value: Any) -> Any:
    """Raw bytes of a tensor/array in logical order (bit-exact comparison; NaNs compare equal)."""
    if isinstance(value, torch.Tensor):
        flat = torch.empty(value.numel(), dtype=value.dtype).copy_(value.detach().reshape(-1))
        return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return np.ascontiguousarray(value).tobytes()


def same(a: Any, b: Any) -> bool:
    """Deep equality of messages: same types, tuples stay tuples, tensors equal bit for bit."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor | np.ndarray):
        return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and bits(a) == bits(b)
    if isinstance(a, msgspec.Struct):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__struct_fields__)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def segments_of(pid: int) -> list[str]:
    """tensorwire segments created by ``pid`` that still exist: named ones in /dev/shm, and memfds
    that this process or ``pid`` still holds (open or mapped)."""
    prefix = f"tw-{pid}-"
    names = {n for n in our_segments() if n.startswith(prefix)}
    for holder in {"self", str(pid)}:
        names.update(n for n in memfds_held(holder) if n.startswith(prefix))
    return sorted(names)


def memfds_held(holder: str = "self") -> set[str]:
    """Names of the tensorwire memfds process ``holder`` has open or mapped (empty if it is gone)."""
    return held_memfds(holder)


def damage(data: bytes, edits: list[tuple[str, int, int]], cut: int | None = None) -> bytes:
    """``data`` with ``edits`` applied in order (``(kind, where, byte)``: flip a bit, set, insert or
    delete a byte, positions taken modulo the length), then cut to ``cut`` bytes."""
    out = bytearray(data)
    for kind, where, byte in edits:
        if kind == "insert":
            out.insert(where % (len(out) + 1), byte)
        elif out:
            pos = where % len(out)
            if kind == "flip":
                out[pos] ^= 1 << (byte % 8)
            elif kind == "set":
                out[pos] = byte
            else:
                del out[pos]
    return bytes(out[:cut] if cut is not None else out)


def head_of(frame0: Any) -> list[Any]:
    """Frame 0 as plain data: ``[tag, fingerprint, data, [[nbytes, handle map], ...], body]`` (tensor
    extensions stay ``msgspec.msgpack.Ext``; re-encode with ``frame_of``)."""
    head = msgspec.msgpack.decode(bytes(memoryview(frame0)))
    assert isinstance(head, list)
    return head


def frame_of(head: list[Any]) -> bytes:
    """Frame 0 from the plain data ``head_of`` gives."""
    return msgspec.msgpack.encode(head)


def tensor_exts(value: Any) -> list[msgspec.msgpack.Ext]:
    """Every tensor extension (codes 1 and 3) in a decoded body, in body order (tuples entered)."""
    found: list[msgspec.msgpack.Ext] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, msgspec.msgpack.Ext):
            if item.code == 2:
                stack.append(msgspec.msgpack.decode(item.data))
            else:
                found.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


def ext_data(ext: msgspec.msgpack.Ext) -> bytes:
    """An extension's payload: bytes, as msgspec decodes it (its stubs say any buffer)."""
    data = ext.data
    assert isinstance(data, bytes)
    return data


def edit_descriptor(ext: msgspec.msgpack.Ext, **changes: Any) -> msgspec.msgpack.Ext:
    """A copy of a buffer tensor extension (code 1) with descriptor fields replaced: ``kind`` (0/1),
    ``dtype`` (code), ``shape``, ``strides`` (None: contiguous), ``buffer``, ``offset``, ``nbytes``,
    ``shared`` (bool); raw ``flags`` may be forced too."""
    from tensorwire._wire import KINDS, SHARED, pack_descriptor, unpack_descriptor
    from tensorwire.dtypes import DTYPE_NAMES

    assert ext.code == 1
    payload = ext_data(ext)
    desc = unpack_descriptor(1, payload)
    fields: dict[str, Any] = {
        "kind": KINDS.index(desc.kind),
        "dtype": DTYPE_NAMES.index(desc.dtype),
        "shape": desc.shape,
        "strides": desc.strides,
        "buffer": desc.buffer,
        "offset": desc.offset,
        "nbytes": desc.nbytes,
        "shared": bool(payload[3] & SHARED),
    }
    flags = changes.pop("flags", None)
    fields.update(changes)
    data = bytearray(pack_descriptor(**fields))
    if flags is not None:
        data[3] = flags
    return msgspec.msgpack.Ext(1, bytes(data))


@contextmanager
def held_elsewhere(decode: Callable[[], object]) -> Iterator[None]:
    """A forked child runs ``decode`` (a receiver of another process claims what it names) and holds
    what it returned until the block ends; then it lets go and exits (a failure fails the block)."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe and the exit status, never return
        code = 1
        try:
            signal.alarm(20)  # a hang ends the child: the test fails instead of hanging
            held = decode()
            os.write(ready_w, b"1")
            os.read(go_r, 1)
            del held
            code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(go_r)
    try:
        assert os.read(ready_r, 1) == b"1", "the child could not decode"
        yield
    finally:
        os.write(go_w, b"1")
        os.close(go_w)
        os.close(ready_r)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
