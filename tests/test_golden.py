"""Golden wire fixtures: bytes written by every released schema version still decode, exactly."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import tensorwire as tw
from tensorwire.builtins import REGISTRY, rpc
from tensorwire.builtins.golden import cases
from tensorwire.golden import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    description_text,
    manifest_lines,
    read_manifest,
    record,
)
from tests.conftest import NOT_REGULAR, REPO, make_not_regular

GOLDEN = REPO / "tests" / "golden"
FIXTURES = sorted(GOLDEN.rglob("*.bin"))


def test_the_manifest_pins_every_fixture() -> None:
    pinned, current = read_manifest(GOLDEN), manifest_lines(GOLDEN)
    assert pinned == current, "a released fixture was added, edited or removed without the manifest"
    assert len(FIXTURES) >= 13


@pytest.mark.parametrize("path", FIXTURES, ids=[p.relative_to(GOLDEN).as_posix() for p in FIXTURES])
def test_every_fixture_decodes_to_its_described_value(path: Path) -> None:
    message = tw.Decoder(REGISTRY).decode(tw.split(path.read_bytes()))
    assert description_text(message) == path.with_suffix(".json").read_text()
    type_id, version = path.parent.parent.name, int(path.parent.name[1:])
    assert type(message).__tw_type__.type_id == type_id and type(message).__tw_type__.version == version


def test_a_value_of_another_type_does_not_match_a_fixture_s_description() -> None:
    """Descriptions were compared as Python values, where ``True == 1 == 1.0``: a decode of the
    ``tree`` fixture that gave ``{"ok": 1, "n": [True, 2.0, (3,)]}`` passed."""
    fixture = (GOLDEN / "rpc.Value" / "v1" / "tree.json").read_text()
    assert description_text(rpc.Value(value={"ok": True, "n": [1, 2, (3,)]})) == fixture
    for wrong in ({"ok": 1, "n": [1, 2, (3,)]}, {"ok": True, "n": [True, 2.0, (3,)]}):
        assert description_text(rpc.Value(value=wrong)) != fixture


def test_todays_encoder_writes_the_released_bytes_of_every_case() -> None:
    """Encoding is deterministic and unchanged: the same message gives the fixture's exact bytes.
    Every case of the table the fixtures are recorded from has both its files: this test passed over
    a case whose fixture was deleted (with its manifest lines) and only counted the rest."""
    encoder, missing = tw.Encoder(), []
    for type_id, builders in cases().items():
        for case, build in builders:
            message = build()
            path = GOLDEN / type_id / f"v{type(message).__tw_type__.version}" / f"{case}.bin"
            if not (path.is_file() and path.with_suffix(".json").is_file()):
                missing.append(path.relative_to(GOLDEN).with_suffix("").as_posix())
                continue
            assert tw.join(encoder.encode(message)) == path.read_bytes(), path
    assert missing == [], "cases without their fixtures: record them (tensorwire golden record)"


def test_every_builtin_type_version_has_fixtures_including_bf16_and_trees() -> None:
    covered = {(p.parent.parent.name, int(p.parent.name[1:])) for p in FIXTURES}
    assert covered == {(i.type_id, i.version) for i in REGISTRY.infos()}
    texts = "".join(p.with_suffix(".json").read_text() for p in FIXTURES)
    assert '"$tensor": "bfloat16"' in texts and '"$tuple"' in texts and '"$ndarray": "int16"' in texts


def test_record_adds_only_what_is_missing_and_refuses_edited_fixtures(tmp_path: Path) -> None:
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    assert record(root, cases()) == []  # everything released is already there
    (root / "rpc.Value" / "v1" / "tree.bin").unlink()
    (root / MANIFEST).write_text(
        "".join(
            line + "\n" for line in (root / MANIFEST).read_text().splitlines() if "rpc.Value/v1/tree.bin" not in line
        )
    )
    assert [p.name for p in record(root, cases())] == ["tree.json", "tree.bin"]
    assert read_manifest(root) == manifest_lines(root)
    victim = root / "media.Video" / "v1" / "uint8_frames.bin"
    victim.write_bytes(victim.read_bytes()[:-1] + b"\xff")
    with pytest.raises(ValueError, match=r"released fixtures were edited or removed: media.Video/v1/uint8_frames.bin"):
        record(root, cases())


def test_an_edited_fixture_fails_the_manifest_check(tmp_path: Path) -> None:
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    target = root / "rpc.Request" / "v1" / "collective.json"
    target.write_text(target.read_text().replace("add_lora", "add_lorax"))
    assert read_manifest(root) != manifest_lines(root)


# -- a user's own schemas -----------------------------------------------------------------------
def _message(type_id: str, version: int, properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    required = [name for name, p in properties.items() if "default" not in p and "const" not in p]
    doc = {"$id": type_id, "x-version": version, "description": "A test type.", "type": "object"}
    return {**doc, "properties": properties, "required": required, **extra}


POINT = {"type": "object", "properties": {"x": {"type": "number", "minimum": 1}}, "required": ["x"]}
LAB: dict[str, Any] = {
    "lab/Sample.v1.json": _message(
        "lab.Sample",
        1,
        {
            "flag": {"type": "boolean"},
            "count": {"type": "integer", "minimum": 3},
            "below": {"type": "integer", "maximum": -2},
            "ratio": {"type": "number", "minimum": 0.5, "maximum": 2},
            "name": {"type": "string", "maxLength": 4},
            "raw": {"type": "string", "contentEncoding": "base64"},
            "mode": {"$ref": "#/$defs/Mode"},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
            "triple": {
                "type": "array",
                "prefixItems": [{"type": "integer", "minimum": 7}, {"$ref": "#/$defs/Mode"}, {"$ref": "#/$defs/Point"}],
            },
            "scores": {"type": "object", "additionalProperties": {"type": "number"}},
            "maybe": {"type": ["integer", "null"]},
            "image": {
                "x-tensor": {"dtypes": ["uint8", "float32"], "shape": [3, "h", None], "devices": ["cpu", "cuda"]}
            },
            "free": {"x-tensor": {}},
            "half": {"x-tensor": {"dtypes": ["bfloat16"], "rank": 2}},
            "array": {"x-ndarray": {"dtypes": ["int16"], "shape": ["h", 2]}},
            "tree": {"x-tree": {"json": True}},
            "point": {"$ref": "#/$defs/Point"},
            "inline": {"type": "object", "properties": {"z": {"type": "integer", "minimum": 1}}, "required": ["z"]},
            "shape": {
                "oneOf": [{"$ref": "Circle.v1.json"}, {"$ref": "Square.v1.json"}],
                "discriminator": {"propertyName": "kind"},
            },
            "circle": {"$ref": "Circle.v1.json"},
            "a": {"type": ["string", "null"], "default": None},
            "b": {"type": ["integer", "null"], "default": None},
            "opt": {"type": "integer", "default": 5},
        },
        **{
            "x-constraints": {"exactly_one_of": ["a", "b"]},
            "$defs": {"Mode": {"type": "string", "enum": ["slow", "fast"], "x-enum-name": "Mode"}, "Point": POINT},
        },
    ),
    "lab/Sample.v2.json": _message("lab.Sample", 2, {"count": {"type": "integer", "minimum": 1}}),
    "lab/Circle.v1.json": _message(
        "lab.Circle", 1, {"kind": {"const": "circle"}, "r": {"type": "number", "minimum": 1}}
    ),
    "lab/Square.v1.json": _message("lab.Square", 1, {"kind": {"const": "square"}, "side": {"type": "integer"}}),
}


def _tree(root: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every path under ``root``: a file's bytes and modification time, None for a directory."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def _tensor(dtype: str, shape: list[int], kind: str = "$tensor") -> dict[str, Any]:
    import hashlib

    size = {"uint8": 1, "float32": 4, "bfloat16": 2, "int16": 2}[dtype]
    count = 1
    for dim in shape:
        count *= dim
    return {kind: dtype, "shape": shape, "sha256": hashlib.sha256(bytes(size * count)).hexdigest()}


def test_record_a_user_schema_directory_writes_minimal_fixtures_that_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorwire.cli import main
    from tests.conftest import write_schemas

    monkeypatch.chdir(tmp_path)  # where no configuration applies
    write_schemas(tmp_path / "schemas", LAB)
    (tmp_path / "notes.txt").write_text("mine\n")
    before = _tree(tmp_path)
    assert main(["golden", "record", "schemas", "--dir", "out/golden"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "8 fixture file(s) written; manifest out/golden/MANIFEST.sha256"
    after = _tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("out")} == before  # nothing else changed
    golden = tmp_path / "out" / "golden"
    assert sorted(p.relative_to(golden).as_posix() for p in golden.rglob("*.bin")) == [
        "lab.Circle/v1/minimal.bin",
        "lab.Sample/v1/minimal.bin",
        "lab.Sample/v2/minimal.bin",
        "lab.Square/v1/minimal.bin",
    ]
    assert read_manifest(golden) == manifest_lines(golden)
    registry = tw.load_schemas(tmp_path / "schemas")
    for path in golden.rglob("*.bin"):
        message = tw.Decoder(registry).decode(tw.split(path.read_bytes()))
        assert description_text(message) == path.with_suffix(".json").read_text()
        assert type(message).__tw_type__.type_id == path.parent.parent.name
        assert type(message).__tw_type__.version == int(path.parent.name[1:])
    sample = json.loads((golden / "lab.Sample" / "v1" / "minimal.json").read_text())
    point = {"$type": "Point", "x": 1.0}
    assert sample == {
        "$type": "lab.Sample",
        "flag": False,
        "count": 3,
        "below": -2,
        "ratio": 0.5,
        "name": "",
        "raw": {"$bytes": ""},
        "mode": "slow",
        "tags": {"$set": []},
        "points": [],
        "triple": {"$tuple": [7, "slow", point]},
        "scores": {},
        "maybe": None,
        "image": _tensor("uint8", [3, 1, 1]),
        "free": _tensor("float32", [1]),
        "half": _tensor("bfloat16", [1, 1]),
        "array": _tensor("int16", [1, 2], "$ndarray"),
        "tree": {},
        "point": point,
        "inline": {"$type": "SampleInline", "z": 1},
        "shape": {"$type": "lab.Circle", "r": 1.0},
        "circle": {"$type": "lab.Circle", "r": 1.0},
        "a": "",  # exactly one of a, b: the first
        "b": None,
        "opt": 5,
    }
    # a second run writes nothing, not even the manifest
    assert main(["golden", "record", "schemas", "--dir", "out/golden"]) == 0
    assert capsys.readouterr().out == "0 fixture file(s) written; manifest out/golden/MANIFEST.sha256\n"
    assert _tree(tmp_path) == after
    # a released fixture that was edited is refused
    victim = golden / "lab.Square" / "v1" / "minimal.json"
    victim.write_text(victim.read_text().replace("0", "1"))
    assert main(["golden", "record", "schemas", "--dir", "out/golden"]) == 2
    err = capsys.readouterr().err
    assert err == "tensorwire: released fixtures were edited or removed: lab.Square/v1/minimal.json; restore them\n"


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_record_reads_a_schema_directory_as_the_loader_does(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the loader ran, ``golden record`` compared the directory with the built-in schemas by
    reading every ``*.json`` whole: a FIFO blocked it forever, a link to /dev/zero read until memory
    ran out. Now such a file is what the loader says it is, and nothing is written."""
    from tensorwire.cli import main
    from tests.conftest import write_schemas

    monkeypatch.chdir(tmp_path)
    write_schemas(tmp_path / "schemas", LAB)
    odd = tmp_path / "schemas" / "lab" / "Odd.v1.json"
    make_not_regular(odd, kind)
    assert main(["golden", "record", "schemas", "--dir", "out/golden"]) == 2
    captured = capsys.readouterr()
    why = "a symbolic link (schema files are read as regular files only, never through a link)"
    why = why if "link" in kind else "not a regular file"
    assert captured.err == f"tensorwire: schemas/lab/Odd.v1.json: cannot read schema file: {why}\n"
    assert captured.out == "" and not (tmp_path / "out").exists()


