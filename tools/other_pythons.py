"""The compiled shorter paths on the other CPython releases pyproject.toml accepts.

    python -m tools.other_pythons [--versions 3.12,3.13] [--all]

``tensorwire._speedups`` works through CPython's C API and, in one place, repeats what assigning
``__class__`` checks (``swap_to_base``): what holds on one release may not on the next. For each
version found on this machine (``pythonX.Y`` on the PATH if it runs, else pyenv's newest
``X.Y.N``), this makes a venv ``.venv-X.Y`` (kept between runs), installs the dependencies there
(torch as ``--torch`` names it: for Linux, PyPI has only CUDA builds, several GB), installs the
package from the files git tracks (the extension compiled for that Python) and runs the tests of the
compiled paths, or with ``--all`` the whole suite. A version not found here is said and skipped;
any other failure exits 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.tracked import REPO, tracked_copy

__all__ = ["COMPILED_PATH_TESTS", "VERSIONS", "find_python", "main"]

COMPILED_PATH_TESTS = (
    "tests/test_package.py::test_the_compiled_paths_are_built_and_taken_here",
    "tests/test_speedups.py",
    "tests/test_plain_path.py",
    "tests/test_plain_trees.py",
    "tests/hostile/test_nesting.py",
)
"""The tests that take the compiled paths (most of them both ways) or check that they are built."""
VERSIONS = ("3.12", "3.13")
"""The releases checked by default: those pyproject.toml names besides the 3.11 of ``make test``."""

_DEPENDENCIES = ("numpy", "msgspec", "jsonschema", "pyzmq", "pytest", "hypothesis", "setuptools>=77", "wheel")


def _runs(executable: str) -> bool:
    try:
        return subprocess.run([executable, "-c", "pass"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_python(version: str, path: str | None = None, pyenv_root: Path | None = None) -> str | None:
    """An interpreter of CPython ``version`` (``"3.12"``): ``pythonX.Y`` on ``path`` (default: the
    PATH) if it runs (a pyenv shim of a version not selected does not), else the newest
    ``X.Y.N`` release under pyenv's ``versions`` (no free-threaded or pre-release builds); None if
    neither."""
    found = shutil.which(f"python{version}", path=path)
    if found is not None and _runs(found):
        return found
    root = pyenv_root if pyenv_root is not None else Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    releases = []
    for folder in (root / "versions").glob(f"{version}.*"):
        match = re.fullmatch(rf"{re.escape(version)}\.(\d+)", folder.name)
        executable = folder / "bin" / f"python{version}"
        if match and executable.is_file() and os.access(executable, os.X_OK):
            releases.append((int(match.group(1)), str(executable)))
    for _, executable_path in sorted(releases, reverse=True):
        if _runs(executable_path):
            return executable_path
    return None


def _run(command: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=cwd, env=env)


def _source() -> Path:
    """The files git tracks, copied to build/ (the package is built from them, as a user's would be)."""
    target = REPO / "build" / "other-pythons-src"
    shutil.rmtree(target, ignore_errors=True)
    tracked_copy(target)
    return target


def _check(version: str, interpreter: str, torch: str, everything: bool, source: Path) -> None:
    venv = REPO / f".venv-{version}"
    python = str(venv / "bin" / "python")
    if not os.access(python, os.X_OK):
        _run([interpreter, "-m", "venv", str(venv)])
    _run([python, "-m", "pip", "install", "-q", torch, *_DEPENDENCIES])
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--force-reinstall", str(source)])
    env = {k: v for k, v in os.environ.items() if k != "TENSORWIRE_PURE_PYTHON"}
    tests = [] if everything else list(COMPILED_PATH_TESTS)
    _run([python, "-m", "pytest", "-p", "no:cacheprovider", *tests], cwd=REPO, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.other_pythons", description=__doc__.splitlines()[0])
    default = ",".join(VERSIONS)
    parser.add_argument("--versions", default=default, help=f"comma-separated X.Y (default {default})")
    parser.add_argument("--torch", default="torch==2.14.1", help="the torch requirement (default torch==2.14.1)")
    parser.add_argument("--all", action="store_true", help="the whole suite, not only the compiled paths' tests")
    args = parser.parse_args(argv)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    if not all(re.fullmatch(r"3\.\d+", v) for v in versions):
        parser.error(f"--versions takes X.Y releases of CPython 3, got {args.versions!r}")
    source: Path | None = None
    failed = []
    for version in versions:
        interpreter = find_python(version)
        if interpreter is None:
            print(f"other-pythons: no CPython {version} on this machine, skipped", flush=True)
            continue
        source = source or _source()
        print(f"other-pythons: CPython {version} ({interpreter})", flush=True)
        try:
            _check(version, interpreter, args.torch, args.all, source)
        except subprocess.CalledProcessError as exc:
            print(f"other-pythons: CPython {version} failed (exit code {exc.returncode})", flush=True)
            failed.append(version)
    if failed:
        print(f"other-pythons: failed on {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
