"""The meta-schema is a valid JSON Schema 2020-12 document that accepts the built-in schemas as editors see them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tensorwire.errors import SchemaError
from tensorwire.schema import load_dir, meta_schema
from tensorwire.schema._meta import MAX_META_ERRORS
from tensorwire.schema._source import read_source
from tests.conftest import BUILTIN_SCHEMAS, write_schemas

BUILTIN_FILES = sorted(p for p in BUILTIN_SCHEMAS.rglob("*.json") if p.parent.name != "meta")


def test_meta_schema_is_valid_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(meta_schema())


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=[p.name for p in BUILTIN_FILES])
def test_builtin_files_validate_against_the_meta_schema(path: Path) -> None:
    doc = json.loads(path.read_text())
    jsonschema.Draft202012Validator(meta_schema()).validate(doc)
    assert doc["$schema"] == "../meta/tensorwire.v1.json"
    assert (path.parent / doc["$schema"]).resolve() == (BUILTIN_SCHEMAS / "meta" / "tensorwire.v1.json").resolve()


def test_meta_schema_rejects_a_keyword_outside_the_subset() -> None:
    doc = {"$id": "a.B", "x-version": 1, "type": "object", "properties": {"x": {"type": "string", "if": {}}}}
    with pytest.raises(jsonschema.ValidationError, match=r"'if' was unexpected"):
        jsonschema.Draft202012Validator(meta_schema()).validate(doc)


def test_a_file_with_more_problems_than_are_reported_gives_the_same_ones_whatever_the_hash_seed(
    tmp_path: Path,
) -> None:
    """Checking stops at MAX_META_ERRORS problems: those are the file's first ones, not the first
    of a walk whose order the hash seed picks."""
    fields = {f"f{i}": {"type": "integer", f"odd{i}": 1, "minimum": "x"} for i in range(150)}
    doc = {"$id": "p.Msg", "x-version": 1, "type": "object", "properties": fields}
    write_schemas(tmp_path, {"p/Msg.v1.json": doc})
    script = (
        "import json, sys\n"
        "from tensorwire.errors import SchemaError\n"
        "from tensorwire.schema import load_dir\n"
        "try:\n"
        "    load_dir(sys.argv[1])\n"
        "except SchemaError as exc:\n"
        "    print(json.dumps([[p.pointer, p.message, p.line, p.col] for p in exc.errors]))\n"
    )
    reports = [
        subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    assert reports[0] == reports[1]
    problems = json.loads(reports[0])
    assert len(problems) == MAX_META_ERRORS
    assert [p[:2] for p in problems[:2]] == [
        ["/properties/f0/odd0", "keyword 'odd0' is not in the tensorwire subset"],
        ["/properties/f0/minimum", "'x' is not of type 'number'"],
    ]
    assert {p[0].split("/")[2] for p in problems} == {f"f{i}" for i in range(MAX_META_ERRORS // 2)}


def test_one_object_of_many_unknown_keywords_is_reported_up_to_the_limit(tmp_path: Path) -> None:
    """One jsonschema error names every unknown key of an object, and each problem found costs a
    walk over the file's text: the report stops at MAX_META_ERRORS problems, as across errors."""
    field = {"type": "integer", **{f"odd{i}": 1 for i in range(MAX_META_ERRORS + 50)}}
    doc = {"$id": "p.Msg", "x-version": 1, "type": "object", "properties": {"a": field}, "required": ["a"]}
    with pytest.raises(SchemaError) as info:
        load_dir(write_schemas(tmp_path, {"p/Msg.v1.json": doc}))
    assert [p.pointer for p in info.value.errors] == [f"/properties/a/odd{i}" for i in range(MAX_META_ERRORS)]
    assert info.value.errors[0].message == "keyword 'odd0' is not in the tensorwire subset"


def test_source_positions(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{\n  "a": {"b": [1, {"c": "x\\"y"}]},\n  "d/e": true\n}')
    source = read_source(path, "x.json")
    assert source.data == {"a": {"b": [1, {"c": 'x"y'}]}, "d/e": True}
    assert source.where("/a/b/1/c") == "x.json:2:24"
    assert source.where("/a/b/1/c", key=True) == "x.json:2:19"
    assert source.where("/d~1e") == "x.json:3:10"
    assert source.where("/a/b/7") == "x.json:2:14"  # nearest known ancestor


def test_the_meta_schema_s_dtypes_are_the_dtype_table_s() -> None:
    import json as _json

    from tensorwire.dtypes import DTYPE_NAMES
    from tensorwire.schema._meta import meta_schema_text

    meta = _json.loads(meta_schema_text())
    listed = meta["$defs"]["tensorSpec"]["properties"]["dtypes"]["items"]["enum"]
    assert listed == list(DTYPE_NAMES)


def test_every_keyword_the_compiler_applies_is_one_the_meta_schema_allows_and_back() -> None:
    import json as _json

    from tensorwire.schema import _keywords as keywords
    from tensorwire.schema._meta import meta_schema_text

    node = set(_json.loads(meta_schema_text())["$defs"]["node"]["properties"])
    applied = set().union(*keywords._APPLIES.values()) | keywords._DOC
    assert applied <= node, applied - node
    assert node - applied == {"$ref", "const", "x-tensor", "x-ndarray", "x-tree"}  # node kinds of their own
