"""tensorwire lint: each rule fires where it should (file, line, col, pointer, message), and only
there; rules turned off by flag and by configuration; formats; the git baseline; bad input."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tensorwire.cli import main
from tensorwire.lint import JSON_SCHEMA, RULES, Finding, lint, render, rules_table
from tensorwire.schema import load_dir
from tests.conftest import write_schemas

THING = "schemas/t/Thing.v1.json"


def _clean() -> dict[str, Any]:
    """A schema directory no rule objects to: a message with a documented field, a nested enum
    and a nested object (each used), and a second type that uses the first."""
    return {
        "t/Thing.v1.json": {
            "$id": "t.Thing",
            "x-version": 1,
            "description": "A thing.",
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "What it is called."},
                "mode": {"$ref": "#/$defs/Mode", "default": "fast", "description": "How fast it goes."},
                "status": {"$ref": "#/$defs/Status", "default": None, "description": "How it went."},
                "size_2d": {"type": "array", "items": {"type": "integer"}, "default": [], "description": "Size."},
            },
            "required": ["name"],
            "$defs": {
                "Mode": {
                    "type": "string",
                    "enum": ["fast", "slow_ish", "1080p"],
                    "x-enum-name": "Mode",
                    "description": "A speed.",
                },
                "Status": {
                    "type": ["object", "null"],
                    "description": "An outcome.",
                    "properties": {"ok": {"type": "boolean", "description": "Whether it worked."}},
                    "required": ["ok"],
                },
            },
        },
        "t/Box.v1.json": {
            "$id": "t.Box",
            "x-version": 1,
            "title": "Box",
            "type": "object",
            "properties": {
                "kind": {"const": "box"},
                "thing": {"$ref": "Thing.v1.json", "description": "What is inside."},
            },
            "required": ["thing"],
        },
    }


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs in its own directory, where no configuration applies but its own."""
    monkeypatch.chdir(tmp_path)


