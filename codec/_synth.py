"""A deterministic value of every message type of a schema directory, built from its IR.

``minimal(message, cls)`` fills every required field of message type ``cls`` with its smallest
valid value and leaves the optional fields at their defaults: a scalar its ``const``, else the
valid value nearest to zero (``False``; ``0`` moved into the bounds and onto ``multipleOf``; the
shortest run of ``a``, ``A``, ``0`` or ``_`` long enough and matching any ``pattern``), an enum
its first value, arrays and maps with their fewest items (``minItems``, ``minProperties``), tuples
item by item, a nullable field ``None``, a tensor zeros of its first allowed dtype (fixed dims as
given, named and free dims 1; 1-D when the shape is free; on the cpu), a tree ``{}``, a union its
first variant, a struct or message recursively. An ``exactly_one_of`` group none of whose fields
is set gets its first field filled. ``minimal_cases`` gives them as ``tensorwire golden record``
cases (``minimal``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import msgspec.inspect as mi
import numpy as np
import torch

from tensorwire.dtypes import DTYPES
from tensorwire.registry import Registry
from tensorwire.schema import Message, SchemaSet
from tensorwire.schema._values import value_problem
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
    unhandled,
)

__all__ = ["CASE", "MAX_SIZE", "minimal", "minimal_cases"]

CASE = "minimal"
MAX_SIZE = 1 << 16  # items, entries, characters or tensor elements a minimal value may need: a fixture, not a load


def _bounded(size: int, what: str) -> int:
    """``size``, if a fixture may hold that many ``what``; else a ``ValueError``."""
    if size > MAX_SIZE:
        raise ValueError(f"the smallest valid value needs {size} {what}, over the {MAX_SIZE} a fixture may hold")
    return size


def minimal_cases(schemas: SchemaSet, registry: Registry) -> dict[str, list[tuple[str, Callable[[], Any]]]]:
    """One ``minimal`` case per message type version of ``schemas`` (classes from ``registry``).

    Every value is built here, so that a type no value can be synthesized for (a named validator
    that rejects it, a tensor that may not live on the cpu) is a ``ValueError`` naming it.
    """
    out: dict[str, list[tuple[str, Callable[[], Any]]]] = {}
    for message in schemas.messages:
        value = minimal(message, registry.type(message.type_id, message.version))
        out.setdefault(message.type_id, []).append((CASE, _const(value)))
    return out


def minimal(message: Message, cls: type[Any]) -> Any:
    """The minimal value of ``message`` as an instance of its class ``cls``."""
    try:
        return _struct(message.struct, _info(cls))
    except (ValueError, TypeError) as exc:  # a ValidationError (msgspec's or ours) is a ValueError
        raise ValueError(
            f"cannot synthesize a minimal {message.type_id} v{message.version} ({message.path}): {exc}; "
            "record its fixtures from cases of your own (tensorwire.golden.record)"
        ) from None


def _const(value: Any) -> Callable[[], Any]:
    def build() -> Any:
        return value

    return build


def _info(cls: type[Any]) -> mi.StructType:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType), cls
    return info


def _struct(struct: StructT, info: mi.StructType) -> Any:
    by_name = {f.name: f for f in info.fields}
    values: dict[str, Any] = {}
    for field in struct.fields:
        if field.required:
            values[field.name] = _value(field.type, by_name[field.name].type)
    for constraint in struct.constraints:
        if constraint.rule != "exactly_one_of":
            continue
        fields = {f.name: f for f in struct.fields}
        present = [n for n in constraint.fields if (values[n] if n in values else fields[n].default) is not None]
        if not present:
            first = constraint.fields[0]
            values[first] = _value(fields[first].type, by_name[first].type, present=True)
    return info.cls(**values)


def _value(node: Node, info: mi.Type, *, present: bool = False) -> Any:
    """The minimal value of ``node`` (``info``: its class's type); never ``None`` with ``present``."""
    match node:
        case NullableT():
            if not present:
                return None
            assert isinstance(info, mi.UnionType)
            return _value(node.inner, next(t for t in info.types if not isinstance(t, mi.NoneType)))
        case ScalarT():
            return _scalar(node)
        case EnumT():
            assert isinstance(info, mi.EnumType)
            return info.cls(node.values[0])
        case ArrayT():
            count = _bounded(node.min_items or 0, "items")
            if node.unique:
                if count > 1:
                    raise ValueError(f"a set of at least {count} distinct items is not synthesized")
                assert isinstance(info, mi.FrozenSetType)
                return frozenset(_value(node.items, info.item_type) for _ in range(count))
            assert isinstance(info, mi.ListType)
            return [_value(node.items, info.item_type) for _ in range(count)]
        case TupleT():
            assert isinstance(info, mi.TupleType)
            return tuple(_value(item, t) for item, t in zip(node.items, info.item_types, strict=True))
        case MapT():
            assert isinstance(info, mi.DictType)
            count = _bounded(node.min_properties or 0, "entries")
            return {f"k{i}": _value(node.values, info.value_type) for i in range(count)}
        case TensorT():
            return _tensor(node)
        case TreeT():
            return {}
        case MessageRefT():
            assert isinstance(info, mi.StructType)
            return _struct(node.target, info)
        case StructT():
            assert isinstance(info, mi.StructType)
            return _struct(node, info)
        case UnionT():
            variant = node.variants[0]
            target = variant.target if isinstance(variant, MessageRefT) else variant
            assert isinstance(info, mi.UnionType)
            match = next(t for t in info.types if isinstance(t, mi.StructType) and t.tag == target.tag)
            return _struct(target, match)
        case _:
            unhandled(node)


def _scalar(node: ScalarT) -> Any:
    """The valid value nearest to zero (or the shortest string of ``a``s) under every limit of ``node``."""
    if node.const is not None:
        return node.const
    if node.kind == "bool":
        return False
    if node.kind in ("str", "bytes"):
        text = _text(node)
        return text.encode() if node.kind == "bytes" else text
    value = _number(node)
    if value_problem(node, value, whole=True) is not None:  # the schema's own check of a value
        raise ValueError(f"no {node.kind} near zero fits the limits of the schema")
    return value


def _text(node: ScalarT) -> str:
    """The shortest run of one of a few characters that is long enough and matches the pattern."""
    shortest = _bounded(node.min_length or 0, "characters")
    longest = shortest + 4 if node.max_length is None else min(node.max_length, shortest + 4)
    for size in range(shortest, longest + 1):
        for char in "aA0_":
            text = char * size
            if node.pattern is None or re.search(node.pattern, text) is not None:
                return text
    raise ValueError(f"a string matching {node.pattern!r} is not synthesized")


def _steps(bound: int | float, step: int | float, *, up: bool) -> int:
    """``bound / step`` rounded up or down to a whole number: exact where both are ints (a float
    quotient rounds a bound past 2**53 off it)."""
    if isinstance(bound, int) and isinstance(step, int):
        return -(-bound // step) if up else bound // step
    quotient = bound / step
    return math.ceil(quotient) if up else math.floor(quotient)


def _number(node: ScalarT) -> int | float:
    try:
        return _near_zero(node)
    except OverflowError:  # a quotient or multiple past a float's range
        raise ValueError(f"no {node.kind} near zero fits the limits of the schema") from None


def _near_zero(node: ScalarT) -> int | float:
    step = node.multiple_of or (1 if node.kind == "int" else 0)
    low, high = node.minimum, node.maximum
    if low is not None and (low > 0 or (low == 0 and node.exclusive_minimum)):
        if step:  # the first multiple above (or at) the lower bound
            k = _steps(low, step, up=False) + 1 if node.exclusive_minimum else _steps(low, step, up=True)
            value: int | float = k * step
        elif not node.exclusive_minimum:
            value = low
        else:  # just above an exclusive lower bound, below the upper one
            value = low + 1 if high is None or low + 1 < high else (low + high) / 2
    elif high is not None and (high < 0 or (high == 0 and node.exclusive_maximum)):
        if step:
            k = _steps(high, step, up=True) - 1 if node.exclusive_maximum else _steps(high, step, up=False)
            value = k * step
        else:
            value = high - 1 if node.exclusive_maximum else high
    else:
        value = 0
    return int(value) if node.kind == "int" else float(value)


def _tensor(node: TensorT) -> Any:
    if node.devices is not None and "cpu" not in node.devices:
        raise ValueError(f"a tensor on {', '.join(node.devices)} only: fixtures hold cpu tensors")
    name = node.dtypes[0] if node.dtypes else "float32"
    shape = (1,) if node.shape is None else tuple(d if isinstance(d, int) else 1 for d in node.shape)
    _bounded(math.prod(shape), "tensor elements")
    dtype = DTYPES[name]
    if node.kind == "ndarray":
        assert dtype.numpy_name is not None  # the schema compiler refuses a dtype numpy lacks
        return np.zeros(shape, dtype=np.dtype(dtype.numpy_name))
    return torch.zeros(shape, dtype=getattr(torch, dtype.torch_name))
