"""``tools.tracked.tracked_copy``: what git tracks, and nothing built or ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import tracked


def test_the_copy_holds_the_tracked_files_and_nothing_built(tmp_path: Path) -> None:
    tracked.tracked_copy(tmp_path)
    assert (tmp_path / "codec" / "_speedups.c").read_bytes() == (tracked.REPO / "codec" / "_speedups.c").read_bytes()
    assert (tmp_path / "pyproject.toml").is_file() and (tmp_path / "tools" / "tracked.py").is_file()
    assert not list(tmp_path.glob("codec/*.so"))  # built in place by the editable install: ignored
    assert not (tmp_path / ".venv").exists() and not (tmp_path / ".git").exists() and not (tmp_path / "build").exists()


def test_without_git_the_working_tree_is_copied_less_its_venvs_and_build_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    for name in (
        "codec/a.py",
        ".venv/bin/python",
        ".venv-3.12/x",
        "build/lib/b.py",
        "codec/__pycache__/a.pyc",
        "c.egg-info/PKG",
    ):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(name)
    monkeypatch.setattr(tracked, "REPO", repo)  # not a git checkout: ``git ls-files`` fails there
    tracked.tracked_copy(tmp_path / "copy")
    copied = sorted(str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert copied == ["codec/a.py"]
