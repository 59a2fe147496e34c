"""The command line: gen, gen --check, schemas, schemas --meta, and exit codes."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tensorwire as tw
import tensorwire.builtins
from tensorwire.cli import main
from tensorwire.schema import meta_schema_text
from tests.conftest import BUILTIN_SCHEMAS, NOT_REGULAR, REPO, make_not_regular, minimal, write_schemas


@pytest.fixture(autouse=True)
def _outside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each command where no configuration applies (the repository's own says where the
    built-ins go); the tests name their paths."""
    monkeypatch.chdir(tmp_path)


def test_the_repository_s_configuration_regenerates_the_built_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO / "codec")  # found upwards, paths relative to pyproject.toml
    assert main(["gen", "--check"]) == 0


def _copy_project(tmp_path: Path) -> tuple[Path, Path]:
    schemas = tmp_path / "schemas"
    out = tmp_path / "generated"
    shutil.copytree(BUILTIN_SCHEMAS, schemas)
    assert main(["gen", str(schemas), "-o", str(out)]) == 0
    return schemas, out


def test_gen_check_passes_on_the_clean_tree(capsys: pytest.CaptureFixture[str]) -> None:
    builtins = REPO / "codec" / "builtins"
    code = main(["gen", "--check", str(BUILTIN_SCHEMAS), "-o", str(builtins), "--registry", "registry"])
    assert code == 0, capsys.readouterr()
    assert "is up to date" in capsys.readouterr().out


