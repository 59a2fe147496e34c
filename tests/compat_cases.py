"""Before/after schema pairs, one per compatibility rule (tests/compat/<RULE_ID>/{old,new}/).

``python tests/compat_cases.py`` rewrites the fixture directories from the cases below.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _variant(type_id: str, tag: str) -> dict[str, Any]:
    return {
        "$id": type_id,
        "x-version": 1,
        "type": "object",
        "properties": {"kind": {"const": tag}, "n": {"type": "integer"}},
        "required": ["n"],
    }


BASE: dict[str, Any] = {
    "t/A.v1.json": _variant("t.A", "a"),
    "t/B.v1.json": _variant("t.B", "b"),
    "t/Thing.v1.json": {
        "$id": "t.Thing",
        "x-version": 1,
        "description": "A thing.",
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "count": {"type": "integer", "minimum": 0, "maximum": 100},
            "ratio": {"type": "number"},
            "level": {"type": "integer", "default": 0},
            "note": {"type": ["string", "null"], "default": None},
            "mode": {"$ref": "#/$defs/Mode", "default": "fast"},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}], "default": [0, 0]},
            "image": {"x-tensor": {"dtypes": ["float32", "uint8"], "shape": ["c", "h", "w"], "devices": ["cpu"]}},
            "extra": {"x-tree": {"max_depth": 8}, "default": None},
            "item": {
                "oneOf": [{"$ref": "A.v1.json"}, {"$ref": "B.v1.json"}, {"type": "null"}],
                "discriminator": {"propertyName": "kind"},
                "default": None,
            },
            "link": {"oneOf": [{"$ref": "A.v1.json"}, {"type": "null"}], "default": None},
        },
        "required": ["name", "count", "ratio", "image"],
        "$defs": {"Mode": {"type": "string", "enum": ["fast", "slow"], "x-enum-name": "Mode"}},
    },
}


def _thing(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def apply(docs: dict[str, Any]) -> None:
        change(docs["t/Thing.v1.json"])

    return apply


def _props(doc: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = doc["properties"]
    return props


CASES: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("TYPE_DELETED", lambda d: d.pop("t/B.v1.json") and _props(d["t/Thing.v1.json"])["item"]["oneOf"].pop(1)),
    ("TYPE_ADDED", lambda d: d.update({"t/C.v1.json": _variant("t.C", "c")})),
    ("MAJOR_VERSION_ADDED", lambda d: d.update({"t/A.v2.json": {**_variant("t.A", "a"), "x-version": 2}})),
    ("DOC_CHANGED", _thing(lambda t: t.update(description="Another thing."))),
    (
        "FIELD_ADDED_REQUIRED",
        _thing(lambda t: (_props(t).update(size={"type": "integer"}), t["required"].append("size"))),
    ),
    ("FIELD_ADDED_OPTIONAL", _thing(lambda t: _props(t).update(size={"type": "integer", "default": 1}))),
    ("FIELD_DELETED", _thing(lambda t: (_props(t).pop("ratio"), t["required"].remove("ratio")))),
    ("FIELD_DELETED_OPTIONAL", _thing(lambda t: _props(t).pop("note"))),
    (
        "FIELD_RENAMED",
        _thing(
            lambda t: (
                _props(t).update(scale=_props(t).pop("ratio")),
                t.update(required=["scale" if n == "ratio" else n for n in t["required"]]),
            )
        ),
    ),
    ("FIELD_MADE_REQUIRED", _thing(lambda t: (_props(t)["note"].pop("default"), t["required"].append("note")))),
    ("FIELD_MADE_OPTIONAL", _thing(lambda t: (_props(t)["ratio"].update(default=1.0), t["required"].remove("ratio")))),
    ("DEFAULT_CHANGED", _thing(lambda t: _props(t)["mode"].update(default="slow"))),
    ("TYPE_CHANGED", _thing(lambda t: _props(t).update(ratio={"type": "string"}))),
    ("TYPE_WIDENED", _thing(lambda t: _props(t)["count"].update(type="number"))),
    ("TYPE_NARROWED", _thing(lambda t: _props(t)["ratio"].update(type="integer"))),
    ("TYPE_WIDENED_LOSSY", _thing(lambda t: _props(t)["level"].update(type="number"))),
    ("TYPE_NARROWED_LOSSY", _thing(lambda t: _props(t)["ratio"].update(type="integer"))),
    ("NULLABLE_ADDED", _thing(lambda t: _props(t)["name"].update(type=["string", "null"]))),
    ("NULLABLE_REMOVED", _thing(lambda t: _props(t)["note"].update(type="string", default=""))),
    ("RANGE_TIGHTENED", _thing(lambda t: _props(t)["count"].update(maximum=50))),
    ("RANGE_LOOSENED", _thing(lambda t: _props(t)["name"].update(maxLength=20))),
    (
        "TUPLE_LENGTH_CHANGED",
        _thing(
            lambda t: (
                _props(t)["pair"]["prefixItems"].append({"type": "integer"}),
                _props(t)["pair"].update(default=[0, 0, 0]),
            )
        ),
    ),
    ("ARRAY_MADE_SET", _thing(lambda t: _props(t)["tags"].update(uniqueItems=True))),
    (
        "REF_TARGET_CHANGED",
        _thing(lambda t: _props(t).update(link={"oneOf": [{"$ref": "B.v1.json"}, {"type": "null"}], "default": None})),
    ),
    ("ENUM_MEMBER_ADDED", _thing(lambda t: t["$defs"]["Mode"]["enum"].append("eco"))),
    ("ENUM_MEMBER_REMOVED", _thing(lambda t: t["$defs"]["Mode"]["enum"].pop())),
    ("ENUM_VALUE_CHANGED", _thing(lambda t: t["$defs"]["Mode"].update(enum=["fast", "sluggish"]))),
    (
        "UNION_VARIANT_ADDED",
        lambda d: (
            d.update({"t/C.v1.json": _variant("t.C", "c")}),
            _props(d["t/Thing.v1.json"])["item"]["oneOf"].insert(0, {"$ref": "C.v1.json"}),
        ),
    ),
    ("UNION_VARIANT_REMOVED", _thing(lambda t: _props(t)["item"]["oneOf"].pop(1))),
    ("UNION_TAG_CHANGED", lambda d: _props(d["t/B.v1.json"])["kind"].update(const="bee")),
    (
        "UNION_TAG_FIELD_CHANGED",
        lambda d: (
            [(_props(d[f]).update(type_=_props(d[f]).pop("kind"))) for f in ("t/A.v1.json", "t/B.v1.json")]
            and _props(d["t/Thing.v1.json"])["item"]["discriminator"].update(propertyName="type_")
        ),
    ),
    ("TENSOR_KIND_CHANGED", _thing(lambda t: _props(t).update(image={"x-ndarray": _props(t)["image"]["x-tensor"]}))),
    ("TENSOR_DTYPE_REPLACED", _thing(lambda t: _props(t)["image"]["x-tensor"].update(dtypes=["float64"]))),
    ("TENSOR_DTYPES_GROWN", _thing(lambda t: _props(t)["image"]["x-tensor"]["dtypes"].append("float16"))),
    ("TENSOR_DTYPES_SHRUNK", _thing(lambda t: _props(t)["image"]["x-tensor"]["dtypes"].remove("uint8"))),
    ("TENSOR_RANK_CHANGED", _thing(lambda t: _props(t)["image"]["x-tensor"].update(shape=["h", "w"]))),
    ("TENSOR_DIMS_REORDERED", _thing(lambda t: _props(t)["image"]["x-tensor"].update(shape=["h", "w", "c"]))),
    ("TENSOR_SHAPE_TIGHTENED", _thing(lambda t: _props(t)["image"]["x-tensor"].update(shape=[3, "h", "w"]))),
    ("TENSOR_DEVICES_GROWN", _thing(lambda t: _props(t)["image"]["x-tensor"].update(devices=["cpu", "cuda"]))),
    ("TENSOR_DEVICES_SHRUNK", _thing(lambda t: _props(t)["image"]["x-tensor"].update(devices=["cuda"]))),
    ("TENSOR_CONTIGUITY_REQUIRED", _thing(lambda t: _props(t)["image"]["x-tensor"].update(contiguous=True))),
    ("TREE_DEPTH_DECREASED", _thing(lambda t: _props(t)["extra"]["x-tree"].update(max_depth=4))),
    ("TREE_DEPTH_INCREASED", _thing(lambda t: _props(t)["extra"]["x-tree"].update(max_depth=16))),
    ("TREE_JSON_TIGHTENED", _thing(lambda t: _props(t)["extra"]["x-tree"].update(json=True))),
    ("CONSTRAINT_TIGHTENED", _thing(lambda t: t.update({"x-constraints": {"at_most_one_of": ["note", "extra"]}}))),
    ("VALIDATOR_ADDED", _thing(lambda t: t.update({"x-validators": ["rpc.ok_xor_error"]}))),
    ("CONST_ADDED", _thing(lambda t: _props(t)["level"].update(const=0))),
    ("PATTERN_ADDED", _thing(lambda t: _props(t)["name"].update(pattern="^[a-z]*$"))),
    ("UNKNOWN_FIELDS_REJECTED", _thing(lambda t: t.update(additionalProperties=False))),
    (
        "STRUCT_TAG_CHANGED",
        lambda d: (
            _props(d["t/A.v1.json"]).pop("kind")
            and d.update(
                {
                    "t/Thing.v1.json": {
                        **d["t/Thing.v1.json"],
                        "properties": {k: v for k, v in _props(d["t/Thing.v1.json"]).items() if k != "item"},
                    }
                }
            )
        ),
    ),
]


def _reverse(
    rule_id: str, change: Callable[[dict[str, Any]], Any]
) -> tuple[str, Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], Any]]:
    """A case whose *old* side carries the change (the rule is the reverse of ``change``'s)."""
    return (rule_id, lambda d: None, change)


def _solo(type_id: str) -> dict[str, Any]:
    return {
        "$id": type_id,
        "x-version": 1,
        "type": "object",
        "properties": {"z": {"type": "boolean"}},
        "required": ["z"],
    }


# (rule, change to the new docs, change to the old docs)
PAIRS: list[tuple[str, Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], Any]]] = [
    *((rule_id, change, lambda d: None) for rule_id, change in CASES),
    (
        "TYPE_ID_CHANGED",
        lambda d: d.update({"t/Lone.v1.json": _solo("t.Lone")}),
        lambda d: d.update({"t/Solo.v1.json": _solo("t.Solo")}),
    ),
    ("VERSION_NOT_BUMPED", _thing(lambda t: t["$defs"]["Mode"]["enum"].pop()), lambda d: None),
    (
        "VERSION_DECREASED",
        lambda d: None,
        lambda d: d.update({"t/A.v2.json": {**_variant("t.A", "a"), "x-version": 2}}),
    ),
    _reverse("TENSOR_CONTIGUITY_DROPPED", _thing(lambda t: _props(t)["image"]["x-tensor"].update(contiguous=True))),
    _reverse("TENSOR_SHAPE_LOOSENED", _thing(lambda t: _props(t)["image"]["x-tensor"].update(shape=[3, "h", "w"]))),
    _reverse("SET_MADE_ARRAY", _thing(lambda t: _props(t)["tags"].update(uniqueItems=True))),
    _reverse("TREE_JSON_LOOSENED", _thing(lambda t: _props(t)["extra"]["x-tree"].update(json=True))),
    _reverse(
        "CONSTRAINT_LOOSENED", _thing(lambda t: t.update({"x-constraints": {"at_most_one_of": ["note", "extra"]}}))
    ),
    _reverse("VALIDATOR_REMOVED", _thing(lambda t: t.update({"x-validators": ["rpc.ok_xor_error"]}))),
    _reverse("CONST_REMOVED", _thing(lambda t: _props(t)["level"].update(const=0))),
    (
        "CONST_CHANGED",
        _thing(lambda t: _props(t)["level"].update(const=1, default=1)),
        _thing(lambda t: _props(t)["level"].update(const=0)),
    ),
    _reverse("PATTERN_REMOVED", _thing(lambda t: _props(t)["name"].update(pattern="^[a-z]*$"))),
    (
        "PATTERN_CHANGED",
        _thing(lambda t: _props(t)["name"].update(pattern="^[a-z0-9]*$")),
        _thing(lambda t: _props(t)["name"].update(pattern="^[a-z]*$")),
    ),
    _reverse("UNKNOWN_FIELDS_IGNORED", _thing(lambda t: t.update(additionalProperties=False))),
    (
        "FIELD_ADDED_TO_CLOSED",
        _thing(
            lambda t: (t.update(additionalProperties=False), _props(t).update(size={"type": "integer", "default": 1}))
        ),
        _thing(lambda t: t.update(additionalProperties=False)),
    ),
    (
        "FIELD_DELETED_FROM_CLOSED",
        _thing(lambda t: (t.update(additionalProperties=False), _props(t).pop("note"))),
        _thing(lambda t: t.update(additionalProperties=False)),
    ),
]


def documents(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    docs = copy.deepcopy(BASE)
    change(docs)
    return docs


def write(root: Path) -> None:
    """Write every pair under ``root``/<RULE_ID>/{old,new}/."""
    shutil.rmtree(root, ignore_errors=True)
    for rule_id, new_change, old_change in PAIRS:
        for side, change in (("old", old_change), ("new", new_change)):
            for rel, doc in documents(change).items():
                path = root / rule_id / side / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "compat")
