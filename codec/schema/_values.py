"""Whether a JSON value (a schema's default or example) is a value of an IR node, and if not,
where in it and why."""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

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

__all__ = ["WIRE_INT", "describe", "fits_double", "value_problem"]

_JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
WIRE_INT = (-(2**63), 2**64 - 1)  # the integers msgpack carries: a bound past them checks nothing


def fits_double(value: int | float) -> bool:
    """Whether ``value`` is a finite double (an int too large for one is not)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def describe(value: Any) -> str:
    """A JSON value for an error message: its JSON type and its text (``integer 3``, ``null``)."""
    if value is None:
        return "null"
    return f"{_JSON_TYPE.get(type(value), type(value).__name__)} {json.dumps(value)}"


def value_problem(node: Node, value: Any, *, whole: bool) -> str | None:
    """Why the JSON ``value`` is not a value of ``node`` (None if it is), naming where in it.

    ``whole``: an example, which may hold structs, unions and tensors (as nested lists); else a
    default, which is null for those.
    """
    found = _problem(node, value, whole)
    if found is None:
        return None
    path, problem = found
    return f"at {path}: {problem}" if path else problem


_Problem = tuple[str, str] | None  # (path inside the value, what is wrong)


def _inside(segment: str, found: _Problem) -> _Problem:
    return None if found is None else (segment + found[0], found[1])


def _first(found: Any) -> _Problem:
    return next((f for f in found if f is not None), None)


def _problem(node: Node, value: Any, whole: bool) -> _Problem:
    match node:
        case NullableT():
            return None if value is None else _problem(node.inner, value, whole)
        case TreeT():
            if _json_depth(value) > node.max_depth:
                return "", f"deeper than max_depth {node.max_depth}"
            return _tree_int_problem(value)
        case _ if value is None:
            return "", "null is not allowed here (the type is not nullable)"
        case ScalarT():
            problem = _scalar_problem(node, value, whole)
            return None if problem is None else ("", problem)
        case EnumT():
            return None if value in node.values else ("", f"{describe(value)} is not one of {list(node.values)}")
        case ArrayT():
            if not isinstance(value, list):
                return "", f"expected array, got {describe(value)}"
            count = _count_problem(len(value), node.min_items, node.max_items, "items")
            if count:
                return "", count
            if node.unique and len({_set_key(node.items, v) for v in value}) != len(value):
                return "", "items repeat in a set (uniqueItems)"
            return _first(_inside(f"[{i}]", _problem(node.items, v, whole)) for i, v in enumerate(value))
        case TupleT():
            if not isinstance(value, list) or len(value) != len(node.items):
                return "", f"expected array of {len(node.items)} items, got {describe(value)}"
            pairs = enumerate(zip(node.items, value, strict=True))
            return _first(_inside(f"[{i}]", _problem(t, v, whole)) for i, (t, v) in pairs)
        case MapT():
            if not isinstance(value, dict):
                return "", f"expected object, got {describe(value)}"
            count = _count_problem(len(value), node.min_properties, node.max_properties, "entries")
            if count:
                return "", count
            return _first(_inside(f"[{json.dumps(k)}]", _problem(node.values, v, whole)) for k, v in value.items())
        case TensorT() | StructT() | MessageRefT() | UnionT() if not whole:
            return "", f"only null can be the default of a {type(node).__name__.removesuffix('T').lower()} field"
        case TensorT():
            return _tensor_problem(node, value)
        case StructT():
            return _struct_problem(node, value, whole)
        case MessageRefT():
            return _struct_problem(node.target, value, whole)
        case UnionT():
            tag = value.get(node.tag_field) if isinstance(value, dict) else None
            for variant in node.variants:
                struct = variant.target if isinstance(variant, MessageRefT) else variant
                if struct.tag == tag:
                    return _struct_problem(struct, value, whole)
            tags = [(v.target if isinstance(v, MessageRefT) else v).tag for v in node.variants]
            return "", f"expected an object whose {node.tag_field!r} is one of {tags}, got {describe(value)}"
        case _:
            unhandled(node)


def _set_key(items: Node, value: Any) -> Any:
    """``value`` as a set of ``items`` holds it, to find repeats: a number item as the double it
    decodes to (``1`` and ``1.0``, ``0`` and ``-0.0`` are one item), anything else as JSON text
    (``true`` is not ``1``)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and isinstance(items, ScalarT) and items.kind == "float" and fits_double(value):
        return float(value)
    return json.dumps(value, sort_keys=True)


def _struct_problem(struct: StructT, value: Any, whole: bool) -> _Problem:
    if not isinstance(value, dict):
        return "", f"expected object, got {describe(value)}"
    fields = {f.name: f for f in struct.fields}
    missing = [f.name for f in struct.fields if f.required and f.name not in value]
    if missing:
        return "", f"missing required field {missing[0]!r}"
    for key, item in value.items():
        if key == struct.tag_field:
            if item != struct.tag:
                return f".{key}", f"expected the tag {struct.tag!r}, got {describe(item)}"
        elif key in fields:
            found = _problem(fields[key].type, item, whole)
            if found is not None:
                return f".{key}{found[0]}", found[1]
        elif struct.closed:
            return "", f"unknown field {key!r} (additionalProperties is false)"
    for constraint in struct.constraints:
        present = [name for name in constraint.fields if value.get(name) is not None]
        if len(present) > 1 or (constraint.rule == "exactly_one_of" and not present):
            return "", f"{constraint.rule} {list(constraint.fields)}: {len(present)} of them are set"
    return None


