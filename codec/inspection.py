"""Readable descriptions of a message's header: ``tensorwire inspect`` and the demo's table.

``describe`` reads any bytes: it returns plain JSON data (str keys; lists, numbers, strings, None)
or raises ``DecodeError``, nothing else. It never shows the contents of a bytes value: each one
(a handle's capability, a body's bytes) is ``{"$bytes": <length>}``; a float JSON cannot hold is
``{"$float": "nan"}`` (``"inf"``, ``"-inf"``). Its nesting is bounded by
``check_depth`` before msgspec sees the frame, and every walk after that is iterative; a frame
nested too deep is refused as a decode refuses it, naming the type and version its tag names and
the path of the first container past the limit.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from tensorwire._files import open_regular, read_at
from tensorwire._locate import decode_order, key_segment
from tensorwire._scan import check_depth, nesting_error, too_deep_for_the_stack
from tensorwire._wire import (
    BLOB_PREAMBLE,
    EXT_INLINE,
    EXT_TENSOR,
    EXT_TUPLE,
    FRAME_LENGTH,
    HEADER_LEVELS,
    WIRE_VERSION,
    Buffer,
    Descriptor,
    blob_frame_count,
    blob_frame_spans,
    parse_tag,
    unpack_descriptor,
)
from tensorwire.errors import DecodeError
from tensorwire.options import Limits

if TYPE_CHECKING:
    from tensorwire.registry import Registry

__all__ = ["describe", "read_header_frame", "tensor_paths"]

_FIELDS = Descriptor._fields  # kind, dtype, shape, strides, buffer, offset, nbytes
_SEGMENT_CHARS = 64  # a longer map key is cut short in a path
_MAX_TENSORS, _MAX_BUFFERS = Limits().max_tensors, Limits().max_buffers

# A body path, built only for the tensor references whose path is wanted: None for ``$``, else
# (parent, step), a step being an array index (int), a string map key (in a 1-tuple) or the JSON
# text of any other map key (in a 2-tuple after None: made once per entry, not once per tensor).
_Where = tuple[Any, Any] | None


class _Ref:
    """A tensor extension: its descriptor as JSON data, numbered in body order (``index``; -1 while
    it is in no body value) with where it is there (``where``), and, where one decode gathers them,
    in frame 0's order (``seq``)."""

    __slots__ = ("desc", "index", "seq", "where")

    def __init__(self, desc: dict[str, Any]) -> None:
        self.desc = desc
        self.index = -1
        self.seq = -1
        self.where: _Where = None


class _Ext:
    """An extension of an unknown type (shown by its code only)."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


def read_header_frame(path: str | os.PathLike[str], limits: Limits | None = None) -> bytearray:
    """Frame 0 of the blob file ``path``, checked as ``split`` checks a blob, reading only the
    preamble, the frame table and frame 0. ``DecodeError`` for a blob of more frames than a message
    has (``limits.max_buffers`` and frame 0) or a frame 0 over ``limits.max_header_bytes``;
    ``OSError`` if the file cannot be read."""
    limits = limits or Limits()
    with open_regular(path) as (fd, size):
        count = blob_frame_count(read_at(fd, 0, BLOB_PREAMBLE.size), size)
        if count > limits.max_buffers + 1:
            raise DecodeError(
                f"blob of {count} frames is over the limit of {limits.max_buffers + 1} "
                "(frame 0 and max_buffers inline buffers)"
            )
        head = read_at(fd, 0, BLOB_PREAMBLE.size + count * FRAME_LENGTH.size)
        if len(head) < BLOB_PREAMBLE.size + count * FRAME_LENGTH.size:
            raise DecodeError(f"blob frame table ({count} frames) does not fit in {size} bytes")
        offset, length = blob_frame_spans(head, count, size)[0]
        if length > limits.max_header_bytes:
            raise DecodeError(
                f"frame 0 of {length} bytes is over the limit of {limits.max_header_bytes} (limit max_header_bytes)"
            )
        frame = read_at(fd, offset, length)
        if len(frame) < length:
            raise DecodeError(f"blob truncated while read: frame 0 needs {length} bytes at {offset}")
        return frame


def describe(
    header_frame: Buffer, max_depth: int = 66, max_tensors: int = _MAX_TENSORS, max_buffers: int = _MAX_BUFFERS
) -> dict[str, Any]:
    """Type, version, fingerprint, the size of frame 0's data, each buffer (transport, size, handle)
    and each tensor with its body path. ``max_depth``: the levels frame 0 may nest, its own array
    and the body's map included (66: the 64 levels below a message of ``Limits``' default);
    ``max_tensors`` and ``max_buffers``: the tensor extensions and buffers it may hold (``Limits``'
    defaults), past which it is a ``DecodeError``, as a decode refuses it, before a description is
    made of any."""
    header = _decode(header_frame, max_depth, [], max_tensors)
    parsed = parse_tag(header[0] if header else None)
    if parsed is not None and parsed[0] != WIRE_VERSION:
        raise DecodeError(
            f"wire format version {parsed[0]} is not supported (this reader: {WIRE_VERSION})", path="$[0]"
        )
    data = _data_size(header[2] if len(header) > 2 else b"")
    buffers = _buffers(_array(header[3] if len(header) > 3 else [], "buffers"), max_buffers)
    refs: list[_Ref] = []
    body = _plain(header[4] if len(header) > 4 else None, refs)
    tensors = [{"index": ref.index, "path": _path(ref.where), **ref.desc} for ref in refs]
    return {
        "type": parsed[1] if parsed else None,
        "version": parsed[2] if parsed else None,
        "fingerprint": _plain(header[1] if len(header) > 1 else None),
        "wire": parsed[0] if parsed else None,
        "tag": _plain(header[0] if header else None),
        "data": data,
        "buffers": buffers,
        "tensors": tensors,
        "body": body,
    }


def tensor_paths(header_frame: Buffer, registry: Registry, max_depth: int = 66) -> list[str | None]:
    """The body path of each tensor of frame 0 in the order a typed decode of its message class (in
    ``registry``) meets them: that decode skips the values of fields its class does not know (sent
    by a newer writer, say), so their tensors are not numbered; ``describe`` numbers every one.
    None where a tensor's path cannot be told (from the first tensor of a value a later one of a
    repeated map key replaces on); ``describe``'s order where the class is not known."""
    made: list[_Ref] = []  # every tensor extension of frame 0, in its order
    header = _decode(header_frame, max_depth, made)
    body = header[4] if len(header) > 4 else None
    _plain(body, [])  # numbers the tensors of the body and finds where they are
    # A map that repeats a key keeps its last value, but a typed decode reads (and numbers) the
    # tensors of the earlier ones too: from the first such tensor on, the numbers cannot be told.
    lost = next((ref.seq for ref in made if ref.index < 0), len(made))
    parsed = parse_tag(header[0] if header else None)
    try:
        cls: Any = registry.type(parsed[1], parsed[2]) if parsed is not None else Any
        refs = decode_order(cls, body, _is_ref)
    except Exception:  # an unknown type, or a class whose fields cannot be read: every tensor
        refs = decode_order(Any, body, _is_ref)
    # (a path is made only for these: a typed decode skips fields it does not know, with any number of tensors)
    return [_path(ref.where) if 0 <= ref.index and ref.seq < lost else None for ref in refs]


