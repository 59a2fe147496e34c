"""What both back-ends derive from the IR the same way: run-time rules and Python default values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorwire.rules import (
    Check,
    CountCheck,
    EachCheck,
    GroupRule,
    StructRules,
    TensorCheck,
    TreeCheck,
    TupleCheck,
    TypeInfo,
)
from tensorwire.schema import SchemaSet
from tensorwire.schema.ir import (
    ArrayT,
    EnumT,
    MapT,
    MessageRefT,
    Node,
    NullableT,
    ScalarT,
    StructT,
    TensorT,
    TreeT,
    TupleT,
    UnionT,
    member_name,
    unhandled,
)

__all__ = [
    "check_for",
    "default_value",
    "made_per_instance",
    "member_name",
    "meta_of",
    "rules_for",
    "type_info",
    "untracked",
]


def type_info(schemas: SchemaSet, struct: StructT) -> TypeInfo | None:
    """Identity of a message type; None for nested structs."""
    if struct.type_id is None or struct.version is None:
        return None
    return TypeInfo(struct.type_id, struct.version, schemas.message(struct.type_id, struct.version).fingerprint)


def meta_of(node: ScalarT | ArrayT | MapT) -> dict[str, Any]:
    """The ``msgspec.Meta`` arguments that say ``node``'s limits (empty: none), so msgspec checks
    them in C on decode and in the encoder's check."""
    pairs: tuple[tuple[str, int | float | str | None], ...]
    match node:
        case ScalarT():
            wire = node.kind == "int"  # an integer bound past what msgpack carries checks nothing
            pairs = (
                ("gt" if node.exclusive_minimum else "ge", _unless(node.minimum, wire and _below(node.minimum))),
                ("lt" if node.exclusive_maximum else "le", _unless(node.maximum, wire and _above(node.maximum))),
                ("multiple_of", node.multiple_of),
                ("min_length", node.min_length),
                ("max_length", node.max_length),
                ("pattern", node.pattern),
            )
        case ArrayT():
            pairs = (("min_length", node.min_items), ("max_length", node.max_items))
        case MapT():
            pairs = (("min_length", node.min_properties), ("max_length", node.max_properties))
    return {key: value for key, value in pairs if value is not None}


_WIRE_MIN, _WIRE_MAX = -(2**63), 2**64 - 1  # the integers msgpack carries


def _below(bound: int | float | None) -> bool:
    return bound is not None and bound <= _WIRE_MIN


def _above(bound: int | float | None) -> bool:
    return bound is not None and bound >= _WIRE_MAX


def _unless(bound: int | float | None, needless: bool) -> int | float | None:
    return None if needless else bound


def check_for(node: Node) -> Check | None:
    """The run-time check a field's value needs (tensors and trees, through containers); None if none."""
    match node:
        case TensorT():
            return TensorCheck(node.kind, node.dtypes, node.shape, node.devices, node.contiguous)
        case TreeT():
            return TreeCheck(node.max_depth, node.json_only)
        case NullableT():
            inner = check_for(node.inner)
            return None if inner is None else EachCheck("nullable", inner)
        case ArrayT():
            inner = check_for(node.items)
            each = None if inner is None else EachCheck("array", inner)
            return _counted(node.min_items if node.unique else None, each)
        case MapT():
            inner = check_for(node.values)
            return _counted(node.min_properties, None if inner is None else EachCheck("map", inner))
        case TupleT():
            items = tuple(check_for(item) for item in node.items)
            return TupleCheck(items) if any(items) else None
        case ScalarT() | EnumT() | StructT() | MessageRefT() | UnionT():
            return None  # scalars and enums are checked by msgspec; structs check themselves
        case _:
            unhandled(node)


def _counted(minimum: int | None, each: Check | None) -> Check | None:
    """``each``, behind a ``CountCheck`` where a set or map must hold at least 2 (msgspec's
    ``min_length`` counts the wire's items, and two equal ones make one)."""
    return each if minimum is None or minimum < 2 else CountCheck(minimum, each)


def rules_for(struct: StructT) -> StructRules | None:
    """The rules the class of ``struct`` runs as its ``__post_init__``; None when there is nothing to check."""
    fields = tuple((f.name, check) for f in struct.fields if (check := check_for(f.type)) is not None)
    groups = tuple(GroupRule(c.rule, c.fields) for c in struct.constraints)
    if not (fields or groups or struct.validators):
        return None
    name = struct.type_id or f"{struct.namespace}.{struct.name}"
    return StructRules(name, fields, groups, tuple(struct.validators))


def default_value(node: Node, value: Any, enum_member: Callable[[EnumT, str], Any]) -> Any:
    """The Python value of a JSON default for ``node`` (tuples, frozensets and enum members restored)."""
    if value is None:
        return None
    match node:
        case NullableT():
            return default_value(node.inner, value, enum_member)
        case EnumT():
            return enum_member(node, value)
        case ScalarT():
            if node.kind == "bytes":
                return b""
            return float(value) if node.kind == "float" else value
        case ArrayT():
            items = [default_value(node.items, v, enum_member) for v in value]
            return frozenset(items) if node.unique else items
        case TupleT():
            return tuple(default_value(t, v, enum_member) for t, v in zip(node.items, value, strict=True))
        case MapT():
            return {k: default_value(node.values, v, enum_member) for k, v in value.items()}
        case TreeT():
            return value
        case TensorT() | StructT() | MessageRefT() | UnionT():
            raise AssertionError(f"no default for {node!r}")  # the builder only lets null through here
        case _:
            unhandled(node)


def made_per_instance(value: Any) -> bool:
    """Whether a field's default (``default_value``) must be made afresh for each instance: a list
    or a map that is not empty (msgspec copies an empty one itself), or a tuple holding a list or a
    map at any depth (which msgspec would share between instances, so that changing one instance's
    would change every later instance's default)."""
    if isinstance(value, list | dict):
        return bool(value)
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list | dict):
            return True
        if isinstance(item, tuple):
            pending.extend(item)
    return False


def untracked(struct: StructT) -> bool:
    """Whether instances of ``struct`` can stay out of the garbage collector (msgspec's ``gc=False``,
    cheaper to build and decode): every field holds a scalar, an enum member or None, none of which
    can refer back to the instance, so it can never be part of a reference cycle."""
    return all(_leaf(f.type) for f in struct.fields)


def _leaf(node: Node) -> bool:
    match node:
        case ScalarT() | EnumT():
            return True
        case NullableT():
            return _leaf(node.inner)
        case _:
            return False
