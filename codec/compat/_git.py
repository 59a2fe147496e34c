"""Read a schema directory as it was at a git revision (``tensorwire compat --against REV``)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tensorwire.errors import CompatError
from tensorwire.schema._source import MAX_FILE_BYTES

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
    blobs = _schema_blobs(top, rev, rel)
    if not blobs:
        return None
    for name, oid, size in blobs:
        if size > MAX_FILE_BYTES:
            raise CompatError(
                f"{rev}:{name}: cannot read schema file: {size} bytes is over the limit of {MAX_FILE_BYTES}"
            )
        try:
            blob = subprocess.run(["git", "cat-file", "blob", oid], cwd=top, capture_output=True, check=True).stdout
        except subprocess.CalledProcessError:
            raise CompatError(f"cannot read {rev}:{name}; fetch it first: {_fetch_hint(rev)}") from None
        target = into / Path(name).relative_to(rel)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blob)
        except OSError as exc:  # (a tree a checkout could not hold either; refused below, but never exit 3)
            raise CompatError(f"{rev}:{name}: cannot write it to read it: {exc.strerror or exc}") from None
    return into


def _schema_blobs(top: Path, rev: str, rel: str) -> list[tuple[str, str, int]]:
    """``(path, object id, size)`` of every ``.json`` file under ``rel`` at ``rev``; a ``CompatError``
    for a path with a ``.`` or ``..`` component (a tree git itself would refuse to check out, which
    would otherwise be written outside the directory it is read into), and for a path that is named
    twice or is both a file and a folder (a crafted tree: no checkout holds both)."""
    listing = _git_bytes(top, "ls-tree", "-r", "-z", "-l", rev, "--", rel)  # names as they are, unquoted
    blobs: list[tuple[str, str, int]] = []
    for entry in listing.split(b"\0"):
        meta, _, raw = entry.partition(b"\t")
        if not raw.endswith(b".json"):
            continue
        _mode, kind, oid, size = meta.split()
        name = os.fsdecode(raw)
        if any(part in ("", ".", "..") for part in name.split("/")):
            raise CompatError(f"{rev}:{name}: a path with a '.' or '..' component; git would not check it out")
        if kind == b"blob":
            blobs.append((name, oid.decode(), int(size)))
    names = [name for name, _, _ in blobs]
    folders = {name.rsplit("/", i)[0] for name in names for i in range(1, name.count("/") + 1)}
    seen: set[str] = set()
    for name in names:
        if name in seen or name in folders:
            raise CompatError(f"{rev}:{name}: named twice, or both a file and a folder; no checkout holds that tree")
        seen.add(name)
    return blobs


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
