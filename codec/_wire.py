"""The wire layout (format 3): frame 0, the tensor descriptors inside it, and the one-blob form.

Frame 0 is a msgpack array of five items, readable by any msgpack reader::

    ["tensorwire:3:media.Video:1",        # tag: magic, wire version, type id, major version
     "8216113a...",                       # the schema fingerprint (SHA-256, hex)
     b"...",                              # data: the bytes of the tensors carried in frame 0
     [[nbytes, {"transport": "inline", "frame": 1}], ...],   # out-of-frame buffers and their handles
     <body>]                              # the message: a map per struct, as msgspec writes it

In the body a tensor or ndarray is a msgpack extension. ``ext(3)`` is a small tensor whose
C-contiguous bytes are in frame 0's data: ``<kind, dtype, rank, flags>`` (four bytes), u64 byte
offset in the data, u64 nbytes, ``rank`` u64 dims and (with flag 1) ``rank`` i64 strides that differ
from the C-contiguous ones only in dims of size 1. ``ext(1)`` describes one that lives in buffer
``buffer``: ``<kind, dtype, rank, flags>``, u32 buffer index, u64 byte offset, u64 nbytes, ``rank``
u64 dims and, when flag 1 (strided) is set, ``rank`` i64 strides in elements (otherwise it is
C-contiguous); flag 2 (shared) says other tensors of the message live in the same buffer (they
arrive sharing one storage). ``kind`` is 0 for a torch tensor and 1 for a numpy array; ``dtype`` is
the position of its name in ``tensorwire.dtypes.DTYPE_NAMES``. A tuple inside a tree is
``ext(2, <msgpack array>)``.

The data item comes before everything that can nest, so a reader bounds frame 0's nesting by
counting only what follows it (``data_span``): tensor bytes never look like containers.

``join(frames)`` packs frames into one blob with 64-byte aligned buffers (``blob_parts`` gives its
pieces without joining them); ``split(blob)`` returns zero-copy memoryviews of it (writable when
the blob is).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import msgspec

from tensorwire.dtypes import DTYPE_NAMES
from tensorwire.errors import DecodeError
from tensorwire.options import Limits

__all__ = [
    "BIN8",
    "BIN16",
    "BLOB_MAGIC",
    "HEADER_LEVELS",
    "BLOB_PREAMBLE",
    "DATA_MAX",
    "EXT_INLINE",
    "EXT_TENSOR",
    "EXT_TUPLE",
    "FRAME_LENGTH",
    "KINDS",
    "MAGIC",
    "MAX_FRAMES",
    "SHARED",
    "WIRE_VERSION",
    "Buffer",
    "EMPTY_DATA",
    "Descriptor",
    "blob_parts",
    "data_header",
    "data_span",
    "join",
    "pack_descriptor",
    "pack_inline",
    "parse_tag",
    "prefix",
    "blob_frame_count",
    "blob_frame_spans",
    "split",
    "tag",
    "unpack_descriptor",
]

MAGIC = "tensorwire"
WIRE_VERSION = 3
HEADER_LEVELS = 2  # frame 0's array and the body sit above the message's own nesting
EXT_TENSOR = 1
EXT_TUPLE = 2
EXT_INLINE = 3
KINDS = ("tensor", "ndarray")
STRIDED = 1  # descriptor flag: strides follow the shape
SHARED = 2  # descriptor flag: other tensors of the message live in the same buffer
BLOB_MAGIC = b"TWB1"
ALIGN = 64
BLOB_PREAMBLE = struct.Struct("<4sI")  # a blob's magic and frame count
FRAME_LENGTH = struct.Struct("<Q")  # a frame's length in a blob's frame table
HEAD = struct.Struct("<BBBB")  # kind, dtype code, rank, flags
PLACED = struct.Struct("<BBBBIQQ")  # HEAD, buffer, offset, nbytes
INLINE = struct.Struct("<BBBBQQ")  # HEAD, offset in frame 0's data, nbytes

Buffer = bytes | bytearray | memoryview
DIMS = [struct.Struct(f"<{rank}Q") for rank in range(16)]  # the shapes of the common ranks
INLINE_DIMS = [struct.Struct(f"<BBBBQQ{rank}Q") for rank in range(16)]  # INLINE and a shape of a common rank
PLACED_DIMS = [struct.Struct(f"<BBBBIQQ{rank}Q") for rank in range(16)]  # PLACED and a shape of a common rank


def _dims(rank: int) -> struct.Struct:
    """The struct of a shape of ``rank`` dims (precompiled for the common ranks)."""
    return DIMS[rank] if rank < len(DIMS) else struct.Struct(f"<{rank}Q")


def _number(text: str) -> bool:
    """A short run of ASCII digits (an int Python converts without a length limit)."""
    return 0 < len(text) <= 18 and text.isascii() and text.isdigit()


def tag(type_id: str, version: int) -> str:
    """The first item of frame 0 for ``type_id`` v``version``."""
    return f"{MAGIC}:{WIRE_VERSION}:{type_id}:{version}"


def parse_tag(value: object) -> tuple[int, str, int] | None:
    """``(wire version, type id, version)`` of a tag, or None if ``value`` is not a tensorwire tag."""
    if not isinstance(value, str):
        return None
    parts = value.split(":")
    if len(parts) != 4 or parts[0] != MAGIC or not _number(parts[1]) or not _number(parts[3]):
        return None
    return int(parts[1]), parts[2], int(parts[3])


@lru_cache(maxsize=1024)
def prefix(type_id: str, version: int, fingerprint: str) -> bytes:
    """Frame 0 up to its data: the array header, the tag and the fingerprint."""
    return b"\x95" + msgspec.msgpack.encode(tag(type_id, version)) + msgspec.msgpack.encode(fingerprint)


EMPTY_DATA = b"\xc4\x00"  # frame 0's data when no tensor is carried in it
DATA_MAX = (1 << 32) - 1  # the most bytes a msgpack bin holds
BIN8, BIN16, _BIN32 = struct.Struct(">BB").pack, struct.Struct(">BH").pack, struct.Struct(">BI").pack
"""Packers of a msgpack bin8 and bin16 header (``BIN8(0xC4, n)``, ``BIN16(0xC5, n)``)."""


def data_header(nbytes: int) -> bytes:
    """The msgpack bin header of frame 0's data of ``nbytes`` bytes (at most ``DATA_MAX``), as msgspec
    writes it: the frame is joined around the tensors' bytes without encoding them into a bin first."""
    if nbytes < 0x100:
        return BIN8(0xC4, nbytes)
    if nbytes < 0x10000:
        return BIN16(0xC5, nbytes)
    if nbytes > DATA_MAX:
        raise ValueError(f"{nbytes} bytes of tensors inside frame 0 is over the {DATA_MAX} a msgpack bin holds")
    return _BIN32(0xC6, nbytes)


