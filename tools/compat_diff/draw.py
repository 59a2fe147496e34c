"""The schemas of the differential check: a message type's fields drawn over the schema
language's features (a field of each kind, required or optional with a default, a closed or open
type), a few random edits of them, and the schema document of ``p.Msg`` holding them (flat, or in a
struct or an array of structs)."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

from tools.compat_diff.values import DTYPES, Field, _accepts, _default, _values

__all__ = ["DEFS", "ITEMS", "KINDS", "NAMES", "document", "draw_schema", "mutate"]

NAMES = ["a", "b", "c", "d", "e"]
ITEMS: list[Field] = [
    {"type": "integer"},
    {"type": "integer", "maximum": 5},
    {"type": "number"},
    {"type": "string", "enum": ["x", "y"], "x-enum-name": "Item"},
]


def _int(r: random.Random) -> Field:
    f: Field = {"type": "integer"}
    if r.random() < 0.3:
        f["format"] = r.choice(["int8", "uint8", "int32", "uint64", "int64"])
    if r.random() < 0.5:
        f["minimum"] = r.choice([-10, 0, 1, -(2**63)])
    if r.random() < 0.5:
        f[r.choice(["maximum", "exclusiveMaximum"])] = r.choice([10, 100, 255, 2**63 - 1])
    if r.random() < 0.2:
        f["multipleOf"] = r.choice([1, 2, 5])
    if r.random() < 0.1:
        f["const"] = r.choice([0, 1, 5])
    return f


def _kinds() -> dict[str, Callable[[random.Random], Field]]:
    return {
        "int": _int,
        "number": lambda r: {"type": "number", **({"maximum": 10.0} if r.random() < 0.4 else {})},
        "string": lambda r: {
            "type": "string",
            **({"maxLength": r.choice([2, 3, 10])} if r.random() < 0.5 else {}),
            **({"minLength": 1} if r.random() < 0.3 else {}),
            **({"pattern": r.choice(["^[a-z]*$", "^[a-c]*$"])} if r.random() < 0.3 else {}),
        },
        "enum": lambda r: {
            "type": "string",
            "enum": r.sample(["x", "y", "z"], r.randint(1, 3)),
            "x-enum-name": r.choice(["Mode", "Kind", "Sort"]),
        },
        "bool": lambda r: {"type": "boolean"},
        "array": lambda r: {
            "type": "array",
            "items": r.choice(ITEMS),
            **({"maxItems": r.choice([1, 3])} if r.random() < 0.4 else {}),
            **({"uniqueItems": True} if r.random() < 0.2 else {}),
        },
        "map": lambda r: {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            **({"maxProperties": 2} if r.random() < 0.4 else {}),
        },
        "struct": lambda r: {
            "type": "object",
            "title": "Inner",
            "properties": {
                "n": {"type": "integer"},
                **({"m": {"type": "integer", "default": 0}} if r.random() < 0.5 else {}),
            },
            "required": ["n"],
            **({"additionalProperties": False} if r.random() < 0.5 else {}),
        },
        "union": lambda r: {
            "oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}][: r.randint(1, 2)],
            "discriminator": {"propertyName": "kind"},
        },
        "ndarray": lambda r: {
            "x-ndarray": {
                **({"dtypes": r.sample(DTYPES, r.randint(1, 2))} if r.random() < 0.6 else {}),
                **(
                    {"shape": r.choice([["a"], ["a", "a"], ["a", 2], [2, "b"], ["a", "b"], [None, 3]])}
                    if r.random() < 0.7
                    else {}
                ),
            }
        },
    }


KINDS = _kinds()
DEFS = {
    "A": {"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}}, "required": ["n"]},
    "B": {"type": "object", "properties": {"kind": {"const": "b"}, "q": {"type": "integer", "default": 0}}},
}


def draw_schema(r: random.Random) -> tuple[dict[str, Field], set[str], bool]:
    fields: dict[str, Field] = {}
    required: set[str] = set()
    for name in r.sample(NAMES, r.randint(1, 3)):
        f = KINDS[r.choice(list(KINDS))](r)
        fields[name] = f
        if r.random() < 0.5 or not _optional(f):
            required.add(name)
    return fields, required, r.random() < 0.4


def _optional(f: Field) -> bool:
    """Give ``f`` a default so that it can be optional; False where no valid one is known."""
    if "default" in f:
        return True
    d = _default(f)
    if d is None and f.get("type") not in (["integer", "null"], ["string", "null"]):
        return False
    f["default"] = d
    return True


def mutate(
    r: random.Random, fields: dict[str, Field], required: set[str], closed: bool
) -> tuple[dict[str, Field], set[str], bool]:
    fields, required = copy.deepcopy(fields), set(required)
    for _ in range(r.randint(1, 2)):
        name = r.choice(list(fields))
        f = fields[name]
        op = r.randrange(15)
        if op == 0:
            free = [n for n in NAMES if n not in fields]
            if free:
                new = KINDS[r.choice(list(KINDS))](r)
                fields[free[0]] = new
                if r.random() < 0.3 or not _optional(new):
                    required.add(free[0])
        elif op == 1 and len(fields) > 1:
            del fields[name]
            required.discard(name)
        elif op == 2:
            free = [n for n in NAMES if n not in fields]
            if free:
                fields[free[0]] = fields.pop(name)
                if name in required:
                    required.discard(name)
                    required.add(free[0])
        elif op == 3:
            if name in required:
                if _optional(f):
                    required.discard(name)
            else:
                required.add(name)
                if r.random() < 0.5:
                    f.pop("default", None)
        elif op == 4:
            closed = not closed
        elif op == 5:
            fields[name] = KINDS[r.choice(list(KINDS))](r)
            if name not in required and not _optional(fields[name]):
                required.add(name)
        elif op == 6 and f.get("type") in ("integer", "string"):
            t = f["type"]
            f["type"] = [t, "null"]
            if "default" in f and r.random() < 0.5:
                f["default"] = None
        elif op == 8 and "default" in f:
            others = [v for v in _values(f) if v != f["default"] and _accepts(f, v)]
            if others:
                f["default"] = r.choice(others)
        elif op == 7 and isinstance(f.get("type"), list):
            f["type"] = f["type"][0]
            if f.get("default", 0) is None:
                f.pop("default")
                required.add(name)
        else:
            _tweak(r, f)
            if "default" in f and not _accepts(f, f["default"]):
                f.pop("default")
                required.add(name)
    return fields, required, closed


def _tweak(r: random.Random, f: Field) -> None:
    """Change one constraint of ``f`` in place."""
    if f.get("type") == "integer" or f.get("type") == ["integer", "null"]:
        key = r.choice(["minimum", "maximum", "exclusiveMaximum", "format", "multipleOf", "const"])
        if key in f and r.random() < 0.5:
            del f[key]
        elif key == "format":
            f[key] = r.choice(["int8", "uint8", "int32", "uint64", "int64"])
        elif key == "const":
            f[key] = r.choice([0, 1])
        elif key == "multipleOf":
            f[key] = r.choice([1, 2, 5])
        else:
            f[key] = r.choice([-10, 0, 1, 10, 100, 255, 256, 2**63 - 1, 2**64 - 1, -(2**63)])
            if key != "minimum":
                f.pop("maximum" if key == "exclusiveMaximum" else "exclusiveMaximum", None)
    elif "enum" in f:
        f["enum"] = r.sample(["x", "y", "z"], r.randint(1, 3))
    elif f.get("type") in ("string", ["string", "null"]):
        key = r.choice(["minLength", "maxLength", "pattern"])
        if key in f and r.random() < 0.5:
            del f[key]
        else:
            f[key] = r.choice(["^[a-z]*$", "^[a-c]*$", "^.*$"]) if key == "pattern" else r.choice([0, 1, 2, 3, 10])
    elif f.get("type") == "array":
        key = r.choice(["maxItems", "minItems", "uniqueItems", "items"])
        if key == "items":
            f["items"] = r.choice(ITEMS)
        elif key == "uniqueItems":
            f[key] = not f.get(key, False)
        else:
            f[key] = r.choice([0, 1, 3])
    elif f.get("type") == "object" and "additionalProperties" in f and f["additionalProperties"] is not False:
        f["maxProperties"] = r.choice([1, 2, 5])
    elif f.get("title") == "Inner":
        op = r.randrange(4)
        if op == 3 and "m" in f["properties"]:
            f["properties"]["m"]["default"] = 4 - f["properties"]["m"]["default"]
        elif op == 0:
            f["additionalProperties"] = not f.get("additionalProperties", True)
            if f["additionalProperties"]:
                del f["additionalProperties"]
        elif op == 1:
            if "m" in f["properties"]:
                del f["properties"]["m"]
            else:
                f["properties"]["m"] = {"type": "integer", "default": 0}
        else:
            f["properties"]["n"]["maximum"] = 1
    elif "oneOf" in f:
        f["oneOf"] = [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}][: 3 - len(f["oneOf"])]
    elif "x-ndarray" in f:
        spec = f["x-ndarray"]
        key = r.choice(["dtypes", "shape"])
        if key == "dtypes":
            spec[key] = r.sample(DTYPES, r.randint(1, 3))
        else:
            spec[key] = r.choice(
                [["a"], ["a", "a"], ["a", 2], [2, "b"], ["a", "b"], ["b", "a"], [None, 3], [None, None]]
            )
        if r.random() < 0.2:
            spec.pop(key, None)
    elif f.get("type") == "number":
        f["maximum"] = r.choice([5.0, 10.0, 100.0])


def document(fields: dict[str, Field], required: set[str], closed: bool, wrap: str) -> dict[str, Any]:
    """``p.Msg`` with these fields, or (``wrap`` "struct" or "array") with one field ``w`` that
    holds a struct ``W`` of them or an array of such structs."""
    struct: dict[str, Any] = {
        "type": "object",
        "properties": fields,
        "required": sorted(n for n in required if n in fields),
    }
    if closed:
        struct["additionalProperties"] = False
    head = {"$id": "p.Msg", "x-version": 1}
    if wrap == "flat":
        return {**head, **struct, "$defs": DEFS}
    ref = {"$ref": "#/$defs/W"}
    w = ref if wrap == "struct" else {"type": "array", "items": ref}
    outer = {"type": "object", "properties": {"w": w}, "required": ["w"]}
    return {**head, **outer, "$defs": {**DEFS, "W": {**struct, "title": "W"}}}