def test_record_defaults_to_the_configured_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorwire.cli import main
    from tests.conftest import write_schemas

    monkeypatch.chdir(tmp_path)
    write_schemas(tmp_path / "contracts", {"lab/Square.v1.json": LAB["lab/Square.v1.json"]})
    (tmp_path / "tensorwire.toml").write_text('schemas = "contracts"\ngolden = "fixtures"\n')
    assert main(["golden", "record"]) == 0
    assert (tmp_path / "fixtures" / "lab.Square" / "v1" / "minimal.bin").is_file()
    (tmp_path / "tensorwire.toml").unlink()
    write_schemas(tmp_path / "schemas", {"lab/Circle.v1.json": LAB["lab/Circle.v1.json"]})
    assert main(["golden", "record"]) == 0  # ./schemas into tests/golden
    assert sorted(p.name for p in (tmp_path / "tests" / "golden").iterdir()) == ["MANIFEST.sha256", "lab.Circle"]


def test_the_built_in_schemas_record_the_built_in_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository records its own fixtures as before: its configuration names schemas/, whose
    files are the built-in ones, so the hand-written cases apply (and everything is recorded)."""
    from tensorwire.builtins import SCHEMA_DIR
    from tensorwire.cli import main
    from tests.conftest import BUILTIN_SCHEMAS

    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    monkeypatch.chdir(REPO)
    assert main(["golden", "record", "--dir", str(root)]) == 0
    assert main(["golden", "record", str(SCHEMA_DIR), "--dir", str(root)]) == 0
    assert _tree(root) == _tree(tmp_path / "golden")
    fresh = tmp_path / "fresh"
    assert main(["golden", "record", str(BUILTIN_SCHEMAS), "--dir", str(fresh)]) == 0
    assert manifest_lines(fresh) == manifest_lines(GOLDEN)
    # a copy (as a wheel installs them) is the built-in schemas: same bytes, same cases
    copy = shutil.copytree(BUILTIN_SCHEMAS, tmp_path / "copy")
    assert main(["golden", "record", str(copy), "--dir", str(tmp_path / "from-copy")]) == 0
    assert manifest_lines(tmp_path / "from-copy") == manifest_lines(GOLDEN)
    # one byte changed and it is a directory of its own: synthesized cases (media.Video has none)
    video = copy / "media" / "Video.v1.json"
    video.write_text(video.read_text() + "\n")
    assert main(["golden", "record", str(copy), "--dir", str(tmp_path / "edited")]) == 2
    assert not (tmp_path / "edited").exists()


def test_a_case_name_with_a_dot_keeps_its_whole_name(tmp_path: Path) -> None:
    """A case's files were named with ``with_suffix``, which replaces what follows a dot: cases
    ``run.1`` and ``run.2`` were both written to ``run.bin`` (the second over the first), and once
    it existed a case ``run.3`` was taken as released and never written."""
    from tensorwire.builtins import diffusion

    root = tmp_path / "golden"
    runs = [(f"run.{i}", lambda i=i: diffusion.Output(error=str(i))) for i in range(1, 4)]
    written = record(root, {"diffusion.Output": runs[:2]})
    assert [p.relative_to(root).as_posix() for p in written] == [
        f"diffusion.Output/v1/run.{i}.{ext}" for i in (1, 2) for ext in ("json", "bin")
    ]
    assert [p.name for p in record(root, {"diffusion.Output": runs})] == ["run.3.json", "run.3.bin"]
    for i in range(1, 4):
        blob = (root / "diffusion.Output" / "v1" / f"run.{i}.bin").read_bytes()
        assert tw.Decoder(REGISTRY).decode(tw.split(blob)).error == str(i)
    assert read_manifest(root) == manifest_lines(root)


@pytest.mark.parametrize("stop", ["json", "bin"])
def test_a_record_stopped_part_of_the_way_is_finished_by_the_next(
    stop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``.bin`` was written first and says that a case was recorded: a record stopped before
    the ``.json`` (Ctrl-C), or while a full disk cut the ``.bin`` short, left a case that every
    later record skipped and pinned as it was, without its description or with half its bytes."""
    from tensorwire.builtins import diffusion

    root = tmp_path / "golden"
    one = {"diffusion.Output": [("one", lambda: diffusion.Output(error="one"))]}
    write_bytes = Path.write_bytes

    def stopped(path: Path, data: Any) -> int:
        if path.suffix == f".{stop}":
            if stop == "bin":
                write_bytes(path, bytes(data)[:10])
                raise OSError(28, "No space left on device")
            raise KeyboardInterrupt
        return write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", stopped)
    with pytest.raises(KeyboardInterrupt if stop == "json" else OSError):
        record(root, one)
    monkeypatch.undo()
    assert not (root / "diffusion.Output" / "v1" / "one.bin").exists()
    assert [p.name for p in record(root, one)] == ["one.json", "one.bin"]
    blob = (root / "diffusion.Output" / "v1" / "one.bin").read_bytes()
    assert tw.Decoder(REGISTRY).decode(tw.split(blob)).error == "one"
    assert read_manifest(root) == manifest_lines(root)


