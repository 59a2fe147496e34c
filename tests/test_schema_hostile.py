"""Hostile schema files: what Python's JSON reader, the code generator or the tools would take and
get wrong is a ``SchemaError`` naming file, line:col, JSON pointer and what is expected."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

import tensorwire as tw
from tensorwire import SchemaError
from tensorwire.gen import render_package
from tensorwire.schema import load_dir
from tests.conftest import minimal, write_schemas


def _error(schema_dir: Path, files: dict[str, Any]) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        load_dir(write_schemas(schema_dir, files))
    return info.value


def _fields(error: SchemaError) -> tuple[str | None, int | None, int | None, str | None, str]:
    return error.file, error.line, error.col, error.pointer, error.message


def _text(props: str) -> str:
    """A schema file's text whose properties are ``props`` (JSON text), all on line 3."""
    return '{"$id": "h.Msg", "x-version": 1, "type": "object",\n "required": [],\n "properties": ' + props + "}\n"


def _col(text: str, line: int, token: str) -> int:
    """The column of ``token`` on line ``line`` of ``text``."""
    return text.splitlines()[line - 1].index(token) + 1


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_number_that_is_not_finite_is_refused_at_its_place(schema_dir: Path, literal: str) -> None:
    """Python reads NaN and Infinity (not JSON) and 1e400 (infinite as a double): the loader
    failed on them with an AssertionError, or generated ``maximum=inf`` (a NameError at import)."""
    props = '{"a": {"type": "number", "default": 0, "maximum": ' + literal + "}}"
    error = _error(schema_dir, {"h/Msg.v1.json": _text(props)})
    assert _fields(error) == (
        str(schema_dir / "h/Msg.v1.json"),
        3,
        _col(_text(props), 3, literal),
        "/properties/a/maximum",
        f"{literal} is not a finite number (JSON numbers here are finite doubles)",
    )


@pytest.mark.parametrize("value", [10**309, -(10**309)], ids=["large", "small"])
def test_a_number_default_written_as_an_integer_past_a_double_is_refused(schema_dir: Path, value: int) -> None:
    """JSON reads ``1000...0`` as an int, which no double holds: ``tensorwire gen`` and
    ``tw.load_schemas`` failed with an OverflowError turning the default into a float."""
    error = _error(schema_dir, {"h/Msg.v1.json": minimal("h.Msg", a={"type": "number", "default": value})})
    assert (error.pointer, error.message) == (
        "/properties/a/default",
        f"default of wrong type: {value} is out of a double's range",
    )


@pytest.mark.parametrize(
    ("prop", "pointer", "where", "value"),
    [
        ({"x-tree": {}, "default": {"a": [1, 2**64]}}, "/properties/t/default", 'at ["a"][1]: ', 2**64),
        ({"x-tree": {}, "default": [-(2**63) - 1]}, "/properties/t/default", "at [0]: ", -(2**63) - 1),
        ({"x-tree": {}, "default": None, "examples": [{"n": 2**70}]}, "/properties/t/examples/0", 'at ["n"]: ', 2**70),
    ],
    ids=["default", "least", "example"],
)
def test_an_integer_in_a_tree_that_the_wire_cannot_carry_is_refused(
    schema_dir: Path, prop: dict[str, Any], pointer: str, where: str, value: int
) -> None:
    """A tree's default or example was checked for its depth only: one holding an integer past
    msgpack's range loaded, and every message holding the default failed to encode (an
    ``EncodeError`` from ``Encoder.encode(Msg())``), as did the example."""
    error = _error(schema_dir, {"h/Msg.v1.json": minimal("h.Msg", t=prop)})
    what = "default of wrong type" if pointer.endswith("default") else "example does not fit the schema"
    assert (error.pointer, error.message) == (
        pointer,
        f"{what}: {where}{value} is outside the integers the wire carries "
        "(-9223372036854775808 .. 18446744073709551615)",
    )


@pytest.mark.parametrize(
    ("where", "pointer", "message"),
    [
        ("$id", "/$id", '$id "' + "x" * 56 + "... must have the form <namespace>.<Name>, e.g. media.Video"),
        ("dtype", "/properties/t/x-tensor/dtypes/0", 'unknown dtype "' + "x" * 56 + "...; expected one of bool, int8"),
        ("enum", "/properties/e/enum/0", 'enum members must be strings, got ["' + "x" * 55 + "..."),
    ],
)
def test_a_long_value_a_meta_schema_error_names_is_cut_short(
    schema_dir: Path, where: str, pointer: str, message: str
) -> None:
    """Other meta-schema errors cut the value they show at 60 characters, but a wrong ``$id``,
    dtype or enum member was shown whole: a value of a megabyte made a message of a megabyte."""
    big = "x" * 1_000_000
    if where == "$id":
        doc = minimal(big)
    elif where == "dtype":
        doc = minimal("h.Msg", t={"x-tensor": {"dtypes": [big]}})
    else:
        doc = minimal("h.Msg", e={"type": "string", "enum": [[big]], "x-enum-name": "E", "default": "x"})
    error = _error(schema_dir, {"h/Msg.v1.json": doc})
    assert error.pointer == pointer and error.message.startswith(message)
    assert len(str(error)) < 500