def _tensor_problem(node: TensorT, value: Any) -> _Problem:
    """A tensor's example is its values as nested lists; its shape is checked against the schema's."""
    shape: list[int] = []
    level = value
    while isinstance(level, list):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    flat = [value]
    for _ in shape:
        if any(not isinstance(v, list) for v in flat):
            return "", f"a {node.kind} example is a rectangular nested list of numbers"
        lengths = {len(v) for v in flat}
        if len(lengths) > 1:
            return "", f"a {node.kind} example is a rectangular nested list of numbers (rows of {sorted(lengths)})"
        flat = [item for v in flat for item in v]
    if any(isinstance(v, list | dict | str) or v is None for v in flat):
        return "", f"a {node.kind} example is a rectangular nested list of numbers"
    if node.shape is not None:
        if len(node.shape) != len(shape):
            return "", f"expected rank {len(node.shape)}, got shape {shape}"
        for axis, (want, got) in enumerate(zip(node.shape, shape, strict=True)):
            if isinstance(want, int) and want != got:
                return "", f"dim {axis} must be {want}, got shape {shape}"
    return None


_OFF_THE_WIRE = f"{{value}} is outside the integers the wire carries ({WIRE_INT[0]} .. {WIRE_INT[1]})"


def _tree_int_problem(value: Any) -> _Problem:
    """The first integer of the JSON ``value`` (a tree's) that the wire cannot carry, and where
    (msgpack refuses it, so no message holding it encodes), or None; without recursion. The path is
    made for that integer only (made for every value, each would repeat every key above it)."""
    pending: list[tuple[Any, Any]] = [(None, value)]  # (where: None or (where of the parent, step), item)
    while pending:
        where, item = pending.pop()
        if isinstance(item, int) and not isinstance(item, bool) and not WIRE_INT[0] <= item <= WIRE_INT[1]:
            steps = []
            while where is not None:
                where, step = where
                steps.append(f"[{json.dumps(step)}]" if isinstance(step, str) else f"[{step}]")
            return "".join(reversed(steps)), _OFF_THE_WIRE.format(value=item)
        if isinstance(item, dict):
            pending.extend(((where, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            pending.extend(((where, i), v) for i, v in reversed(list(enumerate(item))))
    return None


def _json_depth(value: Any) -> int:
    """Levels of arrays and objects in a JSON value (a scalar has none), without recursion."""
    depth, level = 0, [value]
    while any(isinstance(item, list | dict) for item in level):
        depth += 1
        level = [
            v
            for item in level
            if isinstance(item, list | dict)
            for v in (item.values() if isinstance(item, dict) else item)
        ]
    return depth


def _count_problem(count: int, low: int | None, high: int | None, noun: str) -> str | None:
    if low is not None and count < low:
        return f"{count} {noun}, fewer than the minimum {low}"
    if high is not None and count > high:
        return f"{count} {noun}, more than the maximum {high}"
    return None


def _scalar_problem(node: ScalarT, value: Any, whole: bool) -> str | None:
    """Why ``value`` is not a value of ``node``. Bytes are base64 text in an example, and only the
    empty string as a default."""
    if node.kind == "bytes":
        if not whole:
            return None if value == "" else f"expected an empty string (bytes), got {describe(value)}"
        try:
            value = base64.b64decode(value, validate=True)
        except (TypeError, ValueError):
            return f"expected bytes as base64 text, got {describe(value)}"
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "bytes": True,
    }[node.kind]
    if not ok:
        return f"expected {node.kind}, got {describe(value)}"
    if node.kind == "int" and not WIRE_INT[0] <= value <= WIRE_INT[1]:
        return _OFF_THE_WIRE.format(value=value)
    if node.kind == "float" and not fits_double(value):
        return f"{value} is out of a double's range"
    if node.const is not None and (value != node.const or type(value) is not type(node.const)):
        return f"expected the const {describe(node.const)}, got {describe(value)}"
    if node.minimum is not None and (value <= node.minimum if node.exclusive_minimum else value < node.minimum):
        return f"{value} is below the {'exclusive ' if node.exclusive_minimum else ''}minimum {node.minimum}"
    if node.maximum is not None and (value >= node.maximum if node.exclusive_maximum else value > node.maximum):
        return f"{value} is above the {'exclusive ' if node.exclusive_maximum else ''}maximum {node.maximum}"
    if node.multiple_of is not None:
        problem = _step_problem(node, value, node.multiple_of)
        if problem is not None:
            return problem
    if node.max_length is not None and len(value) > node.max_length:
        return f"longer than maxLength {node.max_length}"
    if node.min_length is not None and len(value) < node.min_length:
        return f"shorter than minLength {node.min_length}"
    if node.pattern is not None and re.search(node.pattern, value) is None:
        return f"{describe(value)} does not match the pattern {node.pattern!r}"
    return None


def _step_problem(node: ScalarT, value: int | float, step: int | float) -> str | None:
    """Why ``value`` is not a multiple of ``step`` as msgspec checks it, or None: an integer's
    exactly, a number's on the doubles (``fmod(value, step) == 0``: 0.3 is no multiple of 0.1)."""
    if node.kind != "float":
        return None if value % step == 0 else f"{value} is not a multiple of {step}"
    left = math.fmod(float(value), float(step))
    if left == 0:
        return None
    return f"{value} is not a multiple of {step} as a double (fmod({value}, {step}) is {left}, as msgspec checks it)"