@pytest.mark.parametrize(
    ("cases", "bad"),
    [
        ({"../evil": [("x", lambda: None)]}, "type id '../evil'"),
        ({"/tmp/abs": [("x", lambda: None)]}, "type id '/tmp/abs'"),
        ({"rpc.Value": [("../../x", lambda: None)]}, "case name '../../x'"),
        ({"rpc.Value": [("..", lambda: None)]}, "case name '..'"),
        ({"rpc.Value": [("a/b", lambda: None)]}, "case name 'a/b'"),
        ({"rpc.Value": [("bf16\n", lambda: None)]}, "case name 'bf16\\n'"),  # a line break in the manifest
        ({"rpc.Value\n": [("x", lambda: None)]}, "type id 'rpc.Value\\n'"),
    ],
)
def test_record_refuses_a_name_that_would_escape_the_fixture_directory(tmp_path: Path, cases: Any, bad: str) -> None:
    with pytest.raises(ValueError, match=f"{re.escape(bad)} is not a plain file name"):
        record(tmp_path / "golden", cases)
    assert list(tmp_path.iterdir()) == []


def test_record_refuses_a_link_or_a_file_for_the_fixture_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorwire.cli import main
    from tests.conftest import write_schemas

    monkeypatch.chdir(tmp_path)
    write_schemas(tmp_path / "schemas", {"lab/Square.v1.json": LAB["lab/Square.v1.json"]})
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "file").write_text("x\n")
    before = _tree(tmp_path)
    assert main(["golden", "record", "--dir", "link"]) == 2
    assert capsys.readouterr().err == (
        "tensorwire: link: the fixture directory is a symbolic link; give the directory it points to\n"
    )
    assert main(["golden", "record", "--dir", "file"]) == 2
    assert capsys.readouterr().err == "tensorwire: file: not a directory\n"
    assert _tree(tmp_path) == before
    (tmp_path / "out" / "lab.Square").mkdir(parents=True)
    (tmp_path / "out" / "lab.Square" / "v1").symlink_to(tmp_path / "elsewhere")
    before = _tree(tmp_path)
    assert main(["golden", "record", "--dir", "out"]) == 2
    assert "out: holds symbolic links (lab.Square/v1); fixtures are plain files" in capsys.readouterr().err
    assert _tree(tmp_path) == before and list((tmp_path / "elsewhere").iterdir()) == []