def _is_ref(value: Any) -> bool:
    return type(value) is _Ref


def _decode(
    header_frame: Buffer, max_depth: int, made: list[_Ref] | None = None, max_tensors: int | None = None
) -> list[Any]:
    """Frame 0 as an array, its nesting bounded first; ``made`` gathers its tensor extensions, of
    which there may be ``max_tensors`` (None: any number)."""
    try:
        view = memoryview(header_frame).cast("B")
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"invalid header: {exc}") from None
    try:
        check_depth(view, max_depth, above=HEADER_LEVELS)
    except DecodeError as exc:  # too deep: named as a decode names it, with the type its tag names
        raise nesting_error(view, exc, None, max_depth) from None
    try:
        header = msgspec.msgpack.decode(view, ext_hook=_hook(made, max_tensors))
    except msgspec.MsgspecError as exc:
        raise DecodeError(f"invalid header: {exc}") from None
    except RecursionError:  # a max_depth past what the stack holds
        raise too_deep_for_the_stack(max_depth) from None
    if isinstance(header, dict) and header.get("magic") == "tensorwire":
        raise DecodeError(
            f"wire format version {_plain(header.get('wire'))!r} is not supported (this reader: {WIRE_VERSION})"
        )
    if not isinstance(header, list):
        raise DecodeError("invalid header: frame 0 is not a msgpack array")
    return header


def _hook(made: list[_Ref] | None, max_tensors: int | None) -> Any:
    """The extension hook that gathers tensors in ``made`` (up to ``max_tensors``), if given."""
    return _ext_hook if made is None else partial(_ext_hook, made=made, max_tensors=max_tensors)


def _ext_hook(code: int, data: memoryview, made: list[_Ref] | None = None, max_tensors: int | None = None) -> Any:
    """What an extension of frame 0 reads as; ``made`` gathers the tensors, numbered in its order,
    and holds at most ``max_tensors`` (None: any number): one more is a ``DecodeError``."""
    if code == EXT_TENSOR or code == EXT_INLINE:
        if made is not None and max_tensors is not None and len(made) >= max_tensors:
            raise DecodeError(f"more than {max_tensors} tensors in one message (limit max_tensors)")
        try:
            desc = unpack_descriptor(code, data)
        except DecodeError as exc:
            return _made(_Ref({"error": str(exc)}), made)
        out: dict[str, Any] = dict(zip(_FIELDS, desc, strict=True))
        out["shape"], out["strides"] = list(desc.shape), None if desc.strides is None else list(desc.strides)
        if code == EXT_INLINE:
            out["buffer"] = None  # its bytes are in frame 0's data, from ``offset``
        return _made(_Ref(out), made)
    if code == EXT_TUPLE:  # nesting bounded by check_depth
        items = msgspec.msgpack.decode(data, ext_hook=_hook(made, max_tensors))
        if not isinstance(items, list):
            raise DecodeError("invalid header: a tree tuple must hold an array")
        return tuple(items)
    return _Ext(code)