def _pos(path: str, needle: str) -> tuple[int, int]:
    """1-based line and column of the first ``needle`` in ``path``."""
    text = Path(path).read_text()
    offset = text.index(needle)
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _thing(docs: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = docs["t/Thing.v1.json"]
    return doc


def _rename_field(doc: dict[str, Any], old: str, new: str) -> None:
    doc["properties"] = {(new if k == old else k): v for k, v in doc["properties"].items()}
    doc["required"] = [new if k == old else k for k in doc["required"]]


def _rename_def(doc: dict[str, Any], old: str, new: str) -> None:
    doc["$defs"] = {(new if k == old else k): v for k, v in doc["$defs"].items()}
    for prop in doc["properties"].values():
        if prop.get("$ref") == f"#/$defs/{old}":
            prop["$ref"] = f"#/$defs/{new}"


def test_a_clean_directory_has_no_findings(capsys: pytest.CaptureFixture[str]) -> None:
    write_schemas(Path("schemas"), _clean())
    assert lint(load_dir("schemas")) == []
    assert main(["lint"]) == 0  # DIR defaults to ./schemas
    assert capsys.readouterr() == ("", "")


# (rule, change, file, pointer, needle whose position is the finding's, message)
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str, str, str, str]] = [
    (
        "TYPE_PASCAL_CASE",
        lambda docs: _rename_def(_thing(docs), "Status", "HTTPStatus"),
        THING,
        "/$defs/HTTPStatus",
        '"HTTPStatus": {',
        "$defs name 'HTTPStatus' is not PascalCase: write the acronym 'HTTP' as a word (HttpStatus)",
    ),
    (
        "TYPE_PASCAL_CASE",
        lambda docs: _thing(docs)["$defs"]["Mode"].update({"x-enum-name": "SpeedRGB"}),
        THING,
        "/$defs/Mode/x-enum-name",
        '"SpeedRGB"',
        "enum name 'SpeedRGB' is not PascalCase: write the acronym 'RGB' as a word (SpeedRgb)",
    ),
    (
        "TYPE_PASCAL_CASE",
        lambda docs: _thing(docs)["$defs"]["Status"].update({"title": "run status"}),
        THING,
        "/$defs/Status/title",
        '"run status"',
        "nested object name (title) 'run status' is not PascalCase: use letters and digits only, starting with a "
        "capital (RunStatus)",
    ),
    (
        "TYPE_PASCAL_CASE",
        lambda docs: _thing(docs)["$defs"]["Status"].update({"title": "RunStatus\n"}),
        THING,
        "/$defs/Status/title",
        '"RunStatus\\n"',
        "nested object name (title) 'RunStatus\\n' is not PascalCase: use letters and digits only, starting with a "
        "capital (RunStatus)",
    ),
    (
        "FIELD_LOWER_SNAKE_CASE",
        lambda docs: _rename_field(_thing(docs), "name", "displayName"),
        THING,
        "/properties/displayName",
        '"displayName": {',
        "field name 'displayName' is not lower_snake_case (display_name)",
    ),
    (
        "FIELD_LOWER_SNAKE_CASE",
        lambda docs: _rename_field(_thing(docs)["$defs"]["Status"], "ok", "OK_"),
        THING,
        "/$defs/Status/properties/OK_",
        '"OK_": {',
        "field name 'OK_' is not lower_snake_case (ok)",
    ),
    (
        "ENUM_VALUE_LOWER_SNAKE_CASE",
        lambda docs: _thing(docs)["$defs"]["Mode"]["enum"].__setitem__(1, "SlowIsh"),
        THING,
        "/$defs/Mode/enum/1",
        '"SlowIsh"',
        "enum value 'SlowIsh' of Mode is not lower_snake_case (slow_ish)",
    ),
    (
        "ENUM_VALUE_LOWER_SNAKE_CASE",
        lambda docs: _thing(docs)["$defs"]["Mode"]["enum"].__setitem__(1, "slow_ish\n"),
        THING,
        "/$defs/Mode/enum/1",
        '"slow_ish\\n"',
        "enum value 'slow_ish\\n' of Mode is not lower_snake_case (slow_ish)",
    ),
    (
        "TYPE_DESCRIPTION",
        lambda docs: _thing(docs).pop("description"),
        THING,
        "",
        "{",
        "message type Thing has no description or title",
    ),
    (
        "TYPE_DESCRIPTION",
        lambda docs: _thing(docs)["$defs"]["Mode"].pop("description"),
        THING,
        "/$defs/Mode",
        '"Mode": {',
        "nested enum Mode has no description",
    ),
    (
        "FIELD_DESCRIPTION",
        lambda docs: _thing(docs)["properties"]["name"].pop("description"),
        THING,
        "/properties/name",
        '"name": {',
        "field 'name' has no description",
    ),
    (
        "DEF_UNUSED",
        lambda docs: _thing(docs)["$defs"].update(
            {"Spare": {"type": "string", "enum": ["a"], "x-enum-name": "Spare", "description": "Unused."}}
        ),
        THING,
        "/$defs/Spare",
        '"Spare": {',
        "$defs entry 'Spare' is not used: no $ref of the directory points at it; remove it",
    ),
]