_STR_LENGTH = {0xD9: 1, 0xDA: 2, 0xDB: 4}
_BIN_LENGTH = {0xC4: 1, 0xC5: 2, 0xC6: 4}


def data_span(frame: bytes | memoryview) -> tuple[int, int] | None:
    """``(start, end)`` of frame 0's data bytes when the frame opens as an array of five items whose
    first two are strings and third a bin (as every frame 0 does); None otherwise. ``frame``:
    bytes or a view of unsigned bytes. Nothing before ``end`` can open a nesting level."""
    size = len(frame)
    if size >= 72 and frame[0] == 0x95:  # 72: the shortest frame 0 with a SHA-256 hex fingerprint
        first = frame[1]  # the tag: a fixstr or a str8, as encoders write a type id and version
        # where the fingerprint starts: after a fixstr (2 + its length) or a str8 tag; else past the end
        pos = first - 0x9E if 0xA0 <= first <= 0xBF else 3 + frame[2] if first == 0xD9 else size
        if pos + 72 <= size:
            fingerprint, marker, length = _AFTER_TAG(frame, pos)
            if fingerprint == 0xD940:  # the str8 header of a 64-character fingerprint
                if marker == 0xC5:  # bin16
                    start = pos + 69
                    end = start + length
                    return (start, end) if end < size else None
                if marker == 0xC4:  # bin8: its length, then the first data byte
                    start = pos + 68
                    end = start + (length >> 8)
                    return (start, end) if end < size else None
    return _span(frame, size)


