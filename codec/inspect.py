"""Readable descriptions of a message's header: ``tensorwire inspect`` and the demo's table.

``describe`` reads any bytes: it returns plain JSON data (str keys; lists, numbers, strings, None)
or raises ``DecodeError``, nothing else. It never shows the contents of a bytes value: each one
(a handle's capability, a body's bytes) is ``{"$bytes": <length>}``. Its nesting is bounded by
``check_depth`` before msgspec sees the frame, and every walk after that is iterative.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import msgspec

from codec.errors import DecodeError
from codec.locate import key_segment
from codec.scan import check_depth
from codec.wire import EXT_TENSOR, EXT_TUPLE, Buffer

__all__ = ["describe"]

_FIELDS = ("kind", "dtype", "shape", "strides", "offset", "buffer", "nbytes")
_SEGMENT_CHARS = 64  # a longer map key is cut short in a path

# A body path, built only for the tensor references whose path is wanted: None for ``$``, else
# (parent, step), a step being an array index (int) or a map key (wrapped in a 1-tuple).
_Where = tuple[Any, Any] | None


class _Ref:
    """A tensor reference, ext(1, index)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Ext:
    """An extension of an unknown type (shown by its code only)."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


def describe(header_frame: Buffer, max_depth: int = 66) -> dict[str, Any]:
    """Type, version, fingerprint, each buffer (transport, size, handle) and each tensor with its body path."""
    header = _decode(header_frame, max_depth)
    descriptors = _array(header.get("tensors", []), "tensors")
    paths: dict[int, str] = {}
    body = _plain(header.get("body"), paths, len(descriptors))
    return {
        "type": _plain(header.get("type")),
        "version": _plain(header.get("version")),
        "fingerprint": _plain(header.get("fingerprint")),
        "wire": _plain(header.get("wire")),
        "buffers": _buffers(_array(header.get("buffers", []), "buffers")),
        "tensors": _tensors(descriptors, paths),
        "body": body,
    }


def _decode(header_frame: Buffer, max_depth: int) -> dict[Any, Any]:
    """Frame 0 as a map, its nesting bounded first."""
    try:
        view = memoryview(header_frame).cast("B")
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"invalid header: {exc}") from None
    check_depth(view, max_depth)
    try:
        header = msgspec.msgpack.decode(view, ext_hook=_ext_hook)
    except msgspec.MsgspecError as exc:
        raise DecodeError(f"invalid header: {exc}") from None
    if not isinstance(header, dict):
        raise DecodeError("invalid header: frame 0 is not a msgpack map")
    return header


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == EXT_TENSOR:
        return _Ref(int.from_bytes(data, "little"))
    if code == EXT_TUPLE:  # nesting bounded by check_depth
        items = msgspec.msgpack.decode(data, ext_hook=_ext_hook)
        if not isinstance(items, list):
            raise DecodeError("invalid header: a tree tuple must hold an array")
        return tuple(items)
    return _Ext(code)


def _array(value: Any, name: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise DecodeError(f"invalid header: `{name}` is not an array - at `$.{name}`")
    return value


def _buffers(entries: list[Any] | tuple[Any, ...]) -> list[dict[str, Any]]:
    buffers = []
    for i, entry in enumerate(entries):
        handle = entry.get("handle") if isinstance(entry, dict) else None
        if not isinstance(handle, dict):
            raise DecodeError(f"invalid header: buffer {i} is not a map with a handle map - at `$.buffers[{i}]`")
        transport = _plain(handle.get("transport"))
        buffers.append(
            {"index": i, "transport": transport, "nbytes": _plain(entry.get("nbytes")), "handle": _plain(handle)}
        )
    return buffers


def _tensors(descriptors: list[Any] | tuple[Any, ...], paths: dict[int, str]) -> list[dict[str, Any]]:
    tensors = []
    for i, desc in enumerate(descriptors):
        if not isinstance(desc, list | tuple):
            raise DecodeError(f"invalid header: tensor descriptor {i} is not an array - at `$.tensors[{i}]`")
        fields = [*desc[: len(_FIELDS)], *[None] * (len(_FIELDS) - len(desc))]
        entry: dict[str, Any] = {"index": i, "path": paths.get(i)}
        entry.update((name, _plain(value)) for name, value in zip(_FIELDS, fields, strict=True))
        tensors.append(entry)
    return tensors


def _plain(value: Any, paths: dict[int, str] | None = None, count: int = 0) -> Any:
    """``value`` as JSON data, without recursion; with ``paths``, the body path of the first
    reference to each tensor index below ``count`` is recorded there."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, _Where]] = [(value, root, 0, None)]
    while stack:
        item, into, slot, where = stack.pop()
        if isinstance(item, dict):
            out: Any = {}
            children = []
            for key, child in item.items():
                name = key if isinstance(key, str) else _key(key)
                out[name] = None  # keeps the order of the keys
                children.append((child, out, name, (where, (key,))))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            out = [None] * len(item)
            stack.extend((item[i], out, i, (where, i)) for i in range(len(item) - 1, -1, -1))
        else:
            out = _leaf(item)
            if paths is not None and isinstance(item, _Ref) and item.index < count and item.index not in paths:
                paths[item.index] = _path(where)
        into[slot] = out
    return root[0]


def _leaf(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": len(value)}  # never its contents: a capability is a secret
    if isinstance(value, _Ref):
        return {"$tensor": value.index}
    if isinstance(value, _Ext):
        return {"$ext": value.code}
    if isinstance(value, datetime):  # msgpack's timestamp extension
        return {"$timestamp": value.isoformat()}
    return {"$value": type(value).__name__}


def _key(key: Any) -> str:
    """A map key that is not a string, as a string (its JSON form)."""
    return json.dumps(_plain(key))


def _path(where: _Where) -> str:
    steps = []
    while where is not None:
        where, step = where
        steps.append(_segment(step[0]) if isinstance(step, tuple) else f"[{step}]")
    return "$" + "".join(reversed(steps))


def _segment(key: Any) -> str:
    """The path segment of a map entry: ``.name``, ``["other text"]`` or ``[<JSON of a non-string key>]``."""
    if isinstance(key, str):
        return key_segment(key if len(key) <= _SEGMENT_CHARS else key[: _SEGMENT_CHARS - 3] + "...")
    text = _key(key)
    return f"[{text if len(text) <= _SEGMENT_CHARS else text[: _SEGMENT_CHARS - 3] + '...'}]"
