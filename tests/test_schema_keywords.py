"""The validation keywords JSON Schema users write: each is checked on encode and decode, by both
back-ends, and a schema that uses one wrongly is rejected where it says so."""

from __future__ import annotations

import copy
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

import tensorwire as tw
from tensorwire import SchemaError
from tensorwire.gen import generate
from tensorwire.options import EncodeOptions
from tensorwire.schema import load_dir
from tensorwire.schema.ir import Node, ScalarT
from tests.conftest import write_schemas
from tests.test_backends import _norm
from tests.wire_helpers import frame_of, head_of

ALL: dict[str, Any] = {
    "$id": "kw.All",
    "x-version": 1,
    "description": "Every validation keyword.",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "count": {"type": "integer", "format": "uint8", "exclusiveMinimum": 0, "multipleOf": 2},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "code": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[A-Z]+$"},
        "blob": {"type": "string", "format": "bytes", "minLength": 1},
        "level": {"const": 3},
        "on": {"type": "boolean", "const": True},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 1, "maxItems": 3},
        "scores": {
            "type": "object",
            "additionalProperties": {"type": "number"},
            "minProperties": 1,
            "maxProperties": 2,
        },
        "legacy": {"type": "integer", "default": 0, "deprecated": True, "readOnly": True, "description": "Old."},
        "secret": {"type": "string", "default": "", "writeOnly": True},
        "near_bottom": {"type": "integer", "minimum": -(2**63) + 1, "default": 0},  # one above msgpack's least
    },
    "required": ["count", "ratio", "code", "blob", "level", "tags", "scores"],
    "examples": [
        {"count": 2, "ratio": 0.5, "code": "AB", "blob": "AQ==", "level": 3, "tags": ["a"], "scores": {"x": 1}},
    ],
}
GOOD: dict[str, Any] = {
    "count": 4,
    "ratio": 0.25,
    "code": "ABC",
    "blob": b"\x01",
    "level": 3,
    "tags": frozenset({"a"}),
    "scores": {"x": 1.0},
}


def _kw_type(back_end: str, tmp_path: Path, name: str, doc: dict[str, Any]) -> Iterator[type]:
    """``kw.<name>`` of ``doc`` from ``load_schemas`` or from generated code (both must behave the same)."""
    schema_dir = write_schemas(tmp_path / "schemas", {f"kw/{name}.v1.json": doc})
    if back_end == "run time":
        yield tw.load_schemas(schema_dir).type(f"kw.{name}")
        return
    generate(schema_dir, tmp_path / "twgen_kw")
    sys.path.insert(0, str(tmp_path))
    try:
        yield getattr(importlib.import_module("twgen_kw.kw"), name)
    finally:
        sys.path.remove(str(tmp_path))
        for module in [n for n in sys.modules if n.startswith("twgen_kw")]:
            del sys.modules[module]


@pytest.fixture(params=["run time", "generated"])
def all_type(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[type]:
    yield from _kw_type(request.param, tmp_path, "All", ALL)


def test_both_back_ends_declare_the_same_limits(tmp_path: Path) -> None:
    schema_dir = write_schemas(tmp_path / "schemas", {"kw/All.v1.json": ALL})
    generate(schema_dir, tmp_path / "twgen_same")
    sys.path.insert(0, str(tmp_path))
    try:
        generated = importlib.import_module("twgen_same.kw").All
        runtime = tw.load_schemas(schema_dir).type("kw.All")
        assert _norm(mi.type_info(generated)) == _norm(mi.type_info(runtime))
        info = mi.type_info(runtime)
        assert isinstance(info, mi.StructType) and info.forbid_unknown_fields
        fields = {f.name: f.type for f in info.fields}
        assert fields["count"] == mi.IntType(gt=None, ge=1, lt=None, le=255, multiple_of=2)
        assert fields["ratio"] == mi.FloatType(gt=0, lt=1)
        assert fields["code"] == mi.StrType(min_length=2, max_length=4, pattern="^[A-Z]+$")
        assert fields["blob"] == mi.BytesType(min_length=1)
        assert fields["level"] == mi.LiteralType((3,))
        assert fields["on"] == mi.LiteralType((True,))
        assert fields["tags"] == mi.FrozenSetType(mi.StrType(), min_length=1, max_length=3)
        assert fields["scores"] == mi.DictType(mi.StrType(), mi.FloatType(), min_length=1, max_length=2)
        doc = generated.__doc__ or ""
        assert "legacy: Deprecated. Read-only. Old." in doc and "secret: Write-only." in doc
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("twgen_same")]:
            del sys.modules[name]


