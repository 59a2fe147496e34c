"""The configuration file (``tensorwire.toml`` or ``[tool.tensorwire]``): found upwards, read by every
subcommand, overridden by flags, and precise about what is wrong in it."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from tensorwire.cli import main
from tensorwire.config import MAX_FILE_BYTES, MAX_KEY_PARTS, CompatIgnore, ConfigError, find_config, load_config
from tests.compat_cases import BASE
from tests.conftest import NOT_READ, NOT_REGULAR, make_not_read, make_not_regular, write_schemas

CONFIG = """
schemas = "defs"
out = "pkg/messages"
registry = "registry"
golden = "fixtures"

[compat]
mode = "backward"
fail-on = "warning"
"""


def _project(root: Path, config: str, name: str = "tensorwire.toml") -> Path:
    write_schemas(root / "defs", copy.deepcopy(BASE))
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / name).write_text(config)
    return root


def test_every_key_is_read_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    root = _project(tmp_path, CONFIG + 'ignore = [{rule = "FIELD_DELETED", type = "t.Thing", reason = "gone"}]\n')
    config = find_config(root / "sub" / "deeper")
    assert config is not None and config.path == root / "tensorwire.toml"
    assert (config.schemas, config.out, config.golden) == (root / "defs", root / "pkg/messages", root / "fixtures")
    assert (config.registry, config.mode, config.fail_on) == ("registry", "backward", "warning")
    assert config.ignore == (CompatIgnore("FIELD_DELETED", "gone", "t.Thing"),)
    assert find_config(tmp_path.parent) is None  # nothing above the project's own file applies


def test_pyproject_s_table_is_read_and_tensorwire_toml_wins_beside_it(tmp_path: Path) -> None:
    root = _project(tmp_path, "[project]\nname = 'x'\n[tool.tensorwire]\nout = 'from_pyproject'\n", "pyproject.toml")
    config = find_config(root / "sub")
    assert config is not None and config.out == root / "from_pyproject" and config.path.name == "pyproject.toml"
    (root / "tensorwire.toml").write_text("out = 'from_own_file'\n")
    config = find_config(root)
    assert config is not None and config.out == root / "from_own_file"
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert load_config(root / "pyproject.toml") is None  # a pyproject without the table says nothing


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("outt = 'x'\n", "outt: unknown key; known: schemas, out, registry, golden, compat"),
        ("out = 3\n", "out: expected a non-empty string, got 3"),
        ("[compat]\nmode = 'sideways'\n", "compat.mode: expected one of backward, forward, full, none, got 'sideways'"),
        ("[compat]\nignore = [{rule = 'FIELD_DELETED'}]\n", "compat.ignore[0]: needs a rule and a reason"),
        ("[compat]\nignore = [{rule = 'X', reason = 'r', why = 1}]\n", "compat.ignore[0].why: unknown key"),
        ("out = \n", "cannot read it: "),
        ('out = "p\\u0000kg"\n', "out: expected a path, got 'p\\x00kg': a path holds no NUL character"),
        ('schemas = "\\u0000"\n', "schemas: expected a path, got '\\x00': a path holds no NUL character"),
        ('"o\\u001b]0;t\\u0007" = 1\n', "o\\x1b]0;t\\x07: unknown key"),
        ('[compat]\n"\\u202em" = 1\n', "compat.\\u202em: unknown key"),
        ("[lint]\nignore = [{rule = 'X', file = 'f', \"\\u001b[2J\" = 1}]\n", "lint.ignore[0].\\x1b[2J: unknown key"),
    ],
)
def test_a_bad_file_names_itself_and_the_key(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "tensorwire.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        find_config(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 'tensorwire.toml'}: ") and error in str(info.value)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("schemas." + ".".join(["a"] * (MAX_KEY_PARTS - 1)) + " = 1", "{'a': {'a': {'a': {...}}}}"),
        ("schemas = [" + ", ".join(["'x'"] * 100_000) + "]", "['x', 'x', 'x', 'x', 'x', 'x', ...]"),
    ],
    ids=["nested", "long"],
)
def test_a_value_of_the_wrong_type_is_shown_cut_short(tmp_path: Path, line: str, shown: str) -> None:
    """Dotted keys nest a table as deep as the file makes them (``MAX_KEY_PARTS``; 5,000 before),
    with no recursion in tomllib: the error's ``repr`` of such a value raised a RecursionError (an
    internal error, exit 3); a long value was printed whole (the file's megabytes)."""
    (tmp_path / "tensorwire.toml").write_text(line + "\n")
    with pytest.raises(ConfigError) as info:
        find_config(tmp_path)
    assert str(info.value) == f"{tmp_path / 'tensorwire.toml'}: schemas: expected a non-empty string, got {shown}"


@pytest.mark.parametrize("kind", NOT_READ)
def test_only_a_regular_configuration_file_of_a_bounded_size_is_read(kind: str, tmp_path: Path) -> None:
    """``load_config`` takes any path: a FIFO would block the read, /dev/zero never end it."""
    path = tmp_path / "tensorwire.toml"
    why = make_not_read(path, kind, MAX_FILE_BYTES)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: cannot read it: {why}"


@pytest.mark.parametrize("name", ["tensorwire.toml", "pyproject.toml"])
@pytest.mark.parametrize("kind", [*NOT_REGULAR, "a dangling link"])
def test_a_configuration_that_is_not_a_regular_file_is_refused_not_looked_past(
    kind: str, name: str, tmp_path: Path
) -> None:
    """The search skipped such a name and read a parent directory's file instead, silently: it is
    refused as ``load_config`` refuses it (a link is followed, so one to nothing is refused too)."""
    (tmp_path / "tensorwire.toml").write_text("out = 'from_the_parent'\n")
    path = tmp_path / "sub" / name
    path.parent.mkdir()
    if kind == "a dangling link":
        path.symlink_to(tmp_path / "nothing")
        why = "No such file or directory"
    else:
        make_not_regular(path, kind)
        why = "not a regular file"
    with pytest.raises(ConfigError) as info:
        find_config(path.parent)
    assert str(info.value) == f"{path}: cannot read it: {why}"


def test_a_configuration_that_is_not_utf8_names_itself_and_why(tmp_path: Path) -> None:
    path = tmp_path / "tensorwire.toml"
    path.write_bytes(b'schemas = "caf\xe9"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: cannot read it: 'utf-8' codec can't decode byte 0xe9 in position 14: invalid continuation byte"
    )


@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{a = ", "}")], ids=["arrays", "inline-tables"])
def test_a_configuration_nested_too_deeply_is_refused_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], opening: str, closing: str
) -> None:
    """tomllib reads nesting by recursion: a deep one was a RecursionError, an internal error (exit 3)."""
    path = tmp_path / "tensorwire.toml"
    path.write_text(f"schemas = {opening * 100_000}1{closing * 100_000}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["schemas"]) == 2
    assert capsys.readouterr().err == (
        f"tensorwire: {path}: cannot read it: arrays or inline tables nested too deeply\n"
    )


def test_a_configuration_with_crlf_or_cr_newlines_reads_as_with_lf(tmp_path: Path) -> None:
    for newline in ("\r\n", "\r"):
        path = tmp_path / newline.encode().hex() / "tensorwire.toml"
        path.parent.mkdir()
        path.write_bytes(newline.join(['schemas = "contracts"', "[compat]", 'mode = "backward"', ""]).encode())
        config = load_config(path)
        assert config is not None
        assert (config.schemas, config.mode) == (path.parent / "contracts", "backward")


def test_gen_and_schemas_follow_the_file_and_flags_override_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(tmp_path, CONFIG)
    monkeypatch.chdir(root / "sub" / "deeper")
    assert main(["gen"]) == 0
    assert sorted(p.name for p in (root / "pkg" / "messages").glob("*.py")) == ["registry.py", "t.py"]
    assert main(["gen", "--check"]) == 0
    assert main(["gen", "-o", str(root / "other")]) == 0  # a flag wins over the file
    assert (root / "other" / "registry.py").exists()
    capsys.readouterr()
    assert main(["schemas"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["t.A", "t.B", "t.Thing"]


def test_gen_without_an_output_refuses_and_never_hides_tensorwire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_schemas(tmp_path / "schemas", copy.deepcopy(BASE))
    monkeypatch.chdir(tmp_path)
    assert main(["gen"]) == 2
    assert "tensorwire: gen needs -o OUT, the package to write (or out = ... in tensorwire.toml" in (
        capsys.readouterr().err
    )
    assert main(["gen", "-o", "tensorwire/messages"]) == 2
    assert "a package of that name hides tensorwire" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [tmp_path / "schemas"]  # nothing written


def test_an_ignore_of_a_retired_compat_rule_is_read_and_covers_its_replacements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ignore = (
        "[compat]\nignore = [{rule = 'SET_SEMANTICS_CHANGED', reason = 'tags never repeat'},"
        " {rule = 'VERSION_NOT_BUMPED', type = 't.Thing', reason = 'same'}]\n"
    )
    root = _project(tmp_path, "schemas = 'defs'\n" + ignore)
    new = copy.deepcopy(BASE)
    new["t/Thing.v1.json"]["properties"]["tags"]["uniqueItems"] = True
    write_schemas(root / "new", new)
    monkeypatch.chdir(root)
    assert main(["compat", "defs", "new", "--mode", "backward", "--format", "json"]) == 0
    found = {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert found["ARRAY_MADE_SET"]["severity"] == "info"
    assert found["ARRAY_MADE_SET"]["suppressed"] == "tags never repeat"
    assert main(["compat", "--explain", "SET_SEMANTICS_CHANGED"]) == 0
    assert capsys.readouterr().out == (
        "SET_SEMANTICS_CHANGED: retired; replaced by ARRAY_MADE_SET, SET_MADE_ARRAY (an ignore of it covers them)\n"
    )


def test_compat_takes_its_mode_threshold_and_ignores_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(tmp_path, "schemas = 'defs'\n[compat]\nmode = 'forward'\n")
    new = copy.deepcopy(BASE)
    del new["t/Thing.v1.json"]["properties"]["ratio"]  # breaks old readers (forward) only
    new["t/Thing.v1.json"]["required"].remove("ratio")
    write_schemas(root / "new", new)
    monkeypatch.chdir(root)
    assert main(["compat", "defs", "new"]) == 1
    assert main(["compat", "defs", "new", "--mode", "backward"]) == 0  # the flag wins
    capsys.readouterr()
    (root / "tensorwire.toml").write_text(
        "[compat]\nmode = 'forward'\nignore = [{rule = 'FIELD_DELETED', reason = 'no v1 reader is left'},"
        " {rule = 'VERSION_NOT_BUMPED', type = 't.Thing', reason = 'same'}]\n"
    )
    assert main(["compat", "defs", "new", "--format", "json"]) == 0
    found = {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert (
        found["FIELD_DELETED"]["suppressed"] == "no v1 reader is left" and found["FIELD_DELETED"]["severity"] == "info"
    )
    (root / "tensorwire.toml").write_text("[compat]\nignore = [{rule = 'NO_SUCH_RULE', reason = 'r'}]\n")
    assert main(["compat", "defs", "new"]) == 2
    assert "compat.ignore: unknown rule 'NO_SUCH_RULE'" in capsys.readouterr().err
    (root / "tensorwire.toml").write_text("[compat]\nfail-on = 3\n")
    assert main(["compat", "defs", "new"]) == 2
    assert "compat.fail-on: expected a non-empty string, got 3" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_another_user_owns_is_refused_not_read(tmp_path: Path) -> None:
    planted = tmp_path / "tensorwire.toml"
    planted.write_text("out = '/somewhere/else'\n")
    os.chown(planted, 54321, -1)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ConfigError) as info:
        find_config(tmp_path / "sub")  # found on the way up, as from a shared /tmp
    assert str(info.value) == f"{planted}: owned by uid 54321, not by this user: not read (move or remove it)"
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # another user's pyproject without
    os.chown(tmp_path / "pyproject.toml", 54321, -1)  # the table says nothing, so it is no problem
    planted.unlink()
    assert find_config(tmp_path) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_user_s_file_is_judged_before_it_is_read_as_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's file was read as TOML before its owner was looked at: a 40 KB
    ``pyproject.toml`` planted above the working directory (a key of 20,000 parts) cost every user
    below it ~1.6 GB and seconds. Now such a ``pyproject.toml`` that does not name tensorwire is
    passed over, and any other file of another user is refused, neither read as TOML."""
    import tomllib

    def not_to_be_read(text: str) -> None:
        raise AssertionError("read as TOML")

    monkeypatch.setattr(tomllib, "loads", not_to_be_read)
    planted = tmp_path / "pyproject.toml"
    planted.write_text(".".join(["x"] * 20_000) + " = 1\n")
    os.chown(planted, 54321, -1)
    (tmp_path / "sub").mkdir()
    assert find_config(tmp_path / "sub") is None
    planted.write_text("[tool.tensorwire]\nout = '/somewhere/else'\n" + ".".join(["x"] * 20_000) + " = 1\n")
    with pytest.raises(ConfigError) as info:
        find_config(tmp_path / "sub")
    assert str(info.value) == f"{planted}: owned by uid 54321, not by this user: not read (move or remove it)"


def test_a_dotted_key_of_too_many_parts_is_refused_before_it_is_read_as_toml(tmp_path: Path) -> None:
    """Python's TOML reader takes time and memory growing with the square of a dotted key's parts."""
    path = tmp_path / "tensorwire.toml"
    for parts, quote in ((MAX_KEY_PARTS + 1, ""), (MAX_KEY_PARTS + 1, '"'), (10_000, "")):
        key = ".".join([f"{quote}k{quote}"] * parts)
        path.write_text(f"schemas = 'defs'\n\n[{key}]\nx = 1\n")
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert str(info.value) == f"{path}:3: a dotted key or table name of more than {MAX_KEY_PARTS} parts"
    path.write_text("schemas = 'defs'\n" + ".".join(["k"] * MAX_KEY_PARTS) + " = 1\n")  # as many as allowed
    with pytest.raises(ConfigError, match=r"tensorwire\.toml: k: unknown key; known: schemas, "):  # read, then
        # refused for what it says
        load_config(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another user needs root")
def test_a_link_another_user_made_is_refused_though_its_target_is_ours(tmp_path: Path) -> None:
    """A link planted in a shared directory would pick which of this user's files is read as the
    configuration (and where ``gen`` writes); the file it names being ours does not make it ours."""
    ours = tmp_path / "ours.toml"
    ours.write_text("out = 'elsewhere'\n")
    planted = tmp_path / "shared" / "tensorwire.toml"
    planted.parent.mkdir()
    planted.symlink_to(ours)
    os.lchown(planted, 54321, -1)
    with pytest.raises(ConfigError) as info:
        find_config(planted.parent)
    assert str(info.value) == f"{planted}: a link owned by uid 54321, not by this user: not read (move or remove it)"
    os.lchown(planted, os.geteuid(), -1)  # our own link is read, as before
    found = find_config(planted.parent)
    assert found is not None and found.out == planted.parent / "elsewhere"
