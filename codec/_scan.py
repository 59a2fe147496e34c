"""A bounded, iterative msgpack walk that rejects nesting deeper than a limit before msgspec sees it.

msgspec recurses in C, and a tree tuple (``ext(2, payload)``) is decoded by a Python hook that
calls msgspec again on its payload: a crafted message thousands of levels deep could overflow a
small thread stack. ``check_depth`` walks frame 0 with an explicit stack of frames, never
recursing: every array and map (empty ones included) is one level, and so is every tuple
extension, ext inside ext included; the array a tuple's payload holds is that tuple's own level
(as the encoder counts it). A tuple's payload is a frame of its own that must hold exactly one
value: one running past the payload, or bytes left after it, are a ``DecodeError``. Other
extensions (tensor references) are leaves whose payload is never parsed. Truncation, invalid
bytes and nesting past the limit raise ``DecodeError``. ``nesting_path`` walks a refused frame
again, on the error path only, to name where the nesting goes past the limit; ``nesting_error``
words that refusal with the path and the type and version frame 0's tag names (the decoder's and
``describe``'s alike).
"""

from __future__ import annotations

import struct

import msgspec

from tensorwire._locate import header_path, key_segment
from tensorwire._wire import EXT_TUPLE, HEADER_LEVELS, WIRE_VERSION, Buffer, parse_tag
from tensorwire.errors import DecodeError, printable
from tensorwire.registry import Registry, UnknownTypeError

__all__ = [
    "OPENERS",
    "OTHERS",
    "check_depth",
    "nesting_error",
    "nesting_path",
    "past_the_limit",
    "too_deep_for_the_stack",
    "walk",
]

# Bytes that can open a nesting level: fixmap, fixarray, array16/32, map16/32, ext headers.
OPENERS = bytes([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF, 0xC7, 0xC8, 0xC9, *range(0xD4, 0xD9)])
"""The bytes that can open a level: ``len(frame) - len(frame.translate(None, OPENERS))`` bounds its
depth (deleting these 44 is quicker than keeping them by deleting the other 212, up to ~500 bytes)."""
OTHERS = bytes(sorted(set(range(256)) - set(OPENERS)))
"""Every byte but ``OPENERS``: ``len(frame.translate(None, OTHERS))`` counts a frame's level openers,
quicker than deleting ``OPENERS`` past ~500 bytes (what is kept, so allocated, is only the openers:
2,047 bytes are counted in ~0.8 us rather than ~1.0)."""
_U8, _U16, _U32 = (struct.Struct(f">{c}").unpack_from for c in "BHI")
# Leaves of a fixed size after their first byte (nil, bools, floats, ints): that size; -1 for the rest.
_LEAF = [-1] * 256
for _byte, _size in {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}.items():
    _LEAF[_byte] = _size
for _byte, _size in {0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}.items():
    _LEAF[_byte] = _size
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
# First bytes followed by a big-endian length or count: (its size, its reader).
_LENGTH = {
    **dict.fromkeys((0xC4, 0xD9, 0xC7), (1, _U8)),  # bin8, str8, ext8
    **dict.fromkeys((0xC5, 0xDA, 0xC8, 0xDC, 0xDE), (2, _U16)),  # bin16, str16, ext16, array16, map16
    **dict.fromkeys((0xC6, 0xDB, 0xC9, 0xDD, 0xDF), (4, _U32)),  # bin32, str32, ext32, array32, map32
}
_BYTES = frozenset((0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB))  # bin and str: a length, then that many bytes

# Kinds of frame on the walk's stack.
_TOP = 0  # the frame itself: one value, no level
_CONTAINER = 1  # an array or a map: one level
_TUPLE = 2  # a tuple extension's payload: one level, exactly one value filling it
_TUPLE_ARRAY = 3  # the array a tuple's payload holds: the tuple's own level, not another one


