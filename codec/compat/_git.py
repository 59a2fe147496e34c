"""Read a schema directory as it was at a git revision (``tensorwire compat --against REV``)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tensorwire.errors import CompatError

__all__ = ["checkout_schemas", "history", "temporary_dir"]


def _git_bytes(cwd: Path, *args: str) -> bytes:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except OSError as exc:  # no such directory, or no git
        raise CompatError(f"cannot run git in {cwd}: {exc.strerror}") from None
    if result.returncode != 0:
        raise CompatError(result.stderr.decode(errors="replace").strip() or f"git {' '.join(args)} failed")
    return result.stdout


def _git(cwd: Path, *args: str) -> str:
    return os.fsdecode(_git_bytes(cwd, *args))


def _fetch_hint(rev: str) -> str:
    if "/" in rev and not rev.startswith("refs/"):
        remote, _, branch = rev.partition("/")
        return f"git fetch {remote} {branch}"
    return f"git fetch origin {rev}"


def _not_an_option(rev: str) -> None:
    """Refuse a revision git would read as one of its options (``--output=...``)."""
    if rev.startswith("-"):
        raise CompatError(f"revision {rev!r} starts with '-': git would read it as an option")


def checkout_schemas(schema_dir: Path, rev: str, into: Path) -> Path | None:
    """Write ``schema_dir`` as of ``rev`` under ``into``; None if it did not exist at ``rev``."""
    _not_an_option(rev)
    if not schema_dir.is_dir():
        raise CompatError(f"schema directory {schema_dir} does not exist (give DIR, or run in the repository)")
    schema_dir = schema_dir.resolve()
    try:
        top = Path(_git(schema_dir, "rev-parse", "--show-toplevel").strip())
    except CompatError as exc:
        raise CompatError(f"{schema_dir} is not inside a git repository: {exc}") from None
    try:
        _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except CompatError:
        raise CompatError(f"revision {rev!r} is not in this clone; fetch it first: {_fetch_hint(rev)}") from None
    rel = schema_dir.relative_to(top).as_posix()
    listing = _git_bytes(top, "ls-tree", "-r", "-z", "--name-only", rev, "--", rel)  # names as they are, unquoted
    names = [os.fsdecode(n) for n in listing.split(b"\0") if n.endswith(b".json")]
    if not names:
        return None
    for name in names:
        try:
            blob = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=top, capture_output=True, check=True).stdout
        except subprocess.CalledProcessError:
            raise CompatError(f"cannot read {rev}:{name}; fetch it first: {_fetch_hint(rev)}") from None
        target = into / Path(name).relative_to(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
    return into


def history(schema_dir: Path, rev: str, limit: int = 100) -> list[str]:
    """Commits reachable from ``rev`` (first parents, newest first) that changed ``schema_dir``."""
    _not_an_option(rev)
    if not schema_dir.is_dir():
        raise CompatError(f"schema directory {schema_dir} does not exist (give DIR, or run in the repository)")
    schema_dir = schema_dir.resolve()
    top = Path(_git(schema_dir, "rev-parse", "--show-toplevel").strip())
    try:
        _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except CompatError:
        raise CompatError(f"revision {rev!r} is not in this clone; fetch it first: {_fetch_hint(rev)}") from None
    rel = schema_dir.relative_to(top).as_posix()
    out = _git(top, "rev-list", "--first-parent", f"--max-count={limit}", rev, "--", rel)
    return out.split()


def temporary_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="tensorwire-compat-")