def test_a_message_within_every_limit_round_trips(all_type: type) -> None:
    message = all_type(**GOOD)
    out = tw.Decoder(tw.Registry([all_type])).decode(tw.Encoder().encode(message))
    assert out == message and out.on is True and out.legacy == 0


BAD = [
    ("count", 3, "Expected `int` that's a multiple of 2 - at `$.count`"),
    ("count", 0, "Expected `int` >= 1 - at `$.count`"),
    ("count", 256, "Expected `int` <= 255 - at `$.count`"),
    ("ratio", 1.0, "Expected `float` < 1.0 - at `$.ratio`"),
    ("ratio", 0.0, "Expected `float` > 0.0 - at `$.ratio`"),
    ("code", "A", "Expected `str` of length >= 2 - at `$.code`"),
    ("code", "ABCDE", "Expected `str` of length <= 4 - at `$.code`"),
    ("code", "ab", "Expected `str` matching regex '^[A-Z]+$' - at `$.code`"),
    ("blob", b"", "Expected `bytes` of length >= 1 - at `$.blob`"),
    ("level", 4, "Invalid enum value 4 - at `$.level`"),
    ("on", False, "Invalid enum value False - at `$.on`"),
    ("tags", frozenset(), "Expected `array` of length >= 1 - at `$.tags`"),
    ("tags", frozenset("abcd"), "Expected `array` of length <= 3 - at `$.tags`"),
    ("scores", {}, "Expected `object` of length >= 1 - at `$.scores`"),
    ("scores", {"a": 1.0, "b": 2.0, "c": 3.0}, "Expected `object` of length <= 2 - at `$.scores`"),
    ("near_bottom", -(2**63), "Expected `int` >= -9223372036854775807 - at `$.near_bottom`"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD, ids=[f"{f}={v!r}" for f, v, _ in BAD])
def test_a_value_outside_a_limit_is_refused_on_encode_and_on_decode(
    all_type: type, field: str, value: Any, message: str
) -> None:
    bad = all_type(**{**GOOD, field: value})
    with pytest.raises(tw.EncodeError, match=re.escape(f"kw.All: {message}")):
        tw.Encoder().encode(bad)
    frames = tw.Encoder(options=EncodeOptions(validate=False)).encode(bad)  # a writer that checks nothing
    with pytest.raises(tw.DecodeError, match=re.escape(f"kw.All v1: {message}")):
        tw.Decoder(tw.Registry([all_type])).decode(frames)


DISTINCT: dict[str, Any] = {
    "$id": "kw.Distinct",
    "x-version": 1,
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 2},
        "groups": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "minItems": 2},
            "minProperties": 2,
        },
    },
    "required": ["tags", "groups"],
}


