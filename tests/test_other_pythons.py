"""``tools.other_pythons``: which interpreter it takes for a version, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import other_pythons
from tools.tracked import REPO


def _interpreter(path: Path, works: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n" if works else "#!/bin/sh\necho 'pyenv: not selected' >&2\nexit 127\n")
    path.chmod(0o755)
    return path


def test_a_python_on_the_path_that_runs_is_taken(tmp_path: Path) -> None:
    found = _interpreter(tmp_path / "bin" / "python3.12")
    assert other_pythons.find_python("3.12", path=str(tmp_path / "bin"), pyenv_root=tmp_path / "none") == str(found)


def test_a_shim_that_does_not_run_gives_way_to_pyenvs_newest_release(tmp_path: Path) -> None:
    _interpreter(tmp_path / "shims" / "python3.12", works=False)
    root = tmp_path / "pyenv"
    for name in ("3.12.1", "3.12.10", "3.12.9", "3.12.11t", "3.12.12rc1", "3.13.0"):
        _interpreter(root / "versions" / name / "bin" / f"python{name[:4]}")
    _interpreter(root / "versions" / "3.12.13" / "bin" / "python3.12", works=False)  # a broken build
    found = other_pythons.find_python("3.12", path=str(tmp_path / "shims"), pyenv_root=root)
    assert found == str(root / "versions" / "3.12.10" / "bin" / "python3.12")


def test_no_interpreter_of_the_version_is_none(tmp_path: Path) -> None:
    root = tmp_path / "pyenv"
    _interpreter(root / "versions" / "3.13.0" / "bin" / "python3.13")
    assert other_pythons.find_python("3.12", path=str(tmp_path / "empty"), pyenv_root=root) is None
    assert other_pythons.find_python("3.12", path=str(tmp_path / "empty"), pyenv_root=tmp_path / "missing") is None


def test_versions_must_be_cpython_3_releases(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("3", "3.12.1", "2.7", "3.12;rm"):
        with pytest.raises(SystemExit) as raised:
            other_pythons.main(["--versions", bad])
        assert raised.value.code == 2
        assert f"--versions takes X.Y releases of CPython 3, got {bad!r}" in capsys.readouterr().err


def test_a_version_not_here_is_skipped_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert other_pythons.main(["--versions", "3.99"]) == 0
    assert "other-pythons: no CPython 3.99 on this machine, skipped" in capsys.readouterr().out


def test_the_compiled_path_tests_exist() -> None:
    for test in other_pythons.COMPILED_PATH_TESTS:
        path, _, name = test.partition("::")
        text = (REPO / path).read_text()
        assert not name or f"def {name}(" in text