def test_an_integer_bound_past_a_double_is_checked_as_an_integer(schema_dir: Path) -> None:
    """The check that an integer's bound is whole turned it into a float first: ``maximum:
    1000...0`` (309 digits) failed with an OverflowError instead of loading (it bounds nothing the
    wire carries), and such a ``minimum`` instead of a ``SchemaError``."""
    root = write_schemas(schema_dir, {"h/Msg.v1.json": minimal("h.Msg", n={"type": "integer", "maximum": 10**309})})
    assert "n: int\n" in render_package(load_dir(root))["h.py"]
    error = _error(schema_dir, {"h/Msg.v1.json": minimal("h.Msg", n={"type": "integer", "minimum": 10**309})})
    assert (error.pointer, error.message) == (
        "/properties/n/minimum",
        f"minimum {10**309}: no integer the wire carries (-9223372036854775808 .. 18446744073709551615) is on its side",
    )


def test_a_file_name_a_terminal_would_act_on_is_shown_escaped(schema_dir: Path) -> None:
    """A schema file named with ESC sequences was printed as it is by ``tensorwire gen`` and
    ``lint``: its name could clear the terminal or set its title."""
    error = _error(schema_dir, {"h/X\x1b[2J\x1b]0;t\x07.v1.json": minimal("h.X")})
    assert (error.file, error.message) == (
        str(schema_dir / "h/X\\x1b[2J\\x1b]0;t\\x07.v1.json"),
        "file name must be <Name>.v<N>.json, e.g. Video.v1.json",
    )
    assert str(error).isprintable()


def test_a_key_a_terminal_would_act_on_is_shown_escaped_in_the_pointer(schema_dir: Path) -> None:
    """The JSON pointer of a key holding ESC sequences was printed as it is."""
    doc = minimal("h.Msg", a={"type": "integer", "\x1b]0;t\x07": 1})
    error = _error(schema_dir, {"h/Msg.v1.json": doc})
    assert error.pointer == "/properties/a/\x1b]0;t\x07"  # the data keeps the key
    assert str(error).endswith(
        ": /properties/a/\\x1b]0;t\\x07: keyword '\\x1b]0;t\\x07' is not in the tensorwire subset"
    )


def test_a_lone_surrogate_is_refused_in_a_value_and_in_a_key(schema_dir: Path) -> None:
    """A lone surrogate (``\\ud800``) is no Unicode character: the fingerprint of an enum holding one
    failed with a UnicodeEncodeError, and ``gen`` left a generated module empty when a description
    held one."""
    props = '{"a": {"type": "string", "enum": ["x", "\\ud800"], "x-enum-name": "E", "default": "x"}}'
    error = _error(schema_dir, {"h/Msg.v1.json": _text(props)})
    assert _fields(error)[1:] == (
        3,
        _col(_text(props), 3, '"\\ud800"'),
        "/properties/a/enum/1",
        'string "\\ud800" holds a lone surrogate, not a Unicode character',
    )
    text = (
        '{"$id": "h.Msg", "x-version": 1, "type": "object", "required": [],\n'
        ' "properties": {"a": {"type": "integer", "default": 0, "\\udfffb": 1}}}\n'
    )
    error = _error(schema_dir, {"h/Msg.v1.json": text})
    assert _fields(error)[1:] == (
        2,
        _col(text, 2, '"\\udfffb"'),
        "/properties/a/\udfffb",
        'key "\\udfffb" holds a lone surrogate, not a Unicode character',
    )


def _enum_doc(values: list[str]) -> dict[str, Any]:
    doc = minimal("h.Msg")
    doc["properties"]["e"] = {"type": "string", "enum": values, "x-enum-name": "E", "default": values[-1]}
    return doc