def test_gen_needs_an_output_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no configuration here or above
    assert main(["gen", str(BUILTIN_SCHEMAS)]) == 2
    assert capsys.readouterr().err == (
        "tensorwire: gen needs -o OUT, the package to write (or out = ... in tensorwire.toml or "
        "[tool.tensorwire] of pyproject.toml)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_gen_puts_the_registry_in_the_module_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "__init__.py").write_text("# mine\n")
    assert main(["gen", str(BUILTIN_SCHEMAS), "-o", str(out), "--registry", "registry"]) == 0
    assert (out / "__init__.py").read_text() == "# mine\n"  # the package's own, left alone
    registry = (out / "registry.py").read_text()
    assert "from . import diffusion, media, rpc" in registry
    assert "REGISTRY = Registry.from_modules(diffusion, media, rpc)" in registry
    assert sorted(p.name for p in out.glob("*.py")) == [
        "__init__.py",
        "diffusion.py",
        "media.py",
        "registry.py",
        "rpc.py",
    ]
    (out / "registry.py").write_text(registry.replace("media, rpc)", "rpc)"))
    capsys.readouterr()
    assert main(["gen", "--check", str(BUILTIN_SCHEMAS), "-o", str(out), "--registry", "registry"]) == 1
    err = capsys.readouterr().err
    assert f"run 'tensorwire gen {BUILTIN_SCHEMAS} -o {out} --registry registry'" in err
    for bad in ("media", "no-such", "1st", "class", "\uff52\uff45\uff47", "\uff4d\uff45\uff44\uff49\uff41"):
        assert main(["gen", str(BUILTIN_SCHEMAS), "-o", str(tmp_path / "x"), "--registry", bad]) == 2
        assert f"registry module {bad!r} is not a Python name free in the package" in capsys.readouterr().err
        assert not (tmp_path / "x").exists()


_SO = importlib.machinery.EXTENSION_SUFFIXES[0]


@pytest.mark.parametrize("shadow", ["rpc/__init__.py", f"rpc{_SO}", f"__init__{_SO}"])
def test_gen_and_its_check_refuse_a_tree_where_python_imports_another_file_than_a_generated_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, shadow: str
) -> None:
    """A package directory or an extension module beside a generated module is what ``import``
    loads in its place: ``gen --check`` called such a tree up to date. Both commands now refuse it."""
    schemas, out = _copy_project(tmp_path)
    (out / shadow).parent.mkdir(exist_ok=True)
    (out / shadow).write_text("HIDDEN = True\n")
    if shadow == "rpc/__init__.py":  # what Python imports
        monkeypatch.syspath_prepend(str(tmp_path))
        try:
            assert importlib.import_module("generated.rpc").__dict__.get("HIDDEN") is True
        finally:
            for name in [n for n in sys.modules if n == "generated" or n.startswith("generated.")]:
                del sys.modules[name]
    module = out / ("__init__.py" if shadow.startswith("__init__") else "rpc.py")
    capsys.readouterr()
    for check in (["--check"], []):
        assert main(["gen", *check, str(schemas), "-o", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"tensorwire: {out / shadow} hides the generated module {module} (Python imports it instead): "
            "move it away\n"
        )
    (out / shadow).unlink()
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 0


def test_gen_and_its_check_refuse_bytecode_python_runs_without_reading_a_generated_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unchecked hash-based ``.pyc`` in ``__pycache__`` (PEP 552), which a checkout can carry,
    is what ``import`` runs for a module whatever the module holds: ``gen --check`` called such a
    tree up to date. Bytecode that Python checks against the module (a timestamp or a checked
    hash, as an import writes it) is no reason to refuse."""
    schemas, out = _copy_project(tmp_path)
    module = out / "rpc.py"
    cached = Path(importlib.util.cache_from_source(str(module)))
    for mode in (py_compile.PycInvalidationMode.TIMESTAMP, py_compile.PycInvalidationMode.CHECKED_HASH):
        py_compile.compile(str(module), cfile=str(cached), invalidation_mode=mode, doraise=True)
        assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 0
    other = tmp_path / "other.py"
    other.write_text("HIDDEN = True\n")
    unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH
    py_compile.compile(str(other), cfile=str(cached), invalidation_mode=unchecked, doraise=True)
    capsys.readouterr()
    for check in (["--check"], []):
        assert main(["gen", *check, str(schemas), "-o", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"tensorwire: {cached} is bytecode that Python runs for {module} without reading that file (an "
            "unchecked hash-based .pyc): remove it\n"
        )


def test_gen_check_exits_1_with_a_diff_after_a_schema_edit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schemas, out = _copy_project(tmp_path)
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 0
    capsys.readouterr()
    path = schemas / "rpc" / "Request.v1.json"
    doc = json.loads(path.read_text())
    doc["properties"]["priority"] = {"type": "integer", "default": 0}
    path.write_text(json.dumps(doc))
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert f"--- {out / 'rpc.py'} (on disk)" in captured.out
    assert "+    priority: int = 0" in captured.out
    assert f"is out of date; run 'tensorwire gen {schemas} -o {out}'" in captured.err
    # regenerating fixes the drift, and only rpc.py changed
    assert main(["gen", str(schemas), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out / 'rpc.py'}"
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 0


def test_gen_removes_and_reports_stale_namespace_modules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schemas, out = _copy_project(tmp_path)
    (out / "extra.py").write_text("# Code generated by tensorwire from the schemas of extra. DO NOT EDIT.\n")
    (out / "handwritten.py").write_text("# mine\n")
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 1
    assert f"--- {out / 'extra.py'} (stale)" in capsys.readouterr().out
    assert main(["gen", str(schemas), "-o", str(out)]) == 0
    assert not (out / "extra.py").exists() and (out / "handwritten.py").exists()


def test_gen_writes_nothing_through_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkout can hold links where gen writes: it refuses them before it writes any file."""
    schemas, out = _copy_project(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("not gen's\n")
    (out / "rpc.py").unlink()
    (out / "rpc.py").symlink_to(victim)
    (schemas / "meta" / "tensorwire.v1.json").write_text("{}")  # a file gen would rewrite
    capsys.readouterr()
    for command in (["gen"], ["gen", "--check"]):
        assert main([*command, str(schemas), "-o", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"tensorwire: {out / 'rpc.py'} is a symbolic link: gen reads and writes plain files only\n"
        )
    assert victim.read_text() == "not gen's\n"
    assert (schemas / "meta" / "tensorwire.v1.json").read_text() == "{}"
    linked = tmp_path / "linked"
    linked.symlink_to(out)  # the package's directory itself
    assert main(["gen", str(schemas), "-o", str(linked)]) == 2
    err = capsys.readouterr().err
    assert err == f"tensorwire: {linked} is a symbolic link: gen reads and writes plain files only\n"


def test_gen_names_a_package_directory_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory that cannot be made was an internal error (exit 3, ``FileNotFoundError``)."""
    schemas = write_schemas(tmp_path / "schemas", {"h/Msg.v1.json": minimal("h.Msg")})
    out = Path("/proc/self/no-such-directory/pkg")  # not even root can make it
    assert main(["gen", str(schemas), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"tensorwire: cannot write {out.parent}: No such file or directory\n"


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_gen_check_refuses_a_generated_module_that_is_not_a_regular_file(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO blocked ``gen --check`` forever, a link to /dev/zero read until memory ran out."""
    schemas, out = _copy_project(tmp_path)
    (out / "rpc.py").unlink()
    make_not_regular(out / "rpc.py", kind)
    capsys.readouterr()
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 2
    why = "is a symbolic link: gen reads and writes plain files only" if "link" in kind else None
    expected = f"{out / 'rpc.py'} {why}" if why else f"cannot read {out / 'rpc.py'}: not a regular file"
    assert capsys.readouterr().err == f"tensorwire: {expected}\n"


def test_gen_leaves_modules_that_are_not_regular_files_alone(tmp_path: Path) -> None:
    """Only a regular file gen wrote can be stale: a link or a FIFO among the modules is not read."""
    schemas, out = _copy_project(tmp_path)
    for kind, name in zip(NOT_REGULAR, ("fifo.py", "zero.py", "folder.py"), strict=True):
        make_not_regular(out / name, kind)
    (out / "also.py").symlink_to(out / "rpc.py")  # a link to a generated module: not stale either
    (out / "latin.py").write_bytes(b"# caf\xe9\n")  # not UTF-8: not a module gen wrote
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 0
    assert main(["gen", str(schemas), "-o", str(out)]) == 0
    assert {"fifo.py", "zero.py", "folder.py", "also.py", "latin.py"} <= {p.name for p in out.iterdir()}


def test_gen_that_fails_part_way_through_a_module_leaves_it_as_it_was(tmp_path: Path) -> None:
    """A write that failed part way (here a file size limit; a full disk alike) left the module
    truncated, a file that no longer compiled in place of the one that did."""
    doc = minimal("h.Msg")
    schemas = write_schemas(tmp_path / "schemas", {"h/Msg.v1.json": doc})
    out = tmp_path / "pkg"
    assert main(["gen", str(schemas), "-o", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write_schemas(schemas, {"h/Msg.v1.json": {**doc, "description": "long " * 4000}})
    child = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))\n"
        "from tensorwire.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    gen = [sys.executable, "-B", "-c", child, "gen", str(schemas), "-o", str(out)]
    result = subprocess.run(gen, capture_output=True, text=True, timeout=120, check=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert (result.returncode, result.stderr) == (2, f"tensorwire: cannot write {out / 'h.py'}: File too large\n")


def test_gen_check_names_a_generated_module_that_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schemas, out = _copy_project(tmp_path)
    module = out / "rpc.py"
    module.write_bytes(module.read_bytes() + b"# caf\xe9\n")
    capsys.readouterr()
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tensorwire: cannot read {module}: not UTF-8 text (invalid continuation byte at byte ")


def test_gen_check_reads_crlf_modules_as_a_text_mode_read_did(tmp_path: Path) -> None:
    schemas, out = _copy_project(tmp_path)
    module = out / "rpc.py"
    module.write_bytes(module.read_bytes().replace(b"\n", b"\r\n"))  # as a checkout with autocrlf leaves it
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 0


def test_gen_replaces_no_file_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-written ``__init__.py`` and a module named as a namespace were replaced, exit 0."""
    schemas = tmp_path / "schemas"
    shutil.copytree(BUILTIN_SCHEMAS, schemas)
    out = tmp_path / "pkg"
    out.mkdir()
    mine = {"__init__.py": "import important\n", "rpc.py": "# my rpc helpers\n"}
    for name, text in mine.items():
        (out / name).write_text(text)
    assert main(["gen", str(schemas), "-o", str(out)]) == 2
    assert capsys.readouterr() == (
        "",
        f"tensorwire: {out / 'rpc.py'} exists and was not written by tensorwire gen (it lacks the "
        "generated header): move it away, or pass --force to replace it\n",
    )
    assert sorted(p.name for p in out.iterdir()) == ["__init__.py", "rpc.py"]  # nothing written
    assert all((out / name).read_text() == text for name, text in mine.items())
    (out / "rpc.py").write_text("")  # an empty file is anyone's: the next one in the way is named
    assert main(["gen", str(schemas), "-o", str(out)]) == 2
    assert f"tensorwire: {out / '__init__.py'} exists and was not written" in capsys.readouterr().err
    assert main(["gen", "--force", str(schemas), "-o", str(out)]) == 0
    assert (out / "__init__.py").read_text().startswith("# Code generated by tensorwire from the schemas of")
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 0


def test_gen_replaces_a_meta_schema_copy_only_if_it_is_tensorwire_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schemas, out = _copy_project(tmp_path)
    meta = schemas / "meta" / "tensorwire.v1.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "title": "an older copy"}))
    assert main(["gen", str(schemas), "-o", str(out)]) == 0
    assert meta.read_text() == meta_schema_text()
    meta.write_text('{"$id": "https://example.com/mine.json"}')
    assert main(["gen", str(schemas), "-o", str(out)]) == 2
    assert f"tensorwire: {meta} exists and was not written by tensorwire gen" in capsys.readouterr().err


def test_gen_keeps_the_meta_schema_copy_in_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schemas, out = _copy_project(tmp_path)
    (schemas / "meta" / "tensorwire.v1.json").write_text("{}")
    assert main(["gen", "--check", str(schemas), "-o", str(out)]) == 1
    assert "tensorwire.v1.json (on disk)" in capsys.readouterr().out


def test_repository_meta_schema_is_the_shipped_one() -> None:
    assert (BUILTIN_SCHEMAS / "meta" / "tensorwire.v1.json").read_text() == meta_schema_text()


def test_schemas_lists_every_builtin_type(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemas"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["type", "version", "fingerprint"]
    rows = [line.split() for line in lines[1:]]
    expected = [[i.type_id, f"v{i.version}", f"sha256:{i.fingerprint}"] for i in tw.builtins.REGISTRY.infos()]
    assert rows == expected and len(rows) == 9


def test_schemas_of_a_directory_and_meta(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import CLIP

    write_schemas(tmp_path, {"audio/Clip.v1.json": CLIP})
    assert main(["schemas", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("audio.Clip  v1       sha256:")
    assert main(["schemas", "--meta"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "tensorwire schema file"


def test_invalid_schema_exits_2_with_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_schemas(tmp_path, {"audio/Clip.v1.json": {"$id": "audio.Clip", "x-version": 1, "type": "object"}})
    assert main(["schemas", str(tmp_path)]) == 2
    assert "missing required keyword 'properties'" in capsys.readouterr().err
    assert main(["gen", "--check", str(tmp_path / "nope"), "-o", str(tmp_path / "out")]) == 2
    assert "not a schema directory" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["frobnicate"], ["gen", "--bogus"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert "tensorwire: error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("size", "why"),
    [
        ("nan", "is not a size (4K, 16M, 1G or a byte count)"),
        ("4Q", "is not a size (4K, 16M, 1G or a byte count)"),
        ("", "is not a size (4K, 16M, 1G or a byte count)"),
        ("-1", "is not a positive multiple of 4 bytes (a float32 tensor's)"),
        ("0", "is not a positive multiple of 4 bytes (a float32 tensor's)"),
        ("6", "is not a positive multiple of 4 bytes (a float32 tensor's)"),
    ],
)
def test_bench_refuses_a_size_it_cannot_send_before_it_starts(
    size: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--sizes=nan`` was an internal error (exit 3), and ``--sizes=-1`` started the processes of
    every mode to fail in the first (``wrong data received at -1 bytes``, exit 3). (The benchmark's
    own entry point: ``tensorwire bench`` hands it these words from a source checkout, and a wheel's
    tensorwire, as ``make floor`` installs it, has no benchmark to hand them to.)"""
    from tools.bench.__main__ import main as bench

    with pytest.raises(SystemExit) as info:
        bench([f"--sizes=4K,{size}"])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(f"tensorwire bench: error: argument --sizes: {size!r} {why}\n")


@pytest.mark.parametrize(
    ("raised", "code", "err"),
    [
        (
            RuntimeError("boom"),
            3,
            "tensorwire: internal error: RuntimeError: boom (run with --debug for the traceback)\n",
        ),
        (KeyboardInterrupt(), 130, "tensorwire: interrupted\n"),
        (BrokenPipeError(), 141, ""),
    ],
)
def test_failures_exit_with_their_code_and_no_traceback(
    raised: BaseException, code: int, err: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tensorwire._schema_commands

    def fail(args: object) -> int:
        raise raised

    monkeypatch.setattr(tensorwire._schema_commands, "schemas", fail)
    assert main(["schemas"]) == code
    assert capsys.readouterr().err == err
    if code == 3:
        assert main(["--debug", "schemas"]) == 3
        shown = capsys.readouterr().err
        assert shown.startswith("Traceback (most recent call last):") and shown.endswith("RuntimeError: boom\n")


def test_a_closed_pipe_ends_the_output_quietly() -> None:
    import os

    script = "import sys; from tensorwire.cli import main; sys.exit(main())"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line (as with `| head` once it has enough)
    try:
        writer = subprocess.run(
            [sys.executable, "-c", script, "compat", "--list-rules"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (writer.returncode, writer.stderr) == (141, "")


def test_console_script_runs() -> None:
    script = Path(sys.executable).parent / "tensorwire"
    result = subprocess.run([str(script), "schemas"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "media.Video" in result.stdout


@pytest.mark.parametrize(
    ("fields", "hidden", "whose"),
    [
        (
            {
                "frozenset": {"type": "integer", "default": 3},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "default": []},
            },
            "frozenset",
            "the type or default of field 'tags'",
        ),
        (
            {"msgspec": {"type": "integer", "default": 3}, "n": {"type": "integer", "minimum": 0}},
            "msgspec",
            "the type or default of field 'n'",
        ),
        (
            {"bytes": {"type": "integer"}, "data": {"type": "string", "contentEncoding": "base64"}},
            "bytes",
            "the type or default of field 'data'",
        ),
        (
            {"Colour": {"type": "string", "default": "x"}, "colour": {"$ref": "#/$defs/Colour", "default": "red"}},
            "Colour",
            "the type or default of field 'colour'",
        ),
        ({"str": {"type": "string"}}, "str", "its own type or default"),
    ],
)
def test_gen_refuses_a_field_that_hides_a_name_the_class_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, Any], hidden: str, whose: str
) -> None:
    """msgspec evaluates a generated class's field types with the class's own names in scope, where
    each field's name is bound: a field named like one of them would break the class at import."""
    doc = minimal("shade.T", **fields)
    doc["$defs"] = {"Colour": {"type": "string", "enum": ["red", "blue"], "x-enum-name": "Colour"}}
    schemas = write_schemas(tmp_path / "schemas", {"shade/T.v1.json": doc})
    assert main(["gen", str(schemas), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"tensorwire: T: field {hidden!r} hides the name {hidden!r} that {whose} reads in the generated class; "
        f"rename field {hidden!r}\n"
    )
    assert not (tmp_path / "out").exists()  # nothing written


def test_gen_refuses_a_field_whose_type_nests_deeper_than_python_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A type the schema language allows (arrays 120 deep through a $ref, each with minItems:
    ``Annotated[list[...], ...]``, two brackets a level) was an internal error (exit 3, a
    ``SyntaxError`` from Python's parser, which reads 200 brackets deep) for gen and gen --check."""

    def arrays(levels: int, leaf: dict[str, Any]) -> dict[str, Any]:
        for _ in range(levels):
            leaf = {"type": "array", "items": leaf, "minItems": 1}
        return leaf

    doc = minimal("deep.T", a=arrays(60, {"$ref": "#/$defs/D"}))
    doc["$defs"] = {"D": arrays(60, {"type": "integer"})}
    schemas = write_schemas(tmp_path / "schemas", {"deep/T.v1.json": doc})
    for command in (["gen"], ["gen", "--check"]):
        assert main([*command, str(schemas), "-o", str(tmp_path / "out")]) == 2
        assert capsys.readouterr().err == (
            "tensorwire: T: field 'a' has a type or default nested deeper than Python reads in source (too many "
            "nested parentheses); make part of it an object type, or build the classes with load_schemas\n"
        )
    assert not (tmp_path / "out").exists()  # nothing written
    assert tw.load_schemas(schemas).type("deep.T").__name__ == "T"  # the classes built at run time have no limit


@pytest.mark.parametrize(
    ("files", "hidden"),
    [
        ({"shade/TypeInfo.v1.json": minimal("shade.TypeInfo")}, "TypeInfo"),
        (
            {
                "shade/Literal.v1.json": minimal("shade.Literal"),
                "shade/T.v1.json": minimal("shade.T", kind={"const": 3}, n={"type": "integer"}),
            },
            "Literal",
        ),
        (
            {
                "shade/T.v1.json": minimal(
                    "shade.T",
                    o={
                        "type": "object",
                        "title": "Annotated",
                        "properties": {"n": {"type": "integer", "minimum": 0}},
                        "required": ["n"],
                    },
                )
            },
            "Annotated",
        ),
    ],
)
def test_gen_refuses_a_class_that_hides_a_name_the_module_imports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, Any], hidden: str
) -> None:
    """A class named like ``Literal`` or ``TypeInfo`` replaced the imported name for the rest of the
    generated module: its other classes failed at import."""
    schemas = write_schemas(tmp_path / "schemas", files)
    assert main(["gen", str(schemas), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"tensorwire: namespace shade: class {hidden!r} hides the name {hidden!r} that the generated module imports; "
        "rename the type\n"
    )
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("namespace", ["annotations", "require"])
def test_gen_refuses_a_namespace_named_like_a_name_the_registry_binds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], namespace: str
) -> None:
    """``from . import require`` in the registry module took the imported function, not the
    namespace's module: the generated registry was empty (``annotations``: it failed at import)."""
    schemas = write_schemas(tmp_path / "schemas", {f"{namespace}/T.v1.json": minimal(f"{namespace}.T")})
    assert main(["gen", str(schemas), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"tensorwire: namespace {namespace!r} is a name the generated registry module binds, so it cannot import "
        "the namespace's module; rename the namespace\n"
    )
    assert not (tmp_path / "out").exists()  # nothing written


def test_gen_takes_a_field_named_as_a_string_the_class_holds(tmp_path: Path) -> None:
    """Only names the class reads count: one inside a pattern or a tag is text."""
    fields: dict[str, Any] = {
        "frozenset": {"type": "integer", "default": 3},
        "code": {"type": "string", "pattern": "^frozenset|str$"},
        "kind": {"const": "frozenset"},
    }
    schemas = write_schemas(tmp_path / "schemas", {"shade/T.v1.json": minimal("shade.T", **fields)})
    assert main(["gen", str(schemas), "-o", str(tmp_path / "shaded")]) == 0
    out = subprocess.run(
        [sys.executable, "-c", "from shaded.shade import T; print(T(code='str').frozenset)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "3\n"


def test_gen_namespaces_that_import_each_other_with_an_enum_default_import_in_any_order(tmp_path: Path) -> None:
    """Namespace ``a`` holds a ``b.B``; ``b.B`` has a field of ``a``'s enum with a default. Each module
    imported the other first thing, and ``b``'s class read ``a.Color.RED`` as it was made: the
    package failed at import (a partially initialized module), and ``gen --check`` called it up to
    date. A module with enums now imports the other namespaces once its enums exist."""
    color = {"type": "string", "enum": ["red", "blue"], "x-enum-name": "Color"}
    a = {**minimal("a.A", b={"$ref": "../b/B.v1.json"}), "$defs": {"Color": color}}
    b = minimal("b.B", c={"$ref": "../a/A.v1.json#/$defs/Color", "default": "red"})
    schemas = write_schemas(tmp_path / "schemas", {"a/A.v1.json": a, "b/B.v1.json": b})
    assert main(["gen", str(schemas), "-o", str(tmp_path / "cyc")]) == 0
    assert main(["gen", "--check", str(schemas), "-o", str(tmp_path / "cyc")]) == 0
    use = (
        "import tensorwire as tw, cyc; m = cyc.a.A(b=cyc.b.B()); "
        "r = tw.Decoder(cyc.REGISTRY).decode(tw.Encoder().encode(m)); "
        "print(r == m, r.b.c is cyc.a.Color.RED)"
    )
    for first in ("cyc", "cyc.a", "cyc.b"):
        out = subprocess.run(
            [sys.executable, "-c", f"import {first}; {use}"], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert (out.returncode, out.stdout, out.stderr) == (0, "True True\n", ""), first


@pytest.mark.parametrize("command", [["ls"], ["ls", "--json"], ["reap"], ["reap", "--dry-run"]])
@pytest.mark.parametrize(("name", "why"), [("missing", "No such file or directory"), ("file", "Not a directory")])
def test_shm_names_a_dir_it_cannot_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], name: str, why: str
) -> None:
    """A --dir that does not exist, or is a file, was listed as empty: 'no segments', exit 0."""
    (tmp_path / "file").write_text("")
    path = tmp_path / name
    assert main(["shm", *command, "--dir", str(path)]) == 2
    assert capsys.readouterr() == ("", f"tensorwire: shm {command[0]} --dir {path}: {why}\n")
