"""Code generation: IR -> Python source (checked in) or -> classes at run time.

``generate(schema_dir, out_dir)`` writes the package; ``check(schema_dir, out_dir)`` regenerates in
memory and returns a unified diff of every drifted file (empty when the tree is up to date).
``registry`` names the module that holds ``REGISTRY`` (the package's ``__init__`` by default).

A file ``gen`` owns is read and written only as a plain file: a symbolic link there (or at its
directory: the output directory itself, the schema directory's ``meta``) or anything but a
regular file is a ``ValueError``, before anything is written, so a link at those places cannot
make ``gen`` write elsewhere, or ``gen --check`` block on a FIFO or read a device; a module in the
package that is not a regular file is never taken for a stale one. The directories above them
are not checked: a link among them (``src`` -> ``../elsewhere`` with ``-o src/messages``; ``/tmp``
or a home directory may be one) is followed, and ``gen`` writes where it leads.
A file in the way that ``gen`` did not write (a module without its header) is never replaced but
with ``force``. A package directory or an extension module that Python would import in place of a
generated module (``rpc/__init__.py`` or ``rpc.cpython-311-x86_64-linux-gnu.so`` beside ``rpc.py``)
is a ``ValueError`` for both, and so is an unchecked hash-based ``.pyc`` of a generated module in
``__pycache__`` (Python runs it without reading the module): ``--check`` never calls such a tree
up to date. Each file is written whole or not at all (a new file beside it, renamed over it once
complete).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.machinery
import json
import os
import secrets
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from tensorwire._files import open_regular, read_at, read_text
from tensorwire.gen._source import HEADER_PREFIX, render_package
from tensorwire.schema import META_DIR, load_dir
from tensorwire.schema._meta import META_SCHEMA_NAME, meta_schema, meta_schema_text

__all__ = ["MAX_FILE_BYTES", "build_registry", "check", "expected_files", "generate", "render_package"]

if TYPE_CHECKING:
    from tensorwire.registry import Registry
    from tensorwire.schema import SchemaSet


def build_registry(schemas: SchemaSet) -> Registry:
    """A class for every message type of ``schemas``, as a ``Registry`` (``tensorwire.gen._runtime``,
    imported on use: run-time types need torch)."""
    from tensorwire.gen import _runtime as runtime

    return runtime.build_registry(schemas)


def expected_files(schema_dir: Path, out_dir: Path, registry: str = "__init__") -> dict[Path, str]:
    """Every file ``gen`` owns: the generated modules and the schema directory's meta-schema copy."""
    schemas = load_dir(schema_dir)
    files = {out_dir / name: text for name, text in render_package(schemas, registry).items()}
    files[schema_dir / META_DIR / META_SCHEMA_NAME] = meta_schema_text()
    return files


MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest file ``gen`` reads (a generated module is a few hundred KiB at most)."""


def _on_disk(path: Path) -> str | None:
    """The text of a file ``gen`` owns (``read_text``), None if there is none; ``ValueError`` if
    it, or its directory, is a link, or it is not a regular UTF-8 file."""
    for place in (path.parent, path):
        if place.is_symlink():
            raise ValueError(f"{place} is a symbolic link: gen reads and writes plain files only")
    try:
        return read_text(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _refuse_shadows(out_dir: Path, expected: dict[Path, str]) -> None:
    """``ValueError`` naming the first file that Python would import in place of a generated module
    (an import finds a package directory, then an extension module, before a source file), or run
    in place of its source (bytecode in ``__pycache__`` that Python does not check against it)."""
    for path in expected:
        if path.parent != out_dir or path.suffix != ".py":
            continue
        places = [path.with_suffix(suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES]
        if path.stem != "__init__":
            package = out_dir / path.stem
            places[:0] = [package / f"__init__{suffix}" for suffix in importlib.machinery.all_suffixes()]
        for place in places:
            if os.path.lexists(place):
                raise ValueError(f"{place} hides the generated module {path} (Python imports it instead): move it away")
        for cached in sorted(out_dir.glob(f"__pycache__/{path.stem}.*.pyc")):
            if _unchecked(cached):
                raise ValueError(
                    f"{cached} is bytecode that Python runs for {path} without reading that file (an unchecked "
                    "hash-based .pyc): remove it"
                )


def _unchecked(pyc: Path) -> bool:
    """Whether ``pyc`` is a regular file of bytecode that Python imports without checking it against
    its source: PEP 552's unchecked hash-based form (a timestamp or a checked hash makes it look)."""
    try:
        with open_regular(pyc) as (fd, _):
            header = read_at(fd, 0, 8)
    except OSError:
        return False
    return len(header) == 8 and int.from_bytes(header[4:8], "little") & 0b11 == 0b01