@pytest.mark.parametrize(
    ("values", "index", "message"),
    [
        (["\u00bd", "x"], 0, "enum value '\u00bd' makes the member name '\u00bd', which is not a Python name"),
        (
            ["_missing_", "x"],
            0,
            "enum value '_missing_' makes the member name '_MISSING_': Python's enum takes a name starting with "
            "'__', or starting and ending with '_', for one of its own, not for a member",
        ),
        (
            ["__init__", "x"],
            0,
            "enum value '__init__' makes the member name '__INIT__': Python's enum takes a name starting with "
            "'__', or starting and ending with '_', for one of its own, not for a member",
        ),
        (
            ["_e__x", "y"],
            0,
            "enum value '_e__x' makes the member name '_E__X': Python's enum takes a name starting with '_E__' for "
            "a private attribute of class E, not for a member",
        ),
        (
            ["\U0001d426\U0001d42b\U0001d428", "x"],
            0,
            "enum value '\U0001d426\U0001d42b\U0001d428' makes the member name '\U0001d426\U0001d42b\U0001d428', "
            "read as 'mro', which Python's enum refuses",
        ),
        (
            ["H", "\u210c"],
            1,
            "enum values 'H' and '\u210c' map to the same member name '\u210c' "
            "(as Python reads names, NFKC-normalized)",
        ),
    ],
)
def test_an_enum_value_whose_member_python_would_not_make_is_refused(
    schema_dir: Path, values: list[str], index: int, message: str
) -> None:
    """The generated enum failed at import (``½`` is no name; ``_MISSING_`` is reserved; ``H`` and
    ``\u210c`` are one name to Python; ``\U0001d426\U0001d42b\U0001d428`` is ``mro`` to Python) or
    silently had no member for the value, so neither back end encoded or decoded it (``__INIT__``;
    ``_E__X`` in enum ``E``, a private name)."""
    error = _error(schema_dir, {"h/Msg.v1.json": _enum_doc(values)})
    assert (error.pointer, error.message) == (f"/properties/e/enum/{index}", message)


def test_an_enum_member_has_the_name_python_reads_in_both_back_ends(schema_dir: Path) -> None:
    """A name Python reads NFKC-normalized (a bold ``a`` is ``a``) named its member ``a`` in the
    generated module and the bold ``a`` in the class ``load_schemas`` built, so ``E.a`` (as a
    caller's source reads either spelling) worked with one back end and not the other."""
    bold_a = "\U0001d41a"
    doc = _enum_doc([bold_a, "b"])
    root = write_schemas(schema_dir, {"h/Msg.v1.json": doc})
    module = ast.parse(render_package(load_dir(root))["h.py"])
    (enum_class,) = [n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "E"]
    assigns = [s for s in enum_class.body if isinstance(s, ast.Assign)]
    generated = [t.id for s in assigns for t in s.targets if isinstance(t, ast.Name)]
    loaded = type(tw.load_schemas(root).type("h.Msg")(value=1).e)
    assert generated == list(loaded.__members__) == ["a", "B"]
    assert loaded.a.value == bold_a


@pytest.mark.parametrize(
    ("where", "pointer", "message"),
    [
        (
            "field",
            "/properties/a\n",
            "field name 'a\\n' must be ASCII letters, digits and underscores, not starting with a digit",
        ),
        ("enum", "/properties/e/x-enum-name", "x-enum-name 'E\\n' must be letters and digits, starting with a capital"),
        ("defs", "/$defs/D\n", "$defs name 'D\\n' must be letters and digits, starting with a capital"),
    ],
)
def test_a_name_with_a_trailing_newline_is_refused(schema_dir: Path, where: str, pointer: str, message: str) -> None:
    """The meta-schema's patterns end in ``$``, which Python's ``re`` also matches before a last
    newline: such a name was written into the generated module, which then did not compile."""
    doc = minimal("h.Msg")
    if where == "field":
        doc["properties"] = {"a\n": {"type": "integer"}}
        doc["required"] = ["a\n"]
    elif where == "enum":
        doc["properties"]["e"] = {"type": "string", "enum": ["x"], "x-enum-name": "E\n", "default": "x"}
    else:
        doc["properties"]["d"] = {"$ref": "#/$defs/D\n", "default": None}
        doc["$defs"] = {"D\n": {"type": ["integer", "null"]}}
    error = _error(schema_dir, {"h/Msg.v1.json": doc})
    assert (error.pointer, error.message) == (pointer, message)


def _keyword_named(where: str) -> dict[str, Any]:
    if where == "message":
        return {"h/None.v1.json": minimal("h.None")}
    doc = minimal("h.Msg")
    if where == "enum":
        doc["properties"]["e"] = {"type": "string", "enum": ["x"], "x-enum-name": "True", "default": "x"}
    else:
        doc["properties"]["o"] = {
            "type": "object",
            "title": "False",
            "properties": {"b": {"type": "integer"}},
            "required": ["b"],
        }
        doc["required"].append("o")
    return {"h/Msg.v1.json": doc}