@pytest.mark.parametrize(
    ("rule", "change", "file", "pointer", "needle", "message"), CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES]
)
def test_each_rule_fires_on_its_breach_and_names_the_place(
    rule: str,
    change: Callable[[dict[str, Any]], None],
    file: str,
    pointer: str,
    needle: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = _clean()
    change(docs)
    write_schemas(Path("schemas"), docs)
    line, col = _pos(file, needle)
    assert lint(load_dir("schemas")) == [Finding(rule, message, file, line, col, pointer)]
    assert main(["lint", "schemas"]) == 1
    assert capsys.readouterr().out == f"{file}:{line}:{col}: {rule} {message}\n"
    assert main(["lint", "schemas", "--disable", rule]) == 0
    assert capsys.readouterr().out == ""


def test_the_rules_leave_what_the_style_allows_alone() -> None:
    docs = _clean()
    thing = _thing(docs)
    thing["$defs"]["Mode"]["enum"] += ["zero_to_255", "v2"]  # digits inside words, or first
    thing["properties"]["rgb_2x"] = {"type": "integer", "default": 0, "description": "Two capitals are a word."}
    thing["$defs"]["DpRank"] = {"type": "integer", "description": "Two capitals in a row: Dp, a word."}
    thing["properties"]["rank"] = {"$ref": "#/$defs/DpRank", "default": 0, "description": "Its rank."}
    thing["properties"]["label"] = {"title": "a label, not a name", "type": "string", "default": "", "description": "x"}
    write_schemas(Path("schemas"), docs)
    assert lint(load_dir("schemas")) == []


def test_a_message_type_named_with_an_acronym_and_a_def_used_from_another_file() -> None:
    docs = _clean()
    docs["t/Box.v1.json"]["properties"]["spare"] = {
        "$ref": "Thing.v1.json#/$defs/Status",
        "default": None,
        "description": "Another file's def.",
    }
    _thing(docs)["properties"].pop("status")  # Status is now used by Box only
    docs["t/HTTPReply.v1.json"] = {
        "$id": "t.HTTPReply",
        "x-version": 1,
        "description": "A reply.",
        "type": "object",
        "properties": {"code": {"type": "integer", "description": "Its code."}},
        "required": ["code"],
    }
    write_schemas(Path("schemas"), docs)
    line, col = _pos("schemas/t/HTTPReply.v1.json", '"t.HTTPReply"')
    message = "message type name 'HTTPReply' is not PascalCase: write the acronym 'HTTP' as a word (HttpReply)"
    assert lint(load_dir("schemas")) == [
        Finding("TYPE_PASCAL_CASE", message, "schemas/t/HTTPReply.v1.json", line, col, "/$id")
    ]


def test_a_union_tag_needs_no_description_and_nested_objects_need_one() -> None:
    docs = _clean()
    _thing(docs)["properties"]["inline"] = {
        "type": "object",
        "properties": {"x": {"type": "integer", "description": "An x."}},
        "required": ["x"],
        "default": None,
    }
    _thing(docs)["properties"]["inline"]["type"] = ["object", "null"]
    write_schemas(Path("schemas"), docs)
    found = lint(load_dir("schemas"))
    line, col = _pos(THING, '"inline": {')
    assert found == [
        Finding("FIELD_DESCRIPTION", "field 'inline' has no description", THING, line, col, "/properties/inline"),
        Finding(
            "TYPE_DESCRIPTION",
            "nested object at /properties/inline has no description",
            THING,
            line,
            col,
            "/properties/inline",
        ),
    ]  # and nothing about Box's kind, a const tag


def _broken(docs: dict[str, Any]) -> None:
    """Three findings of three rules in two files."""
    _rename_field(_thing(docs), "name", "Name")
    _thing(docs)["$defs"]["Mode"]["enum"][0] = "FAST"
    _thing(docs)["properties"]["mode"]["default"] = "FAST"
    docs["t/Box.v1.json"].pop("title")


class _CountedText(str):
    """A schema file's text that counts the characters its line and column lookups read."""

    read = 0

    def count(self, sub: str, start: Any = None, end: Any = None) -> int:
        _CountedText.read += len(self[start:end])
        return super().count(sub, start, end)

    def rfind(self, sub: str, start: Any = None, end: Any = None) -> int:
        _CountedText.read += len(self[start:end])
        return super().rfind(sub, start, end)


def test_the_place_of_each_of_many_findings_is_found_without_reading_the_file_each_time(tmp_path: Path) -> None:
    """Each finding's line and column counted the newlines of the whole text before it: a file of
    80,000 undocumented fields took 105 s to lint (most of it in ``str.count``), growing with the
    square of its size. The text is now read about twice, and a few KiB more for each finding."""
    props = {f"f{i}": {"type": "integer", "default": 0} for i in range(3000)}
    doc = {"$id": "t.Wide", "x-version": 1, "description": "Wide.", "type": "object", "properties": props}
    schemas = load_dir(write_schemas(tmp_path / "schemas", {"t/Wide.v1.json": doc}))
    (source,) = schemas.sources.values()
    source.text = _CountedText(source.text)
    _CountedText.read = 0
    findings = lint(schemas)
    assert len(findings) == 3000 and (findings[0].line, findings[-1].line) == (7, 7 + 4 * 2999)  # 4 lines a field
    assert _CountedText.read <= 3 * len(source.text) + 10_000 * len(findings)


def test_rules_turned_off_by_flags_and_by_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    docs = _clean()
    _broken(docs)
    write_schemas(Path("schemas"), docs)
    assert {f.rule for f in lint(load_dir("schemas"))} == {
        "FIELD_LOWER_SNAKE_CASE",
        "ENUM_VALUE_LOWER_SNAKE_CASE",
        "TYPE_DESCRIPTION",
    }
    assert main(["lint", "--disable", "FIELD_LOWER_SNAKE_CASE,ENUM_VALUE_LOWER_SNAKE_CASE"]) == 1
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["TYPE_DESCRIPTION"]
    argv = ["lint", "--disable", "FIELD_LOWER_SNAKE_CASE", "--disable", "ENUM_VALUE_LOWER_SNAKE_CASE"]
    assert main([*argv, "--disable", "TYPE_DESCRIPTION"]) == 0
    Path("tensorwire.toml").write_text(
        '[lint]\ndisable = ["ENUM_VALUE_LOWER_SNAKE_CASE", "TYPE_DESCRIPTION"]\n'
        'ignore = [{rule = "FIELD_LOWER_SNAKE_CASE", file = "t/Th*.json"}]\n'
    )
    assert main(["lint"]) == 0
    assert capsys.readouterr().out == ""
    Path("tensorwire.toml").write_text('[lint]\ndisable = ["ENUM_VALUE_LOWER_SNAKE_CASE"]\n')
    assert main(["lint", "--disable", "TYPE_DESCRIPTION"]) == 1  # the flag adds to the file's list
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["FIELD_LOWER_SNAKE_CASE"]


def test_the_configuration_names_the_schema_directory(capsys: pytest.CaptureFixture[str]) -> None:
    docs = _clean()
    _thing(docs).pop("description")
    write_schemas(Path("contracts"), docs)
    Path("tensorwire.toml").write_text('schemas = "contracts"\n')
    assert main(["lint"]) == 1
    assert capsys.readouterr().out.startswith("contracts/t/Thing.v1.json:1:1: TYPE_DESCRIPTION ")


def test_an_unknown_rule_id_is_a_usage_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_schemas(Path("schemas"), _clean())
    assert main(["lint", "--disable", "FIELD_DESCRIPTION,NO_SUCH_RULE"]) == 2
    assert capsys.readouterr().err == (
        "tensorwire: lint --disable: unknown rule 'NO_SUCH_RULE'; see tensorwire lint --list-rules\n"
    )
    known = ", ".join(RULES)
    Path("tensorwire.toml").write_text('[lint]\ndisable = ["NOPE"]\n')
    assert main(["lint"]) == 2
    config = tmp_path / "tensorwire.toml"
    assert capsys.readouterr().err == f"tensorwire: {config}: lint.disable: unknown rule 'NOPE'; known: {known}\n"
    Path("tensorwire.toml").write_text('[lint]\nignore = [{rule = "NOPE2", file = "*"}]\n')
    assert main(["lint"]) == 2
    assert capsys.readouterr().err == f"tensorwire: {config}: lint.ignore: unknown rule 'NOPE2'; known: {known}\n"
    Path("tensorwire.toml").unlink()
    Path("pyproject.toml").write_text('[tool.tensorwire.lint]\ndisable = ["NOPE"]\n')
    assert main(["lint"]) == 2
    assert "pyproject.toml: tool.tensorwire.lint.disable: unknown rule 'NOPE'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown lint rule 'NOPE'"):
        lint(load_dir("schemas"), disable=["NOPE"])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[lint]\ndisable = "FIELD_DESCRIPTION"\n', "lint.disable: expected an array of rule IDs"),
        ("[lint]\nenable = []\n", "lint.enable: unknown key; known: disable, ignore"),
        ('[lint]\nignore = [{rule = "DEF_UNUSED"}]\n', "lint.ignore[0]: needs a rule and a file"),
        ("lint = 1\n", "lint must be a table"),
    ],
)
def test_a_bad_lint_table_is_a_config_error(text: str, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    write_schemas(Path("schemas"), _clean())
    Path("tensorwire.toml").write_text(text)
    assert main(["lint"]) == 2
    assert problem in capsys.readouterr().err


def test_json_and_github_formats(capsys: pytest.CaptureFixture[str]) -> None:
    docs = _clean()
    _broken(docs)
    write_schemas(Path("schemas"), docs)
    assert main(["lint", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, JSON_SCHEMA)
    assert report["summary"] == {"FIELD_LOWER_SNAKE_CASE": 1, "ENUM_VALUE_LOWER_SNAKE_CASE": 1, "TYPE_DESCRIPTION": 1}
    line, col = _pos(THING, '"Name": {')
    assert [f["file"] for f in report["findings"]] == ["schemas/t/Box.v1.json", THING, THING]  # sorted
    assert report["findings"][1] == {
        "rule": "FIELD_LOWER_SNAKE_CASE",
        "message": "field name 'Name' is not lower_snake_case (name)",
        "file": THING,
        "line": line,
        "col": col,
        "pointer": "/properties/Name",
    }
    assert main(["lint", "--format", "github"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "::error file=schemas/t/Box.v1.json,line=1,col=1,title=TYPE_DESCRIPTION::"
        "message type Box has no description or title"
    )
    assert len(lines) == 3 and all(line.startswith("::error file=") for line in lines)
    assert render([], "json") == '{\n  "findings": [],\n  "summary": {}\n}'
    odd = Finding("DEF_UNUSED", "50% of\nit", "a,b:c.json", 1, 2, "")
    assert render([odd], "github") == "::error file=a%2Cb%3Ac.json,line=1,col=2,title=DEF_UNUSED::50%25 of%0Ait"


def test_list_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--list-rules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(RULES)
    assert all(RULES[line.split()[0]].purpose in line for line in lines)
    assert main(["lint", "--list-rules", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == json.loads(rules_table("json"))
    assert [r["id"] for r in listed if r["needs_baseline"]] == ["VERSION_NOT_BUMPED"]
    assert len(RULES) >= 7 and all(r.purpose and "\n" not in r.purpose for r in RULES.values())


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({"t/Thing.v1.json": '{"$id": "t.Thing",'}, "schemas/t/Thing.v1.json:1:19: invalid JSON"),
        ({"t/Thing.v1.json": {"$id": "t.Thing", "x-version": 1, "type": "object"}}, "missing required keyword"),
        ({"t/thing.json": {}}, "file name must be <Name>.v<N>.json"),
        ({}, "schemas: not a schema directory"),
    ],
)
def test_a_directory_that_does_not_load_exits_2_with_the_schema_error(
    files: dict[str, Any], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if files:
        write_schemas(Path("schemas"), files)
    assert main(["lint"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorwire: ") and error in err and "Traceback" not in err


# -- the git baseline ---------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=lint", "-c", "user.email=lint@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


def _repo(root: Path) -> Path:
    write_schemas(root / "schemas", _clean())
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "v1")
    return root


def test_against_a_revision_a_breaking_change_needs_a_new_major_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    assert main(["lint", "--against", "HEAD"]) == 0
    assert capsys.readouterr().out == ""
    docs = _clean()
    _thing(docs)["properties"]["name"]["type"] = "integer"  # a breaking change in v1
    write_schemas(repo / "schemas", docs)
    assert main(["lint"]) == 0  # without a baseline the rule does not run
    assert main(["lint", "--against", "HEAD"]) == 1
    line, col = _pos(THING, '"x-version": 1')
    col += len('"x-version": ')
    assert capsys.readouterr().out == (
        f"{THING}:{line}:{col}: VERSION_NOT_BUMPED t.Thing v1 has 1 breaking change(s) but kept its major "
        "version; add Thing.v2.json (changes: TYPE_CHANGED; see tensorwire compat)\n"
    )
    assert main(["lint", "--against", "HEAD", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"][0]["pointer"] == "/x-version"
    # disabled, the baseline is not even read: a revision this clone lacks does not matter
    assert main(["lint", "--against", "no-such-rev", "--disable", "VERSION_NOT_BUMPED"]) == 0
    assert main(["lint", "--against", "no-such-rev"]) == 2
    assert "revision 'no-such-rev' is not in this clone" in capsys.readouterr().err
    # a break accepted in the configuration's compat.ignore is accepted here too
    Path("tensorwire.toml").write_text(
        '[compat]\nignore = [{rule = "VERSION_NOT_BUMPED", type = "t.Thing", reason = "no reader left"}]\n'
    )
    assert main(["lint", "--against", "HEAD"]) == 0
    Path("tensorwire.toml").unlink()
    # the change in a new major version beside the old one is no finding
    write_schemas(repo / "schemas", _clean())
    v2 = copy.deepcopy(_thing(docs))
    v2["x-version"] = 2
    write_schemas(repo / "schemas", {"t/Thing.v2.json": v2})
    assert main(["lint", "--against", "HEAD"]) == 0, capsys.readouterr()


def test_against_a_revision_without_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "README").write_text("x\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "no schemas yet")
    write_schemas(repo / "schemas", _clean())
    monkeypatch.chdir(repo)
    assert main(["lint", "--against", "HEAD"]) == 0
    assert capsys.readouterr().out == ""
