"""Raw msgpack pieces the fuzzer writes by hand, and an iterative walk over the top-level array of a frame.

msgspec writes canonical msgpack only; hostile inputs also need deep nesting built in linear time,
extension chains, non-canonical widths, lying lengths and maps with duplicate keys. ``items`` splits an
array (frame 0 is one: ``[tag, fingerprint, data, buffers, body]``) into the raw bytes of its items
(without recursion),
so that one item can be rewritten while every other byte of the frame stays as it was (what follows
an item that does not parse, too).
"""

from __future__ import annotations

import struct

__all__ = [
    "array_header",
    "bin_header",
    "bin_payload",
    "build_array",
    "build_map",
    "ext",
    "ext_chain",
    "items",
    "map_header",
    "nested",
    "skip",
    "str_header",
]

_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
_WIDTH = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin8-32, str8-32: length bytes
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_FIXED.update({0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8})
_LEN = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I")}
_BIN = {1: 0xC4, 2: 0xC5, 4: 0xC6}
_STR = {1: 0xD9, 2: 0xDA, 4: 0xDB}


def _width(size: int, width: int | None) -> int:
    if width is not None:
        return width
    return 1 if size < 2**8 else 2 if size < 2**16 else 4


def bin_header(size: int, width: int | None = None) -> bytes:
    """The header of a bin claiming ``size`` bytes, its length in ``width`` bytes (1, 2 or 4; None:
    the shortest), whatever follows it."""
    width = _width(size, width)
    return bytes([_BIN[width]]) + size.to_bytes(width, "big")


def str_header(size: int, width: int | None = None) -> bytes:
    """The header of a str8, str16 or str32 claiming ``size`` bytes (``width`` as for ``bin_header``)."""
    width = _width(size, width)
    return bytes([_STR[width]]) + size.to_bytes(width, "big")


def bin_payload(raw: bytes) -> bytes | None:
    """The bytes of the bin ``raw`` holds exactly (any width), or None if it is something else."""
    if not raw or raw[0] not in (0xC4, 0xC5, 0xC6):
        return None
    width = _WIDTH[raw[0]]
    if len(raw) < 1 + width or len(raw) != 1 + width + int.from_bytes(raw[1 : 1 + width], "big"):
        return None
    return raw[1 + width :]


def array_header(count: int) -> bytes:
    """The header of an array of ``count`` items."""
    if count < 16:
        return bytes([0x90 | count])
    if count < 2**16:
        return b"\xdc" + struct.pack(">H", count)
    return b"\xdd" + struct.pack(">I", count)


def map_header(count: int) -> bytes:
    """The header of a map of ``count`` pairs."""
    if count < 16:
        return bytes([0x80 | count])
    if count < 2**16:
        return b"\xde" + struct.pack(">H", count)
    return b"\xdf" + struct.pack(">I", count)


def _ext_header(code: int, length: int) -> bytes:
    kind = struct.pack(">b", code)
    if length in _FIXEXT:
        return bytes([_FIXEXT[length]]) + kind
    if length < 2**8:
        return b"\xc7" + struct.pack(">B", length) + kind
    if length < 2**16:
        return b"\xc8" + struct.pack(">H", length) + kind
    return b"\xc9" + struct.pack(">I", length) + kind


def ext(code: int, payload: bytes) -> bytes:
    """An extension value of type ``code`` (-128..127) holding ``payload``."""
    return _ext_header(code, len(payload)) + payload


def ext_chain(levels: list[tuple[int, bytes]], leaf: bytes) -> bytes:
    """Extensions nested inside each other around ``leaf``, outermost first: level ``(code, prefix)``
    is ``ext(code, prefix + <the next level>)`` (built in linear time, any depth)."""
    parts: list[bytes] = []
    size = len(leaf)
    for code, prefix in reversed(levels):
        size += len(prefix)
        header = _ext_header(code, size)
        parts.append(prefix)
        parts.append(header)
        size += len(header)
    parts.reverse()
    return b"".join(parts) + leaf


def nested(openers: list[bytes], leaf: bytes) -> bytes:
    """Containers each holding the next (``openers``: one-item array or one-pair map headers, each
    map header followed by its key), around ``leaf``."""
    return b"".join(openers) + leaf


def build_array(items: list[bytes]) -> bytes:
    """An array of already encoded items, in order."""
    return array_header(len(items)) + b"".join(items)


def build_map(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A map of already encoded ``(key, value)`` pairs, duplicates and all, in order."""
    return map_header(len(pairs)) + b"".join(k + v for k, v in pairs)


def skip(data: bytes | memoryview, pos: int) -> int:
    """The offset after the one value at ``pos`` (``ValueError`` if it is malformed or truncated)."""
    view = memoryview(data).cast("B")
    total = len(view)
    remaining = 1
    while remaining:
        remaining -= 1
        if pos >= total:
            raise ValueError("truncated msgpack")
        byte = view[pos]
        pos += 1
        if byte <= 0x7F or byte >= 0xE0:
            continue
        if byte <= 0x8F:
            remaining += 2 * (byte & 0x0F)
        elif byte <= 0x9F:
            remaining += byte & 0x0F
        elif byte <= 0xBF:
            pos += byte & 0x1F
        elif byte in _FIXED:
            pos += _FIXED[byte]
        elif byte in _WIDTH:
            width = _WIDTH[byte]
            pos += width + _length(view, pos, width)
        elif byte in (0xC7, 0xC8, 0xC9):
            width = {0xC7: 1, 0xC8: 2, 0xC9: 4}[byte]
            pos += width + 1 + _length(view, pos, width)
        elif 0xD4 <= byte <= 0xD8:
            pos += 1 + (1 << (byte - 0xD4))
        elif byte in (0xDC, 0xDD):
            width = 2 if byte == 0xDC else 4
            remaining += _length(view, pos, width)
            pos += width
        elif byte in (0xDE, 0xDF):
            width = 2 if byte == 0xDE else 4
            remaining += 2 * _length(view, pos, width)
            pos += width
        else:
            raise ValueError(f"invalid msgpack byte 0x{byte:02x}")
    if pos > total:
        raise ValueError("truncated msgpack")
    return pos


def _length(view: memoryview, pos: int, width: int) -> int:
    if pos + width > len(view):
        raise ValueError("truncated msgpack")
    value: int = _LEN[width].unpack_from(view, pos)[0]
    return value


def items(frame: bytes) -> tuple[bytes, list[bytes], bytes] | None:
    """The array ``frame`` starts with, split: ``(array header, [item] as far as they parse, the
    rest)``; None if ``frame`` does not start with an array header."""
    view = memoryview(frame)
    if not view:
        return None
    byte = view[0]
    if 0x90 <= byte <= 0x9F:
        count, pos = byte & 0x0F, 1
    elif byte in (0xDC, 0xDD):
        width = 2 if byte == 0xDC else 4
        try:
            count, pos = _length(view, 1, width), 1 + width
        except ValueError:
            return None
    else:
        return None
    head = bytes(view[:pos])
    found: list[bytes] = []
    try:
        for _ in range(count):
            end = skip(view, pos)
            found.append(bytes(view[pos:end]))
            pos = end
    except ValueError:
        pass  # the rest stays as it is
    return head, found, bytes(view[pos:])