def check_depth(data: Buffer, max_depth: int, *, above: int = 0) -> None:
    """Raise ``DecodeError`` if ``data`` nests deeper than ``max_depth`` levels (or is malformed on
    the way: truncated, an invalid byte, a tuple payload that its value does not fill exactly);
    ``above`` as for ``walk``."""
    head = data if type(data) is bytes else bytes(memoryview(data).cast("B"))
    if len(head) - len(head.translate(None, OPENERS)) <= max_depth:
        return  # fewer bytes that could open a level than the limit: cannot be too deep
    walk(head, max_depth, above=above)


def walk(
    data: bytes | memoryview, max_depth: int, depth: int = 0, start: int = 0, budget: int = -1, *, above: int = 0
) -> int:
    """Walk the one value at offset ``start`` of ``data`` (bytes, or a view of unsigned bytes), found
    ``depth`` levels down; raise ``DecodeError`` as ``check_depth`` does, else return the offset
    after it, or -1 if it read ``budget`` values without reaching the end (negative: no bound).
    ``above``: the levels of ``max_depth`` above the message (frame 0's array, the body's own map),
    which the error leaves out: it names the limit as ``Limits.max_depth`` says it.

    The frame being read is in locals (values still to read, end offset, kind, whether inside a
    tuple); the ones it is inside wait on the stack. A leaf that runs past its frame's end is
    caught at the next read or at that frame's end, before any further byte is read.
    """
    stack: list[tuple[int, int, int, bool]] = []
    remaining, end, kind, bounded = 1, len(data), _TOP, False
    pos = start
    while True:
        if remaining == 0:
            if pos > end:
                raise _overrun(bounded)
            if kind == _TOP:
                return pos
            if kind == _TUPLE and pos != end:
                raise DecodeError(f"a tree tuple's payload has {end - pos} bytes left after its value")
            if kind != _TUPLE_ARRAY:
                depth -= 1
            remaining, end, kind, bounded = stack.pop()
            continue
        remaining -= 1
        budget -= 1
        if budget == 0:
            return -1
        if pos >= end:
            raise _overrun(bounded)
        byte = data[pos]
        pos += 1
        if byte < 0x80 or byte >= 0xE0:  # fixint
            continue
        if byte < 0x90:  # fixmap
            count, inner = 2 * (byte & 0x0F), _CONTAINER
        elif byte < 0xA0:  # fixarray
            count, inner = byte & 0x0F, _TUPLE_ARRAY if kind == _TUPLE else _CONTAINER
        elif byte < 0xC0:  # fixstr
            pos += byte & 0x1F
            continue
        elif _LEAF[byte] >= 0:
            pos += _LEAF[byte]
            continue
        else:
            if byte in _FIXEXT:
                length = _FIXEXT[byte]
            else:
                sized = _LENGTH.get(byte)
                if sized is None:
                    raise DecodeError(f"invalid msgpack byte 0x{byte:02x} in header frame")
                size, read = sized
                if pos + size > end:
                    raise _overrun(bounded)
                length = read(data, pos)[0]
                pos += size
                if byte in _BYTES:
                    pos += length
                    continue
                if byte >= 0xDC:  # array16/32, map16/32
                    if byte >= 0xDE:
                        count, inner = 2 * length, _CONTAINER
                    else:
                        count, inner = length, _TUPLE_ARRAY if kind == _TUPLE else _CONTAINER
                    length = -1
            if length >= 0:  # an extension: its type byte, then its payload
                if pos + 1 + length > end:
                    raise _overrun(bounded)
                if data[pos] != EXT_TUPLE:
                    pos += 1 + length  # a tensor: a leaf whose payload is never parsed
                    continue
                pos += 1
                if depth >= max_depth:
                    raise past_the_limit(max_depth - above)
                depth += 1
                stack.append((remaining, end, kind, bounded))
                remaining, end, kind, bounded = 1, pos + length, _TUPLE, True
                continue
        if inner == _CONTAINER:
            if depth >= max_depth:
                raise past_the_limit(max_depth - above)
            if count == 0:
                continue  # an empty container: a level, but nothing to walk
            depth += 1
        elif count == 0:
            continue
        stack.append((remaining, end, kind, bounded))
        remaining, kind = count, inner


