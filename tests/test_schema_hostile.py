"""Hostile schema files: what Python's JSON reader, the code generator or the tools would take and
get wrong is a ``SchemaError`` naming file, line:col, JSON pointer and what is expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorwire import SchemaError
from tensorwire.schema import load_dir
from tests.conftest import write_schemas


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