class _Held(Exception):
    """Raised by a SIGALRM handler: a call was held too long."""


@pytest.mark.parametrize("fifo", [MANIFEST, "rpc.Result/v1/error.json"], ids=["manifest", "fixture"])
def test_record_refuses_a_fifo_in_the_fixture_directory_instead_of_waiting_on_it(tmp_path: Path, fifo: str) -> None:
    """A FIFO where the manifest is read, or where a fixture is written, held ``record`` forever."""
    root = tmp_path / "golden"
    (root / fifo).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(root / fifo)
    before = _tree(root)

    def held(signum: int, frame: object) -> None:
        raise _Held

    previous = signal.signal(signal.SIGALRM, held)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with pytest.raises(ValueError, match=rf"holds what is neither a file nor a directory \({re.escape(fifo)}\)"):
            record(root, cases())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _tree(root) == before


def test_record_walks_a_fixture_directory_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    """Listing the fixture directory recursed once per directory: 1,200 nested directories made
    ``record`` raise ``RecursionError`` (``tensorwire golden record``: internal error)."""
    root = tmp_path / "golden"
    deepest = root
    for _ in range(1200):  # one at a time: Path.mkdir(parents=True) recurses too
        deepest /= "a"
        deepest.mkdir(parents=deepest.parent == root)
    try:
        assert record(root, cases())
        assert read_manifest(root) == manifest_lines(root)
    finally:
        os.removedirs(deepest)  # without recursion, up to the fixtures


