"""Where in a message a value is: the first value a predicate accepts, and its path (e.g. ``$.kwargs.x[2]``).

Paths are written as the rest of tensorwire writes them: ``$`` is the message, ``.name`` a struct
field (its wire name), ``[i]`` an item of a list, tuple or set (a set in the sorted order it is
sent in), ``.key`` the value of a dict entry whose key is an identifier, ``["key"]`` one whose key
is another string and ``[key]`` (its repr) one whose key is not a string. A key is reported at
the path of its entry. Only error paths use this (a message that fails to encode); the walk is
iterative, never enters a container twice, and stops at the message's depth limit.

msgspec writes the value of any map entry as ``[...]``: ``entry_path`` finds which entry it is, in
the body of a message (decoded untyped), for the errors of both the encoder's check and the decoder.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable, Iterator
from functools import lru_cache
from itertools import islice
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec

__all__ = [
    "decode_order",
    "entry_path",
    "header_path",
    "key_segment",
    "locate",
    "msgspec_error",
    "set_order",
    "too_deep",
]

_UNSET = object()
_LONG = 64  # characters of a key a path shows


class _Key:
    """The segment of a dict entry, written (``key_segment``) only if its path is asked for."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


_Children = Iterator[tuple[str | _Key, Any]]
_Where = tuple[Any, str | _Key] | None  # a path as links (parent, segment), joined only for a match: None is ``$``


def locate(message: Any, match: Callable[[Any], bool], max_depth: int) -> tuple[str, Any] | None:
    """``(path, value)`` of the first value in ``message`` (depth first, in the order it is encoded)
    that ``match`` accepts, looking no deeper than ``max_depth`` containers below the message; None
    if there is none, or if the caller's code (a container's ``items``, ``match``) raises on the way."""
    try:
        return _locate(message, match, max_depth)
    except Exception:  # the locator only improves a message; it never replaces the error
        return None


def _locate(message: Any, match: Callable[[Any], bool], max_depth: int) -> tuple[str, Any] | None:
    if match(message):
        return "$", message
    for where, value, _ in _inside(message, max_depth):
        if match(value):
            return _path(where), value
    return None


def too_deep(message: Any, max_depth: int) -> str | None:
    """The path of the first container (array, map, struct) in ``message`` (depth first, in the
    order it is encoded) more than ``max_depth`` levels below it: the message itself is at none,
    a list in one of its fields at one. None if there is none, or if the caller's code raises on
    the way (the walk goes no deeper than ``max_depth + 1``)."""
    try:
        for where, value, level in _inside(message, max_depth):
            if level > max_depth and _children(value) is not None:
                return _path(where)
    except Exception:  # the locator only improves a message; it never replaces the error
        return None
    return None


def _inside(message: Any, max_depth: int) -> Iterator[tuple[_Where, Any, int]]:
    """Each value inside ``message``, its path as links and its level (1: a field of the message),
    depth first in the order it is encoded; a container is entered once, at level ``max_depth`` at
    the deepest."""
    children = _children(message)
    if children is None:
        return
    stack: list[tuple[_Children, _Where, int]] = [(children, None, 1)]
    seen = {id(message)}
    while stack:
        items, where, level = stack[-1]
        for segment, value in items:  # one child per turn of the outer loop
            link = (where, segment)
            yield link, value, level
            if level <= max_depth and id(value) not in seen:
                inner = _children(value)
                if inner is not None:
                    seen.add(id(value))
                    stack.append((inner, link, level + 1))
            break
        else:
            stack.pop()


def _path(where: _Where) -> str:
    """The path a chain of ``(parent, segment)`` links ends at."""
    segments = []
    while where is not None:
        where, segment = where
        segments.append(segment if isinstance(segment, str) else key_segment(segment.key))
    return "$" + "".join(reversed(segments))


def key_segment(key: Any) -> str:
    """The path segment of the entry of a dict at ``key``: ``.key``, ``["key"]`` or ``[key]``; a
    key longer than 64 characters is cut to its first 61 and ``...`` (``["61 characters"...]``)."""
    if isinstance(key, str):
        text = str.__str__(key)  # the plain value, for a str enum member too
        if len(text) > _LONG:
            return f"[{json.dumps(text[: _LONG - 3])}...]"
        return f".{text}" if text.isidentifier() else f"[{json.dumps(text)}]"
    try:
        text = repr(key)
    except Exception:  # a key whose repr raises is still named, by its type
        text = f"<unprintable {type(key).__name__}>"
    return f"[{text if len(text) <= _LONG else text[: _LONG - 3] + '...'}]"


def _children(value: Any) -> _Children | None:
    """``(segment, child)`` for each child of a container or struct, in encoding order; None for a leaf."""
    if isinstance(value, msgspec.Struct):
        return _fields(value)
    if isinstance(value, list | tuple):
        return ((f"[{i}]", item) for i, item in enumerate(value))
    if isinstance(value, dict):
        return _entries(value)
    if isinstance(value, set | frozenset):
        return ((f"[{i}]", item) for i, item in enumerate(set_order(value)))
    return None