_MAP = 4  # (``nesting_path`` only) a map: one level, its keys and values in turn
_OPENS = frozenset(OPENERS)


def nesting_path(data: bytes | memoryview, max_depth: int, budget: int = 1 << 20) -> str | None:
    """The path from the top of ``data`` (one msgpack value, walked from its start as ``walk`` walks
    it, ``max_depth`` levels allowed) of the first container past the limit: ``[i]`` an item of an
    array or of a tree tuple, a map's value by ``key_segment`` of its key. A map whose key is not
    named (one that is a container or an extension, or one inside which the nesting is) ends the
    path there. None if the walk meets no such container within its first ``budget`` values (a
    million: ~0.3 s): it ends, or meets malformed bytes first.

    Only error paths use this: it walks the values ``walk`` walked (iterative, one pass, one entry
    per open level, at most ``budget`` values) and reads a key only where the path passes it.
    """
    # Each open level: (kind, its item count, its items left, its end, the current key's and value's offsets).
    stack: list[tuple[int, int, int, int, int, int]] = []
    kind, count, remaining, end, key, value = _TOP, 1, 1, len(data), 0, 0
    pos = depth = 0
    while True:
        if remaining == 0:
            if pos > end or kind == _TOP or (kind == _TUPLE and pos != end):
                return None  # malformed (``walk`` says how)
            if kind != _TUPLE_ARRAY:
                depth -= 1
            kind, count, remaining, end, key, value = stack.pop()
            continue
        if kind == _MAP:
            if remaining & 1:
                value = pos
            else:
                key = pos
        remaining -= 1
        budget -= 1
        if pos >= end or budget < 0:
            return None
        byte = data[pos]
        pos += 1
        if byte < 0x80 or byte >= 0xE0:  # fixint
            continue
        if byte < 0x90:  # fixmap
            inner, items = _MAP, 2 * (byte & 0x0F)
        elif byte < 0xA0:  # fixarray
            inner, items = _CONTAINER, byte & 0x0F
        elif byte < 0xC0:  # fixstr
            pos += byte & 0x1F
            continue
        elif _LEAF[byte] >= 0:
            pos += _LEAF[byte]
            continue
        else:
            length = _FIXEXT.get(byte, -1)
            if length < 0:
                sized = _LENGTH.get(byte)
                if sized is None or pos + sized[0] > end:
                    return None
                length = sized[1](data, pos)[0]
                pos += sized[0]
                if byte in _BYTES:
                    pos += length
                    continue
            if byte >= 0xDC:  # array16/32, map16/32
                inner, items = (_MAP, 2 * length) if byte >= 0xDE else (_CONTAINER, length)
            else:  # an extension: its type byte, then its payload
                if pos + 1 + length > end:
                    return None
                if data[pos] != EXT_TUPLE:
                    pos += 1 + length  # a tensor: a leaf
                    continue
                pos += 1
                inner, items = _TUPLE, 1
        if inner == _CONTAINER and kind == _TUPLE:
            inner = _TUPLE_ARRAY  # the tuple's own level
        elif depth >= max_depth:
            return _path(data, [*stack, (kind, count, remaining, end, key, value)])
        elif items:
            depth += 1
        if items:
            stack.append((kind, count, remaining, end, key, value))
            kind, count, remaining = inner, items, items
            if inner == _TUPLE:
                end = pos + length