def _made(ref: _Ref, made: list[_Ref] | None) -> _Ref:
    if made is not None:
        ref.seq = len(made)
        made.append(ref)
    return ref


def _data_size(value: Any) -> int:
    if not isinstance(value, bytes):
        raise DecodeError("invalid header: `data` is not a bin", path="$.data")
    return len(value)


def _array(value: Any, name: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise DecodeError(f"invalid header: `{name}` is not an array", path=f"$.{name}")
    return value


def _buffers(entries: list[Any] | tuple[Any, ...], max_buffers: int) -> list[dict[str, Any]]:
    if len(entries) > max_buffers:  # (as a decode says it)
        raise DecodeError(f"{len(entries)} buffers is over the limit of {max_buffers}", path="$.buffers")
    buffers = []
    for i, entry in enumerate(entries):
        handle = entry[1] if isinstance(entry, list | tuple) and len(entry) == 2 else None
        if not isinstance(handle, dict):
            raise DecodeError(f"invalid header: buffer {i} is not an [nbytes, handle map] pair", path=f"$.buffers[{i}]")
        transport = _plain(handle.get("transport"))
        buffers.append({"index": i, "transport": transport, "nbytes": _plain(entry[0]), "handle": _plain(handle)})
    return buffers


def _plain(value: Any, tensors: list[_Ref] | None = None) -> Any:
    """``value`` as JSON data, without recursion; with ``tensors``, each tensor extension is
    numbered in body order, told where it is and appended there. A container's items
    are taken one at a time, so what the walk holds besides the result is one entry per level."""
    root: list[Any] = [None]
    stack: list[tuple[Iterator[tuple[Any, Any, Any]], Any, _Where]] = []
    _place(value, root, 0, None, stack, tensors)
    while stack:
        items, into, where = stack[-1]
        for slot, step, item in items:
            if _place(item, into, slot, (where, step), stack, tensors):
                break  # its items first
        else:
            stack.pop()
    return root[0]


def _place(
    item: Any,
    into: Any,
    slot: Any,
    where: _Where,
    stack: list[tuple[Iterator[tuple[Any, Any, Any]], Any, _Where]],
    tensors: list[_Ref] | None,
) -> bool:
    """Put ``item`` (at body path ``where``) as JSON data at ``into[slot]``; a container that has
    items is put there empty and pushed on ``stack`` to be filled (True)."""
    if isinstance(item, dict) and item:
        entries: dict[str, Any] = {}  # (filled in order: keys keep it)
        into[slot] = entries
        stack.append((_entries(item), entries, where))
        return True
    if isinstance(item, list | tuple) and item:
        into[slot] = values = [None] * len(item)
        stack.append((((i, i, v) for i, v in enumerate(item)), values, where))
        return True
    if isinstance(item, dict | list | tuple):
        into[slot] = {} if isinstance(item, dict) else []
        return False
    if tensors is not None and isinstance(item, _Ref):
        item.index, item.where = len(tensors), where
        tensors.append(item)
    into[slot] = _leaf(item)
    return False


def _entries(item: dict[Any, Any]) -> Iterator[tuple[str, Any, Any]]:
    """Each entry of ``item`` as (its name in the description, its path step, its value). A key
    that is not a string is named by its JSON text; where that names another entry too (two bin
    keys of one length, ``1`` and ``"1"``), `` #2``, `` #3``... is added until no other is named so."""
    used: set[str] = set()  # the names given to its other keys (``name in item``: a string key's)
    last: dict[str, int] = {}  # the suffix last given to each text (so that each is tried once)
    for key, value in item.items():
        if isinstance(key, str):
            yield key, (key,), value
            continue
        text = name = _key(key)
        n = last.get(text, 1)
        while name in item or name in used:
            n += 1
            name = f"{text} #{n}"
        last[text] = n
        used.add(name)
        yield name, (None, text), value


def _leaf(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}  # JSON has no NaN or infinity
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
        steps.append(_segment(step) if isinstance(step, tuple) else f"[{step}]")
    return "$" + "".join(reversed(steps))


def _segment(step: tuple[str] | tuple[None, str]) -> str:
    """The path segment of a map entry: ``.name``, ``["other text"]`` or ``[<JSON of a non-string key>]``."""
    if len(step) == 1:
        key = step[0]
        return key_segment(key if len(key) <= _SEGMENT_CHARS else key[: _SEGMENT_CHARS - 3] + "...")
    text = step[1]
    return f"[{text if len(text) <= _SEGMENT_CHARS else text[: _SEGMENT_CHARS - 3] + '...'}]"