@pytest.fixture(params=["run time", "generated"])
def distinct_type(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[type]:
    yield from _kw_type(request.param, tmp_path, "Distinct", DISTINCT)


@pytest.mark.parametrize(
    ("change", "where", "noun", "path"),
    [
        ({"tags": ["a", "a"]}, "tags", "item", "$.tags"),
        ({"groups": msgspec.Raw(b"\x82\xa1x\x92\x01\x02\xa1x\x92\x03\x04")}, "groups", "key", "$.groups"),
        ({"groups": {"x": [1, 1], "y": [3, 4]}}, "groups['x']", "item", "$.groups.x"),
    ],
    ids=["an item twice in a set", "a key twice in a map", "an item twice in a set in a map"],
)
def test_repeats_on_the_wire_do_not_make_a_set_or_map_that_is_too_small(
    distinct_type: type, change: dict[str, Any], where: str, noun: str, path: str
) -> None:
    """msgspec counts ``minItems`` and ``minProperties`` on the wire's array or map, where a repeat
    made one item or entry of two: a peer sent a set or map smaller than its minimum, which a
    decoder took (and an encoder refused). The error's path names the field (it stopped at the
    struct, ``$``, before struct rules' paths were joined to msgspec's)."""
    good = distinct_type(tags=frozenset("ab"), groups={"x": frozenset({1, 2}), "y": frozenset({3, 4})})
    decoder = tw.Decoder(tw.Registry([distinct_type]))
    head = head_of(tw.Encoder().encode(good)[0])
    assert decoder.decode([frame_of(head)]) == good  # exactly at each minimum
    head[-1].update(change)
    with pytest.raises(tw.DecodeError) as info:
        decoder.decode([frame_of(head)])
    message = f"kw.Distinct.{where}: expected at least 2 distinct {noun}s, got 1 (a repeated {noun} counts once)"
    assert (info.value.message, info.value.path, info.value.type_id, info.value.version) == (
        message,
        path,
        "kw.Distinct",
        1,
    )


def test_a_list_with_a_repeat_for_a_set_is_refused_on_encode(distinct_type: type) -> None:
    """The encoder's check decodes what it would send: the set it makes must hold the minimum too."""
    groups = {"x": frozenset({1, 2}), "y": frozenset({3, 4})}
    with pytest.raises(tw.EncodeError) as info:
        tw.Encoder().encode(distinct_type(tags=["a", "a"], groups=groups))
    assert (info.value.message, info.value.path, info.value.type_id) == (
        "kw.Distinct.tags: expected at least 2 distinct items, got 1 (a repeated item counts once)",
        "$.tags",
        "kw.Distinct",
    )


def test_unknown_fields_are_refused_by_a_closed_type_and_ignored_by_an_open_one(all_type: type) -> None:
    head = head_of(tw.Encoder().encode(all_type(**GOOD))[0])
    head[-1]["extra"] = 1
    with pytest.raises(tw.DecodeError, match=re.escape("kw.All v1: Object contains unknown field `extra`")):
        tw.Decoder(tw.Registry([all_type])).decode([frame_of(head)])


def test_an_open_type_ignores_unknown_fields(tmp_path: Path) -> None:
    doc = copy.deepcopy(ALL)
    doc.pop("additionalProperties")
    cls = tw.load_schemas(write_schemas(tmp_path / "s", {"kw/All.v1.json": doc})).type("kw.All")
    head = head_of(tw.Encoder().encode(cls(**GOOD))[0])
    head[-1]["extra"] = 1
    assert tw.Decoder(tw.Registry([cls])).decode([frame_of(head)]) == cls(**GOOD)


def test_limits_count_in_the_fingerprint_and_docs_do_not(tmp_path: Path) -> None:
    def fingerprint(change: Any) -> str:
        doc = copy.deepcopy(ALL)
        change(doc)
        path = tmp_path / str(len(list(tmp_path.iterdir())))
        return load_dir(write_schemas(path, {"kw/All.v1.json": doc})).messages[0].fingerprint

    base = fingerprint(lambda d: None)
    assert fingerprint(lambda d: d["properties"]["legacy"].update(deprecated=False)) == base
    assert fingerprint(lambda d: d["properties"]["secret"].pop("writeOnly")) == base
    assert fingerprint(lambda d: d.pop("examples")) == base
    for change in (
        lambda d: d["properties"]["code"].update(pattern="^[A-Z]*$"),
        lambda d: d["properties"]["count"].update(multipleOf=1),
        lambda d: d["properties"]["ratio"].update(exclusiveMaximum=2),
        lambda d: d["properties"]["tags"].update(maxItems=4),
        lambda d: d.pop("additionalProperties"),
        lambda d: d["properties"]["on"].update(const=False),
    ):
        assert fingerprint(change) != base


def _scalar(node: Node) -> ScalarT:
    assert isinstance(node, ScalarT)
    return node


def test_an_integer_s_bounds_are_merged_into_the_tightest_inclusive_range(tmp_path: Path) -> None:
    doc = {
        "$id": "kw.Range",
        "x-version": 1,
        "type": "object",
        "properties": {
            "a": {"type": "integer", "format": "int8", "minimum": -200, "exclusiveMaximum": 100},
            "b": {"type": "integer", "format": "uint64"},
            "c": {"type": "integer", "format": "int64", "exclusiveMinimum": 5.0, "maximum": 10},
            "d": {"type": "number", "minimum": 1, "exclusiveMinimum": 1},
        },
        "required": ["a", "b", "c", "d"],
    }
    struct = load_dir(write_schemas(tmp_path, {"kw/Range.v1.json": doc})).messages[0].struct
    a, b, c, d = (_scalar(f.type) for f in struct.fields)
    assert (a.minimum, a.maximum, a.exclusive_minimum, a.exclusive_maximum) == (-128, 99, False, False)
    assert (b.minimum, b.maximum) == (0, 2**64 - 1)
    assert (c.minimum, c.maximum) == (6, 10) and isinstance(c.minimum, int)
    assert (d.minimum, d.exclusive_minimum) == (1, True)  # of two equal bounds, the exclusive one


def test_an_optional_const_field_defaults_to_its_value_and_the_first_string_const_is_the_tag(tmp_path: Path) -> None:
    doc = {
        "$id": "kw.Tagged",
        "x-version": 1,
        "type": "object",
        "properties": {
            "kind": {"const": "tagged"},
            "unit": {"const": "px"},
            "n": {"type": "integer"},
        },
        "required": ["n"],
    }
    cls = tw.load_schemas(write_schemas(tmp_path, {"kw/Tagged.v1.json": doc})).type("kw.Tagged")
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType) and (info.tag_field, info.tag) == ("kind", "tagged")
    assert [(f.name, f.type, f.default) for f in info.fields] == [
        ("unit", mi.LiteralType(("px",)), "px"),
        ("n", mi.IntType(), msgspec.NODEFAULT),
    ]