@pytest.mark.parametrize(
    ("where", "pointer", "name"),
    [("message", "/$id", "None"), ("enum", "/properties/e", "True"), ("title", "/properties/o", "False")],
)
def test_a_class_name_that_is_a_python_keyword_is_refused(
    schema_dir: Path, where: str, pointer: str, name: str
) -> None:
    """``class None(...)`` was written into the generated module, which then did not compile."""
    error = _error(schema_dir, _keyword_named(where))
    message = f"type name {name!r} is a Python keyword, which cannot name a generated class"
    assert (error.pointer, error.message) == (pointer, message)


def test_a_namespace_that_is_a_python_keyword_is_refused(schema_dir: Path) -> None:
    """``from . import class`` was written into the generated package, which then did not compile."""
    error = _error(schema_dir, {"class/Msg.v1.json": minimal("class.Msg")})
    assert (error.file, error.message) == (
        str(schema_dir / "class" / "Msg.v1.json"),
        "namespace 'class' is a Python keyword, which cannot name the generated module",
    )


def test_a_message_class_name_another_message_type_takes_is_refused(schema_dir: Path) -> None:
    """``h.Msg`` v1 (beside v2) and ``h.MsgV1`` were both generated as ``class MsgV1``: the second
    replaced the first, so the generated registry had no ``h.Msg`` v1."""
    files = {
        "h/Msg.v1.json": minimal("h.Msg"),
        "h/Msg.v2.json": minimal("h.Msg", 2),
        "h/MsgV1.v1.json": minimal("h.MsgV1"),
    }
    error = _error(schema_dir, files)
    assert (error.file, error.pointer, error.message) == (
        str(schema_dir / "h" / "MsgV1.v1.json"),
        "/$id",
        f"message class name h.MsgV1 of h.MsgV1 v1 clashes with the message class of h.Msg declared in "
        f"{schema_dir / 'h' / 'Msg.v1.json'}; rename one",
    )


def test_a_title_with_a_trailing_newline_is_not_a_class_name(schema_dir: Path) -> None:
    doc = minimal("h.Msg")
    doc["properties"]["o"] = {
        "type": "object",
        "title": "Named\n",
        "properties": {"b": {"type": "integer"}},
        "required": ["b"],
    }
    doc["required"].append("o")
    (nested,) = load_dir(write_schemas(schema_dir, {"h/Msg.v1.json": doc})).named
    assert nested.name == "MsgO"


@pytest.mark.parametrize(
    "description",
    [
        'ends with a quote"',
        'two quotes""',
        'three """ inside and one at the end"',
        "a NUL \x00, a CR \r, a DEL \x7f",
        "\\",
        "an override \u202e }; x = 1 { \u2066, a mark \u200f, separators \u2028 \u2029 \x85",
    ],
)
def test_a_description_is_the_generated_docstring_exactly(tmp_path: Path, description: str) -> None:
    """A description ending with a quote ended the generated docstring early (a SyntaxError at
    import), two quotes there were lost, and a NUL made the module uncompilable. A bidirectional
    control was written as it is, which makes an editor show the line reordered ("trojan source"),
    and a line separator, at which an editor breaks a line that Python reads as one."""
    doc = minimal("h.Msg")
    doc["$defs"] = {"E": {"type": "string", "enum": ["x"], "x-enum-name": "E", "description": description}}
    doc["properties"]["e"] = {"$ref": "#/$defs/E", "default": "x"}
    schemas = load_dir(write_schemas(tmp_path / "schemas", {"h/Msg.v1.json": doc}))
    source = render_package(schemas)["h.py"]
    module = ast.parse(source)
    (enum_class,) = [n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "E"]
    assert ast.get_docstring(enum_class, clean=False) == description
    assert re.search("[\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\x85]", source) is None


def test_a_uint64_field_builds_in_both_back_ends_and_keeps_its_range(tmp_path: Path) -> None:
    """msgspec checks integer bounds in the int64 range only: ``format: uint64`` (bounds 0 ..
    2**64-1) made classes that failed to build, at import of the generated module and in
    ``load_schemas``. Its upper bound is the wire's own, so only ``ge=0`` is written."""
    doc = minimal("h.Msg", n={"type": "integer", "format": "uint64"})
    root = write_schemas(tmp_path / "schemas", {"h/Msg.v1.json": doc})
    assert "n: Annotated[int, msgspec.Meta(ge=0)]" in render_package(load_dir(root))["h.py"]
    registry = tw.load_schemas(root)
    cls = registry.type("h.Msg")
    assert tw.Decoder(registry).decode(tw.Encoder().encode(cls(n=2**64 - 1))) == cls(n=2**64 - 1)
    with pytest.raises(tw.EncodeError, match=re.escape("Expected `int` >= 0 - at `$.n`")):
        tw.Encoder().encode(cls(n=-1))