def test_record_refuses_a_name_that_is_not_utf8_before_writing(tmp_path: Path) -> None:
    """A file name that is not UTF-8 let ``record`` write the new fixtures, then fail to write the
    manifest (with a message naming neither), and fail so on every later run."""
    root = tmp_path / "golden"
    root.mkdir()
    os.close(os.open(os.fsencode(root) + b"/x\xff.bin", os.O_CREAT | os.O_WRONLY, 0o600))
    before = _tree(root)
    with pytest.raises(ValueError, match=r"holds names that are not UTF-8 \('x\\udcff\.bin'\); the manifest lists"):
        record(root, cases())
    assert _tree(root) == before


def test_a_manifest_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    root = tmp_path / "golden"
    root.mkdir()
    (root / MANIFEST).write_bytes(b"\xff\xfe  rpc.Result/v1/error.json\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(root / MANIFEST))}: cannot read it: not UTF-8 text \("):
        record(root, cases())


def test_a_manifest_line_that_pins_nothing_is_named_and_a_blank_one_skipped(tmp_path: Path) -> None:
    """Each line was split at its first two spaces whatever it held: a blank line pinned a file
    named "" (record then refused with ``released fixtures were edited or removed: ; restore
    them``), and a line of ``sha256sum --binary`` (``<digest> *<path>``) the same."""
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    manifest = root / MANIFEST
    lines = manifest.read_text().splitlines()
    manifest.write_text("\n".join(["", *lines, "", ""]))
    assert read_manifest(root) == manifest_lines(root)
    assert record(root, cases()) == []
    binary = lines[1].replace("  ", " *")
    manifest.write_text("\n".join([lines[0], binary, *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(manifest))}:2: not a line of '<sha256>  <path>': ") as info:
        record(root, cases())
    assert str(info.value).endswith(repr(binary))


def test_record_reads_large_files_in_bounded_memory(tmp_path: Path) -> None:
    """Every file was read whole to be hashed, and the manifest too: a large (here sparse) file in
    the fixture directory made ``record`` hold all of it."""
    root = tmp_path / "golden"
    record(root, cases())
    with (root / "large.bin").open("wb") as file:
        file.truncate(256 * 1024 * 1024)
    tracemalloc.start()
    try:
        record(root, cases())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, f"record held {peak} bytes for a 256 MiB file"
    assert read_manifest(root) == manifest_lines(root)
    with (root / MANIFEST).open("r+b") as file:
        file.truncate(MAX_MANIFEST_BYTES + 1)
    too_large = rf"{re.escape(MANIFEST)}: cannot read it: {MAX_MANIFEST_BYTES + 1} bytes is over"
    with pytest.raises(ValueError, match=too_large):
        record(root, cases())


def test_a_type_no_value_can_be_synthesized_for_stops_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorwire.cli import main
    from tests.conftest import write_schemas

    monkeypatch.chdir(tmp_path)
    gpu = _message("lab.Gpu", 1, {"t": {"x-tensor": {"devices": ["cuda"]}}})
    write_schemas(tmp_path / "schemas", {"lab/Gpu.v1.json": gpu, "lab/Square.v1.json": LAB["lab/Square.v1.json"]})
    assert main(["golden", "record", "--dir", "out"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorwire: cannot synthesize a minimal lab.Gpu v1 (schemas/lab/Gpu.v1.json): ")
    assert "fixtures hold cpu tensors" in err
    assert not (tmp_path / "out").exists()


def test_minimal_values_keep_every_limit_a_schema_can_state(tmp_path: Path) -> None:
    from tensorwire._synth import minimal_cases
    from tensorwire.schema import load_dir
    from tests.conftest import write_schemas

    props = {
        "step": {"type": "integer", "minimum": 3, "multipleOf": 4},
        "below": {"type": "integer", "format": "int8", "exclusiveMaximum": -5, "multipleOf": 3},
        "above": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
        "code": {"type": "string", "minLength": 2, "pattern": "^[A-Z]+$"},
        "blob": {"type": "string", "format": "bytes", "minLength": 3},
        "level": {"const": 7},
        "flag": {"type": "boolean", "const": True, "default": True},
        "tags": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2},
        "scores": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}, "minProperties": 1},
    }
    doc = _message("lab.Limits", 1, props, additionalProperties=False)
    doc["required"] = [name for name in props if name != "flag"]
    schema_dir = write_schemas(tmp_path / "schemas", {"lab/Limits.v1.json": doc})
    registry = tw.load_schemas(schema_dir)
    ((_, build),) = minimal_cases(load_dir(schema_dir), registry)["lab.Limits"]
    message = build()
    assert (message.step, message.below, message.above, message.code, message.blob) == (4, -6, 0.25, "AA", b"aaa")
    assert (message.level, message.flag, message.tags, message.scores) == (7, True, [1, 1], {"k0": "a"})
    assert tw.Decoder(registry).decode(tw.Encoder().encode(message)) == message  # every limit checked both ways
    unsynthesizable = {**props, "code": {"type": "string", "pattern": "^b"}}
    doc = _message("lab.Limits", 1, unsynthesizable)
    schema_dir = write_schemas(tmp_path / "bad", {"lab/Limits.v1.json": doc})
    with pytest.raises(ValueError, match=r"cannot synthesize a minimal lab.Limits v1 .*a string matching '\^b'"):
        minimal_cases(load_dir(schema_dir), tw.load_schemas(schema_dir))