# After the tag: the str8 header of a 64-character fingerprint, its characters, the data's bin
# header and the two bytes after it (a bin16's length, or a bin8's length and the next byte).
_AFTER_TAG = struct.Struct(">H64xBH").unpack_from


def _span(frame: bytes | memoryview, size: int) -> tuple[int, int] | None:
    """``data_span`` for any encoding of the first three items."""
    if size < 4 or frame[0] != 0x95:
        return None
    pos = 1
    for _ in range(2):  # the tag and the fingerprint
        first = frame[pos]
        if 0xA0 <= first <= 0xBF:
            pos += 1 + (first & 0x1F)
        else:
            width = _STR_LENGTH.get(first, 0)
            if not width or pos + 1 + width > size:
                return None
            pos += 1 + width + int.from_bytes(frame[pos + 1 : pos + 1 + width], "big")
        if pos >= size:
            return None
    width = _BIN_LENGTH.get(frame[pos], 0)
    if not width or pos + 1 + width > size:
        return None
    start = pos + 1 + width
    end = start + int.from_bytes(frame[pos + 1 : start], "big")
    return (start, end) if end < size else None


class Descriptor(NamedTuple):
    """One tensor as the wire describes it (``strides`` None: C-contiguous; ``buffer`` -1: inside frame
    0, ``offset`` into its data)."""

    kind: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    buffer: int
    offset: int
    nbytes: int


_DESCRIPTOR = tuple.__new__  # ``_DESCRIPTOR(Descriptor, values)``: a Descriptor made without its Python ``__new__``


def pack_descriptor(
    kind: int,
    dtype: int,
    shape: Sequence[int],
    strides: Sequence[int] | None,
    buffer: int,
    offset: int,
    nbytes: int,
    shared: bool = False,
) -> bytes:
    """The ``ext(1)`` payload of a tensor in buffer ``buffer`` (``kind`` and ``dtype`` as codes)."""
    rank = len(shape)
    flags = (0 if strides is None else STRIDED) | (SHARED if shared else 0)
    if strides is None and rank < len(PLACED_DIMS):  # the common one: one pack
        return PLACED_DIMS[rank].pack(kind, dtype, rank, flags, buffer, offset, nbytes, *shape)
    head = PLACED.pack(kind, dtype, rank, flags, buffer, offset, nbytes)
    if strides is None:
        return head + _dims(rank).pack(*shape)
    return head + struct.pack(f"<{rank}Q{rank}q", *shape, *strides)


def pack_inline(
    kind: int, dtype: int, shape: Sequence[int], offset: int, nbytes: int, strides: Sequence[int] | None = None
) -> bytes:
    """The ``ext(3)`` payload of a small C-contiguous tensor whose ``nbytes`` bytes are at ``offset`` in
    frame 0's data (``strides``: its own, where they differ from the canonical ones in dims of size 1)."""
    rank = len(shape)
    if strides is None:
        return INLINE.pack(kind, dtype, rank, 0, offset, nbytes) + struct.pack(f"<{rank}Q", *shape)
    return INLINE.pack(kind, dtype, rank, STRIDED, offset, nbytes) + struct.pack(f"<{rank}Q{rank}q", *shape, *strides)