def _one(prop: dict[str, Any], *, root: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "$id": "kw.One",
        "x-version": 1,
        "type": "object",
        "properties": {"x": prop},
        "required": ["x"],
        **(root or {}),
    }


REJECTED = [
    ({"type": "number", "format": "int32"}, "/properties/x/format", "format 'int32' does not apply to type 'number'"),
    (
        {"type": "integer", "format": "int128"},
        "/properties/x/format",
        "unknown integer format 'int128'; expected one of int8, int16, int32, int64, uint8",
    ),
    ({"type": "string", "format": "uuid"}, "/properties/x/format", "format 'uuid' is not checked; say what a valid"),
    (
        {"type": "string", "pattern": "("},
        "/properties/x/pattern",
        "invalid pattern (Python re): missing ), unterminated subpattern",
    ),
    ({"type": "string", "format": "bytes", "pattern": "a"}, "/properties/x/pattern", "pattern applies to text"),
    ({"type": "string", "minLength": 3, "maxLength": 2}, "/properties/x", "minLength 3 is above maxLength 2"),
    ({"type": "integer", "multipleOf": 1.5}, "/properties/x/multipleOf", "multipleOf of an integer must be whole"),
    ({"type": "integer", "exclusiveMinimum": 3, "maximum": 3}, "/properties/x", "no value fits: the lower bound 4"),
    ({"type": "number", "minimum": 1, "exclusiveMaximum": 1}, "/properties/x", "no value fits"),
    ({"const": 1.5}, "/properties/x/const", 'a number has no const (floats compare by range): write "minimum"'),
    ({"type": "string", "const": 3}, "/properties/x/type", "const integer 3 is not of type 'string'"),
    ({"const": 3, "maximum": 4}, "/properties/x/maximum", "keyword 'maximum' cannot be combined with 'const'"),
    (
        {"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 1},
        "/properties/x/minItems",
        "minItems does not apply to a tuple: prefixItems fixes its length",
    ),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 1}, "/properties/x", "minItems 2"),
    (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "maxProperties": 3},
        "/properties/x/maxProperties",
        "maxProperties counts the entries of a map",
    ),
    ({"type": "object", "additionalProperties": False}, "/properties/x", "an object needs properties (a struct)"),
    (
        {"type": "integer", "examples": [1, "two"]},
        "/properties/x/examples/1",
        "example does not fit the schema: expected int",
    ),
    (
        {"type": "array", "items": {"type": "integer", "maximum": 3}, "examples": [[1, 4]]},
        "/properties/x/examples/0",
        "at [1]: 4 is above the maximum 3",
    ),
    (
        {"x-tensor": {"shape": [2, "n"]}, "examples": [[[1, 2], [3, 4], [5, 6]]]},
        "/properties/x/examples/0",
        "dim 0 must be 2, got shape [3, 2]",
    ),
    (
        {"x-tensor": {}, "examples": [[[1, 2], [3]]]},
        "/properties/x/examples/0",
        "a tensor example is a rectangular nested list of numbers (rows of [1, 2])",
    ),
    ({"x-tensor": {}, "examples": [["a"]]}, "/properties/x/examples/0", "a tensor example is a rectangular"),
    ({"type": "string", "format": "bytes", "examples": ["%%"]}, "/properties/x/examples/0", "expected bytes as base64"),
    (
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "examples": [[1, 1]]},
        "/properties/x/examples/0",
        "items repeat in a set (uniqueItems)",
    ),
    (
        {"type": "array", "items": {"type": "number"}, "uniqueItems": True, "examples": [[1, 1.0]]},
        "/properties/x/examples/0",
        "items repeat in a set (uniqueItems)",
    ),
    (
        {"type": "array", "items": {"type": "number"}, "uniqueItems": True, "examples": [[0, -0.0]]},
        "/properties/x/examples/0",
        "items repeat in a set (uniqueItems)",
    ),
    ({"x-tree": {"max_depth": 2}, "examples": [[[[1]]]]}, "/properties/x/examples/0", "deeper than max_depth 2"),
    (
        {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "maxProperties": 1,
            "examples": [{"a": 1, "b": 2}],
        },
        "/properties/x/examples/0",
        "2 entries, more than the maximum 1",
    ),
    (
        {"type": "string", "pattern": "^a", "examples": ["ba"]},
        "/properties/x/examples/0",
        "string \"ba\" does not match the pattern '^a'",
    ),
]


