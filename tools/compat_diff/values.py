"""The values the differential check tries for a field of a drawn schema: candidates of each kind
(some of which the field rejects: integers at the wire's limits, strings of a few lengths and
letters, arrays of every dtype and shape a spec allows and a few others), a valid default where
one is known, and the cheap check that a default is valid."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

__all__ = ["DTYPES", "INTS", "STRINGS", "Field"]

Field = dict[str, Any]
INTS = [
    0,
    1,
    -1,
    2,
    3,
    5,
    7,
    10,
    -10,
    100,
    255,
    256,
    300,
    -129,
    -130,
    2**31,
    -(2**53 + 1),
    2**63 - 1,
    2**63,
    -(2**63),
    2**64 - 2,
    2**64 - 1,
]
STRINGS = [
    "",
    "a",
    "x",
    "A",
    "ab",
    "zz",
    "a\n",
    "abc",
    "ABC",
    "abcdefghij",
    "abcdefghijk",
    "xyz1",
    "abca",
    "abcabcabcab",
]
DTYPES = ["float32", "int64", "uint8"]


def _values(f: Field) -> list[Any]:
    """Candidate values for a field of this schema (some of which it rejects)."""
    if f.get("type") == ["integer", "null"] or f.get("type") == ["string", "null"]:
        return [None] * 5 + _values({**f, "type": f["type"][0]})
    if "x-ndarray" in f:
        return _arrays(f["x-ndarray"])
    if "oneOf" in f:
        return [{"kind": "a", "n": 1}, {"kind": "b", "q": 2}, {"kind": "b"}]
    t = f.get("type")
    if "enum" in f:
        return ["x", "y", "z"]
    if t == "integer":
        extra = [v + d for k, v in f.items() if isinstance(v, int) and not isinstance(v, bool) for d in (-1, 0, 1)]
        return INTS + extra
    if t == "number":
        return [0.0, 0.5, -1.5, 10.0, 11.0, 1e300, 3]
    if t == "string":
        return STRINGS
    if t == "boolean":
        return [True, False]
    if t == "array" and "enum" in f["items"]:
        return [[], ["x"], ["z"], ["x", "y"], ["x", "x"], ["x", "y", "x", "y"]]
    if t == "array":
        return [[], [1], [6], [1, 2], [1, 2, 3], [1, 1], [1, 2, 3, 4], [9, 9, 9, 9], [0.5], [2**53 + 1], [-(2**53 + 1)]]
    if t == "object" and "additionalProperties" in f and f["additionalProperties"] is not False:
        return [{}, {"k": 1}, {"k": 1, "j": 2}, {"k": 1, "j": 2, "l": 3}, {k: 1 for k in "abcdef"}]
    return [{"n": 1}, {"n": 2}, {"n": 1, "m": 4}, {"n": 2, "m": 0}]


def _arrays(spec: dict[str, Any]) -> list[Any]:
    """Arrays of every dtype the spec allows (and float64) in every shape it allows with sizes 2
    and 3 for its named and free dims, and in a few other shapes."""
    shapes = {(2,), (3,), (2, 2), (2, 3), (3, 2), (3, 3), (2, 2, 2)}
    dims = spec.get("shape")
    if dims is not None:
        free = sorted({d for d in dims if isinstance(d, str)}) + [i for i, d in enumerate(dims) if d is None]
        for sizes in itertools.product((2, 3), repeat=len(free)):
            size = dict(zip(free, sizes, strict=True))
            shapes.add(tuple(d if isinstance(d, int) else size[d if d is not None else i] for i, d in enumerate(dims)))
    dtypes = [*spec.get("dtypes", DTYPES), "float64"]
    return [np.arange(int(np.prod(s)), dtype=d).reshape(s) for s in sorted(shapes) for d in dtypes]


def _default(f: Field) -> Any:
    """A valid default for a scalar, array or map field; None where none is known."""
    if "const" in f:
        return f["const"]
    if "x-ndarray" in f or "oneOf" in f or f.get("title") == "Inner":
        return None
    return next((v for v in _values(f) if _accepts(f, v)), None)


def _accepts(f: Field, v: Any) -> bool:
    """A cheap check that a default is valid (the loader checks it again)."""
    if "enum" in f:
        return v in f["enum"]
    t = f.get("type")
    if isinstance(t, list):
        return v is None or _accepts({**f, "type": t[0]}, v)
    if t == "integer":
        if not isinstance(v, int) or v < f.get("minimum", -(2**63)) or v > f.get("maximum", 2**64):
            return False
        if "exclusiveMaximum" in f and v >= f["exclusiveMaximum"]:
            return False
        return v % f.get("multipleOf", 1) == 0 and 0 <= v <= 255 if f.get("format") == "uint8" else True
    if t == "string":
        return f.get("minLength", 0) <= len(v) <= f.get("maxLength", 99) and "pattern" not in f
    return t in ("boolean", "number", "array") or (t == "object" and "additionalProperties" in f)
