"""The rewrite of a message before it is encoded: tuples inside trees wrapped, sets sorted.

msgpack has no tuple, so a tuple inside an ``x-tree`` value becomes a ``TupleMarker`` (written as
ext(2, list)), and sets are written in sorted order so that equal messages give equal bytes; both
on shallow copies: the caller's object is never touched. ``preparer(cls)`` gives the rewrite for
messages of ``cls`` (None if they hold no tree or set), each field's rewriter built once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from typing import Any

import msgspec
import msgspec.inspect as mi

from tensorwire._compile import build, read_field
from tensorwire._encode_errors import Rejected, located
from tensorwire._leaf_types import LEAF_TYPES, LEAVES_ONLY, PLAIN_LEAVES, TREE_LEAVES
from tensorwire._locate import set_order
from tensorwire._type_tree import holds_custom
from tensorwire.errors import EncodeError

__all__ = ["AS_IS", "TupleMarker", "plain_tree", "plain_trees", "prepare", "preparer"]


class TupleMarker:
    """A tuple inside a tree, on its way to the wire."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items


def preparer(cls: type) -> Callable[[Any, int], Any] | None:
    """``prepare`` for messages of ``cls``; None if they hold no tree or set (nothing to rewrite).

    When every field it may rewrite is a tree, a map of trees, a list of trees or an optional
    struct, the function first checks whether each holds a leaf, a flat list or a flat map of
    leaves (at C speed per field), lists and maps of those, or None: then there is nothing to
    rewrite and the message is returned as it is.
    """
    plan = _plan(cls)
    if not plan:
        return None
    kinds = {f.name: _flat_kind(f.type) for f in mi.type_info(cls).fields}  # type: ignore[attr-defined]
    fields = tuple((name, kinds[name]) for name, _ in plan)
    if any(kind is None for _, kind in fields):
        return prepare
    return _quick_preparer(fields)


# What a field of each kind may hold for ``prepare`` to have nothing to rewrite in it (``v``: its value,
# one level below the message). An empty list or map is let through before ``LEAVES_ONLY``, which
# first makes a set of what it is given; a nested one is looked through by ``plain_tree``.
_NOTHING_TO_REWRITE = {
    "tree": "v is None or type(v) in LEAF_TYPES or (type(v) is list and (not v or LEAVES_ONLY(map(type, v))))"
    " or (type(v) is dict and (not v or LEAVES_ONLY(map(type, v.values())))) or plain_tree(v, 1, max_depth)",
    "map": "v is None or (type(v) is dict and (not v or LEAVES_ONLY(map(type, v.values()))"
    " or plain_tree(v, 1, max_depth)))",
    "list": "v is None or (type(v) is list and (not v or LEAVES_ONLY(map(type, v)) or plain_tree(v, 1, max_depth)))",
    "optional": "v is None",
}


def _tree_walk(leaves: frozenset[type]) -> Callable[[Any, int, int], bool]:
    """The walk that says whether a tree, ``depth`` levels below the message, holds only lists and
    maps (of exactly those types) of leaves of ``leaves`` and of such lists and maps, none deeper
    than ``max_depth``. False for anything else (a tuple, a set, a subclass, another value, one
    nested too deep), which the full ``prepare`` then rewrites or names."""
    only = leaves.issuperset

    def walk(value: Any, depth: int, max_depth: int) -> bool:
        if type(value) in leaves:
            return True
        if depth > max_depth:
            return False
        if type(value) is list:
            items: Any = value
        elif type(value) is dict:
            items = value.values()
        else:
            return False
        if only(map(type, items)):
            return True
        depth += 1
        for item in items:
            if type(item) not in leaves and not walk(item, depth, max_depth):
                return False
        return True

    return walk


plain_tree = _tree_walk(LEAF_TYPES)
"""Whether a tree has nothing ``prepare`` would rewrite or refuse (see ``_tree_walk``)."""
_written_as_is = _tree_walk(PLAIN_LEAVES)  # and holds no tensor or array either