def _fields(value: msgspec.Struct) -> _Children:
    names = value.__struct_fields__
    wire = getattr(value, "__struct_encode_fields__", names)
    for name, label in zip(names, wire, strict=True):
        item = getattr(value, name, _UNSET)
        if item is not _UNSET:  # a deleted field has no value to look at
            yield f".{label}", item


def _entries(value: dict[Any, Any]) -> _Children:
    for key, item in value.items():
        segment = _Key(key)
        yield segment, key
        yield segment, item


def set_order(values: set[Any] | frozenset[Any]) -> list[Any]:
    """A set's items in the order the body encoder sends them: sorted, else sorted by their reprs,
    else (items that neither order nor print) as the set iterates; never raises."""
    try:
        return sorted(values)
    except Exception:
        pass
    try:
        return sorted(values, key=repr)
    except Exception:
        return list(values)


# -- msgspec's error paths ------------------------------------------------------------------------

_AT = re.compile(r" - at `(\$[^`]*)`\Z")
_AT_KEY = re.compile(r" - at `key` in `(\$[^`]*)`\Z")
_SEGMENT = re.compile(r"\.([^.\[`]+)|\[(\d+)\]|\[\.\.\.\]")
_MAX_ENTRIES = 65536  # entries of one map looked at for the one msgspec names (on error paths only)
_UNION = (Union, types.UnionType)


def msgspec_error(text: str) -> tuple[str, str | None, bool]:
    """The parts of a msgspec ``ValidationError``'s text: its problem, the path it names (None if
    it names none: the value itself) and whether it is about a map key at that path (msgspec's
    ``- at `key` in `$.m` ``)."""
    found = _AT_KEY.search(text)
    if found is not None:
        return text[: found.start()], found.group(1), True
    found = _AT.search(text)
    if found is not None:
        return text[: found.start()], found.group(1), False
    return text, None, False


def header_path(path: str) -> str:
    """A msgspec path into frame 0 (``[tag, fingerprint, data, buffers, body]``) as tensorwire writes
    it: ``$`` is the body, ``$.buffers`` the buffer table, ``$.data`` frame 0's tensor bytes."""
    if path.startswith("$[4]"):
        return "$" + path[4:]
    if path.startswith("$[3]"):
        return "$.buffers" + path[4:]
    if path.startswith("$[2]"):
        return "$.data" + path[4:]
    return path


def entry_path(
    cls: type, body: Any, path: str, problem: str, on_key: bool, ext_hook: Callable[[int, memoryview], Any]
) -> str | None:
    """msgspec's ``path`` of ``problem`` in ``body`` (a message of ``cls`` decoded untyped) with
    each map value (``[...]``) replaced by its entry's ``key_segment`` and, ``on_key``, the key of
    the map it ends at appended; None if the entries cannot be told.

    Each ``[...]`` is the first entry of that map (of at most ``_MAX_ENTRIES``) whose value, decoded
    alone as the map's value type, fails with the same problem at the same place. Only error paths
    use this; ``ext_hook`` stands in for tensors (what a value decodes without side effects).
    """
    spans = list(_SEGMENT.finditer(path, 1))
    if not path.startswith("$") or sum(m.end() - m.start() for m in spans) != len(path) - 1:
        return None
    out, tp, value = "$", cls, body
    for segment in spans:
        tp = _narrow(tp, value)
        name, index = segment.group(1), segment.group(2)
        if name is not None:
            found = _field(tp, value, name)
            if found is None:
                return None
            tp, value = found
            out += f".{name}"
        elif index is not None:
            found = _item(tp, value, int(index))
            if found is None:
                return None
            tp, value = found
            out += f"[{index}]"
        else:
            origin, args = get_origin(tp), get_args(tp)
            if origin is not dict or not isinstance(value, dict) or len(args) != 2:
                return None
            want = (problem, "$" + path[segment.end() :], on_key)
            decode = msgspec.msgpack.Decoder(args[1], ext_hook=ext_hook).decode
            key = next((k for k, v in islice(value.items(), _MAX_ENTRIES) if _failure(decode, v) == want), _UNSET)
            if key is _UNSET:
                return None
            tp, value = args[1], value[key]
            out += key_segment(key)
    if on_key:
        tp = _narrow(tp, value)
        args = get_args(tp)
        if get_origin(tp) is not dict or not isinstance(value, dict) or len(args) != 2:
            return None
        decode = msgspec.msgpack.Decoder(args[0]).decode
        for key in islice(value, _MAX_ENTRIES):
            if _failure(decode, key) == (problem, "$", False):
                return out + key_segment(key)
        return None
    return out