@pytest.mark.parametrize(("prop", "pointer", "message"), REJECTED, ids=[r[2][:40] for r in REJECTED])
def test_a_keyword_used_wrongly_is_a_schema_error_at_its_place(
    tmp_path: Path, prop: dict[str, Any], pointer: str, message: str
) -> None:
    with pytest.raises(SchemaError, match=re.escape(f"{pointer}: ") + ".*" + re.escape(message)):
        load_dir(write_schemas(tmp_path, {"kw/One.v1.json": _one(prop)}))


def test_a_message_example_is_checked_as_a_whole_message(tmp_path: Path) -> None:
    for example, message in (
        ({"x": 1, "y": 2}, "example does not fit the schema: unknown field 'y' (additionalProperties is false)"),
        ({}, "example does not fit the schema: missing required field 'x'"),
        ({"x": "one"}, 'example does not fit the schema: at .x: expected int, got string "one"'),
    ):
        doc = _one({"type": "integer"}, root={"additionalProperties": False, "examples": [{"x": 1}, example]})
        with pytest.raises(SchemaError, match=re.escape(f"/examples/1: {message}")):
            load_dir(write_schemas(tmp_path / str(len(message)), {"kw/One.v1.json": doc}))


def test_closing_a_type_and_adding_a_field_break_the_side_their_rules_name(tmp_path: Path) -> None:
    """An old reader that rejects unknown fields refuses a new writer's added field
    (FIELD_ADDED_TO_CLOSED breaks old readers); a removed field an old writer still sends is
    refused by a new closed reader (FIELD_DELETED_FROM_CLOSED breaks old writers)."""
    from tensorwire.compat import compare

    def schema(*fields: str) -> dict[str, Any]:
        props = {name: {"type": "integer", "default": 0} for name in fields}
        return {"$id": "kw.C", "x-version": 1, "type": "object", "additionalProperties": False, "properties": props}

    def registry(name: str, *fields: str) -> tw.Registry:
        return tw.load_schemas(write_schemas(tmp_path / name, {"kw/C.v1.json": schema(*fields)}))

    old, grown, shrunk = registry("old", "a", "b"), registry("grown", "a", "b", "c"), registry("shrunk", "a")

    def travels(writer: tw.Registry, reader: tw.Registry, **values: int) -> bool:
        try:
            tw.Decoder(reader).decode(tw.Encoder().encode(writer.type("kw.C")(**values)))
        except tw.DecodeError as exc:
            assert "unknown field" in str(exc)
            return False
        return True

    rules = {f.rule: f.side for f in compare(load_dir(tmp_path / "old"), load_dir(tmp_path / "grown"))}
    assert rules["FIELD_ADDED_TO_CLOSED"] == "old readers" and "FIELD_ADDED_OPTIONAL" not in rules
    assert not travels(grown, old, c=1) and travels(old, grown, b=1)
    rules = {f.rule: f.side for f in compare(load_dir(tmp_path / "old"), load_dir(tmp_path / "shrunk"))}
    assert rules["FIELD_DELETED_FROM_CLOSED"] == "old writers"
    assert not travels(old, shrunk, b=1) and travels(shrunk, old, a=1)


