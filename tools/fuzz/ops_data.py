"""Structural mutations of frame 0's data: the bin holding the bytes of the tensors carried in frame 0.

Each ``ext(3)`` of the body names a range of the data (u64 offset, u64 nbytes). The data is cut
(ranges past its end), grown or shifted under its descriptors (the offsets following or not),
retyped (a str of the same bytes, an array, nil, an extension, containers nested past the depth
limit), written with non-canonical or lying length widths (a bin that swallows the buffer table
and the body, one that ends before its bytes do, 4 GiB claims), filled with bytes that would open
containers if anything read them as msgpack, read by many descriptors at once (a small frame
asking for gigabytes), overlapped by another tensor's range, and dropped, the tensors' bytes
moved back into their extensions (frame 0 as it was before the data item, in wire format 2).
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

import msgspec

from tensorwire import DTYPE_NAMES, DTYPES
from tensorwire._wire import EXT_INLINE, EXT_TUPLE, MAGIC, WIRE_VERSION, pack_inline
from tools.fuzz import rawmp
from tools.fuzz.draft import DATA, TAG, Draft, encode
from tools.fuzz.ops_table import Op
from tools.fuzz.ops_tensors import Desc, pack, store, tensors, unpack

__all__ = ["DATA_OPS"]

_U64 = 2**64 - 1
_OPENERS = (b"\x91", b"\x81", b"\x9f", b"\xdc\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xc7\xff\x02", b"\xd8\x02")
_BYTES = (1, 4096, 1 << 16, 1 << 20, 8 << 20)  # sizes of one range that many descriptors read
_READERS = (2, 64, 4096, 65000)  # with the message's own tensors, within the default max_tensors
_DTYPES = ("uint8", "float32", "int64", "bool")
_OLD_BYTES = 4 << 20  # the most tensor bytes the layout before the data item copies into the body


def _inline(d: Draft) -> tuple[list[Any], list[tuple[Any, Any, Desc]]]:
    """The body (in a holder) and each of its ``ext(3)`` as ``(container, key, fields)``."""
    holder, found = tensors(d)
    inline = []
    for parent, key in found:
        desc = unpack(parent[key]) if parent[key].code == EXT_INLINE else None
        if desc is not None:
            inline.append((parent, key, desc))
    return holder, inline


def _shift(d: Draft, delta: int) -> None:
    """Every ``ext(3)`` offset moved by ``delta`` (wrapped into 64 bits)."""
    holder, inline = _inline(d)
    for parent, key, desc in inline:
        parent[key] = pack(replace(desc, offset=desc.offset + delta))
    if inline:
        store(d, holder)


def _cut(d: Draft) -> str | None:
    data = d.data()
    if not data:
        return None
    cut = min(d.rng.choice((1, 2, 4, 8, len(data) // 2, len(data) - 1, len(data))), len(data)) or 1
    d.put(DATA, data[: len(data) - cut])
    return f"data cut by {cut} of its {len(data)} bytes"


def _grow(d: Draft) -> str | None:
    data = d.data()
    if data is None:
        return None
    extra = d.rng.choice((1, 3, 7, 64, 4096, 1 << 20))
    filler = d.rng.randbytes(extra) if extra <= 4096 else bytes(extra)
    if d.rng.random() < 0.5:
        d.put(DATA, data + filler)
        return f"data grown by {extra} bytes at its end"
    d.put(DATA, filler + data)
    if d.rng.random() < 0.5:
        _shift(d, extra)
        return f"{extra} bytes before the data, the offsets following"
    return f"{extra} bytes before the data, the offsets as they were"


def _retype(d: Draft) -> str:
    rng = d.rng
    data = d.data() or b""
    depth = rng.choice((63, 64, 65, 66, 1000, 100_000))
    choices: tuple[tuple[str, Any], ...] = (
        ("a str of its bytes", msgspec.Raw(rawmp.str_header(len(data)) + data)),
        ("a str", data.decode("latin-1")),
        ("an array of its bytes", list(data[:4096])),
        ("[data]", [data]),
        ("nil", None),
        ("an int", rng.choice((0, len(data), -1, _U64))),
        ("a float", 1.5),
        ("a map", {"data": data}),
        ("ext(3) of its bytes", msgspec.msgpack.Ext(EXT_INLINE, data)),
        ("ext(2) of its bytes", msgspec.msgpack.Ext(EXT_TUPLE, encode(data))),
        (f"nested {depth} deep", msgspec.Raw(rawmp.nested([b"\x91"] * depth, encode(data)))),
        (f"in an ext(2) chain {depth} deep", msgspec.Raw(rawmp.ext_chain([(EXT_TUPLE, b"")] * depth, encode(data)))),
        ("the never-used byte", msgspec.Raw(b"\xc1")),
    )
    what, value = rng.choice(choices)
    d.put(DATA, value)
    return f"data as {what}"


def _width(d: Draft) -> str | None:
    """The data's bin header honest in another width, or lying about its length."""
    data = d.data()
    if data is None:
        return None
    rng = d.rng
    size = len(data)
    kind = rng.randrange(6)
    if kind == 0:
        width = rng.choice((2, 4))
        d.put(DATA, msgspec.Raw(rawmp.bin_header(size, width) + data))
        return f"data in a bin{8 * width} header"
    if kind == 1:
        claim = size + rng.choice((1, 2, 8, 255))
        d.put(DATA, msgspec.Raw(rawmp.bin_header(claim) + data))
        return f"data claiming {claim} of its {size} bytes (it swallows the buffer table's start)"
    if kind == 2 and size:
        claim = max(size - rng.choice((1, 2, 8, size)), 0)
        d.put(DATA, msgspec.Raw(rawmp.bin_header(claim) + data))
        return f"data claiming {claim} of its {size} bytes (its last bytes read as the next items)"
    if kind == 3:
        d.data_claim = rng.choice((-1, 0, 1, 2, 4096))
        return f"data claiming all of frame 0 after it {d.data_claim:+}"
    if kind == 4:
        claim, width = rng.choice(((2**32 - 1, 4), (2**31, 4), (2**31 - 1, 4), (2**16 - 1, 2), (2**26 + 1, 4)))
        d.put(DATA, msgspec.Raw(rawmp.bin_header(max(claim, size), width) + data))
        return f"data claiming {max(claim, size)} bytes"
    d.put(DATA, msgspec.Raw(rawmp.bin_header(size, 4)[: -rng.choice((1, 2, 3))]))
    return "data header cut inside its length (the next items' bytes read as the rest of it)"