def _stale(out_dir: Path, expected: dict[Path, str]) -> dict[Path, str]:
    """Generated modules in ``out_dir`` that no schema produces any more, with their text (links
    and other kinds of file are never gen's: left alone)."""
    if not out_dir.is_dir() or out_dir.is_symlink():
        return {}
    stale: dict[Path, str] = {}
    for path in sorted(out_dir.glob("*.py")):
        if path in expected or path.is_symlink():
            continue
        try:
            text = read_text(path, MAX_FILE_BYTES)
        except (OSError, UnicodeDecodeError):  # not a module gen wrote
            continue
        if text.startswith(HEADER_PREFIX):
            stale[path] = text
    return stale


def _foreign(path: Path, text: str) -> bool:
    """Whether the file ``gen`` would replace holds ``text`` that ``gen`` did not write: a module
    without the generated header, a meta-schema copy that is not tensorwire's meta-schema (an
    empty file is anyone's)."""
    if not text.strip():
        return False  # nothing to lose: an empty __init__.py
    if path.suffix != ".json":
        return not text.startswith(HEADER_PREFIX)
    try:
        data = json.loads(text)
    except ValueError:
        return True
    return not isinstance(data, dict) or data.get("$id") != meta_schema()["$id"]


def generate(schema_dir: Path, out_dir: Path, registry: str = "__init__", *, force: bool = False) -> list[Path]:
    """Write the generated package; return the files that changed (stale modules are removed).
    A file in the way that ``gen`` did not write is a ``ValueError`` before anything is written,
    unless ``force``."""
    expected = expected_files(schema_dir, out_dir, registry)
    _refuse_shadows(out_dir, expected)
    changed = []
    for path, text in expected.items():  # every one read before any write
        actual = _on_disk(path)
        if actual is not None and actual != text and not force and _foreign(path, actual):
            raise ValueError(
                f"{path} exists and was not written by tensorwire gen (it lacks the generated header): "
                "move it away, or pass --force to replace it"
            )
        if actual != text:
            changed.append(path)
    for path in changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, expected[path])
    for path in _stale(out_dir, expected):
        path.unlink()
        changed.append(path)
    return changed


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: into a new file beside it (with the
    permissions of the file it replaces), renamed over it once complete, so a write that fails
    part way (a full disk, a file size limit) leaves the file as it was and no file behind."""
    data = memoryview(text.encode("utf-8"))
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        try:
            with contextlib.suppress(FileNotFoundError):
                os.fchmod(fd, stat.S_IMODE(os.lstat(path).st_mode))
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if isinstance(exc, OSError) and exc.filename is None:  # a write's: name the file it was for
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def check(schema_dir: Path, out_dir: Path, registry: str = "__init__") -> str:
    """Unified diff between the files on disk and what ``generate`` would write ('' if none)."""
    expected = expected_files(schema_dir, out_dir, registry)
    _refuse_shadows(out_dir, expected)
    chunks: list[str] = []
    for path, text in expected.items():
        actual = _on_disk(path)
        if actual != text:
            chunks.extend(
                difflib.unified_diff(
                    (actual or "").splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile="/dev/null" if actual is None else f"{path} (on disk)",
                    tofile=f"{path} (generated)",
                )
            )
    for path, old in _stale(out_dir, expected).items():
        lines = old.splitlines(keepends=True)
        chunks.extend(difflib.unified_diff(lines, [], fromfile=f"{path} (stale)", tofile="/dev/null"))
    return "".join(chunks)