def unpack_descriptor(code: int, data: Buffer) -> Descriptor:
    """The descriptor in an ``ext(1)`` or ``ext(3)`` payload; ``DecodeError`` if it is malformed
    (its sizes are checked against buffers and limits by ``tensorwire._descriptors``)."""
    size = len(data)
    if code == EXT_TENSOR and size >= PLACED.size:  # the common one, contiguous: one unpack, no more checks
        rank = data[2]
        if rank < len(PLACED_DIMS) and size == PLACED.size + 8 * rank:
            values = PLACED_DIMS[rank].unpack_from(data)
            kind, dtype, flags = values[0], values[1], values[3]
            if kind < 2 and dtype < len(DTYPE_NAMES) and not flags & ~SHARED:  # (as the checks below)
                return _DESCRIPTOR(
                    Descriptor, (KINDS[kind], DTYPE_NAMES[dtype], values[7:], None, values[4], values[5], values[6])
                )
    if size < HEAD.size:
        raise DecodeError(f"tensor descriptor of {size} bytes is shorter than its {HEAD.size}-byte head")
    kind, dtype, rank, flags = HEAD.unpack_from(data)
    if kind >= len(KINDS):
        raise DecodeError(f"tensor kind {kind} is neither 0 (tensor) nor 1 (ndarray)")
    if dtype >= len(DTYPE_NAMES):
        raise DecodeError(f"dtype code {dtype} is not in the wire dtype table (0..{len(DTYPE_NAMES) - 1})")
    if code == EXT_INLINE:
        if flags & ~STRIDED:
            raise DecodeError(f"inline tensor with flags {flags}: inside frame 0 only flag 1 (strided) is defined")
        strided = flags == STRIDED
        end = INLINE.size + (16 if strided else 8) * rank
        if size != end:
            raise DecodeError(
                f"inline tensor descriptor of {size} bytes, expected {end} for rank {rank} and flags {flags}"
            )
        _, _, _, _, offset, nbytes = INLINE.unpack_from(data)
        dims = struct.unpack_from(f"<{rank}Q{rank}q" if strided else f"<{rank}Q", data, INLINE.size)
        shape, strides = (dims[:rank], dims[rank:]) if strided else (dims, None)
        return Descriptor(KINDS[kind], DTYPE_NAMES[dtype], shape, strides, -1, offset, nbytes)
    strided = bool(flags & STRIDED)
    end = PLACED.size + (16 if strided else 8) * rank
    if flags & ~(STRIDED | SHARED) or size != end:
        raise DecodeError(f"tensor descriptor of {size} bytes, expected {end} for rank {rank} and flags {flags}")
    _, _, _, _, buffer, offset, nbytes = PLACED.unpack_from(data)
    if strided:
        dims = struct.unpack_from(f"<{rank}Q{rank}q", data, PLACED.size)
        shape, strides = dims[:rank], dims[rank:]
    else:
        shape, strides = _dims(rank).unpack_from(data, PLACED.size), None  # (a limit checks the rank later)
    return Descriptor(KINDS[kind], DTYPE_NAMES[dtype], shape, strides, buffer, offset, nbytes)


def join(frames: Sequence[Buffer]) -> bytes:
    """One blob: ``TWB1``, frame count, frame lengths, then the frames, each at a 64-byte boundary
    (``ValueError`` for no frames: a blob holds one at least)."""
    return b"".join(blob_parts(frames)[0])  # one copy of each frame


def blob_parts(frames: Sequence[Buffer]) -> tuple[list[Buffer], int]:
    """The pieces of ``join(frames)`` in order (its preamble, the padding and the frames themselves,
    not copied) and their total size in bytes: a writer can gather them without joining."""
    if len(frames) == 1:  # the common message: its preamble and padding are one piece
        frame = frames[0]
        size = len(frame) if type(frame) is bytes else memoryview(frame).nbytes
        return [_SINGLE.pack(BLOB_MAGIC, 1, size), frame], _SINGLE.size + size
    sizes = [memoryview(f).nbytes for f in frames]
    if not sizes:  # (``split`` refuses a blob of none: every message has frame 0)
        raise ValueError("a blob holds at least one frame, got none")
    parts: list[Buffer] = [BLOB_PREAMBLE.pack(BLOB_MAGIC, len(frames)), *(FRAME_LENGTH.pack(n) for n in sizes)]
    pos = BLOB_PREAMBLE.size + FRAME_LENGTH.size * len(frames)
    for frame, size in zip(frames, sizes, strict=True):
        pad = -pos % ALIGN
        if pad:
            parts.append(_ZEROS[:pad])
        parts.append(frame)
        pos += pad + size
    return parts, pos


