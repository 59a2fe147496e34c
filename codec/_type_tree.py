"""The types one level inside a ``msgspec.inspect`` type: what walks over declared types recurse into."""

from __future__ import annotations

from typing import Any

import msgspec.inspect as mi

__all__ = ["children"]


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
