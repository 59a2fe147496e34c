"""Where in a message a value is: the first value a predicate accepts, and its path (e.g. ``$.kwargs.x[2]``).

Paths are written as the rest of tensorwire writes them: ``$`` is the message, ``.name`` a struct
field (its wire name), ``[i]`` an item of a list, tuple or set (a set in the sorted order it is
sent in), ``.key`` the value of a dict entry whose key is an identifier, ``["key"]`` one whose key
is another string and ``[key]`` (its repr) one whose key is not a string. A key is reported at
the path of its entry. Only error paths use this (a message that fails to encode); the walk is
iterative, never enters a container twice, and stops at the message's depth limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

__all__ = ["key_segment", "locate"]

_UNSET = object()
_Children = Iterator[tuple[str, Any]]
_Where = tuple[Any, str] | None  # a path as links (parent, segment), joined only for a match: None is ``$``


def locate(message: Any, match: Callable[[Any], bool], max_depth: int) -> tuple[str, Any] | None:
    """``(path, value)`` of the first value in ``message`` (depth first, in the order it is encoded)
    that ``match`` accepts, looking no deeper than ``max_depth`` containers below the message; None
    if there is none."""
    if match(message):
        return "$", message
    children = _children(message)
    if children is None:
        return None
    stack: list[tuple[_Children, _Where, int]] = [(children, None, 0)]
    seen = {id(message)}
    while stack:
        items, where, depth = stack[-1]
        for segment, value in items:  # one child per turn of the outer loop
            if match(value):
                return _path((where, segment)), value
            if depth < max_depth and id(value) not in seen:
                inner = _children(value)
                if inner is not None:
                    seen.add(id(value))
                    stack.append((inner, (where, segment), depth + 1))
            break
        else:
            stack.pop()
    return None


def _path(where: _Where) -> str:
    """The path a chain of ``(parent, segment)`` links ends at."""
    segments = []
    while where is not None:
        where, segment = where
        segments.append(segment)
    return "$" + "".join(reversed(segments))


def key_segment(key: Any) -> str:
    """The path segment of the entry of a dict at ``key``: ``.key``, ``["key"]`` or ``[key]``."""
    if isinstance(key, str):
        text = str.__str__(key)  # the plain value, for a str enum member too
        return f".{text}" if text.isidentifier() else f"[{json.dumps(text)}]"
    text = repr(key)
    return f"[{text if len(text) <= 64 else text[:61] + '...'}]"


def _children(value: Any) -> _Children | None:
    """``(segment, child)`` for each child of a container or struct, in encoding order; None for a leaf."""
    if isinstance(value, msgspec.Struct):
        return _fields(value)
    if isinstance(value, list | tuple):
        return ((f"[{i}]", item) for i, item in enumerate(value))
    if isinstance(value, dict):
        return _entries(value)
    if isinstance(value, set | frozenset):
        return ((f"[{i}]", item) for i, item in enumerate(_sorted(value)))
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
        segment = key_segment(key)
        yield segment, key
        yield segment, item


def _sorted(values: set[Any] | frozenset[Any]) -> list[Any]:
    """A set's items in the order the body encoder sends them."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=repr)
