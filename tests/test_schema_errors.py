"""Every rejection of the schema compiler: a SchemaError naming file, line:col, JSON pointer and expectation."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tensorwire import SchemaError
from tensorwire.rules import known_validators
from tensorwire.schema import load_dir
from tensorwire.schema._source import MAX_FILE_BYTES
from tests.conftest import CLIP, NOT_READ, make_not_read, minimal, write_schemas


def _load(schema_dir: Path, files: dict[str, Any]) -> None:
    load_dir(write_schemas(schema_dir, files))


def _clip(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(CLIP)
    change(doc)
    return doc


def _at(schema_dir: Path, rel: str, line: int, col: int, pointer: str) -> str:
    """Regex for the leading ``file:line:col: /pointer:`` of an error."""
    return re.escape(f"{schema_dir / rel}:{line}:{col}: {pointer}: ")


def test_unknown_keyword_names_file_line_col_pointer_and_keyword(schema_dir: Path) -> None:
    text = (
        "{\n"
        '  "$id": "media.Video",\n'
        '  "x-version": 1,\n'
        '  "type": "object",\n'
        '  "properties": {\n'
        '    "layout": {\n'
        '      "type": "object",\n'
        '      "patternProperties": {"^a": {"type": "string"}}\n'
        "    }\n"
        "  },\n"
        '  "required": ["layout"]\n'
        "}\n"
    )
    with pytest.raises(SchemaError) as info:
        _load(schema_dir, {"media/Video.v1.json": text})
    assert re.match(
        _at(schema_dir, "media/Video.v1.json", 8, 7, "/properties/layout/patternProperties")
        + re.escape(
            "keyword 'patternProperties' is not in the tensorwire subset; a map with any string keys is "
            '{"type": "object", "additionalProperties": {...}}'
        )
        + "$",
        str(info.value),
    ), str(info.value)


def test_unknown_keyword_at_the_root(schema_dir: Path) -> None:
    with pytest.raises(SchemaError, match=r"/allOf: keyword 'allOf' is not in the tensorwire subset"):
        _load(schema_dir, {"audio/Clip.v1.json": _clip(lambda d: d.update(allOf=[]))})


@pytest.mark.parametrize(
    ("keyword", "value", "instead"),
    [
        ("anyOf", [{"type": "string"}], "a union is a oneOf whose variants are objects told apart by discriminator"),
        ("nullable", True, 'a nullable field says so in its type: "type": ["string", "null"]'),
        ("definitions", {}, "nested types go in $defs"),
        ("unevaluatedProperties", False, '"additionalProperties": false rejects unknown fields'),
        ("dependentRequired", {"x": ["y"]}, 'fields that exclude or need each other: "x-constraints"'),
        ("if", {}, 'a rule across fields: "x-constraints", or a named check in "x-validators"'),
        ("example", 1, '"examples" is a list of examples'),
    ],
)
def test_an_unsupported_keyword_names_the_supported_way_to_say_it(
    schema_dir: Path, keyword: str, value: Any, instead: str
) -> None:
    doc = _clip(lambda d: d["properties"]["sample_rate"].update({keyword: value}))
    with pytest.raises(SchemaError) as info:
        _load(schema_dir, {"audio/Clip.v1.json": doc})
    pointer = f"/properties/sample_rate/{keyword}"
    assert f"{pointer}: keyword {keyword!r} is not in the tensorwire subset; {instead}" in str(info.value)
    assert str(info.value).count("\n") == 0, str(info.value)  # one problem, said once
    assert info.value.pointer == pointer and info.value.errors[0].message.startswith(f"keyword {keyword!r}")


def test_a_large_value_of_the_wrong_kind_is_shown_cut_short(schema_dir: Path) -> None:
    """jsonschema writes the whole value into its message: a title of a megabyte made an error of
    a megabyte."""
    text = (
        '{"$id": "p.Msg", "x-version": 1, "type": "object",\n'
        f' "title": {json.dumps({f"k{i}": "v" * 10 for i in range(20000)})},\n'
        ' "properties": {"a": {"type": "integer", "description": "x"}}, "required": ["a"]}\n'
    )
    with pytest.raises(SchemaError) as info:
        _load(schema_dir, {"p/Msg.v1.json": text})
    assert str(info.value) == (
        f"{schema_dir / 'p/Msg.v1.json'}:2:11: /title: "
        '{"k0": "vvvvvvvvvv", "k1": "vvvvvvvvvv", "k2": "vvvvvvvvv... is not of type \'string\''
    )
    assert [(p.pointer, p.line, p.col) for p in info.value.errors] == [("/title", 2, 11)]


def test_a_union_at_the_root_of_a_file_says_where_a_union_goes(schema_dir: Path) -> None:
    union = {"$id": "audio.Either", "x-version": 1, "oneOf": [{"$ref": "Clip.v1.json"}, {"$ref": "Clip.v1.json"}]}
    with pytest.raises(SchemaError) as info:
        _load(schema_dir, {"audio/Clip.v1.json": CLIP, "audio/Either.v1.json": union})
    assert str(info.value) == (
        f"{schema_dir / 'audio/Either.v1.json'}:4:3: /oneOf: a schema file is one object type; a union of "
        'types goes in a field of it: {"oneOf": [{"$ref": ...}, ...], "discriminator": {"propertyName": ...}}'
    )


def test_unresolvable_file_ref(schema_dir: Path) -> None:
    doc = minimal("audio.Holder", clip={"$ref": "../video/Nope.v1.json"})
    with pytest.raises(
        SchemaError,
        match=r"/properties/clip/\$ref: unresolvable \$ref '../video/Nope.v1.json': "
        r"no schema file 'video/Nope.v1.json'",
    ):
        _load(schema_dir, {"audio/Holder.v1.json": doc})


def test_unresolvable_def_ref(schema_dir: Path) -> None:
    doc = _clip(lambda d: d["properties"]["codec"].update({"$ref": "#/$defs/Missing"}))
    with pytest.raises(
        SchemaError, match=r"unresolvable \$ref '#/\$defs/Missing': expected #/\$defs/<Name> of audio/Clip.v1.json"
    ):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_id_must_match_the_path(schema_dir: Path) -> None:
    with pytest.raises(
        SchemaError,
        match=r"Other.v1.json:\d+:\d+: /\$id: "
        r"\$id 'audio.Clip' does not match the file's path \(expected 'audio.Other'\)",
    ):
        _load(schema_dir, {"audio/Other.v1.json": CLIP})


def test_version_must_match_the_file_name(schema_dir: Path) -> None:
    with pytest.raises(SchemaError, match=r"/x-version: x-version 1 does not match the file name \(expected 2\)"):
        _load(schema_dir, {"audio/Clip.v2.json": CLIP})


def test_duplicate_id_names_both_files(schema_dir: Path) -> None:
    with pytest.raises(
        SchemaError,
        match=r"Copy.v1.json:\d+:\d+: /\$id: duplicate \$id audio.Clip v1 \(also declared in .*Clip.v1.json\)",
    ):
        _load(schema_dir, {"audio/Clip.v1.json": CLIP, "audio/Copy.v1.json": CLIP})


def test_non_string_enum_member(schema_dir: Path) -> None:
    doc = _clip(lambda d: d["$defs"]["AudioCodec"].update(enum=["pcm", 1]))
    with pytest.raises(SchemaError, match=r"/\$defs/AudioCodec/enum/1: enum members must be strings, got 1"):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_unknown_dtype(schema_dir: Path) -> None:
    doc = _clip(lambda d: d["properties"]["samples"]["x-tensor"].update(dtypes=["float32", "float128"]))
    with pytest.raises(
        SchemaError,
        match=r"/properties/samples/x-tensor/dtypes/1: unknown dtype 'float128'; expected one of bool, int8",
    ):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_tree_depth_over_the_limit(schema_dir: Path) -> None:
    doc = _clip(lambda d: d["properties"]["extra"].update({"x-tree": {"max_depth": 65}}))
    with pytest.raises(SchemaError, match=r"/properties/extra/x-tree/max_depth: tree depth 65 is over the limit of 64"):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def _variant(type_id: str, tag: str | None) -> dict[str, Any]:
    doc = minimal(type_id, value={"type": "integer"})
    if tag is not None:
        doc["properties"] = {"kind": {"const": tag}, **doc["properties"]}
    return doc


def test_union_without_discriminator(schema_dir: Path) -> None:
    holder = minimal("u.Holder", item={"oneOf": [{"$ref": "A.v1.json"}, {"$ref": "B.v1.json"}]})
    with pytest.raises(
        SchemaError,
        match=r"/properties/item/oneOf: union without discriminator: 2 variants need discriminator.propertyName",
    ):
        _load(
            schema_dir,
            {"u/A.v1.json": _variant("u.A", "a"), "u/B.v1.json": _variant("u.B", "b"), "u/Holder.v1.json": holder},
        )


def test_union_variant_without_the_tag_property(schema_dir: Path) -> None:
    item = {"oneOf": [{"$ref": "A.v1.json"}, {"$ref": "B.v1.json"}], "discriminator": {"propertyName": "kind"}}
    holder = minimal("u.Holder", item=item)
    with pytest.raises(SchemaError, match=r"/properties/item/oneOf/1: variant u.B has no const property 'kind'"):
        _load(
            schema_dir,
            {"u/A.v1.json": _variant("u.A", "a"), "u/B.v1.json": _variant("u.B", None), "u/Holder.v1.json": holder},
        )


def test_union_variants_with_the_same_tag(schema_dir: Path) -> None:
    item = {"oneOf": [{"$ref": "A.v1.json"}, {"$ref": "B.v1.json"}], "discriminator": {"propertyName": "kind"}}
    holder = minimal("u.Holder", item=item)
    with pytest.raises(SchemaError, match=r"variant u.B repeats tag 'a' of variant 0"):
        _load(
            schema_dir,
            {"u/A.v1.json": _variant("u.A", "a"), "u/B.v1.json": _variant("u.B", "a"), "u/Holder.v1.json": holder},
        )


@pytest.mark.parametrize(
    ("prop", "message"),
    [
        ({"type": "integer", "default": "three"}, r"expected int, got string \"three\""),
        ({"type": "integer", "minimum": 1, "default": 0}, r"0 is below the minimum 1"),
        (
            {"type": "number", "multipleOf": 0.1, "default": 0.3},
            re.escape("0.3 is not a multiple of 0.1 as a double (fmod(0.3, 0.1) is 0.09999999999999998, as msgspec"),
        ),
        ({"type": "number", "multipleOf": 0.1, "default": 3}, re.escape("3 is not a multiple of 0.1 as a double")),
        ({"type": "integer", "multipleOf": 3, "default": 4}, r"4 is not a multiple of 3$"),
        (
            {"type": "array", "items": {"type": "number"}, "uniqueItems": True, "minItems": 2, "default": [1, 1.0]},
            re.escape("items repeat in a set (uniqueItems)"),
        ),
        ({"type": "string", "maxLength": 2, "default": "abc"}, r"longer than maxLength 2"),
        ({"type": "boolean", "default": None}, r"null is not allowed here \(the type is not nullable\)"),
        ({"type": "array", "items": {"type": "string"}, "default": [1]}, r"at \[0\]: expected str, got integer 1"),
        ({"type": "array", "prefixItems": [{"type": "integer"}], "default": [1, 2]}, r"expected array of 1 items"),
        ({"$ref": "#/$defs/AudioCodec", "default": "mp3"}, r"string \"mp3\" is not one of \['pcm', 'opus'\]"),
        ({"x-tensor": {}, "default": 0}, r"only null can be the default of a tensor field"),
        (
            {"type": "object", "additionalProperties": {"type": "number"}, "default": {"a": "x"}},
            r'at \["a"\]: expected float, got string',
        ),
    ],
)
def test_default_of_wrong_type(schema_dir: Path, prop: dict[str, Any], message: str) -> None:
    doc = _clip(lambda d: d["properties"].update(bad=prop))
    with pytest.raises(SchemaError, match=r"/properties/bad/default: default of wrong type: " + message):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


@pytest.mark.parametrize(
    ("prop", "pointer", "message"),
    [
        (
            {"type": "string", "minimum": 1},
            "/properties/bad/minimum",
            "keyword 'minimum' does not apply to type 'string'",
        ),
        (
            {"$ref": "#/$defs/AudioCodec", "type": "string"},
            "/properties/bad/type",
            "keyword 'type' cannot be combined with '\\$ref'",
        ),
        ({"type": "array"}, "/properties/bad", "an array needs items \\(a list\\) or prefixItems \\(a tuple\\)"),
        (
            {"type": "object"},
            "/properties/bad",
            "an object needs properties \\(a struct\\) or additionalProperties \\(a map of values of one schema",
        ),
        ({"type": "string", "enum": ["a"]}, "/properties/bad", "an enum needs x-enum-name"),
        ({"type": "null"}, "/properties/bad/type", "type 'null' alone carries no value"),
        ({"description": "untyped"}, "/properties/bad", "no type: expected one of type, \\$ref, enum, const, oneOf"),
        ({"x-tensor": {"rank": 2, "shape": [1, 2, 3]}}, "/properties/bad/x-tensor", "rank 2 disagrees with shape"),
        ({"x-ndarray": {"dtypes": ["bfloat16"]}}, "/properties/bad/x-ndarray/dtypes", "numpy has no dtype 'bfloat16'"),
        (
            {"type": "array", "uniqueItems": True, "items": {"x-tree": {}}},
            "/properties/bad/uniqueItems",
            "a set \\(uniqueItems\\) needs scalar",
        ),
    ],
)
def test_ill_formed_nodes(schema_dir: Path, prop: dict[str, Any], pointer: str, message: str) -> None:
    doc = _clip(lambda d: (d["properties"].update(bad=prop), d["required"].append("bad")))
    with pytest.raises(SchemaError, match=re.escape(pointer) + ": " + message):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_required_names_an_unknown_property(schema_dir: Path) -> None:
    with pytest.raises(SchemaError, match=r"/required/3: required names unknown property 'nope'"):
        _load(schema_dir, {"audio/Clip.v1.json": _clip(lambda d: d["required"].append("nope"))})


def test_optional_field_needs_a_default(schema_dir: Path) -> None:
    doc = _clip(lambda d: d["properties"].update(note={"type": "string"}))
    with pytest.raises(SchemaError, match=r"/properties/note: optional field 'note' needs a default"):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_required_field_with_a_default(schema_dir: Path) -> None:
    doc = _clip(lambda d: d["properties"]["sample_rate"].update(default=8000))
    with pytest.raises(SchemaError, match=r"field 'sample_rate' is required and has a default"):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_constraints_name_known_fields(schema_dir: Path) -> None:
    doc = _clip(lambda d: d.update({"x-constraints": {"at_most_one_of": ["extra", "nope"]}}))
    with pytest.raises(SchemaError, match=r"/x-constraints/at_most_one_of: at_most_one_of names unknown field 'nope'"):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_unknown_validator(schema_dir: Path) -> None:
    doc = _clip(lambda d: d.update({"x-validators": ["audio.no_such_rule"]}))
    known = known_validators()  # the built-ins' and those other test modules register
    assert "media.media_contract" in known
    registered = ", ".join(sorted(known))
    with pytest.raises(
        SchemaError,
        match=re.escape(f"/x-validators/0: unknown validator 'audio.no_such_rule'; registered: {registered}"),
    ):
        _load(schema_dir, {"audio/Clip.v1.json": doc})


def test_recursive_message_references(schema_dir: Path) -> None:
    a = minimal("r.A", b={"oneOf": [{"$ref": "B.v1.json"}, {"type": "null"}], "default": None})
    b = minimal("r.B", a={"$ref": "A.v1.json"})
    with pytest.raises(
        SchemaError,
        match=r"recursive reference \(.*A.v1.json -> .*B.v1.json -> .*A.v1.json\); "
        r"the subset has no recursive types, use x-tree",
    ):
        _load(schema_dir, {"r/A.v1.json": a, "r/B.v1.json": b})


def test_recursive_defs(schema_dir: Path) -> None:
    doc = minimal("r.Tree", root={"$ref": "#/$defs/Node"})
    doc["$defs"] = {
        "Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}, "required": ["child"]}
    }
    with pytest.raises(SchemaError, match=r"recursive reference through '#/\$defs/Node'; use x-tree"):
        _load(schema_dir, {"r/Tree.v1.json": doc})


def test_one_name_for_two_different_enums(schema_dir: Path) -> None:
    other = minimal("audio.Other", codec={"type": "string", "enum": ["wav"], "x-enum-name": "AudioCodec"})
    with pytest.raises(
        SchemaError,
        match=r"type name audio.AudioCodec is already defined differently at .*Clip.v1.json:\d+:\d+; rename one",
    ):
        _load(schema_dir, {"audio/Clip.v1.json": CLIP, "audio/Other.v1.json": other})


def test_nested_name_clashing_with_a_message_class(schema_dir: Path) -> None:
    doc = minimal(
        "audio.Track",
        clip={"type": "object", "title": "Clip", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    )
    with pytest.raises(
        SchemaError, match=r"/properties/clip: nested type name audio.Clip clashes with the message class declared in"
    ) as info:
        _load(schema_dir, {"audio/Clip.v1.json": CLIP, "audio/Track.v1.json": doc})
    assert (info.value.file, info.value.pointer) == (str(schema_dir / "audio" / "Track.v1.json"), "/properties/clip")
    assert info.value.line is not None and info.value.line > 1


def test_invalid_json_reports_line_and_column(schema_dir: Path) -> None:
    with pytest.raises(SchemaError, match=r"Clip.v1.json:3:3: invalid JSON: Expecting property name"):
        _load(schema_dir, {"audio/Clip.v1.json": '{"$id": "audio.Clip",\n  "x-version": 1,\n  x}'})


def test_an_integer_longer_than_python_reads_is_named_at_its_place(schema_dir: Path) -> None:
    limit = sys.get_int_max_str_digits()
    number = "1" + "0" * limit
    text = f'{{"$id": "p.Msg", "x-version": 1, "type": "object",\n "properties": {{"a": {{"maximum": {number}}}}}}}'
    with pytest.raises(SchemaError) as info:
        _load(schema_dir, {"p/Msg.v1.json": text})
    message = f"invalid JSON: an integer of {limit + 1} digits (Python reads integers of at most {limit})"
    assert str(info.value) == f"{schema_dir / 'p/Msg.v1.json'}:2:34: {message}"
    assert (info.value.line, info.value.col) == (2, 34)


def test_duplicate_json_keys(schema_dir: Path) -> None:
    """Named at the second place of the key, as every schema error names its place."""
    text = '{"$id": "audio.Clip", "x-version": 1,\n "properties": {"a": {}, "\\u0061": {}}, "x-version": 2}'
    with pytest.raises(SchemaError) as info:
        _load(schema_dir, {"audio/Clip.v1.json": text})
    where = f"{schema_dir / 'audio/Clip.v1.json'}:2:26"
    assert str(info.value) == f"{where}: /properties/a: invalid JSON: duplicate key 'a'"
    assert [(p.pointer, p.line, p.col) for p in info.value.errors] == [("/properties/a", 2, 26)]


@pytest.mark.parametrize(
    ("rel", "message"),
    [
        ("audio/clip.v1.json", r"file name must be <Name>.v<N>.json"),
        ("audio/Clip.v0.json", r"file name must be <Name>.v<N>.json"),
        ("Audio/Clip.v1.json", r"schema files live at <namespace>/<Name>.v<N>.json"),
        ("audio/deep/Clip.v1.json", r"schema files live at <namespace>/<Name>.v<N>.json"),
    ],
)
def test_file_layout(schema_dir: Path, rel: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        _load(schema_dir, {rel: CLIP})


def test_missing_required_keywords_are_each_named(schema_dir: Path) -> None:
    doc = {"$id": "audio.Clip", "type": "object"}
    with pytest.raises(SchemaError) as info:
        _load(schema_dir, {"audio/Clip.v1.json": doc})
    assert "missing required keyword 'x-version'" in str(info.value)
    assert "missing required keyword 'properties'" in str(info.value)


def test_empty_or_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"not a schema directory"):
        load_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SchemaError, match=r"no schema files found"):
        load_dir(tmp_path / "empty")


@pytest.mark.parametrize("kind", NOT_READ)
def test_only_a_regular_schema_file_of_a_bounded_size_is_read(kind: str, schema_dir: Path) -> None:
    """What a schema directory holds is input too: a FIFO would block the read, /dev/zero never
    end it; refused (as an oversized file is) before a byte is read."""
    path = schema_dir / "audio" / "Clip.v1.json"
    path.parent.mkdir(parents=True)
    why = make_not_read(path, kind, MAX_FILE_BYTES)
    if "link" in kind:
        why = "a symbolic link (schema files are read as regular files only, never through a link)"
    with pytest.raises(SchemaError) as info:
        load_dir(schema_dir)
    assert (info.value.message, info.value.file) == (f"cannot read schema file: {why}", str(path))


def test_a_schema_file_with_crlf_or_cr_newlines_names_the_same_place(schema_dir: Path) -> None:
    text = json.dumps(minimal("audio.Clip", value={"type": "integer", "minimum": 5, "maximum": 1}), indent=2)
    places = []
    for newline in ("\n", "\r\n", "\r"):
        path = schema_dir / newline.encode().hex() / "audio" / "Clip.v1.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(text.replace("\n", newline).encode())
        with pytest.raises(SchemaError) as info:
            load_dir(path.parent.parent)
        places.append((info.value.line, info.value.col, info.value.pointer, info.value.message))
    assert places[0] == places[1] == places[2] and (places[0][0] or 0) > 1


def test_errors_never_leak_jsonschema_or_python_exceptions(schema_dir: Path) -> None:
    """Garbage of every JSON type at the root is a SchemaError, not a crash."""
    documents: tuple[object, ...] = ([], 1, "x", None, {"$id": 3})
    for i, garbage in enumerate(documents):
        root = schema_dir / str(i)
        with pytest.raises(SchemaError):
            _load(root, {"audio/Clip.v1.json": json.dumps(garbage)})


@pytest.mark.parametrize("depth", [101, 200_000])
def test_a_file_nested_too_deep_is_refused_before_anything_recursive_reads_it(schema_dir: Path, depth: int) -> None:
    """A hostile schema file of deep arrays would run the parser, the index and the meta-schema
    check out of stack; it is refused where the nesting passes the limit."""
    head = '{"$id": "audio.Clip", "x-version": 1, "type": "object", "properties": {"x": {"examples": '
    text = head + "[" * depth + "]" * depth + "}}}"
    with pytest.raises(SchemaError, match=r"Clip.v1.json:1:\d+: nested deeper than 100 arrays and objects$") as info:
        _load(schema_dir, {"audio/Clip.v1.json": text})
    assert (info.value.line, info.value.col) == (1, len(head) + 98)  # level 101: the 98th "[" after 3 objects
    assert info.value.pointer is None


def test_brackets_inside_strings_do_not_count_as_nesting(schema_dir: Path) -> None:
    doc = minimal("audio.Clip", x={"type": "string", "description": "[" * 500 + '{"\\"[' * 50})
    _load(schema_dir, {"audio/Clip.v1.json": doc})


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("class", "field name 'class' is a Python keyword, which a generated class cannot declare"),
        ("__tw_rules__", "field name '__tw_rules__' starts with '__': Python renames such a name in a class body"),
        ("__secret", "field name '__secret' starts with '__': Python renames such a name in a class body"),
    ],
)
def test_a_field_name_no_class_can_declare_as_it_is(schema_dir: Path, name: str, message: str) -> None:
    doc = _clip(lambda d: d["properties"].update({name: {"type": "integer", "default": 3}}))
    with pytest.raises(SchemaError, match=re.escape(f"/properties/{name}: {message}")) as info:
        _load(schema_dir, {"audio/Clip.v1.json": doc})
    assert (info.value.pointer, info.value.file) == (f"/properties/{name}", str(schema_dir / "audio/Clip.v1.json"))