@pytest.mark.parametrize(
    ("node", "keyword", "message"),
    [
        (
            {"type": "integer", "maximum": 10**19},
            "maximum",
            "maximum 10000000000000000000: msgspec checks integer bounds in the int64 range only "
            "(-9223372036854775808 .. 9223372036854775807)",
        ),
        (
            {"type": "integer", "minimum": 2**64},
            "minimum",
            "minimum 18446744073709551616: no integer the wire carries "
            "(-9223372036854775808 .. 18446744073709551615) is on its side",
        ),
        (
            {"type": "integer", "multipleOf": 2**63},
            "multipleOf",
            "multipleOf 9223372036854775808 is past what msgspec checks (int64)",
        ),
        ({"type": "number", "maximum": 10**400}, "maximum", f"maximum {10**400}: out of a double's range"),
        ({"const": 2**63}, "const", "const 9223372036854775808 is past what msgspec checks (int64)"),
        (
            {"type": "string", "maxLength": 2**63},
            "maxLength",
            "maxLength 9223372036854775808 is past what msgspec checks (a length of at most 9223372036854775807)",
        ),
        (
            {"type": "array", "items": {"type": "integer"}, "minItems": 10**30},
            "minItems",
            f"minItems {10**30} is past what msgspec checks (a length of at most 9223372036854775807)",
        ),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 2**64},
            "maxProperties",
            "maxProperties 18446744073709551616 is past what msgspec checks (a length of at most 9223372036854775807)",
        ),
        ({"const": -(2**63) - 1}, "const", "const -9223372036854775809 is past what msgspec checks (int64)"),
        (
            {"type": "integer", "default": 2**64},
            "default",
            "default of wrong type: 18446744073709551616 is outside the integers the wire carries "
            "(-9223372036854775808 .. 18446744073709551615)",
        ),
    ],
)
def test_a_bound_msgspec_cannot_check_is_refused_at_its_keyword(
    schema_dir: Path, node: dict[str, Any], keyword: str, message: str
) -> None:
    """Such a bound loaded, and the classes of the schema then failed to build with msgspec's
    ValueError (generated code at import, ``load_schemas`` at once)."""
    error = _error(schema_dir, {"h/Msg.v1.json": minimal("h.Msg", n=node)})
    assert (error.pointer, error.message) == (f"/properties/n/{keyword}", message)


def _arrays(levels: int, leaf: dict[str, Any]) -> dict[str, Any]:
    node = leaf
    for _ in range(levels):
        node = {"type": "array", "items": node}
    return node


_TOO_DEEP = (
    "types nested deeper than 200 levels, counting through $ref (the tools and generated code walk a type recursively)"
)


def test_a_chain_of_refs_deeper_than_the_limit_is_a_schema_error_not_a_recursion_error(schema_dir: Path) -> None:
    """Each file's nesting is bounded, but a chain of ``$ref``s (between ``$defs`` or files) was
    followed recursively: a RecursionError (exit 3) from a few KiB of schema."""
    defs = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(300)}
    defs["D300"] = {"type": "integer"}
    doc = minimal("h.Msg", a={"$ref": "#/$defs/D0"})
    doc["$defs"] = defs
    error = _error(schema_dir / "defs", {"h/Msg.v1.json": doc})
    assert (error.pointer, error.message) == ("/$defs/D198", _TOO_DEEP)  # with the message and its field: 200
    files = {f"h/M{i}.v1.json": minimal(f"h.M{i}", a={"$ref": f"M{i + 1}.v1.json"}) for i in range(150)}
    files["h/M150.v1.json"] = minimal("h.M150")
    error = _error(schema_dir / "files", files)
    assert (error.file, error.pointer, error.message) == (
        str(schema_dir / "files/h/M100.v1.json"),
        "/properties/a",
        _TOO_DEEP,
    )


def test_a_type_built_once_and_referenced_deep_counts_its_own_levels(schema_dir: Path) -> None:
    """A ``$defs`` entry is built once: one reached again under many levels adds its own."""
    doc = minimal("h.Msg", a={"$ref": "#/$defs/D"}, b={"$ref": "#/$defs/E"}, c={"$ref": "#/$defs/F"})
    doc["$defs"] = {
        "D": _arrays(90, {"type": "integer"}),
        "E": _arrays(90, {"$ref": "#/$defs/D"}),
        "F": _arrays(90, {"$ref": "#/$defs/E"}),
    }
    error = _error(schema_dir, {"h/Msg.v1.json": doc})
    assert (error.pointer, error.message) == ("/$defs/F" + "/items" * 90 + "/$ref", _TOO_DEEP)