def _quick_preparer(fields: tuple[tuple[str, str | None], ...]) -> Callable[[Any, int], Any]:
    """``prepare`` that first checks, in one straight-line function (``tensorwire._compile``),
    whether each field holds None, a leaf, a list or a map of leaves (as its kind allows; an
    optional struct: None only), or lists and maps of those (``plain_tree``): then the message is
    returned as it is."""
    bound: dict[str, Any] = {
        "LEAF_TYPES": LEAF_TYPES,
        "LEAVES_ONLY": LEAVES_ONLY,
        "plain_tree": plain_tree,
        "prepare": prepare,
    }
    lines = ["def quick(message, max_depth):", "    if max_depth < 2:", "        return prepare(message, max_depth)"]
    # past the check above, a flat container (two levels down) cannot be in the way of the limit
    for i, (name, kind) in enumerate(fields):
        assert kind is not None
        lines.append(f"    v = {read_field('message', name, f'N{i}', bound)}")
        lines.append(f"    if not ({_NOTHING_TO_REWRITE[kind]}):")
        lines.append("        return prepare(message, max_depth)")
    lines.append("    return message")
    return build(lines, bound, "quick")


# The check of a non-empty list or map ``v`` one level below the message (``{items}``: its items),
# indented for a field's block of ``plain_trees``'s function: leaves that no extension writes
# (``PLAIN_LEAVES``) or lists and maps of them within the limit leave the message as it is; leaves
# of any tree (a tensor or an array right there), or lists and maps of them, leave it to the hooked
# encode; anything else is for the full ``prepare`` to rewrite or name.
_CONTAINER = """\
types = set(map(type, {items}))
if not PLAIN_SET(types):
    if LEAF_SET(types):
        plain = False
    elif not written_as_is(v, 1, max_depth):
        plain = False
        if not plain_tree(v, 1, max_depth):
            return prepare(message, max_depth)"""


def _field_block(kind: str, rewritable: bool, structs: str) -> list[str]:
    """The lines of ``plain_trees``'s function that check one field's value ``v`` of ``kind``
    (``structs``: for an optional struct, the name of the map from each struct type it may hold to
    that type's own check, one level down)."""
    if kind == "optional":
        rewrite = ["        return prepare(message, max_depth)"] if rewritable else []
        return [
            "if v is not None:",
            f"    inner = {structs}.get(type(v))",
            "    if inner is None or inner(v, max_depth - 1) is not AS_IS:",
            "        plain = False",
            *rewrite,
        ]
    if kind == "tree":
        both = _CONTAINER.format(items="(v.values() if type(v) is dict else v)").splitlines()
        return [
            "if type(v) not in PLAIN_LEAVES:",
            "    if type(v) is list or type(v) is dict:",
            "        if v:",
            *(" " * 12 + line for line in both),
            "    else:",
            "        plain = False",
            "        if type(v) not in LEAF_TYPES:",
            "            return prepare(message, max_depth)",
        ]
    container, items = ("dict", "v.values()") if kind == "map" else ("list", "v")
    return [
        "if v is not None:",
        f"    if type(v) is not {container}:",
        "        return prepare(message, max_depth)",
        "    if v:",
        *(" " * 8 + line for line in _CONTAINER.format(items=items).splitlines()),
    ]


AS_IS = object()
"""What ``plain_trees``'s function gives for a message a plain msgpack encode writes as it is."""


