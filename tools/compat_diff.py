"""Differential check of ``tensorwire.compat``: the checker's verdict against real decoding.

Each trial draws a message schema (``p.Msg``) over the schema language's features (integers with
bounds, formats, steps and consts; numbers; strings with lengths and patterns; enums; booleans;
arrays; maps; nested structs; tagged unions; ``x-ndarray`` dtypes and shapes; nullable fields;
required and optional fields with defaults; closed and open types), changes it by a few random
edits, then encodes messages valid under each version and decodes them with the other. For each
mode (backward: new reads old, forward: old reads new, full: both) it reports

- MISS: the checker gives no error, yet a message failed to decode or decoded to another value;
- ALARM: the checker gives an error, yet no message drawn failed (a candidate false alarm: the
  draw may have missed the failing message, so judge each one by hand).

Run it from the repository root (it is slow: two schema loads per trial)::

    nice -n 10 .venv/bin/python -m tools.compat_diff --trials 300 --seed 1

Each finding prints both schemas and a message that shows it, to paste into a test.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

import tensorwire as tw
from tensorwire.compat import compare
from tensorwire.schema import load_dir

Field = dict[str, Any]
NAMES = ["a", "b", "c", "d", "e"]
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


class Fields(dict[str, Any]):
    """A struct's fields (a map's entries stay a plain dict)."""


def plain(value: Any) -> Any:
    """A decoded message as plain data comparable across the versions' classes."""
    if isinstance(value, msgspec.Struct):
        return Fields({k: plain(v) for k, v in msgspec.structs.asdict(value).items()})
    if isinstance(value, list | tuple | set | frozenset):
        items = [plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return (str(value.dtype), list(value.shape), value.tolist())
    if hasattr(value, "value") and not isinstance(value, int | float | str):
        return value.value
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    return value


def messages(
    r: random.Random, writer: type, fields: dict[str, Field], required: set[str], count: int, wrap: str = "flat"
) -> list[Any]:
    out: list[Any] = []
    for _ in range(count * 10):
        if len(out) == count:
            break
        values = {}
        for name, f in fields.items():
            if name not in required and r.random() < 0.3:
                continue
            values[name] = r.choice(_values(f))
        if wrap != "flat":
            values = {"w": values if wrap == "struct" else [values, values]}
        try:
            msg: Any = msgspec.convert(values, writer)
            tw.Encoder().encode(msg)
        except (msgspec.MsgspecError, tw.CodecError, TypeError, ValueError, OverflowError):
            continue
        out.append(msg)
    return out


def travels(msg: Any, reader: tw.Registry) -> tuple[bool, str]:
    """Whether ``msg`` decodes under ``reader`` with every field both sides have unchanged."""
    try:
        got = tw.Decoder(reader).decode(tw.Encoder().encode(msg))
    except tw.CodecError as exc:
        return False, f"decode error: {exc}"
    sent, back = plain(msg), plain(got)
    for k in sent.keys() & back.keys():
        if not same(sent[k], back[k]):
            return False, f"{k}: sent {sent[k]!r}, got {back[k]!r}"
    return True, ""


def same(sent: Any, back: Any) -> bool:
    """Equal, where a struct is compared on the fields both of its versions have."""
    if isinstance(sent, Fields) and isinstance(back, Fields):
        return all(same(sent[k], back[k]) for k in sent.keys() & back.keys())
    if isinstance(sent, list) and isinstance(back, list):
        return len(sent) == len(back) and all(same(a, b) for a, b in zip(sent, back, strict=True))
    return bool(sent == back)


def trial(r: random.Random, root: Path, count: int) -> list[str]:
    fields, required, closed = draw_schema(r)
    nfields, nrequired, nclosed = mutate(r, fields, required, closed)
    wrap = r.choice(["flat", "flat", "struct", "array"])
    old_doc, new_doc = document(fields, required, closed, wrap), document(nfields, nrequired, nclosed, wrap)
    if old_doc == new_doc:
        return []
    paths = []
    for side, doc in (("old", old_doc), ("new", new_doc)):
        d = root / side / "p"
        d.mkdir(parents=True, exist_ok=True)
        (d / "Msg.v1.json").write_text(json.dumps(doc))
        paths.append(root / side)
    try:
        old_reg, new_reg = tw.load_schemas(paths[0]), tw.load_schemas(paths[1])
    except tw.SchemaError as exc:
        return [f"SKIP: {exc}"]
    old_ir, new_ir = load_dir(paths[0]), load_dir(paths[1])
    broken: dict[str, tuple[Any, str] | None] = {}
    for mode, writer, reader, wf, wr in (
        ("backward", old_reg, new_reg, fields, required),
        ("forward", new_reg, old_reg, nfields, nrequired),
    ):
        broken[mode] = None
        sent = messages(r, writer.type("p.Msg"), wf, wr, count, wrap)
        if not sent:
            return [f"SKIP: no message valid under the {mode} writer drawn"]
        for msg in sent:
            ok, why = travels(msg, reader)
            if not ok:
                broken[mode] = (msg, why)
                break
    broken["full"] = broken["backward"] or broken["forward"]
    out: list[Any] = []
    for mode in ("backward", "forward", "full"):
        errors = sorted(
            {f.rule for f in compare(old_ir, new_ir, mode) if f.severity == "error" and f.rule != "VERSION_NOT_BUMPED"}
        )
        case = f" ({wrap})\n  old={json.dumps(fields)} req={sorted(required)} closed={closed}" + (
            f"\n  new={json.dumps(nfields)} req={sorted(nrequired)} closed={nclosed}"
        )
        failure = broken[mode]
        if not errors and failure is not None:
            msg, why = failure
            out.append(f"MISS {mode}: {why} message={plain(msg)!r}{case}")
        elif errors and failure is None:
            out.append(f"ALARM {mode}: {errors}{case}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--messages", type=int, default=300, help="messages drawn per side and trial")
    parser.add_argument("--only", choices=["MISS", "ALARM"], help="print one kind of finding alone")
    args = parser.parse_args()
    r = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.trials):
            for line in trial(r, Path(tmp) / str(i), args.messages):
                if args.only is None or line.startswith(args.only):
                    print(f"[{i}] {line}", flush=True)


if __name__ == "__main__":
    main()