def _path(data: bytes | memoryview, levels: list[tuple[int, int, int, int, int, int]]) -> str:
    """The path ``nesting_path`` names, from the open ``levels`` (outermost first)."""
    path = "$"
    for kind, count, remaining, _, key, value in levels:
        if kind == _CONTAINER or kind == _TUPLE_ARRAY:
            path += f"[{count - remaining - 1}]"
        elif kind == _MAP:
            if remaining & 1 or data[key] in _OPENS:  # in a key, or a key that is a container or an extension
                break
            try:
                path += key_segment(msgspec.msgpack.decode(bytes(data[key:value])))
            except msgspec.MsgspecError:  # a key that does not read (a string that is not UTF-8)
                break
    return path


def nesting_error(data: bytes | memoryview, exc: DecodeError, registry: Registry | None, max_depth: int) -> DecodeError:
    """``exc``, a refusal of frame 0 ``data`` (bytes, or a view of unsigned bytes) by the walk that
    bounds its nesting (``max_depth``: its levels, frame 0's own included); if it says the frame is
    nested too deep, with the type and version its tag names and the path of the first container
    past the limit where ``nesting_path`` names one (in the body ``$...``, in the buffer table
    ``$.buffers...``). With ``registry``, only a type of it is named; without one (``describe``),
    any type id the tag holds, written printable and cut to 64 characters. Read without recursion."""
    if exc.message != past_the_limit(max_depth - HEADER_LEVELS).message or data[0] not in _ARRAYS:
        return exc  # another refusal, or a frame 0 that is not an array: no tag, no path
    try:
        found = nesting_path(data, max_depth)
        ident = _tagged(data, registry)
    except Exception:  # the locator only improves a message; it never replaces the error
        return exc
    return DecodeError(
        exc.message,
        path=header_path(found) if found is not None and found != "$" else None,
        type_id=None if ident is None else ident[0],
        version=None if ident is None else ident[1],
    )


_ARRAYS = frozenset((*range(0x91, 0xA0), 0xDC, 0xDD))  # the headers of an array that has items
_ID_CHARS = 64  # a type id read without a registry is cut to this many characters


def _tagged(data: bytes | memoryview, registry: Registry | None) -> tuple[str, int] | None:
    """``(type_id, version)`` that the tag of frame 0 ``data`` names, read alone (nothing after it),
    if it is one of this wire format's and (with ``registry``) a type of ``registry``; else None."""
    start = 1 if data[0] < 0xA0 else 3 if data[0] == 0xDC else 5
    try:
        tag = msgspec.msgpack.decode(bytes(data[start : walk(data, 0, 0, start)]))
        parsed = parse_tag(tag)
        if parsed is None or parsed[0] != WIRE_VERSION:
            return None
        if registry is not None:
            registry.type(parsed[1], parsed[2])
    except (DecodeError, msgspec.MsgspecError, UnknownTypeError):
        return None
    if registry is None:
        type_id = printable(parsed[1])
        return type_id if len(type_id) <= _ID_CHARS else type_id[: _ID_CHARS - 3] + "...", parsed[2]
    return parsed[1], parsed[2]


def past_the_limit(limit: int) -> DecodeError:
    """The refusal of a frame nested deeper than ``limit`` levels (as ``Limits.max_depth`` counts them)."""
    return DecodeError(f"nesting deeper than the limit of {limit}")


def _overrun(bounded: bool) -> DecodeError:
    """The error for a value that runs past its end: a tuple payload's (``bounded``) or the frame's."""
    if bounded:
        return DecodeError("a value runs past the end of its tree tuple's payload")
    return DecodeError("header frame is truncated")


def too_deep_for_the_stack(max_depth: int) -> DecodeError:
    """The error for a frame whose nesting was within ``max_depth`` but past what this thread's
    stack holds (msgspec decodes nested values recursively: a ``RecursionError``). The limit is
    not named: from Python 3.12 on, the one that recursion in C meets is not ``sys.getrecursionlimit()``
    (and Python tells it nowhere)."""
    return DecodeError(
        "nesting deeper than this process can decode (past Python's recursion limit); "
        f"a max_depth of {max_depth} is more than it holds"
    )