def plain_trees(
    cls: type, inside: frozenset[type] = frozenset(), rewrite: bool = True
) -> Callable[[Any, int], Any] | None:
    """For a class whose values may hold a tensor, an array or something to rewrite only inside
    trees (fields of ``Any``, or a map or a list of ``Any``) or optional structs: ``prepare`` for
    it that first says whether a message needs none of the encoder's hooks. It gives ``AS_IS``
    where the message holds, in those fields, only lists and maps of leaves that no extension
    writes (``PLAIN_LEAVES``, nested within the limit), and in its optional struct fields None or
    a struct (of exactly a type the field names) of which the same holds, one level down (an
    ``rpc.Result`` with an ``rpc.Value`` payload): a plain msgpack encode then writes it as the
    hooked one would. Else it gives what ``prepare`` gives (the message itself where nothing is
    rewritten: a leaf, list or map of tree leaves, as ``preparer``'s function checks). None for
    any other class (one with no such field included). ``inside``: the classes whose check is
    being made around this one (a struct of one of them, inside itself, is never written as it is);
    ``rewrite`` False: the check of a struct inside another, which gives None where ``prepare``
    has something to rewrite or refuse (the outer message's ``prepare`` does it, with its paths)."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    fields: list[tuple[str, Any, str, bool]] = []
    for field in info.fields:
        rewritable = _rewritable(field.type, frozenset({cls}))
        if not holds_custom(field.type) and not rewritable:
            continue  # written as it is, whatever it holds
        kind = _flat_kind(field.type)
        if kind is None:
            return None
        fields.append((field.name, field.type, kind, rewritable))
    if not fields:
        return None
    rewrites = any(rewritable for _, _, _, rewritable in fields)
    bound: dict[str, Any] = {
        "AS_IS": AS_IS,
        "LEAF_SET": LEAF_TYPES.issuperset,
        "LEAF_TYPES": LEAF_TYPES,
        "PLAIN_LEAVES": PLAIN_LEAVES,
        "PLAIN_SET": PLAIN_LEAVES.issuperset,
        "plain_tree": plain_tree,
        "prepare": prepare,
        "written_as_is": _written_as_is,
    }
    lines = [
        "def trees(message, max_depth):",
        "    if max_depth < 2:",
        f"        return {'prepare(message, max_depth)' if rewrites else 'message'}",
        "    plain = True",
    ]
    # past the check above, no flat container is too deep
    for i, (name, union, kind, rewritable) in enumerate(fields):
        if kind == "optional":
            bound[f"S{i}"] = _struct_checks(union, inside | {cls})
        lines.append(f"    v = {read_field('message', name, f'N{i}', bound)}")
        lines.extend("    " + line for line in _field_block(kind, rewritable, f"S{i}"))
    lines.append("    return AS_IS if plain else message")
    if not rewrite:
        lines = [line.replace("prepare(message, max_depth)", "None") for line in lines]
    return build(lines, bound, "trees")


def _struct_checks(union: Any, inside: frozenset[type]) -> dict[type, Callable[[Any, int], Any]]:
    """For an optional struct field of type ``union``: each struct type it may hold whose messages
    may be written as they are, to its check (``plain_trees``'s function; one that holds no tensor
    and nothing to rewrite: always ``AS_IS``). A type with a tensor field, or one of ``inside``, has none."""
    checks: dict[type, Callable[[Any, int], Any]] = {}
    for member in union.types:
        if not isinstance(member, mi.StructType) or member.cls in inside:
            continue
        if not holds_custom(member) and not _rewritable(member, frozenset()):
            checks[member.cls] = _always_as_is
            continue
        check = plain_trees(member.cls, inside, rewrite=False)
        if check is not None:
            checks[member.cls] = check
    return checks


def _always_as_is(message: Any, max_depth: int) -> Any:
    return AS_IS


def _flat_kind(t: Any) -> str | None:
    """``"tree"``, ``"map"`` (of trees), ``"list"`` (of trees) or ``"optional"`` (structs or None) for
    a field type of that shape."""
    if isinstance(t, mi.UnionType) and all(isinstance(u, mi.StructType | mi.NoneType) for u in t.types):
        return "optional" if any(isinstance(u, mi.NoneType) for u in t.types) else None
    if isinstance(t, mi.AnyType):
        return "tree"
    if isinstance(t, mi.DictType) and isinstance(t.value_type, mi.AnyType):
        return "map"
    if isinstance(t, mi.ListType) and isinstance(t.item_type, mi.AnyType):
        return "list"
    return None


def prepare(message: Any, max_depth: int) -> Any:
    """``message`` with tree tuples wrapped and sets sorted, copying only the structs and containers
    on the way. A value a tree may not hold, or one nested deeper than ``max_depth``, is an
    ``EncodeError`` with its path."""
    try:
        return _struct(message, 0, max_depth)
    except Rejected as exc:
        raise located(message, exc, max_depth) from exc.__cause__


def _too_deep(value: Any, max_depth: int) -> Rejected:
    return Rejected(EncodeError(f"nesting deeper than the limit of {max_depth}"), value)


# What the rewriters go into: each is a level of the body (an array, a map or a tuple's ext). Any
# other value (a scalar, a tensor) is none, and passes at any depth, as a decoder counts it.
_NESTS = (dict, list, tuple, set, frozenset, msgspec.Struct)


Rewrite = Callable[[Any, int, int], Any]  # (value, depth, max_depth) -> value, or a rewritten copy


@cache
def _plan(cls: type) -> tuple[tuple[str, Rewrite], ...]:
    """Fields of ``cls`` whose values ``prepare`` may rewrite, each with its rewriter."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    seen = frozenset({cls})
    return tuple((f.name, _rewriter(f.type)) for f in info.fields if _rewritable(f.type, seen))