def _openers(d: Draft) -> str | None:
    """Data bytes that would open a container (or a huge one) if anything read them as msgpack."""
    data = d.data()
    if data is None:
        return None
    opener = d.rng.choice(_OPENERS)
    if data and d.rng.random() < 0.5:
        d.put(DATA, (opener * (len(data) // len(opener) + 1))[: len(data)])
        return f"data overwritten with {opener.hex()} (the ranges intact)"
    count = d.rng.choice((8, 64, 66, 67, 200, 400, 5000, 100_000))
    d.put(DATA, data + opener * count)
    return f"{count} times {opener.hex()} after the data"


def _readers(d: Draft) -> str | None:
    """One range of the data read by many ``ext(3)`` (the frame stays small, the message does not):
    a tensor of the body (one in a list where there is one) replaced by as many readers of the kind
    it was, spliced into its list."""
    rng = d.rng
    size, count, name = rng.choice(_BYTES), rng.choice(_READERS), rng.choice(_DTYPES)
    offset = d.append_data(bytes(size))
    if offset is None:
        return None
    holder, found = tensors(d)
    listed = [(p, k) for p, k in found if isinstance(p, list) and p is not holder]
    parent, key = rng.choice(listed or found or [(holder, 0)])
    desc = unpack(parent[key]) if parent is not holder else None
    itemsize = DTYPES[name].itemsize
    shape = (size // itemsize,) if rng.random() < 0.7 else (1, size // itemsize)
    payload = pack_inline(desc.kind & 1 if desc else 0, DTYPE_NAMES.index(name), shape, offset, shape[-1] * itemsize)
    readers = [msgspec.msgpack.Ext(EXT_INLINE, payload)] * count
    if isinstance(parent, list) and parent is not holder:
        parent[key : key + 1] = readers
    else:
        parent[key] = readers
    store(d, holder)
    return f"{count} ext(3) reading one range of {shape[-1] * itemsize} bytes ({name})"


def _overlap(d: Draft) -> str | None:
    """An ``ext(3)`` range moved onto (or across the end of) another's."""
    holder, inline = _inline(d)
    if not inline:
        return None
    parent, key, desc = d.rng.choice(inline)
    other = d.rng.choice(inline)[2]
    size = len(d.data() or b"")
    offset = d.rng.choice((other.offset, other.offset + 1, other.offset + other.nbytes - 1, size - desc.nbytes // 2))
    parent[key] = pack(replace(desc, offset=max(offset, 0)))
    store(d, holder)
    return f"an ext(3) range moved to {max(offset, 0)} (another's at {other.offset})"


def _old_layout(d: Draft) -> str | None:
    """Frame 0 as it was before the data item: four items, each ``ext(3)`` carrying its bytes after
    its dims and without offset and nbytes (the bytes of the first few MiB of them)."""
    data = d.data()
    if data is None:
        return None
    holder, inline = _inline(d)
    budget = _OLD_BYTES
    for parent, key, desc in inline:
        own = data[desc.offset : desc.offset + min(desc.nbytes, budget)]
        budget -= len(own)
        head = struct.pack("<BBBB", desc.kind, desc.dtype, desc.rank, desc.flags)
        dims = struct.pack(f"<{len(desc.shape)}Q", *desc.shape)
        strides = b"" if desc.strides is None else struct.pack(f"<{len(desc.strides)}q", *desc.strides)
        parent[key] = msgspec.msgpack.Ext(EXT_INLINE, head + dims + strides + own)
    if inline:
        store(d, holder)
    del d.items[DATA]
    tag = d.get(TAG)
    current = f"{MAGIC}:{WIRE_VERSION}:"
    if isinstance(tag, str) and tag.startswith(current) and d.rng.random() < 0.5:
        d.put(TAG, f"{MAGIC}:2:" + tag[len(current) :])
        return f"frame 0 of wire format 2 ({len(inline)} ext(3) carrying their bytes)"
    return f"frame 0 without its data ({len(inline)} ext(3) carrying their bytes)"


DATA_OPS: tuple[Op, ...] = (
    _cut,
    _cut,
    _grow,
    _retype,
    _retype,
    _width,
    _width,
    _openers,
    _readers,
    _overlap,
    _old_layout,
)
