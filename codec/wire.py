"""The wire layout: frame 0 (plain msgpack header), tensor descriptors, and the one-blob form.

Frame 0 is a msgpack map readable by any msgpack reader::

    {"magic": "tensorwire", "wire": 1, "type": "media.Video", "version": 1, "fingerprint": "...",
     "buffers": [{"nbytes": N, "handle": {"transport": "inline", ...}}, ...],
     "tensors": [[kind, dtype, shape, strides, offset, buffer, nbytes], ...],
     "body": <the message, tensors replaced by ext(1, index), tree tuples by ext(2, packed list)>}

``join(frames)`` packs frames into one blob with 64-byte aligned buffers; ``split(blob)`` returns
zero-copy memoryviews of it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Any

import msgspec

from codec.errors import DecodeError

__all__ = [
    "BLOB_MAGIC",
    "EXT_TENSOR",
    "EXT_TUPLE",
    "MAGIC",
    "WIRE_VERSION",
    "Buffer",
    "TensorDesc",
    "header_bytes",
    "header_type",
    "join",
    "split",
]

MAGIC = "tensorwire"
WIRE_VERSION = 1
EXT_TENSOR = 1
EXT_TUPLE = 2
BLOB_MAGIC = b"TWB1"
ALIGN = 64
_COUNT = struct.Struct("<4sI")
_LENGTH = struct.Struct("<Q")

NonNegative = Annotated[int, msgspec.Meta(ge=0)]

Buffer = bytes | bytearray | memoryview


class TensorDesc(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Where one tensor's elements are: dtype, shape, strides (elements), byte offset into a buffer."""

    kind: str  # "tensor" (torch) or "ndarray" (numpy)
    dtype: str
    shape: list[NonNegative]
    strides: list[int]
    offset: NonNegative
    buffer: NonNegative
    nbytes: NonNegative  # prod(shape) * itemsize, checked


def header_type(handle_types: Sequence[type[Any]]) -> type[Any]:
    """The header Struct whose buffer handles are a tagged union of ``handle_types``."""
    handle: Any = handle_types[0] if len(handle_types) == 1 else __import__("typing").Union[tuple(handle_types)]
    entry = msgspec.defstruct(
        "BufferEntry", [("nbytes", NonNegative), ("handle", handle)], forbid_unknown_fields=True, kw_only=True
    )
    return msgspec.defstruct(
        "Header",
        [
            ("magic", str),
            ("wire", int),
            ("type", str),
            ("version", int),
            ("fingerprint", str),
            ("buffers", list[entry]),  # type: ignore[valid-type]
            ("tensors", list[TensorDesc]),
            ("body", msgspec.Raw),
        ],
        kw_only=True,
    )


_TENSORS_KEY = msgspec.msgpack.encode("tensors")
_BODY_KEY = msgspec.msgpack.encode("body")
_NO_BUFFERS = msgspec.msgpack.encode([]) + _TENSORS_KEY + msgspec.msgpack.encode([]) + _BODY_KEY


@lru_cache(maxsize=1024)
def _prefix(type_id: str, version: int, fingerprint: str) -> bytes:
    """Frame 0 up to the value of ``buffers``: the map header and the type's fixed entries."""
    fixed = msgspec.msgpack.encode(
        {"magic": MAGIC, "wire": WIRE_VERSION, "type": type_id, "version": version, "fingerprint": fingerprint}
    )
    assert fixed[0] == 0x80 | 5  # a fixmap of the five entries above, widened to all eight keys:
    return bytes([0x80 | 8]) + fixed[1:] + msgspec.msgpack.encode("buffers")  # + buffers, tensors, body


def header_bytes(
    type_id: str, version: int, fingerprint: str, buffers: list[Any], tensors: list[TensorDesc], body: bytes
) -> bytes:
    """Frame 0 (the map described above, keys in that order), built around the already encoded body."""
    prefix = _prefix(type_id, version, fingerprint)
    if not buffers and not tensors:
        return prefix + _NO_BUFFERS + body
    encode = msgspec.msgpack.encode
    return b"".join((prefix, encode(buffers), _TENSORS_KEY, encode(tensors), _BODY_KEY, body))


def join(frames: Sequence[Buffer]) -> bytes:
    """One blob: ``TWB1``, frame count, frame lengths, then the frames, each at a 64-byte boundary."""
    count = len(frames)
    table = _COUNT.pack(BLOB_MAGIC, count) + b"".join(_LENGTH.pack(memoryview(f).nbytes) for f in frames)
    out = bytearray(table)
    for frame in frames:
        out += b"\0" * (-len(out) % ALIGN)
        out += frame
    return bytes(out)


def split(blob: Buffer) -> list[memoryview]:
    """The frames of a blob made by ``join``, as zero-copy memoryviews (writable if the blob is)."""
    view = memoryview(blob).cast("B")
    if view.nbytes < _COUNT.size:
        raise DecodeError(f"blob of {view.nbytes} bytes is shorter than its {_COUNT.size}-byte preamble")
    magic, count = _COUNT.unpack_from(view, 0)
    if magic != BLOB_MAGIC:
        raise DecodeError(f"not a tensorwire blob: magic {bytes(magic)!r}, expected {BLOB_MAGIC!r}")
    table_end = _COUNT.size + count * _LENGTH.size
    if count == 0 or table_end > view.nbytes:
        raise DecodeError(f"blob frame table ({count} frames) does not fit in {view.nbytes} bytes")
    frames: list[memoryview] = []
    pos = table_end
    for i in range(count):
        (length,) = _LENGTH.unpack_from(view, _COUNT.size + i * _LENGTH.size)
        pos += -pos % ALIGN
        if pos + length > view.nbytes:
            raise DecodeError(f"blob truncated: frame {i} needs {length} bytes at {pos}, blob has {view.nbytes}")
        frames.append(view[pos : pos + length])
        pos += length
    if pos != view.nbytes:
        raise DecodeError(f"blob has {view.nbytes - pos} trailing bytes after its last frame")
    return frames