def test_a_type_as_deep_as_one_file_can_nest_still_loads(schema_dir: Path) -> None:
    doc = minimal("h.Msg", a=_arrays(95, {"$ref": "#/$defs/D"}))
    doc["$defs"] = {"D": _arrays(95, {"type": "integer"})}
    (message,) = load_dir(write_schemas(schema_dir, {"h/Msg.v1.json": doc})).messages
    assert message.type_id == "h.Msg"


_NESTED = "a repeated part holds a quantifier that is not of fixed count"
_OVERLAP = "a repeated part holds an alternation whose branches can start with the same character"


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("a{99999999999}", "the repetition number is too large"),
        ("(" * 1000 + "a" + ")" * 1000, "groups nested too deeply"),
    ],
    ids=["repeat", "groups"],
)
def test_a_pattern_python_cannot_compile_is_refused_at_its_keyword(schema_dir: Path, pattern: str, why: str) -> None:
    """Only ``re.error`` was taken for an invalid pattern: a repeat count past what ``re`` takes
    (``OverflowError``) and groups nested past the recursion limit of its parser
    (``RecursionError``) escaped ``load_schemas`` and were an internal error (exit 3) of the tools."""
    error = _error(schema_dir, {"h/Msg.v1.json": minimal("h.Msg", s={"type": "string", "pattern": pattern})})
    assert (error.pointer, error.message) == ("/properties/s/pattern", f"invalid pattern (Python re): {why}")


@pytest.mark.parametrize(
    ("pattern", "example", "why"),
    [
        ("^(a+)+$", "a" * 12 + "!", _NESTED),
        ("^(a|aa)+$", "a" * 12 + "!", _OVERLAP),
        ("^(ab|a.)+$", "ab" * 6 + "!", _OVERLAP),
        ("^([a-z]+-?)*$", "a" * 12 + "!", _NESTED),
        ("^(?>(a*)*b)", "a" * 12, _NESTED),
        ("^(-(a+)+)*$", "-" + "a" * 12 + "!", _NESTED),  # the inner repeat is not fenced off by the outer's "-"
        ("^(-.+)*$", "-a" * 12 + "\n\n", _NESTED),  # "." takes the "-" each repeat starts with
        ("^(\\w+\\s?)*$", "a" * 12 + "!", _NESTED),  # the repeat starts with what "\\w+" takes
        ("^(-a*-?a*)*$", "-a" * 12 + "!", _NESTED),
        ("^(-[a-z]+x?)*$", "-ax" * 12 + "!", _NESTED),  # what follows "[a-z]+" ("x?") can be what it takes
        ("^(-(?:[a-z]+)x?)*$", "-ax" * 12 + "!", _NESTED),
        ("^(\\.(-{0,2})?)*$", "." * 12 + "!", _NESTED),  # "(-{0,2})?" matches nothing in two ways
    ],
)
def test_a_pattern_that_backtracks_exponentially_is_refused_before_it_runs(
    schema_dir: Path, pattern: str, example: str, why: str
) -> None:
    """A default or example was searched with such a pattern at load: ``tensorwire schemas`` hung
    (2**n steps), as every decode of a peer's string in that field would."""
    field = {"type": "string", "pattern": pattern, "default": example, "examples": [example]}
    props = json.dumps({"a": field})
    error = _error(schema_dir, {"h/Msg.v1.json": _text(props)})
    assert _fields(error)[:4] == (
        str(schema_dir / "h/Msg.v1.json"),
        3,
        _col(_text(props), 3, json.dumps(pattern)),
        "/properties/a/pattern",
    )
    assert error.message.startswith(
        f"pattern {pattern!r} can backtrack through exponentially many ways to match a string: {why}"
    )
    assert "possessive" in error.message


@pytest.mark.parametrize(
    ("pattern", "good"),
    [
        ("^[a-z_]+$", "a_b"),
        ("^[a-z]+(-[a-z]++)*$", "ab-cd"),
        ("^(?>[a-z]+-?)*$", "ab-cd"),
        ("^(foo|bar)+$", "barfoo"),
        ("^(\\d{3}\\.){3}\\d+$", "127.000.000.1"),
        ("^(a|b|c)*x", "abcx"),
        ("^[a-z]+(-[a-z]+)*$", "ab-cd-e"),  # each repeat starts with a "-" that "[a-z]+" cannot take
        ("^\\w+(,\\s*\\w+)*$", "a, b,c"),
        ("(?i)^(-[A-Z]+)*$", "-ab-C"),
        ("^(\\.\\d+)*$", ".1.25"),
        ("^(\\d{1,3}\\.){3}\\d{1,3}$", "127.0.0.1"),  # a "." that "\\d{1,3}" cannot take follows it
        ("^((\\d+)[a-z])+$", "1a22b"),
    ],
)
def test_a_pattern_that_cannot_backtrack_exponentially_loads_and_checks(
    schema_dir: Path, pattern: str, good: str
) -> None:
    field = {"type": "string", "pattern": pattern, "default": "Z!"}
    error = _error(schema_dir, {"h/Msg.v1.json": _text(json.dumps({"a": field}))})
    assert (error.pointer, error.message) == (
        "/properties/a/default",
        f'default of wrong type: string "Z!" does not match the pattern {pattern!r}',
    )
    field["default"] = good
    assert load_dir(write_schemas(schema_dir, {"h/Msg.v1.json": _text(json.dumps({"a": field}))})).messages