LIMIT_CHANGES = [
    (
        {"type": "integer", "minimum": 0},
        {"type": "integer", "exclusiveMinimum": 0},
        "RANGE_TIGHTENED",
        "minimum 0 -> minimum 1",
    ),
    (
        {"type": "number", "maximum": 1},
        {"type": "number", "exclusiveMaximum": 1},
        "RANGE_TIGHTENED",
        "maximum 1 -> exclusiveMaximum 1",
    ),
    (
        {"type": "number", "exclusiveMaximum": 1},
        {"type": "number", "maximum": 1},
        "RANGE_LOOSENED",
        "exclusiveMaximum 1 -> maximum 1",
    ),
    (
        {"type": "integer", "multipleOf": 2},
        {"type": "integer", "multipleOf": 4},
        "RANGE_TIGHTENED",
        "multipleOf 2 -> 4",
    ),
    ({"type": "integer", "multipleOf": 4}, {"type": "integer", "multipleOf": 2}, "RANGE_LOOSENED", "multipleOf 4 -> 2"),
    ({"type": "number", "multipleOf": 0.5}, {"type": "number"}, "RANGE_LOOSENED", "multipleOf 0.5 dropped"),
    ({"type": "integer"}, {"type": "integer", "format": "int32"}, "RANGE_TIGHTENED", "minimum -2147483648 added"),
    ({"type": "string"}, {"type": "string", "minLength": 1}, "RANGE_TIGHTENED", "minLength 1 added"),
    (
        {"type": "string", "minLength": 2},
        {"type": "string", "minLength": 1},
        "RANGE_LOOSENED",
        "minLength 2 -> minLength 1",
    ),
    (
        {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
        "RANGE_TIGHTENED",
        "maxItems 3 -> maxItems 2",
    ),
    (
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1},
        "RANGE_TIGHTENED",
        "minProperties 1 added",
    ),
    ({"type": "integer"}, {"const": 1}, "CONST_ADDED", "must now be 1"),
    (
        {"type": "array", "items": {"const": "a"}},
        {"type": "array", "items": {"type": "string", "const": "b"}},
        "CONST_CHANGED",
        'items of field \'x\' of kw.L v1: const "a" -> "b"',
    ),
    ({"type": "string", "pattern": "^a"}, {"type": "string"}, "PATTERN_REMOVED", "no longer has to match '^a'"),
]


@pytest.mark.parametrize(("old", "new", "rule_id", "message"), LIMIT_CHANGES, ids=[c[3] for c in LIMIT_CHANGES])
def test_a_changed_limit_is_reported_with_its_keywords(
    tmp_path: Path, old: dict[str, Any], new: dict[str, Any], rule_id: str, message: str
) -> None:
    from tensorwire.compat import compare

    def load(name: str, prop: dict[str, Any]) -> Any:
        doc = {"$id": "kw.L", "x-version": 1, "type": "object", "properties": {"k": {"type": "integer"}, "x": prop}}
        doc["required"] = ["k", "x"]
        return load_dir(write_schemas(tmp_path / name, {"kw/L.v1.json": doc}))

    findings = [f for f in compare(load("old", old), load("new", new)) if f.rule != "VERSION_NOT_BUMPED"]
    assert [f.rule for f in findings] == [rule_id], [(f.rule, f.message) for f in findings]
    assert message in findings[0].message and findings[0].pointer == "/properties/x"


def test_a_union_example_is_checked_against_the_variant_its_tag_names(tmp_path: Path) -> None:
    def variant(type_id: str, tag: str) -> dict[str, Any]:
        props = {"kind": {"const": tag}, "n": {"type": "integer", "minimum": 0}}
        return {"$id": type_id, "x-version": 1, "type": "object", "properties": props, "required": ["n"]}

    union = {"oneOf": [{"$ref": "A.v1.json"}, {"$ref": "B.v1.json"}], "discriminator": {"propertyName": "kind"}}
    for example, message in (
        ({"kind": "c", "n": 1}, "expected an object whose 'kind' is one of ['a', 'b'], got object"),
        ({"kind": "b", "n": -1}, "at .n: -1 is below the minimum 0"),
    ):
        files = {
            "kw/A.v1.json": variant("kw.A", "a"),
            "kw/B.v1.json": variant("kw.B", "b"),
            "kw/One.v1.json": _one({**union, "examples": [{"kind": "a", "n": 0}, example]}),
        }
        with pytest.raises(
            SchemaError, match=re.escape(f"/properties/x/examples/1: example does not fit the schema: {message}")
        ):
            load_dir(write_schemas(tmp_path / str(len(message)), files))