def _rewritable(t: Any, seen: frozenset[type]) -> bool:
    """Whether values of ``t`` may hold a tree or a set (both are rewritten before encoding)."""
    if isinstance(t, mi.AnyType | mi.SetType | mi.FrozenSetType):
        return True
    if isinstance(t, mi.StructType):
        return t.cls not in seen and any(_rewritable(f.type, seen | {t.cls}) for f in t.fields)
    if isinstance(t, mi.UnionType):
        return any(_rewritable(u, seen) for u in t.types)
    if isinstance(t, mi.ListType | mi.VarTupleType):
        return _rewritable(t.item_type, seen)
    if isinstance(t, mi.TupleType):
        return any(_rewritable(u, seen) for u in t.item_types)
    if isinstance(t, mi.DictType):
        return _rewritable(t.value_type, seen)
    return False


def _struct(obj: Any, depth: int, max_depth: int) -> Any:
    plan = _plan(type(obj))  # type: ignore[arg-type]
    if not plan:
        return obj
    depth += 1
    changes = None
    for name, rewrite in plan:
        old = getattr(obj, name)
        if old is None:
            continue
        if depth > max_depth and isinstance(old, _NESTS):
            raise _too_deep(old, max_depth)
        try:
            new = rewrite(old, depth, max_depth)
        except (Rejected, MemoryError):
            raise
        except Exception as exc:  # the caller's code (a container's ``__getitem__``, ``items``) raised
            raise Rejected(EncodeError(f"reading the value raised {type(exc).__name__}: {exc}"), old) from exc
        if new is not old:
            if changes is None:
                changes = {}
            changes[name] = new
    if changes is None:
        return obj
    clone = copy.copy(obj)
    for name, value in changes.items():
        msgspec.structs.force_setattr(clone, name, value)
    return clone


def _rewriter(t: Any) -> Rewrite:
    """The function that rewrites a value of declared type ``t`` (built once per field).

    Each rewriter takes a non-None value at ``depth`` (its caller checked the depth limit);
    anything that does not have the declared shape is left as it is (the schema check reports it).
    """
    if isinstance(t, mi.AnyType):
        return _tree
    if isinstance(t, mi.StructType):
        cls = t.cls
        return lambda value, depth, max_depth: _struct(value, depth, max_depth) if isinstance(value, cls) else value
    if isinstance(t, mi.UnionType):
        return _union_rewriter(t)
    if isinstance(t, mi.SetType | mi.FrozenSetType):
        return lambda value, depth, max_depth: set_order(value) if isinstance(value, set | frozenset) else value
    if isinstance(t, mi.DictType):
        return _dict_rewriter(_rewriter(t.value_type))
    if isinstance(t, mi.ListType | mi.VarTupleType):
        return _sequence_rewriter(_rewriter(t.item_type))
    if isinstance(t, mi.TupleType):
        return _tuple_rewriter(tuple(_rewriter(u) for u in t.item_types))
    return _same