def decode_order(cls: type, body: Any, is_ref: Callable[[Any], bool]) -> list[Any]:
    """The values ``is_ref`` accepts in ``body`` (a message of ``cls`` decoded untyped), in the order
    a typed decode of ``cls`` meets them: the values of map entries that name no field of their
    struct are left out, as that decode skips them unread. Where a union's option cannot be told
    from its value, or the type is untyped, every one below it is taken, in order."""
    found: list[Any] = []
    stack: list[tuple[Any, Any]] = [(cls, body)]
    while stack:
        tp, value = stack.pop()
        if is_ref(value):
            found.append(value)
        else:
            stack.extend(reversed(_typed_children(_narrow(tp, value), value)))
    return found


def _typed_children(tp: Any, value: Any) -> list[tuple[Any, Any]]:
    """(type, value) of each value inside untyped ``value`` that a typed decode of ``tp`` reads, in
    order (a map's keys and values alike; ``tp`` None: untyped)."""
    if not isinstance(value, dict | list | tuple):
        return []
    struct = isinstance(tp, type) and issubclass(tp, msgspec.Struct)
    if isinstance(value, dict):
        if struct and not tp.__struct_config__.array_like:
            known = _field_types(tp)
            return [(known[k], v) for k, v in value.items() if isinstance(k, str) and k in known]
        key, item = get_args(tp) if get_origin(tp) is dict and len(get_args(tp)) == 2 else (Any, Any)
        return [pair for k, v in value.items() for pair in ((key, k), (item, v))]
    if struct:  # array-like: its fields by position, after its tag
        start = int(tp.__struct_config__.tag_field is not None)
        return list(zip(_field_types(tp).values(), value[start:], strict=False))
    origin, args = get_origin(tp), get_args(tp)
    if origin in (list, set, frozenset) or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return [(args[0], v) for v in value]
    if origin is tuple:
        return [(args[i] if i < len(args) else Any, v) for i, v in enumerate(value)]
    return [(Any, v) for v in value]


@lru_cache(maxsize=256)
def _field_types(cls: type) -> dict[str, Any]:
    """The declared type of each field of struct class ``cls`` by the name it is sent as, in order."""
    return {f.encode_name: f.type for f in msgspec.structs.fields(cls)}


def _failure(decode: Callable[[bytes], Any], value: Any) -> tuple[str, str, bool] | None:
    """What msgspec says of ``value`` (untyped) decoded by ``decode``: (problem, path, on_key), None
    if it decodes; another error is no answer."""
    try:
        decode(msgspec.msgpack.encode(value))
    except msgspec.ValidationError as exc:
        problem, path, on_key = msgspec_error(str(exc))
        return problem, "$" if path is None else path, on_key
    except Exception:
        return ("", "", False)
    return None


def _strip(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _narrow(tp: Any, value: Any) -> Any:
    """``tp`` without its constraints and, for a union, the one option that ``value`` has the shape of."""
    tp = _strip(tp)
    if get_origin(tp) not in _UNION:
        return tp
    options = [o for o in map(_strip, get_args(tp)) if _shaped(o, value)]
    return options[0] if len(options) == 1 else None


def _shaped(tp: Any, value: Any) -> bool:
    """Whether untyped ``value`` has the shape of a container type ``tp`` (a struct by its tag)."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        config = tp.__struct_config__
        if config.array_like:
            return isinstance(value, list) and (config.tag_field is None or value[:1] == [config.tag])
        return isinstance(value, dict) and (config.tag_field is None or value.get(config.tag_field) == config.tag)
    origin = get_origin(tp) or tp
    if origin is dict:
        return isinstance(value, dict)
    return origin in (list, tuple, set, frozenset) and isinstance(value, list)


def _field(tp: Any, value: Any, name: str) -> tuple[Any, Any] | None:
    """(type, value) of the field a struct type ``tp`` sends as ``name``."""
    if not (isinstance(tp, type) and issubclass(tp, msgspec.Struct)):
        return None
    fields = msgspec.structs.fields(tp)
    position = next((i for i, f in enumerate(fields) if f.encode_name == name), -1)
    if position < 0:
        return None
    field = fields[position]
    config = tp.__struct_config__
    if config.array_like:
        position += config.tag_field is not None
        return (field.type, value[position]) if isinstance(value, list) and position < len(value) else None
    return (field.type, value[name]) if isinstance(value, dict) and name in value else None


def _item(tp: Any, value: Any, index: int) -> tuple[Any, Any] | None:
    """(type, value) of item ``index`` of a list, tuple or set type ``tp``."""
    if not isinstance(value, list) or index >= len(value):
        return None
    origin, args = get_origin(tp) or tp, get_args(tp)
    if origin in (list, set, frozenset) or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return (args[0] if args else Any), value[index]
    if origin is tuple and index < len(args):
        return args[index], value[index]
    return None
