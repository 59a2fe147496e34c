"""A bounded, iterative msgpack walk that rejects nesting deeper than a limit before msgspec sees it.

msgspec recurses in C, and a tree tuple (``ext(2, payload)``) is decoded by a Python hook that
calls msgspec again on its payload: a crafted message thousands of levels deep could overflow a
small thread stack. ``check_depth`` walks frame 0 with an explicit stack of frames, never
recursing: every array and map (empty ones included) is one level, and so is every tuple
extension, ext inside ext included; the array a tuple's payload holds is that tuple's own level
(as the encoder counts it). A tuple's payload is a frame of its own that must hold exactly one
value: one running past the payload, or bytes left after it, are a ``DecodeError``. Other
extensions (tensor references) are leaves whose payload is never parsed. Truncation, invalid
bytes and nesting past the limit raise ``DecodeError``.
"""

from __future__ import annotations

import struct

from codec.errors import DecodeError
from codec.wire import EXT_TUPLE, Buffer

__all__ = ["check_depth"]

# Bytes that can open a nesting level: fixmap, fixarray, array16/32, map16/32, ext headers.
_OPENERS = bytes([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF, 0xC7, 0xC8, 0xC9, *range(0xD4, 0xD9)])
_OTHERS = bytes(b for b in range(256) if b not in _OPENERS)
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}  # ext8-32: length bytes
_SIMPLE = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_SIMPLE.update({0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8})
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin8-32, str8-32: length bytes
_LEN = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I")}

# Kinds of frame on the walk's stack: whether the frame counts a level, whether it must end exactly.
_TOP = 0  # the frame itself: one value, no level
_CONTAINER = 1  # an array or a map: one level
_TUPLE = 2  # a tuple extension's payload: one level, exactly one value filling it
_TUPLE_ARRAY = 3  # the array a tuple's payload holds: the tuple's own level, not another one


def check_depth(data: Buffer, max_depth: int) -> None:
    """Raise ``DecodeError`` if ``data`` nests deeper than ``max_depth`` levels (or is malformed
    on the way: truncated, an invalid byte, a tuple payload that its value does not fill exactly)."""
    view = memoryview(data).cast("B")
    if len(bytes(view).translate(None, _OTHERS)) <= max_depth:
        return  # fewer bytes that could open a level than the limit: cannot be too deep
    _walk(view, max_depth)


def _walk(view: memoryview, max_depth: int) -> int:
    """Walk the one value at the start of ``view``; return the offset after it.

    Each frame on the stack is ``[values still to read, end offset, kind, 1 if inside a tuple else 0]``.
    """
    stack = [[1, len(view), _TOP, 0]]
    frame = stack[0]
    depth = 0
    pos = 0
    while True:
        if frame[0] == 0:
            if frame[2] == _TOP:
                return pos
            if frame[2] == _TUPLE and pos != frame[1]:
                raise DecodeError(f"a tree tuple's payload has {frame[1] - pos} bytes left after its value")
            if frame[2] != _TUPLE_ARRAY:
                depth -= 1
            stack.pop()
            frame = stack[-1]
            continue
        frame[0] -= 1
        end, bounded = frame[1], frame[3] == 1
        if pos >= end:
            raise _overrun(bounded)
        byte = view[pos]
        pos += 1
        if byte <= 0x7F or byte >= 0xE0:
            continue
        kind = _CONTAINER
        if 0xA0 <= byte <= 0xBF:
            pos += byte & 0x1F
            count = -1
        elif 0x90 <= byte <= 0x9F:
            count = byte & 0x0F
            kind = _TUPLE_ARRAY if frame[2] == _TUPLE else _CONTAINER
        elif 0x80 <= byte <= 0x8F:
            count = 2 * (byte & 0x0F)
        elif byte in _SIMPLE:
            pos += _SIMPLE[byte]
            count = -1
        elif byte in _SIZED:
            size = _SIZED[byte]
            pos += size + _read(view, pos, size, end, bounded)
            count = -1
        elif byte == 0xDC or byte == 0xDD:
            size = 2 if byte == 0xDC else 4
            count = _read(view, pos, size, end, bounded)
            pos += size
            kind = _TUPLE_ARRAY if frame[2] == _TUPLE else _CONTAINER
        elif byte == 0xDE or byte == 0xDF:
            size = 2 if byte == 0xDE else 4
            count = 2 * _read(view, pos, size, end, bounded)
            pos += size
        elif byte in _FIXEXT or byte in _EXT:
            pos, count, end = _ext(view, pos, byte, end, bounded)
            kind = _TUPLE
        else:
            raise DecodeError(f"invalid msgpack byte 0x{byte:02x} in header frame")
        if pos > end:
            raise _overrun(bounded)
        if count < 0:
            continue  # a leaf
        if kind != _TUPLE_ARRAY:
            if depth >= max_depth:
                raise DecodeError(f"nesting deeper than the limit of {max_depth}")
            if count == 0:
                continue  # an empty container: a level, but nothing to walk
            depth += 1
        elif count == 0:
            continue
        frame = [count, end, kind, 1 if bounded or kind == _TUPLE else 0]
        stack.append(frame)


def _ext(view: memoryview, pos: int, byte: int, end: int, bounded: bool) -> tuple[int, int, int]:
    """Read the extension whose header byte ``byte`` was just read: ``(offset, count, end)``, where a
    tuple gives its payload's start, 1 value to read and the payload's end; any other extension is a
    leaf: the offset after it and -1."""
    if byte in _FIXEXT:
        length = _FIXEXT[byte]
    else:
        size = _EXT[byte]
        length = _read(view, pos, size, end, bounded)
        pos += size
    if pos + 1 + length > end:
        raise _overrun(bounded)
    if view[pos] == EXT_TUPLE:
        return pos + 1, 1, pos + 1 + length
    return pos + 1 + length, -1, end


def _overrun(bounded: bool) -> DecodeError:
    """The error for a value that runs past its end: a tuple payload's (``bounded``) or the frame's."""
    if bounded:
        return DecodeError("a value runs past the end of its tree tuple's payload")
    return DecodeError("header frame is truncated")


def _read(view: memoryview, pos: int, size: int, end: int, bounded: bool) -> int:
    if pos + size > end:
        raise _overrun(bounded)
    value: int = _LEN[size].unpack_from(view, pos)[0]
    return value