def test_an_integer_bound_past_a_double_s_precision_is_kept_exactly(tmp_path: Path) -> None:
    """Bounds past 2**53 are not rounded through a float: the minimal value is the bound itself
    (or the first multiple past it), not a value beside it the schema refuses."""
    from tensorwire._synth import minimal_cases
    from tensorwire.schema import load_dir
    from tests.conftest import write_schemas

    props = {
        "low": {"type": "integer", "minimum": 2**62 + 1},
        "step": {"type": "integer", "minimum": 2**62 + 1, "multipleOf": 3},
        "high": {"type": "integer", "maximum": -(2**62) - 1},
        "past": {"type": "integer", "exclusiveMinimum": 2**53},
    }
    schema_dir = write_schemas(tmp_path / "schemas", {"lab/Big.v1.json": _message("lab.Big", 1, props)})
    registry = tw.load_schemas(schema_dir)
    ((_, build),) = minimal_cases(load_dir(schema_dir), registry)["lab.Big"]
    message = build()
    assert (message.low, message.step, message.high, message.past) == (2**62 + 1, 2**62 + 2, -(2**62) - 1, 2**53 + 1)


def test_a_value_with_no_minimal_form_is_named(tmp_path: Path) -> None:
    from tensorwire._synth import minimal_cases
    from tensorwire.schema import load_dir
    from tests.conftest import write_schemas

    for prop, problem in (
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "minItems": 2}, "a set of at least 2"),
        ({"type": "integer", "minimum": 5, "maximum": 6, "multipleOf": 4}, "no int near zero fits the limits"),
        ({"type": "number", "minimum": 1e308, "multipleOf": 1e-300}, "no float near zero fits the limits"),
        (  # a schema's sizes reach no allocation of theirs: a billion items is refused, not built
            {"type": "array", "items": {"type": "integer"}, "minItems": 10**9},
            "the smallest valid value needs 1000000000 items, over the 65536 a fixture may hold",
        ),
        ({"type": "string", "minLength": 10**12}, "needs 1000000000000 characters"),
        ({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 70000}, "70000 entries"),
        ({"x-tensor": {"shape": [100000, 100000]}}, "needs 10000000000 tensor elements"),
    ):
        schema_dir = write_schemas(
            tmp_path / str(len(problem)), {"lab/One.v1.json": _message("lab.One", 1, {"x": prop})}
        )
        with pytest.raises(
            ValueError, match=re.escape("cannot synthesize a minimal lab.One v1 (") + ".*" + re.escape(problem)
        ):
            minimal_cases(load_dir(schema_dir), tw.load_schemas(schema_dir))