def _enum_field(members: list[Any]) -> dict[str, Any]:
    return {"a": {"type": "string", "enum": members, "x-enum-name": "E", "default": "s0"}}


def test_a_long_enum_of_mixed_items_is_checked_in_one_pass(schema_dir: Path) -> None:
    """jsonschema compares the items of an array it cannot sort (ints and strings) pairwise: 8,000
    members took 8.5 s, a 16 MiB file hung. Repeats are now found in one pass, and checking stops at
    100 problems."""
    members: list[Any] = [i if i % 2 else f"s{i}" for i in range(20_000)]
    started = time.monotonic()
    error = _error(schema_dir, {"h/Msg.v1.json": _text(json.dumps(_enum_field(members)))})
    assert time.monotonic() - started < 10
    assert len(error.errors) == 100
    assert (error.pointer, error.message) == ("/properties/a/enum/1", "enum members must be strings, got 1")


@pytest.mark.parametrize(
    ("members", "pointer", "message"),
    [
        (["s0", "b", "s0"], "/properties/a/enum/2", 'item 2 ("s0") repeats item 0: the items must be unique'),
        (["s0", 1, "b", 1.0], "/properties/a/enum/3", "item 3 (1.0) repeats item 1: the items must be unique"),
        (["s0", {"k": [1]}, {"k": [1.0]}], "/properties/a/enum/2", "repeats item 1: the items must be unique"),
    ],
)
def test_a_repeated_item_is_named_at_its_place(
    schema_dir: Path, members: list[Any], pointer: str, message: str
) -> None:
    text = _text(json.dumps(_enum_field(members)))
    error = _error(schema_dir, {"h/Msg.v1.json": text})
    (repeat,) = [p for p in error.errors if "repeats" in p.message]
    assert (repeat.pointer, repeat.message.endswith(message)) == (pointer, True)
    assert (repeat.line, repeat.file) == (3, str(schema_dir / "h/Msg.v1.json"))


def test_true_and_1_are_not_a_repeat(schema_dir: Path) -> None:
    error = _error(schema_dir, {"h/Msg.v1.json": _text(json.dumps(_enum_field(["s0", True, 1])))})
    assert not [p for p in error.errors if "repeats" in p.message]


@pytest.mark.parametrize("target", ["outside", "inside"])
def test_a_schema_file_that_is_a_symbolic_link_is_refused_unread(schema_dir: Path, tmp_path: Path, target: str) -> None:
    """A link such as ``ns/Pass.v1.json -> /etc/passwd`` was followed: any file the user can read
    was parsed (and one holding a schema loaded as part of the tree)."""
    write_schemas(schema_dir, {"h/Msg.v1.json": minimal("h.Msg")})
    outside = write_schemas(tmp_path / "elsewhere", {"h/Other.v1.json": minimal("h.Other")})
    link = schema_dir / "h" / "Other.v1.json"
    link.symlink_to(outside / "h/Other.v1.json" if target == "outside" else schema_dir / "h/Msg.v1.json")
    with pytest.raises(SchemaError) as info:
        load_dir(schema_dir)
    assert _fields(info.value) == (
        str(link),
        None,
        None,
        None,
        "cannot read schema file: a symbolic link (schema files are read as regular files only, never through a link)",
    )


def test_an_x_version_longer_than_a_tag_carries_is_refused(schema_dir: Path) -> None:
    """A version of 19 digits loaded, but the tag parser takes 18: ``inspect`` showed ``"type": null``."""
    from tensorwire._wire import parse_tag, tag
    from tensorwire.schema import MAX_VERSION

    version = MAX_VERSION + 1
    text = '{"$id": "h.Msg", "type": "object", "properties": {},\n "x-version": ' + str(version) + "}\n"
    error = _error(schema_dir, {f"h/Msg.v{version}.json": text})
    assert _fields(error) == (
        str(schema_dir / f"h/Msg.v{version}.json"),
        2,
        _col(text, 2, str(version)),
        "/x-version",
        f"x-version {version} is over {MAX_VERSION}: a message's tag carries a version of at most 18 digits",
    )
    assert parse_tag(tag("h.Msg", version)) is None
    doc = minimal("h.Msg", MAX_VERSION)
    schemas = load_dir(write_schemas(schema_dir / "top", {f"h/Msg.v{MAX_VERSION}.json": doc}))
    assert parse_tag(tag("h.Msg", schemas.messages[0].version)) == (3, "h.Msg", MAX_VERSION)


