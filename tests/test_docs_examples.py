"""README.md's python examples, run as a user runs them: each block alone, in a fresh interpreter.

Each block runs in a directory of its own that holds a copy of the repository's ``schemas/`` and
``tests/golden/`` (a project's usual layout) and every file an earlier block of another language
declares with ``<!-- file: PATH -->`` on the line above it (the ``audio.Clip`` schema). An HTML
comment on the line above a python block changes how it is run:

- ``<!-- not run: REASON -->``: the block is not run (a GPU, a second host); the reason is required;
- ``<!-- raises: Error: message -->``: the block must end by raising that error, with that message.

Any other block must exit 0 and leave no shared-memory segment of its process in /dev/shm.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
_MARKER = re.compile(r"<!-- (not run|raises|file): (.+?) -->\s*\Z")
_TIMEOUT = 120  # seconds per block: a hung example fails instead of holding the suite


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: its language, code, first line and the marker above it."""

    language: str
    code: str
    line: int
    marker: tuple[str, str] | None


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, with the ``<!-- kind: value -->`` comment on the line above it."""
    found = []
    for match in _FENCE.finditer(text):
        above = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(above)
        kind = (marker.group(1), marker.group(2).strip()) if marker else None
        found.append(Block(match.group(1), match.group(2), text.count("\n", 0, match.start()) + 1, kind))
    return found


def _python_blocks() -> list[tuple[Block, dict[str, str]]]:
    """Each python block with the files declared above it (path -> text)."""
    files: dict[str, str] = {}
    found = []
    for block in blocks(README.read_text()):
        if block.marker is not None and block.marker[0] == "file":
            files[block.marker[1]] = block.code
        if block.language == "python":
            found.append((block, dict(files)))
    return found


PYTHON_BLOCKS = _python_blocks()


def test_the_readme_has_python_examples_and_every_marker_says_why() -> None:
    assert len(PYTHON_BLOCKS) >= 5  # the extraction finds them (a changed fence would find none)
    for block, _ in PYTHON_BLOCKS:
        if block.marker is not None:
            assert block.marker[0] in ("not run", "raises"), f"README.md:{block.line}: {block.marker}"
            assert block.marker[1], f"README.md:{block.line}: a marker needs its reason or error"


@pytest.mark.parametrize(("block", "files"), PYTHON_BLOCKS, ids=[f"README.md:{b.line}" for b, _ in PYTHON_BLOCKS])
def test_a_readme_example_runs(block: Block, files: dict[str, str], tmp_path: Path) -> None:
    if block.marker is not None and block.marker[0] == "not run":
        pytest.skip(f"README.md:{block.line} is marked not run: {block.marker[1]}")
    project = tmp_path / "project"
    shutil.copytree(REPO / "schemas", project / "schemas")
    shutil.copytree(REPO / "tests" / "golden", project / "tests" / "golden")
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    (project / "example.py").write_text(block.code)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # what the example makes in /tmp stays here
    env.pop("PYTHONPATH", None)  # the installed package, as a user has it, not this checkout's folders
    child = subprocess.Popen(
        [sys.executable, "example.py"], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _, err = child.communicate(timeout=_TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        pytest.fail(f"README.md:{block.line} did not finish within {_TIMEOUT} s:\n{err[-3000:]}")
    left = [name for name in os.listdir("/dev/shm") if name.startswith(f"tw-{child.pid}-")]
    assert not left, f"README.md:{block.line} left shared memory behind: {left}"
    if block.marker is not None and block.marker[0] == "raises":
        last = err.rstrip().rsplit("\n", 1)[-1]
        raised = last == block.marker[1] or last.endswith(f".{block.marker[1]}")
        assert child.returncode == 1 and raised, f"README.md:{block.line}:\n{err[-3000:]}"
    else:
        assert child.returncode == 0, f"README.md:{block.line} failed:\n{err[-3000:]}"