_ZEROS = bytes(ALIGN)
_SINGLE = struct.Struct(f"<4sIQ{ALIGN - BLOB_PREAMBLE.size - FRAME_LENGTH.size}x")  # a one-frame blob up to its frame


MAX_FRAMES = Limits().max_buffers + 1
"""``split``'s default ``max_frames``: frame 0 and as many buffers as the default ``Limits`` allow."""


def split(blob: Buffer, *, max_frames: int | None = MAX_FRAMES) -> list[memoryview]:
    """The frames of a blob made by ``join``, as zero-copy memoryviews (writable if the blob is).

    ``max_frames``: the most frames taken (``MAX_FRAMES`` by default, what a decoder with the
    default ``Limits`` takes; None: as many as the blob holds); a blob of more is a ``DecodeError``
    before a view is made (a view costs ~200 bytes, a frame in the table 8)."""
    try:
        view = memoryview(blob).cast("B")
    except (TypeError, ValueError) as exc:  # not a buffer, not C-contiguous, released
        raise DecodeError(f"blob is not a contiguous buffer: {exc}") from None
    if view.nbytes >= _SINGLE.size and _SINGLE.unpack_from(view) == (BLOB_MAGIC, 1, view.nbytes - _SINGLE.size):
        return [view[_SINGLE.size :]]  # the common message, well-formed (any other: checked below)
    count = blob_frame_count(view, view.nbytes)
    if max_frames is not None and count > max_frames:
        raise DecodeError(f"blob of {count} frames is over the max_frames of {max_frames}")
    return [view[pos : pos + length] for pos, length in blob_frame_spans(view, count, view.nbytes)]


def blob_frame_count(head: Buffer, size: int) -> int:
    """The number of frames of a blob of ``size`` bytes that starts with ``head`` (its preamble at
    least); ``DecodeError`` if the preamble is short or not a blob's, or the frame table does not fit."""
    if memoryview(head).nbytes < BLOB_PREAMBLE.size:
        raise DecodeError(f"blob of {size} bytes is shorter than its {BLOB_PREAMBLE.size}-byte preamble")
    magic, count = BLOB_PREAMBLE.unpack_from(head, 0)
    if magic != BLOB_MAGIC:
        raise DecodeError(f"not a tensorwire blob: magic {bytes(magic)!r}, expected {BLOB_MAGIC!r}")
    if count == 0 or BLOB_PREAMBLE.size + count * FRAME_LENGTH.size > size:
        raise DecodeError(f"blob frame table ({count} frames) does not fit in {size} bytes")
    return int(count)


def blob_frame_spans(head: Buffer, count: int, size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of each of the ``count`` frames of a blob of ``size`` bytes that starts
    with ``head`` (its preamble and frame table at least), each checked to fit and the last to end
    the blob (``DecodeError`` otherwise)."""
    spans: list[tuple[int, int]] = []
    pos = BLOB_PREAMBLE.size + count * FRAME_LENGTH.size
    for i, (length,) in enumerate(FRAME_LENGTH.iter_unpack(memoryview(head)[BLOB_PREAMBLE.size : pos])):
        pos += -pos % ALIGN
        if pos + length > size:
            raise DecodeError(f"blob truncated: frame {i} needs {length} bytes at {pos}, blob has {size}")
        spans.append((pos, length))
        pos += length
    if pos != size:
        raise DecodeError(f"blob has {size - pos} trailing bytes after its last frame")
    return spans