def _nested_dirs(top: Path, levels: int) -> Path:
    """``top/a/a/.../a``, ``levels`` directories deep (deeper than Python's recursion limit)."""
    deepest = top
    for _ in range(levels):  # one at a time: Path.mkdir(parents=True) recurses too
        deepest /= "a"
        deepest.mkdir()
    return deepest


def test_a_directory_tree_deeper_than_the_recursion_limit_is_walked(schema_dir: Path) -> None:
    """Listing the schema files recursed once per directory: 1,200 nested directories (a checkout
    can hold them) made ``load_dir`` raise ``RecursionError`` (``tensorwire gen``: internal error)."""
    write_schemas(schema_dir, {"h/Msg.v1.json": minimal("h.Msg")})
    deepest = _nested_dirs(schema_dir / "h", 1200)
    try:
        assert [m.type_id for m in load_dir(schema_dir).messages] == ["h.Msg"]
        (deepest / "Stray.v1.json").write_text("{}")
        with pytest.raises(SchemaError) as info:
            load_dir(schema_dir)
        assert _fields(info.value) == (
            str(deepest / "Stray.v1.json"),
            None,
            None,
            None,
            "schema files live at <namespace>/<Name>.v<N>.json (namespace: lower_snake)",
        )
    finally:
        (deepest / "Stray.v1.json").unlink(missing_ok=True)
        os.removedirs(deepest)  # without recursion, up to h/, which holds Msg.v1.json


@pytest.mark.parametrize("tag", ["caf\u00e9", "astral.\U0001f600"])
def test_a_tag_that_is_not_ascii_is_refused(schema_dir: Path, tag: str) -> None:
    """msgspec's MessagePack decoder compared a struct's tag that is not ASCII with nothing (until
    the class had encoded one): a receiver that only decodes refused every message of such a type
    (``Invalid value 'café' - at `$.kind```), from generated and run-time classes alike."""
    doc = minimal("h.Msg", kind={"const": tag}, n={"type": "integer"})
    error = _error(schema_dir, {"h/Msg.v1.json": doc})
    assert (error.pointer, error.message) == (
        "/properties/kind/const",
        f"tag {tag!r} (the object's first string const) is not ASCII: msgspec's MessagePack decoder refuses "
        "a struct whose tag is not ASCII (until it has encoded one); use ASCII",
    )


class _CountedReads(tuple):  # type: ignore[type-arg]
    """A tuple that counts the passes over it."""

    passes = 0

    def __iter__(self) -> Any:
        type(self).passes += 1
        return super().__iter__()


@pytest.mark.parametrize("count", [20, 80])
def test_gen_reads_the_messages_a_fixed_number_of_times_however_many_there_are(schema_dir: Path, count: int) -> None:
    """Each message's class name and type info looked for its type's latest version and its own
    entry through every message: 2,000 messages took over a second to render. The set now indexes
    them once."""
    files = {f"h/M{i}.v{v}.json": minimal(f"h.M{i}", v) for i in range(count // 2) for v in (1, 2)}
    schemas = load_dir(write_schemas(schema_dir, files))
    counted = dataclasses.replace(schemas, messages=_CountedReads(schemas.messages))
    _CountedReads.passes = 0
    assert render_package(counted) == render_package(schemas)
    assert _CountedReads.passes <= 3  # the namespaces, the namespace's messages, the index: not one per message


def test_a_long_key_over_many_values_loads_in_memory_of_the_file_s_size(schema_dir: Path) -> None:
    """Where every value sat was indexed by its JSON pointer, and a tree default's integers were
    checked with a path made for each: both repeat every key above a value, so a long key over many
    values took memory of their product (a 260 KB file: 7.8 GB). Here a 60 KB file: 81 MB before."""
    import tracemalloc

    key = "k" * 20_000
    write_schemas(schema_dir, {"h/Msg.v1.json": minimal("h.Msg", t={"x-tree": {}, "default": {key: [0] * 2_000}})})
    tracemalloc.start()
    try:
        load_dir(schema_dir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000
    doc = minimal("h.Msg", t={"x-tree": {}, "default": {key: [0] * 2_000 + [{"a~/b": [1, 2**70]}]}})
    error = _error(schema_dir, {"h/Msg.v1.json": doc})  # the path of what is wrong is still told
    assert error.pointer == "/properties/t/default"
    assert error.message.startswith(f'default of wrong type: at ["{key}"][2000]["a~/b"][1]: 1180591620717411303424 is')