def _same(value: Any, depth: int, max_depth: int) -> Any:
    return value


def _checked(rewrite: Rewrite) -> Rewrite:
    """``rewrite`` for an item one level down: None passes, the depth limit is enforced."""

    def item(value: Any, depth: int, max_depth: int) -> Any:
        if value is None:
            return None
        if depth > max_depth and isinstance(value, _NESTS):
            raise _too_deep(value, max_depth)
        return rewrite(value, depth, max_depth)

    return item


def _union_rewriter(t: Any) -> Rewrite:
    structs = tuple(option.cls for option in t.types if isinstance(option, mi.StructType))
    has_tree = any(isinstance(option, mi.AnyType) for option in t.types)

    def union(value: Any, depth: int, max_depth: int) -> Any:
        if structs and isinstance(value, structs):
            return _struct(value, depth, max_depth)
        if has_tree:
            return _tree(value, depth, max_depth)
        return value

    return union


def _dict_rewriter(inner: Rewrite) -> Rewrite:
    item = _checked(inner)
    trees = inner is _tree

    def rewrite(value: Any, depth: int, max_depth: int) -> Any:
        if not isinstance(value, dict):
            return value
        if trees and depth < max_depth and LEAVES_ONLY(map(type, value.values())):
            return value  # leaves only: nothing to rewrite
        items = {k: item(v, depth + 1, max_depth) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value

    return rewrite


def _sequence_rewriter(inner: Rewrite) -> Rewrite:
    item = _checked(inner)
    trees = inner is _tree

    def rewrite(value: Any, depth: int, max_depth: int) -> Any:
        if not isinstance(value, list | tuple):
            return value
        if trees and depth < max_depth and LEAVES_ONLY(map(type, value)):
            return value
        seq = [item(v, depth + 1, max_depth) for v in value]
        return type(value)(seq) if any(a is not b for a, b in zip(seq, value, strict=True)) else value

    return rewrite


def _tuple_rewriter(inners: tuple[Rewrite, ...]) -> Rewrite:
    items = tuple(_checked(inner) for inner in inners)

    def rewrite(value: Any, depth: int, max_depth: int) -> Any:
        if not isinstance(value, tuple) or len(value) != len(items):
            return value
        seq = [item(v, depth + 1, max_depth) for v, item in zip(value, items, strict=True)]
        return tuple(seq) if any(a is not b for a, b in zip(seq, value, strict=True)) else value

    return rewrite


def _tree(value: Any, depth: int, max_depth: int) -> Any:
    if type(value) in LEAF_TYPES:
        return value
    if depth > max_depth:
        raise _too_deep(value, max_depth)
    if isinstance(value, tuple):
        return TupleMarker([_tree(v, depth + 1, max_depth) for v in value])
    if isinstance(value, list):
        if LEAVES_ONLY(map(type, value)):
            return value  # the common leaf list, checked at C speed
        seq = [_tree(v, depth + 1, max_depth) for v in value]
        return seq if any(a is not b for a, b in zip(seq, value, strict=True)) else value
    if isinstance(value, dict):
        if LEAVES_ONLY(map(type, value.values())):
            return value
        items = {k: _tree(v, depth + 1, max_depth) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    if not isinstance(value, TREE_LEAVES):
        raise Rejected(EncodeError(f"{type(value).__name__} is not allowed in a tree"), value)
    return value
