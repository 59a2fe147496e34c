"""A bounded, iterative msgpack walk that rejects nesting deeper than a limit before msgspec sees it.

msgspec recurses in C; a crafted message thousands of levels deep can overflow a small thread
stack. ``check_depth`` walks frame 0 without recursion (ext payloads of tree tuples count as a
level) and raises ``DecodeError`` past the limit or on truncation.
"""

from __future__ import annotations

import struct

from codec.errors import DecodeError
from codec.wire import EXT_TUPLE

__all__ = ["check_depth"]

# Bytes that can open a nesting level: fixmap, fixarray, array16/32, map16/32, ext headers.
_OPENERS = bytes([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF, 0xC7, 0xC8, 0xC9, *range(0xD4, 0xD9)])
_OTHERS = bytes(b for b in range(256) if b not in _OPENERS)
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_SIMPLE = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_SIMPLE.update({0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8})
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin8-32, str8-32: length bytes
_LEN = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I")}


def check_depth(data: bytes | memoryview, max_depth: int) -> None:
    """Raise ``DecodeError`` if ``data`` nests containers deeper than ``max_depth`` (or is truncated)."""
    view = memoryview(data).cast("B")
    if len(bytes(view).translate(None, _OTHERS)) <= max_depth:
        return  # fewer possible openers than the limit: cannot be too deep
    _walk(view, 0, len(view), max_depth, 0)


def _walk(view: memoryview, pos: int, end: int, max_depth: int, base: int) -> int:
    """Walk exactly one value starting at ``pos``; return the offset after it."""
    remaining = [1]  # values still to read at each open level
    while remaining:
        if remaining[-1] == 0:
            remaining.pop()
            continue
        remaining[-1] -= 1
        if pos >= end:
            raise DecodeError("header frame is truncated")
        byte = view[pos]
        pos += 1
        count = -1
        if byte <= 0x7F or byte >= 0xE0:
            continue
        if 0xA0 <= byte <= 0xBF:
            pos += byte & 0x1F
        elif 0x90 <= byte <= 0x9F:
            count = byte & 0x0F
        elif 0x80 <= byte <= 0x8F:
            count = 2 * (byte & 0x0F)
        elif byte in _SIMPLE:
            pos += _SIMPLE[byte]
        elif byte in _SIZED:
            size = _SIZED[byte]
            pos += size + _read(view, pos, size, end)
        elif byte in (0xDC, 0xDD):
            size = 2 if byte == 0xDC else 4
            count = _read(view, pos, size, end)
            pos += size
        elif byte in (0xDE, 0xDF):
            size = 2 if byte == 0xDE else 4
            count = 2 * _read(view, pos, size, end)
            pos += size
        elif byte in _FIXEXT or byte in (0xC7, 0xC8, 0xC9):
            if byte in _FIXEXT:
                length = _FIXEXT[byte]
            else:
                size = {0xC7: 1, 0xC8: 2, 0xC9: 4}[byte]
                length = _read(view, pos, size, end)
                pos += size
            if pos + 1 + length > end:
                raise DecodeError("header frame is truncated")
            code = view[pos]
            pos += 1
            if code == EXT_TUPLE:  # the array inside is the tuple's own level
                _walk(view, pos, pos + length, max_depth, base + len(remaining) - 1)
            pos += length
        else:
            raise DecodeError(f"invalid msgpack byte 0x{byte:02x} in header frame")
        if count > 0:
            if base + len(remaining) > max_depth:
                raise DecodeError(f"nesting deeper than the limit of {max_depth}")
            remaining.append(count)
        if pos > end:
            raise DecodeError("header frame is truncated")
    return pos


def _read(view: memoryview, pos: int, size: int, end: int) -> int:
    if pos + size > end:
        raise DecodeError("header frame is truncated")
    value: int = _LEN[size].unpack_from(view, pos)[0]
    return value
