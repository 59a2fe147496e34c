"""Structural mutations of the tensor descriptors and of the message body.

A tensor is an extension in place in the body (``tensorwire._wire``): ``ext(1)`` describes one in a
buffer (``<kind, dtype, rank, flags>``, u32 buffer, u64 offset, u64 nbytes, rank u64 dims, with
flag 1 rank i64 strides), ``ext(3)`` one whose bytes are in frame 0's data (the same head, u64
offset into the data, u64 nbytes, then the dims and strides). Descriptor mutations unpack such a
payload into its fields, change one (or the code, or the payload's length, or what follows the
dims) and pack it again, every field wrapped into its width, so that any bit pattern a sender
could write is reachable; a mutation sometimes keeps ``nbytes`` consistent with a new shape or
dtype (and an ``ext(3)``'s range inside the data, which grows to hold it) so the input reaches the
deeper checks. The body is edited as a tree (tree tuples opened), with hand-built raw msgpack where
msgspec would refuse to write it: extension chains, nesting hundreds deep, invalid UTF-8,
non-canonical widths, containers claiming more items than there are bytes.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from tensorwire import DTYPE_NAMES, DTYPES
from tensorwire._wire import EXT_INLINE, EXT_TENSOR, EXT_TUPLE, pack_descriptor, pack_inline
from tools.fuzz import rawmp, values
from tools.fuzz.draft import BODY, BUFFERS, BodyTuple, Draft, encode
from tools.fuzz.ops_table import Op

__all__ = ["BODY_OPS", "DESCRIPTOR_OPS", "Desc", "pack", "store", "tensors", "unpack"]

_FIELDS = (
    *("kind", "dtype", "rank", "flags", "shape", "strides"),
    *("offset", "buffer", "nbytes", "code", "tail", "payload"),
)
_ITEMSIZE = [DTYPES[name].itemsize for name in DTYPE_NAMES]
_SHAPES: tuple[list[int], ...] = (
    [2**63],
    [0, 2**63],
    [2**40, 2**40, 0],
    [2**64 - 1, 0],
    [0, 2**64 - 1, 2**64 - 1],
    [0] * 9,
    [1] * 9,
    [2**31, 2**31],
    [3, 2**62, 0],
    [2**34],
    [],
    [0],
    [1],
    [1, 0, 1],
)
_U32, _U64 = 2**32 - 1, 2**64 - 1
_HEAD = struct.Struct("<BBBB")
_PLACED = struct.Struct("<IQQ")  # buffer, offset, nbytes (after the head, in ext(1))
_INLINE = struct.Struct("<QQ")  # offset in frame 0's data, nbytes (after the head, in ext(3))
_INDEX = struct.Struct("<I")
_INLINE_BYTES = 1 << 16  # an inline range kept consistent with its shape only up to this size
_MANY_BYTES = 4 << 20  # the most payload bytes copies of one extension may add to frame 0
_FLOAT32 = DTYPE_NAMES.index("float32")
_ONE = b"\0\0\x80?"  # 1.0 as a float32
_LEAF_TENSOR = pack_descriptor(0, _FLOAT32, (1,), None, 0, 0, 4)  # one float32 at the start of buffer 0


@dataclass(frozen=True)
class Desc:
    """A tensor extension's payload as fields (any values: ``pack`` wraps each into its width).

    ``rank`` is written as it is, independently of ``len(shape)``; strides are written when they
    are not None, whatever ``flags`` says. ``buffer`` exists in ``ext(1)`` only; ``offset`` and
    ``nbytes`` in both (for ``ext(3)``, a range of frame 0's data). ``tail``: what follows the dims
    and strides (nothing in a well-formed extension; an ``ext(3)``'s own bytes before the data item).
    """

    code: int
    kind: int
    dtype: int
    rank: int
    flags: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    buffer: int = 0
    offset: int = 0
    nbytes: int = 0
    tail: bytes = b""


def unpack(ext: msgspec.msgpack.Ext) -> Desc | None:
    """The fields of a tensor extension, or None if its payload is too short to hold them."""
    data = bytes(ext.data)
    if ext.code not in (EXT_TENSOR, EXT_INLINE) or len(data) < _HEAD.size:
        return None
    kind, dtype, rank, flags = _HEAD.unpack_from(data)
    pos = _HEAD.size
    buffer = 0
    if ext.code == EXT_TENSOR:
        if len(data) < pos + _PLACED.size:
            return None
        buffer, offset, nbytes = _PLACED.unpack_from(data, pos)
        pos += _PLACED.size
    else:
        if len(data) < pos + _INLINE.size:
            return None
        offset, nbytes = _INLINE.unpack_from(data, pos)
        pos += _INLINE.size
    strided = bool(flags & 1)
    if len(data) < pos + rank * (16 if strided else 8):
        return None
    shape = struct.unpack_from(f"<{rank}Q", data, pos)
    pos += 8 * rank
    strides = None
    if strided:
        strides = struct.unpack_from(f"<{rank}q", data, pos)
        pos += 8 * rank
    return Desc(ext.code, kind, dtype, rank, flags, shape, strides, buffer, offset, nbytes, data[pos:])


def _signed(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


def pack(desc: Desc) -> msgspec.msgpack.Ext:
    """The extension of ``desc``, every field wrapped into its width (code wrapped into -128..127);
    any code but 1 gets the layout of ``ext(3)``."""
    parts = [_HEAD.pack(desc.kind & 0xFF, desc.dtype & 0xFF, desc.rank & 0xFF, desc.flags & 0xFF)]
    if desc.code == EXT_TENSOR:
        parts.append(_PLACED.pack(desc.buffer & _U32, desc.offset & _U64, desc.nbytes & _U64))
    else:
        parts.append(_INLINE.pack(desc.offset & _U64, desc.nbytes & _U64))
    parts.append(struct.pack(f"<{len(desc.shape)}Q", *(n & _U64 for n in desc.shape)))
    if desc.strides is not None:
        parts.append(struct.pack(f"<{len(desc.strides)}q", *(_signed(n) for n in desc.strides)))
    parts.append(desc.tail)
    return msgspec.msgpack.Ext((desc.code + 128) % 256 - 128, b"".join(parts))


def _inline_leaf(d: Draft) -> bytes:
    """The ``ext(3)`` payload of one float32 in frame 0's data (1.0, appended where the data has
    fewer than four bytes)."""
    data = d.data()
    offset = 0
    if data is not None and len(data) < len(_ONE):
        offset = len(data)
        d.append_data(_ONE)
    return pack_inline(0, _FLOAT32, (1,), offset, len(_ONE))


def _append(d: Draft, nbytes: int) -> int:
    """Where ``nbytes`` zero bytes appended to frame 0's data start (0 if the data item is no bin)."""
    offset = d.append_data(bytes(nbytes))
    return 0 if offset is None else offset


def _room(d: Draft, offset: int, nbytes: int) -> int:
    """An offset in frame 0's data with ``nbytes`` bytes from it: ``offset`` where they fit, else
    where as many bytes appended start."""
    data = d.data()
    if data is None or (0 <= offset and offset + nbytes <= len(data)):
        return offset
    return _append(d, nbytes)


def _is_tensor(node: Any) -> bool:
    return isinstance(node, msgspec.msgpack.Ext) and node.code in (EXT_TENSOR, EXT_INLINE)


def tensors(d: Draft) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """The body (in a holder) and the ``(container, key)`` of each tensor extension in it."""
    holder, nodes = _body(d)
    return holder, [n for n in nodes if _is_tensor(n[0][n[1]])]


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(min(step, 2**63 - 1))
        step *= max(dim, 1)
    return tuple(reversed(strides))


def _itemsize(desc: Desc) -> int:
    return _ITEMSIZE[desc.dtype] if 0 <= desc.dtype < len(_ITEMSIZE) else 1


def _consistent(d: Draft, desc: Desc) -> Desc:
    """``desc`` with ``nbytes`` matching its shape and dtype, C-contiguous strides where it has
    strides, and an inline tensor's range inside frame 0's data (where not too many bytes)."""
    nbytes = min(math.prod(desc.shape) * _itemsize(desc), _U64)
    strides = None if desc.strides is None else _c_strides(desc.shape)
    if desc.code == EXT_INLINE:
        if nbytes > _INLINE_BYTES:
            return replace(desc, strides=strides)
        return replace(desc, strides=strides, nbytes=nbytes, offset=_room(d, desc.offset, nbytes))
    return replace(desc, strides=strides, nbytes=nbytes)


def _with_shape(desc: Desc, shape: tuple[int, ...]) -> Desc:
    strides = None if desc.strides is None else (tuple(desc.strides) + (1,) * len(shape))[: len(shape)]
    return replace(desc, shape=shape, rank=len(shape), strides=strides)


def _offset(d: Draft, desc: Desc) -> int:
    """An offset at some edge of where the tensor lives (its buffer, or frame 0's data)."""
    choices = [-1, 0, 1, 2, 3, 4, 8, 15, 16, 4096, 2**31, 2**63, _U64, desc.offset + 1, desc.offset - 1]
    if desc.code != EXT_TENSOR:
        size = len(d.data() or b"")
        choices += [size, size + 1, size - desc.nbytes, size - desc.nbytes + 1, 2**64 - desc.nbytes]
        choices += [desc.offset + _itemsize(desc), desc.offset + 2**63]
    value: int = d.rng.choice(choices)
    return value


def _nbytes(d: Draft, desc: Desc) -> int:
    """An nbytes at some edge of the shape's size, or of what the buffer or the data holds."""
    choices = [0, -1, 1, 2**63, _U64, 2**40, desc.nbytes + 1, desc.nbytes - 1, desc.nbytes * 2]
    if desc.code != EXT_TENSOR:
        size = len(d.data() or b"")
        choices += [size - desc.offset, size - desc.offset + 1, 2**64 - desc.offset, desc.nbytes + _itemsize(desc)]
    value: int = d.rng.choice(choices)
    return value


def _tail(d: Draft, desc: Desc) -> tuple[Desc, str]:
    """``desc`` with bytes after its dims: an inline tensor's own bytes (where it carried them before
    the data item), or random ones."""
    if desc.code == EXT_INLINE and d.rng.random() < 0.6:
        data = d.data() or b""
        own = data[desc.offset : desc.offset + min(desc.nbytes, _INLINE_BYTES)]
        return replace(desc, tail=own), f"its {len(own)} bytes after its dims too"
    tail = d.rng.randbytes(d.rng.choice((1, 4, 8, 16, 17)))
    return replace(desc, tail=desc.tail + tail), f"{len(tail)} bytes after its dims"


def _mutate_field(d: Draft, desc: Desc, field: str) -> tuple[Desc, str] | None:
    """``desc`` with ``field`` changed, and what changed; None where the field does not apply."""
    rng = d.rng
    rank = len(desc.shape)
    placed = desc.code == EXT_TENSOR
    if field == "kind":
        value: Any = rng.choice((0, 1, 2, 3, 127, 255))
        return replace(desc, kind=value), f"kind {value}"
    if field == "dtype":
        value = rng.choice((*range(len(DTYPE_NAMES)), len(DTYPE_NAMES), len(DTYPE_NAMES) + 1, 254, 255))
        return replace(desc, dtype=value), f"dtype code {value}"
    if field == "rank":
        value = rng.choice((0, max(rank - 1, 0), rank + 1, 8, 9, 63, 64, 255))
        if rng.random() < 0.5:
            return replace(desc, rank=value), f"rank {value} over {rank} dims"  # the payload's length disagrees
        dims = (tuple(desc.shape) + (1,) * value)[:value]
        return _with_shape(desc, dims), f"rank {value} (dims padded with 1)"
    if field == "flags":
        value = rng.choice((0, 1, 2, 3, 4, 5, 8, 0x80, 0xFF))
        if rng.random() < 0.5:
            return replace(desc, flags=value), f"flags {value}"  # strides present or not as before
        strides = _c_strides(desc.shape) if value & 1 else None
        return replace(desc, flags=value, strides=strides), f"flags {value} (strides to match)"
    if field == "shape":
        if rng.random() < 0.6:
            shape = tuple(rng.choice(_SHAPES))
        else:
            shape = tuple(rng.choice((0, 1, 2, 3, 255, 2**20, 2**32)) for _ in range(rng.randrange(10)))
        return _with_shape(desc, shape), f"shape {list(shape)!r:.50}"
    if field == "strides":
        stride = rng.choice((0, -1, 1, 2**63 - 1, -(2**63), 2**62, 2**64 - 1, 4096, -4096, 2))
        ones = [1] * max(rank - 1, 0)
        chosen = rng.choice(([stride] * rank, [stride] * (rank + 1), [], [1] * rank, [stride, *ones], [*ones, stride]))
        return replace(desc, flags=desc.flags | 1, strides=tuple(chosen)), f"strides {chosen!r:.50}"
    if field == "offset":
        value = _offset(d, desc)
        return replace(desc, offset=value), f"offset {value & _U64}"
    if field == "buffer" and placed:
        value = rng.choice((-1, 1, 2, 3, 100, 4096, 2**31, _U32, desc.buffer + 1))
        return replace(desc, buffer=value), f"buffer {value & _U32}"
    if field == "nbytes":
        value = _nbytes(d, desc)
        return replace(desc, nbytes=value), f"nbytes {value & _U64}"
    if field == "tail":
        return _tail(d, desc)
    if field == "code":
        if placed and rng.random() < 0.5 and desc.nbytes <= _INLINE_BYTES:  # the same tensor, its bytes in the data
            moved = replace(desc, code=EXT_INLINE, flags=desc.flags & 1, offset=_append(d, desc.nbytes))
            return moved, "moved into frame 0's data"
        if not placed and rng.random() < 0.5:  # the same tensor, placed in a buffer at its data offset
            return replace(desc, code=EXT_TENSOR, buffer=0), "moved to buffer 0"
        value = rng.choice((EXT_TENSOR, EXT_INLINE, EXT_TUPLE, 0, 4, 127, -1, -128))
        return replace(desc, code=value), f"extension code {value} on the same fields"
    return None


def _payload(d: Draft, ext: msgspec.msgpack.Ext) -> tuple[msgspec.msgpack.Ext, str]:
    """``ext`` with its raw payload cut, grown or overwritten."""
    rng = d.rng
    data = bytearray(ext.data)
    kind = rng.randrange(4)
    if kind == 0 and data:
        cut = rng.choice((1, 4, 8, rng.randrange(1, len(data) + 1)))
        return msgspec.msgpack.Ext(ext.code, bytes(data[:-cut])), f"payload cut by {cut}"
    if kind == 1:
        extra = rng.randbytes(rng.choice((1, 8, 16, 17)))
        return msgspec.msgpack.Ext(ext.code, bytes(data) + extra), f"payload grown by {len(extra)}"
    if kind == 2 and data:
        pos = rng.randrange(min(len(data), 64))
        data[pos] = rng.randrange(256)
        return msgspec.msgpack.Ext(ext.code, bytes(data)), f"payload byte {pos} set"
    return msgspec.msgpack.Ext(ext.code, rng.randbytes(len(data))), "payload random"


def _desc_field(d: Draft) -> str | None:
    holder, found = tensors(d)
    if not found:
        return None
    parent, key = d.rng.choice(found)
    ext = parent[key]
    desc = unpack(ext)
    field = d.rng.choice(_FIELDS)
    if desc is None or field == "payload":
        parent[key], what = _payload(d, ext)
        store(d, holder)
        return f"ext({ext.code}) {what}"
    changed = None
    for _attempt in range(4):
        changed = _mutate_field(d, desc, field)
        if changed is not None:
            break
        field = d.rng.choice(_FIELDS[:6])
    if changed is None:
        return None
    new, what = changed
    kept = field in ("shape", "dtype", "rank") and d.rng.random() < 0.5
    if kept:
        new = _consistent(d, new)
    parent[key] = pack(new)
    store(d, holder)
    return f"ext({ext.code}) {what}{' (nbytes kept consistent)' if kept else ''}"


def _desc_shape(d: Draft) -> str | None:
    """A tensor extension replaced by another form: dropped, the wire-1 reference, a descriptor list."""
    holder, found = tensors(d)
    if not found:
        return None
    parent, key = d.rng.choice(found)
    ext = parent[key]
    desc = unpack(ext)
    kind = d.rng.randrange(5)
    if kind == 0:
        parent[key] = None
        what = "dropped (None)"
    elif kind == 1:
        parent[key] = msgspec.msgpack.Ext(EXT_TENSOR, _INDEX.pack(d.rng.choice((0, 1, 2**32 - 1))))
        what = "as a wire-1 reference (a u32 index)"
    elif kind == 2 and desc is not None:
        name = DTYPE_NAMES[desc.dtype] if desc.dtype < len(DTYPE_NAMES) else desc.dtype
        fields = ["tensor" if desc.kind == 0 else "ndarray", name, list(desc.shape), desc.strides, desc.offset]
        parent[key] = [*fields, desc.buffer if desc.code == EXT_TENSOR else -1, desc.nbytes]
        what = "as a wire-1 descriptor list"
    elif kind == 3 and desc is not None:
        parent[key] = pack(replace(desc, flags=desc.flags ^ 2))
        what = "shared flag toggled"
    else:
        parent[key] = msgspec.msgpack.Ext(d.rng.choice((EXT_TENSOR, EXT_INLINE)), b"")
        what = "as an empty extension"
    store(d, holder)
    return f"a tensor extension {what}"


def _desc_many(d: Draft) -> str | None:
    holder, found = tensors(d)
    if not found:
        return None
    parent, key = d.rng.choice(found)
    count = d.rng.choice((5, 4096, 65535, 65536, 65537))
    ext = parent[key]
    if len(ext.data) * count > _MANY_BYTES:  # frame 0 stays a few MiB: a one-element tensor of the same form
        ext = msgspec.msgpack.Ext(ext.code, _LEAF_TENSOR if ext.code == EXT_TENSOR else _inline_leaf(d))
    parent[key] = [ext] * count
    store(d, holder)
    return f"{count} copies of a tensor extension ({len(ext.data)} bytes each)"


def _retarget(d: Draft) -> str | None:
    holder, found = tensors(d)
    buffers = d.listed(BUFFERS)
    placed = [(p, k) for p, k in found if p[k].code == EXT_TENSOR]
    if not placed or not buffers:
        return None
    parent, key = d.rng.choice(placed)
    desc = unpack(parent[key])
    if desc is None:
        return None
    index = d.rng.randrange(len(buffers))
    entry = buffers[index]
    size = entry[0] if isinstance(entry, list) and entry and isinstance(entry[0], int) else 0
    offset = max(0, size - desc.nbytes) + d.rng.choice((0, 0, 1, 16, -16))
    parent[key] = pack(replace(desc, buffer=index, offset=offset))
    store(d, holder)
    return f"descriptor moved to buffer {index} at {offset}"


DESCRIPTOR_OPS: tuple[Op, ...] = (
    _desc_field,
    _desc_field,
    _desc_field,
    _desc_field,
    _desc_shape,
    _desc_many,
    _retarget,
)


# -- the body ------------------------------------------------------------------------------------


def _nodes(holder: list[Any], limit: int = 4000) -> list[tuple[Any, Any]]:
    """``(container, key)`` of every value of the body, root first (tree tuples opened up to 32 deep,
    so that writing the body back never recurses far)."""
    found: list[tuple[Any, Any]] = []
    stack: list[tuple[Any, Any, int]] = [(holder, 0, 0)]
    while stack and len(found) < limit:
        parent, key, depth = stack.pop()
        found.append((parent, key))
        node = parent[key]
        if isinstance(node, msgspec.msgpack.Ext) and node.code == EXT_TUPLE and depth < 32:
            try:
                items = msgspec.msgpack.decode(node.data)
            except (msgspec.MsgspecError, RecursionError):
                continue
            if not isinstance(items, list):
                continue
            node = parent[key] = BodyTuple(items)
        if isinstance(node, BodyTuple):
            stack.extend((node.items, i, depth + 1) for i in range(len(node.items)))
        elif isinstance(node, list):
            stack.extend((node, i, depth + 1) for i in range(len(node)))
        elif isinstance(node, dict):
            stack.extend((node, k, depth + 1) for k in node)
    return found


def _body(d: Draft) -> tuple[list[Any], list[tuple[Any, Any]]]:
    holder = [d.get(BODY)]
    return holder, _nodes(holder)


def store(d: Draft, holder: list[Any]) -> None:
    """Write the body (in its holder) back into the draft."""
    d.put(BODY, msgspec.Raw(encode(holder[0])))


def _replace(d: Draft, make: Any, what: str, pick: Any = None) -> str:
    """Replace one body node (chosen by ``pick`` among the nodes, or any) by ``make(node)``."""
    holder, nodes = _body(d)
    choices = [n for n in nodes if pick(n[0][n[1]])] if pick is not None else nodes
    if not choices:
        choices = nodes
    parent, key = d.rng.choice(choices)
    parent[key] = make(parent[key])
    store(d, holder)
    return what


def _tensor_ref(d: Draft) -> str:
    rng = d.rng

    def make(node: Any) -> Any:
        kind = rng.randrange(3)
        if kind == 0:
            index = rng.choice((0, 1, 2, 2**31, 2**32 - 1))
            return msgspec.msgpack.Ext(EXT_TENSOR, _INDEX.pack(index))  # a reference of wire format 1
        if kind == 1:
            size = rng.choice((0, 1, 3, 4, 5, 8, 23, 24, 31, 32, 40))
            return msgspec.msgpack.Ext(rng.choice((EXT_TENSOR, EXT_INLINE)), rng.randbytes(size))
        data = node.data if isinstance(node, msgspec.msgpack.Ext) else _LEAF_TENSOR
        return msgspec.msgpack.Ext(rng.choice((0, 1, 2, 3, 4, 127, -1, -128)), data)

    return _replace(d, make, "tensor extension changed", _is_tensor)


def _leaf(d: Draft, leaf: bytes | None) -> bytes:
    """``leaf``, or (None) an ``ext(3)`` of one float32 in frame 0's data."""
    return rawmp.ext(EXT_INLINE, _inline_leaf(d)) if leaf is None else leaf


def _ext_chain(d: Draft) -> str:
    rng = d.rng
    depth = rng.choice((1, 2, 3, 10, 60, 62, 63, 64, 65, 66, 100, 200, 1000))
    prefix = rng.choice((b"", b"\x91", b"\x92\xc0"))
    leaf = rng.choice(
        (
            encode([1]),
            encode([]),
            b"",
            encode(1),
            encode([1]) + b"\x00",
            rawmp.ext(EXT_TENSOR, _INDEX.pack(0)),
            rawmp.ext(EXT_TENSOR, _LEAF_TENSOR),
            None,  # an ext(3) of one float32 in frame 0's data
            b"\x91",
            b"\xc0",
        )
    )
    raw = rawmp.ext_chain([(EXT_TUPLE, prefix)] * depth, _leaf(d, leaf))
    return _replace(d, lambda _: msgspec.Raw(raw), f"ext(2) chain {depth} deep (prefix {prefix.hex()})")


def _deep(d: Draft) -> str:
    rng = d.rng
    depth = rng.choice((10, 40, 58, 60, 61, 62, 63, 64, 65, 66, 70, 100, 200))
    openers = [rng.choice((b"\x91", b"\x81\xa1k", b"\x92\xc0", b"\x81\x00")) for _ in range(depth)]
    leaf = rng.choice((b"\xc0", b"\x90", b"\x80", rawmp.ext(EXT_TENSOR, _LEAF_TENSOR), None))
    raw = rawmp.nested(openers, _leaf(d, leaf))
    return _replace(d, lambda _: msgspec.Raw(raw), f"containers nested {depth} deep")


def _wrong_type(d: Draft) -> str:
    return _replace(d, lambda _: values.junk(d.rng), "a body value of another type")


_ODDITIES = (
    b"\xa2\xff\xfe",  # invalid UTF-8
    b"\xa3\xed\xa0\x80",  # an encoded surrogate
    b"\xcf" + (5).to_bytes(8, "big"),  # a small uint in 8 bytes
    b"\xd3" + (-1).to_bytes(8, "big", signed=True),
    b"\xdb\x00\x00\x00\x01a",  # str32 of one byte
    b"\xdd\xff\xff\xff\xff",  # an array claiming 2**32-1 items
    b"\xdf\xff\xff\xff\xff",
    b"\xc6\xff\xff\xff\xff",  # bin32 claiming 4 GiB
    b"\xdb\xff\xff\xff\xff",
    b"\xc9\xff\xff\xff\xff\x02",  # ext32 claiming 4 GiB
    b"\xc1",  # never used
    b"\xd4\xff\x00",  # ext -1 (a timestamp) of one byte
    b"\xd6\xff\x00\x00\x00\x00",  # a valid timestamp
    b"\xc7\x0c\xff" + bytes(12),
    b"\xca\x7f\xc0\x00\x00",  # float32 NaN
)


def _oddity(d: Draft) -> str:
    raw = d.rng.choice(_ODDITIES)
    return _replace(d, lambda _: msgspec.Raw(raw), f"raw {raw[:8].hex()}")


def _dict_keys(d: Draft) -> str:
    rng = d.rng

    def make(node: Any) -> Any:
        if not isinstance(node, dict) or not node:
            return node
        key = rng.choice(list(node))
        kind = rng.randrange(5)
        if kind == 0:
            pairs = [(encode(k), encode(v)) for k, v in node.items()]
            pairs.insert(rng.randrange(len(pairs) + 1), (encode(key), encode(values.junk(rng))))
            return msgspec.Raw(rawmp.build_map(pairs))
        if kind == 1:
            del node[key]
        elif kind == 2:
            node[rng.choice(("zz_unknown", "", "Kind", "__class__"))] = values.junk(rng)
        elif kind == 3:
            pairs = [(encode(k if k != key else rng.choice((0, b"k", None, 1.5))), encode(v)) for k, v in node.items()]
            return msgspec.Raw(rawmp.build_map(pairs))
        else:
            node[f"{key}_"] = node.pop(key)
        return node

    return _replace(d, make, "a map of the body rekeyed", lambda n: isinstance(n, dict) and bool(n))


def _field_deep(d: Draft) -> str | None:
    """A map of the body given a field (unknown, or one it has) whose value nests past any limit: a
    closed type rejects the unknown field before reading its value, an open one must bound it."""
    rng = d.rng

    def make(node: Any) -> Any:
        known = rng.random() < 0.4
        key = rng.choice(list(node)) if known else rng.choice(("zz_unknown", "", "id_"))
        depth = rng.choice((9, 64, 65, 66, 1000, 100_000))
        if rng.random() < 0.7:
            deep = rawmp.nested([rng.choice((b"\x91", b"\x81\xa1k", b"\x92\xc0"))] * depth, b"\xc0")
        else:
            deep = rawmp.ext_chain([(EXT_TUPLE, b"")] * depth, b"\x90")
        pairs = [(encode(k), encode(v)) for k, v in node.items() if k != key]
        pairs.insert(rng.randrange(len(pairs) + 1), (encode(key), deep))
        return msgspec.Raw(rawmp.build_map(pairs))

    if not any(isinstance(n[0][n[1]], dict) and n[0][n[1]] for n in _body(d)[1]):
        return None
    return _replace(
        d, make, "a field of a map of the body nested past the limit", lambda n: isinstance(n, dict) and bool(n)
    )


def _struct_list(d: Draft) -> str | None:
    """A list of the body (one of maps where there is one) made of many copies of one of its items:
    more level openers than a count lets through, each map a struct a closed mirror reads."""
    holder, nodes = _body(d)
    lists = [n for n in nodes if isinstance(n[0][n[1]], list) and n[0][n[1]]]
    if not lists:
        return None
    maps = [n for n in lists if any(isinstance(v, dict) for v in n[0][n[1]])]
    parent, key = d.rng.choice(maps or lists)
    items = parent[key]
    item = d.rng.choice([v for v in items if isinstance(v, dict)] or items)
    count = d.rng.choice((32, 33, 64, 65, 1000, 20_000))
    count = min(count, max(32, _MANY_BYTES // len(encode(item))))  # frame 0 stays a few MiB
    parent[key] = [item] * count
    store(d, holder)
    return f"a list of the body made of {count} copies of one of its items"


def _tag(d: Draft) -> str:
    tags = ("rpc.Value", "diffusion.Output", "media.Video", "", 5, None, "diffusion.output", "diffusion.RunnerOutput")

    def make(node: Any) -> Any:
        if isinstance(node, dict):
            node["kind"] = d.rng.choice(tags)
        return node

    return _replace(d, make, "a union tag changed", lambda n: isinstance(n, dict) and "kind" in n)


def _random_body(d: Draft) -> str:
    if d.rng.random() < 0.5:
        d.put(BODY, values.junk(d.rng, 4))
        return "body replaced by a random value"
    d.put(BODY, msgspec.Raw(d.rng.randbytes(d.rng.randrange(1, 64))))
    return "body replaced by random bytes"


def _alias(d: Draft) -> str:
    holder, nodes = _body(d)
    refs = [n for n in nodes if _is_tensor(n[0][n[1]])]
    if not refs:
        return _wrong_type(d)
    source = d.rng.choice(refs)
    parent, key = d.rng.choice(nodes)
    parent[key] = source[0][source[1]]
    store(d, holder)
    return "a tensor extension copied to another place"


BODY_OPS: tuple[Op, ...] = (
    _tensor_ref,
    _ext_chain,
    _ext_chain,
    _deep,
    _deep,
    _wrong_type,
    _wrong_type,
    _oddity,
    _dict_keys,
    _tag,
    _random_body,
    _alias,
    _field_deep,
    _struct_list,
)
