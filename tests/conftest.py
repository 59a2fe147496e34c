"""Shared helpers: the repository paths and a writer for temporary schema directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILTIN_SCHEMAS = REPO / "schemas"
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # repository tooling (tools/) is tested too, but not installed

CLIP: dict[str, Any] = {  # a JSON document
    "$schema": "../meta/tensorwire.v1.json",
    "$id": "audio.Clip",
    "x-version": 1,
    "title": "Clip",
    "description": "A mono or multi-channel audio clip.",
    "type": "object",
    "properties": {
        "samples": {"x-tensor": {"dtypes": ["float32", "bfloat16"], "shape": ["channels", None]}},
        "sample_rate": {"type": "integer", "minimum": 1},
        "codec": {"$ref": "#/$defs/AudioCodec", "default": "pcm"},
        "tags": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
        "window": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}]},
        "extra": {"x-tree": {}, "default": None},
    },
    "required": ["samples", "sample_rate", "window"],
    "$defs": {"AudioCodec": {"type": "string", "enum": ["pcm", "opus"], "x-enum-name": "AudioCodec"}},
}


def minimal(type_id: str, version: int = 1, **properties: Any) -> dict[str, Any]:
    """A schema document with the given properties (all required unless they carry a default)."""
    props = properties or {"value": {"type": "integer"}}
    return {
        "$id": type_id,
        "x-version": version,
        "type": "object",
        "properties": props,
        "required": [name for name, p in props.items() if "default" not in p and "const" not in p],
    }


def write_schemas(root: Path, files: dict[str, Any]) -> Path:
    """Write ``{"ns/Name.v1.json": document-or-text}`` under ``root``; return ``root``."""
    for rel, doc in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return root


NOT_REGULAR = ("a FIFO", "a link to /dev/zero", "a directory")
"""What a file reader must refuse unread: a FIFO blocks a read, /dev/zero never ends one."""


def make_not_regular(path: Path, kind: str) -> None:
    """Put one of ``NOT_REGULAR`` at ``path``."""
    if kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a directory":
        path.mkdir()
    else:
        assert kind == "a link to /dev/zero", kind
        path.symlink_to("/dev/zero")


NOT_READ = (*NOT_REGULAR, "too large")
"""What a bounded reader of regular files refuses unread: ``NOT_REGULAR``, and a file over its limit."""


def make_not_read(path: Path, kind: str, limit: int) -> str:
    """Put one of ``NOT_READ`` at ``path`` (a file over ``limit`` bytes is sparse: nothing is
    written); why it is refused, as ``tensorwire._files.read_regular`` words it."""
    if kind != "too large":
        make_not_regular(path, kind)
        return "not a regular file"
    with path.open("wb") as file:
        file.truncate(limit + 1)
    return f"{limit + 1} bytes is over the limit of {limit}"


@pytest.fixture
def schema_dir(tmp_path: Path) -> Path:
    return tmp_path / "schemas"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The repository's folders are not packages of their own: a test that imported ``codec`` or
    ``transports`` (the folders, through the repository path) instead of ``tensorwire`` fails the run."""
    stray = sorted(name for name in sys.modules if name.split(".")[0] in ("codec", "transports"))
    if stray:
        print(f"\nmodules imported under the repository's folder names instead of tensorwire: {stray}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Every sleep asked for with ``time.sleep`` during the test (``tensorwire.transports._page_lock``
    waits for a page another process keeps locked with it)."""
    import time

    asked: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        asked.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    yield asked


def shm_left_by_spawned(monkeypatch: pytest.MonkeyPatch) -> Callable[[], set[str]]:
    """Record the pids of the processes a test spawns from now on; the returned function lists the
    /dev/shm files named by those pids or the test's own (``tw-<pid>-...``, ``twbench-<pid>-...``;
    other tests on the machine may add theirs)."""
    import multiprocessing as mp
    import os
    import re

    pids = [os.getpid()]
    start = mp.context.SpawnProcess.start

    def recording(process: mp.context.SpawnProcess) -> None:
        start(process)
        assert process.pid is not None
        pids.append(process.pid)

    monkeypatch.setattr(mp.context.SpawnProcess, "start", recording)

    def left() -> set[str]:
        owners = {name: re.match(r"tw(?:bench)?-(\d+)-", name) for name in os.listdir("/dev/shm")}
        return {name for name, owner in owners.items() if owner is not None and int(owner.group(1)) in pids}

    return left


def run_in(site: Path, code: str, *args: str) -> dict[str, Any]:
    """The JSON that ``code`` (run with ``args`` in a fresh interpreter seeing ``site``) printed last."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=site,
        env={"PYTHONPATH": str(site), "PATH": ""},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture(params=["compiled", "python"])
def shorter_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Encoders and decoders made in the test take their shorter paths compiled
    (``tensorwire._speedups``; skipped where it is not built) or in Python, as where it is not."""
    from tensorwire import _decoder, _encoder
    from tensorwire._native import SPEEDUPS

    if request.param == "python":
        monkeypatch.setattr(_encoder, "SPEEDUPS", None)
        monkeypatch.setattr(_decoder, "SPEEDUPS", None)
    elif SPEEDUPS is None:
        pytest.skip("tensorwire._speedups is not built here")
    return str(request.param)
