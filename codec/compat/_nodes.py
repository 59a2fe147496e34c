"""What the compatibility walk asks of IR nodes: allowed dtypes, limits, defaults, what a tree
holds and how two unions' variants pair up (named dims are ``_dims``'s)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Any, TypeAlias

from tensorwire.dtypes import DTYPES
from tensorwire.schema._values import WIRE_INT, value_problem
from tensorwire.schema.ir import (
    ArrayT,
    EnumT,
    Field,
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
)

__all__ = [
    "TREE_SCALARS",
    "alone",
    "device_names",
    "dtype_names",
    "exact_as_float",
    "in_tree",
    "kind_of",
    "limit_changes",
    "never_sent",
    "same_default",
    "sole",
    "sole_held",
    "spans",
    "takes",
    "variant_id",
    "variant_pairs",
    "variant_tag",
]


def dtype_names(node: TensorT) -> tuple[str, ...] | None:
    """The dtypes ``node`` allows, ``None`` for any: a list of every dtype its kind can hold (the
    whole table for a tensor, numpy's part of it for an array) allows what an unset one does."""
    if node.dtypes is None:
        return None
    every = {d.name for d in DTYPES.values() if node.kind == "tensor" or d.numpy_name is not None}
    return None if set(node.dtypes) >= every else node.dtypes


def device_names(node: TensorT) -> frozenset[str]:
    """The devices ``node`` allows: those it lists, else every device its kind lives on (a numpy
    array only on the cpu, so ``["cpu"]`` on one allows what an unset list does)."""
    if node.devices is not None:
        return frozenset(node.devices)
    return frozenset({"cpu"} if node.kind == "ndarray" else {"cpu", "cuda"})


# IR limit -> (its JSON Schema keyword, whether a higher value accepts less)
_LOWER = {"minimum": "minimum", "min_length": "minLength", "min_items": "minItems", "min_properties": "minProperties"}
_UPPER = {"maximum": "maximum", "max_length": "maxLength", "max_items": "maxItems", "max_properties": "maxProperties"}


def limit_changes(a: ScalarT | ArrayT | MapT, b: ScalarT | ArrayT | MapT) -> tuple[list[str], list[str]]:
    """What got tighter and what got looser between the limits of ``a`` and ``b`` (same kind)."""
    tighter: list[str] = []
    looser: list[str] = []
    integers = getattr(a, "kind", None) == getattr(b, "kind", None) == "int"
    for attr, keyword in (*_LOWER.items(), *_UPPER.items()):
        if not hasattr(a, attr):
            continue
        lower = attr in _LOWER
        flag = {"minimum": "exclusive_minimum", "maximum": "exclusive_maximum"}.get(attr, "")
        old, new = _limit(a, attr, flag, integers), _limit(b, attr, flag, integers)
        if old == new:
            continue
        old_text, new_text = _bound_text(keyword, *old), _bound_text(keyword, *new)
        if new[0] is None:
            looser.append(f"{old_text} dropped")
        elif old[0] is None:
            tighter.append(f"{new_text} added")
        else:
            # a bound is tighter when it moves inwards, or stays and becomes exclusive
            inward = new[0] > old[0] if lower else new[0] < old[0]
            (tighter if inward or (new[0] == old[0] and new[1]) else looser).append(f"{old_text} -> {new_text}")
    old_step, new_step = getattr(a, "multiple_of", None), getattr(b, "multiple_of", None)
    if old_step != new_step:
        # an integer is a multiple of 1: a step that divides 1 (0.5, 0.25) holds every integer
        if new_step is None:
            if not (getattr(b, "kind", None) == "int" and old_step is not None and _divides(old_step, 1)):
                looser.append(f"multipleOf {old_step} dropped")
        elif old_step is None:
            if not (getattr(a, "kind", None) == "int" and _divides(new_step, 1)):
                tighter.append(f"multipleOf {new_step} added")
        else:
            change = f"multipleOf {old_step} -> {new_step}"
            # msgspec checks a float step exactly (fmod), so compare the binary values, not the decimals
            ratio = Fraction(new_step) / Fraction(old_step)
            if ratio.denominator == 1:  # every new value is an old one
                tighter.append(change)
            elif ratio.numerator == 1:  # every old value is a new one
                looser.append(change)
            else:
                tighter.append(change)
                looser.append(change)
    return tighter, looser


def _limit(node: ScalarT | ArrayT | MapT, attr: str, flag: str, integers: bool) -> tuple[Any, bool]:
    """``node``'s limit ``attr`` and whether it is exclusive (``flag``). Between two integers
    (``integers``), whose bounds are inclusive, a bound at or past the end of the integers the wire
    carries holds every one of them: ``None``."""
    value = getattr(node, attr)
    if integers and value is not None:
        if (attr == "minimum" and value <= WIRE_INT[0]) or (attr == "maximum" and value >= WIRE_INT[1]):
            return None, False
    return value, getattr(node, flag, False)


def sole(node: ScalarT) -> bool | int | str | None:
    """The one value ``node`` holds, if it holds one alone: its ``const``, or an integer whose
    bounds are that value (``None`` if it holds more, or none)."""
    if node.const is not None:
        return node.const
    if node.kind == "int" and isinstance(node.minimum, int) and node.minimum == node.maximum:
        return node.minimum if _holds(node, node.minimum) else None
    return None


def never_sent(field: Field) -> bool:
    """Whether no writer sends ``field``: an optional one whose type holds one value alone (a
    scalar's ``sole``, an enum's one member), its default: a writer omits a field at its default,
    and refuses to encode any other value."""
    node = field.type
    one = (isinstance(node, ScalarT) and sole(node) is not None) or (isinstance(node, EnumT) and len(node.values) == 1)
    return not field.required and one


def sole_held(writer: ScalarT, reader: ScalarT) -> bool:
    """Whether ``writer`` holds one value alone and ``reader`` accepts it: all ``writer`` sends."""
    value = sole(writer)
    return value is not None and _holds(reader, value)


def _holds(node: ScalarT, value: bool | int | str) -> bool:
    """Whether a decoder of ``node`` accepts ``value``: its step checked on the binary value, as
    the decoder does (``fmod``), not on the decimal text."""
    if value_problem(replace(node, multiple_of=None), value, whole=False) is not None:
        return False
    return node.multiple_of is None or (isinstance(value, int) and _divides(node.multiple_of, value))


def _divides(step: int | float, value: int) -> bool:
    """Whether ``value`` is a multiple of ``step`` as a decoder checks it: on the step's binary
    value (``fmod``), so 0.5 divides 1 and 0.1 does not."""
    return (Fraction(value) / Fraction(step)).denominator == 1


def exact_as_float(node: ScalarT) -> bool:
    """Whether every integer ``node`` accepts decodes as a number unchanged: its const or bounds
    keep it within ±2**53 (2**53 + 1 decodes as 2**53)."""
    limit = 2**53
    if isinstance(node.const, int):
        return abs(node.const) <= limit
    low, high = node.minimum, node.maximum
    return low is not None and high is not None and low >= -limit and high <= limit


TREE_SCALARS = ("bool", "int", "float", "str")  # the scalars a tree holds as they are, at any depth limit


def in_tree(node: Node, tree: TreeT, depth: int = 0) -> bool:
    """Whether ``tree`` holds every value of ``node`` (at ``depth`` containers down), and decodes it
    as the same value: a list (not a set or a tuple, which a tree tells apart), a map, a scalar, a
    member's string, null, and bytes and tensors where the tree is not JSON-only; each list or map
    one level deeper, within its depth limit."""
    node = node.inner if isinstance(node, NullableT) else node
    if isinstance(node, ArrayT | MapT):
        if depth >= tree.max_depth or (isinstance(node, ArrayT) and node.unique):
            return False
        return in_tree(node.items if isinstance(node, ArrayT) else node.values, tree, depth + 1)
    if isinstance(node, ScalarT):
        return node.kind in TREE_SCALARS or not tree.json_only
    if isinstance(node, TensorT):
        return not tree.json_only
    return isinstance(node, EnumT)


def spans(array: ArrayT, items: TupleT) -> bool:
    """Whether ``array`` holds every value of tuple ``items``: a list of its items, of its length."""
    n = len(items.items)
    return (
        not array.unique
        and all(item == array.items for item in items.items)
        and (array.min_items or 0) <= n <= (n if array.max_items is None else array.max_items)
    )


def takes(string: ScalarT, enum: EnumT) -> bool:
    """Whether ``string`` accepts every member of ``enum`` (a member travels as its string)."""
    return string.kind == "str" and all(value_problem(string, v, whole=False) is None for v in enum.values)


def same_default(a: Field, b: Field) -> bool:
    """Whether two fields' defaults are one value: an integer's and a number's by value (``1`` is
    ``1.0``, ``2**53 + 1`` is not ``2**53``), others as JSON text: ``1``, ``1.0`` and ``true`` are
    equal in Python (so a writer omits one where its default is another) but not to an ``x-tree``
    reader."""
    if _numeric(a) and _numeric(b):
        return bool(a.default == b.default)
    return json.dumps(a.default, sort_keys=True) == json.dumps(b.default, sort_keys=True)


def _numeric(field: Field) -> bool:
    node = field.type.inner if isinstance(field.type, NullableT) else field.type
    return isinstance(node, ScalarT) and node.kind in ("int", "float")


def _bound_text(keyword: str, value: Any, exclusive: bool) -> str:
    if exclusive:
        keyword = "exclusive" + keyword[0].upper() + keyword[1:]
    return f"{keyword} {value}"


def kind_of(node: Node) -> str:
    if isinstance(node, ScalarT):
        return node.kind
    if isinstance(node, MessageRefT):
        return f"{node.target.type_id} v{node.target.version}"
    return type(node).__name__.removesuffix("T").lower()


def variant_id(node: StructT | MessageRefT) -> str:
    struct = node.target if isinstance(node, MessageRefT) else node
    return f"{struct.type_id} v{struct.version}" if struct.type_id else f"{struct.namespace}.{struct.name}"


_Variant: TypeAlias = StructT | MessageRefT


def variant_pairs(a: UnionT, b: UnionT) -> tuple[list[tuple[_Variant, _Variant]], list[_Variant], list[_Variant]]:
    """The variants of ``a`` and ``b`` that are one variant on the wire (old, new; in ``b``'s
    order), those of ``b`` alone and those of ``a`` alone. The wire names a variant declared in
    place by its tag alone, so two such variants of one tag are one whatever their names (a tag
    the old union gave another variant included); the others are paired by name (their tag
    changed), a message type by its id."""
    old, new = list(a.variants), list(b.variants)
    pairs: list[tuple[_Variant, _Variant]] = []

    def pair(same: Callable[[_Variant, _Variant], bool]) -> None:
        for vb in list(new):
            va = next((v for v in old if same(v, vb)), None)
            if va is not None:
                pairs.append((va, vb))
                old.remove(va)
                new.remove(vb)

    if a.tag_field == b.tag_field:
        pair(lambda va, vb: isinstance(va, StructT) and isinstance(vb, StructT) and va.tag == vb.tag)
    pair(lambda va, vb: type(va) is type(vb) and variant_id(va) == variant_id(vb))
    order = {id(v): i for i, v in enumerate(b.variants)}
    pairs.sort(key=lambda p: order[id(p[1])])
    return pairs, new, old


def alone(node: Node, union: UnionT) -> UnionT | None:
    """``node`` as a union of itself alone beside ``union``: a struct or a message whose tag is in
    ``union``'s discriminator travels as that variant would (else ``None``)."""
    if not isinstance(node, StructT | MessageRefT):
        return None
    struct = node.target if isinstance(node, MessageRefT) else node
    return UnionT(union.tag_field, (node,)) if struct.tag_field == union.tag_field else None


def variant_tag(node: StructT | MessageRefT) -> str | None:
    struct = node.target if isinstance(node, MessageRefT) else node
    return struct.tag
