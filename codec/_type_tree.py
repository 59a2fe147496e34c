"""Walks over declared types (``msgspec.inspect`` types): the types one level inside one, how deep
a value of one can nest when msgspec can skip nothing in it, and how deep its typed part nests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec.inspect as mi

__all__ = ["children", "closed_depth", "holds_custom", "typed_depth"]


def children(t: Any) -> list[Any]:
    """The field, member, item, key and value types of ``t`` (none for a leaf)."""
    if isinstance(t, mi.StructType):
        return [f.type for f in t.fields]
    if isinstance(t, mi.UnionType):
        return list(t.types)
    if isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return [t.item_type]
    if isinstance(t, mi.TupleType):
        return list(t.item_types)
    if isinstance(t, mi.DictType):
        return [t.key_type, t.value_type]
    return []


def holds_custom(t: Any, seen: set[type] | None = None) -> bool:
    """Whether a value of ``t`` may hold a custom object (a tensor) or an untyped tree (``seen``:
    the structs already looked into, each once)."""
    if seen is None:
        seen = set()
    if isinstance(t, mi.AnyType | mi.CustomType | mi.ExtType):
        return True
    if isinstance(t, mi.StructType):
        if t.cls in seen:
            return False
        seen.add(t.cls)
    return any(holds_custom(c, seen) for c in children(t))


# Leaves msgspec reads from one msgpack value that holds no other (nothing to skip, no level).
_LEAVES = (
    mi.NoneType,
    mi.BoolType,
    mi.IntType,
    mi.FloatType,
    mi.StrType,
    mi.BytesType,
    mi.ByteArrayType,
    mi.EnumType,
    mi.LiteralType,
)


def closed_depth(t: Any, inside: frozenset[type] = frozenset()) -> int | None:
    """The most levels (arrays and maps, a struct's own included) a value of ``t`` is read from,
    where msgspec can skip nothing in it: every struct closed (``forbid_unknown_fields``: an
    unknown field is an error before its value is read), no union of two structs or more (msgspec
    skips other fields to find the tag), no recursive type, only leaves of ``_LEAVES``. Then msgspec
    reads nothing nested deeper, whatever the bytes. None where it may (a value nests without bound)."""
    if isinstance(t, _LEAVES):
        return 0
    if isinstance(t, mi.Metadata):
        return closed_depth(t.type, inside)
    if isinstance(t, mi.StructType):
        if not t.forbid_unknown_fields or t.cls in inside:
            return None
        inside = inside | {t.cls}
    elif isinstance(t, mi.UnionType):
        if sum(isinstance(_unwrapped(member), mi.StructType) for member in t.types) > 1:
            return None
    elif not isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType | mi.TupleType | mi.DictType):
        return None
    return _below(t, inside, closed_depth)


def typed_depth(t: Any, inside: frozenset[type] = frozenset()) -> int | None:
    """The most levels (arrays and maps, a struct's own included) the typed part of a value of ``t``
    nests: an untyped value (a tree), a tensor or an extension adds none (the encoder bounds a
    tree's nesting as it rewrites it). None for a recursive type (a value nests without bound)."""
    if isinstance(t, mi.Metadata):
        return typed_depth(t.type, inside)
    if isinstance(t, mi.StructType):
        if t.cls in inside:
            return None
        inside = inside | {t.cls}
    elif not isinstance(
        t, mi.UnionType | mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType | mi.TupleType | mi.DictType
    ):
        return 0
    return _below(t, inside, typed_depth)


def _below(t: Any, inside: frozenset[type], depth_of: Callable[[Any, frozenset[type]], int | None]) -> int | None:
    """``t``'s own level (none for a union) and the deepest of the types inside it by ``depth_of``;
    None if one of them is None."""
    deepest = 0
    for child in children(t):
        depth = depth_of(child, inside)
        if depth is None:
            return None
        deepest = max(deepest, depth)
    return deepest if isinstance(t, mi.UnionType) else 1 + deepest


def _unwrapped(t: Any) -> Any:
    """``t`` without its ``Annotated`` metadata: a union member ``Annotated[Struct, ...]`` is a struct."""
    while isinstance(t, mi.Metadata):
        t = t.type
    return t
