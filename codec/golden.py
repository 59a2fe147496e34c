"""Golden wire fixtures: bytes written by every released schema version, kept to prove they still decode.

``tests/golden/<type id>/v<N>/<case>.bin`` is a joined blob (inline buffers only) and
``<case>.json`` describes the value it must decode to (tensors by dtype, shape and a SHA-256 of
their bits). ``MANIFEST.sha256`` pins every file: a released fixture is never edited, only added.
``record(root, cases)`` writes the fixtures of ``cases`` that do not exist yet, and nothing outside
``root`` (``tensorwire golden record`` passes the built-in types' ``tensorwire.builtins.golden.cases()``
for the built-in schemas, and one synthesized ``minimal`` case per type version for any other).
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import torch

from tensorwire._encoder import Encoder
from tensorwire._files import find, read_text
from tensorwire._wire import join

__all__ = [
    "MANIFEST",
    "MAX_MANIFEST_BYTES",
    "Cases",
    "describe",
    "description_text",
    "manifest_lines",
    "read_manifest",
    "record",
]

MANIFEST = "MANIFEST.sha256"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024  # the largest manifest read (some 500,000 fixtures)
Cases = Mapping[str, Sequence[tuple[str, Callable[[], Any]]]]
"""Fixture builders per type id: ``(case name, a function that builds the message)``."""

_DIGEST = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # one path component (whole): no separator, . or .., newline


def _bits(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        flat = torch.empty(value.numel(), dtype=value.dtype).copy_(value.reshape(-1))
        raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    else:
        raw = np.ascontiguousarray(value).tobytes()
    return hashlib.sha256(raw).hexdigest()


def describe(value: Any) -> Any:
    """A JSON description of a message, exact for every field (tensors by their bits' SHA-256)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        kind = "$tensor" if isinstance(value, torch.Tensor) else "$ndarray"
        dtype = str(value.dtype).removeprefix("torch.")
        return {kind: dtype, "shape": list(value.shape), "sha256": _bits(value)}
    if isinstance(value, msgspec.Struct):
        info = getattr(type(value), "__tw_type__", None)
        out: dict[str, Any] = {"$type": info.type_id if info else type(value).__name__}
        out.update({name: describe(getattr(value, name)) for name in value.__struct_fields__})
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return {"$tuple": [describe(v) for v in value]}
    if isinstance(value, frozenset | set):
        return {"$set": sorted(describe(v) for v in value)}
    if isinstance(value, list):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, float) and value != value:
        return {"$float": "nan"}
    return value


def description_text(value: Any) -> str:
    """``describe(value)`` as a fixture's ``.json`` file holds it. A decode of the fixture must give
    this text exactly: compared as Python values, ``1``, ``1.0`` and ``true`` are equal."""
    return json.dumps(describe(value), indent=2, sort_keys=True) + "\n"


def manifest_lines(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every fixture file under ``root`` (each read a chunk at a time)."""
    files = [p for p in find(root) if p.is_file() and p.name != MANIFEST]
    return {p.relative_to(root).as_posix(): _sha256(p) for p in files}


def _sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _utf8(name: str) -> bool:
    """Whether ``name`` (a path as the file system gave it) is UTF-8: undecodable bytes come as surrogates."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_manifest(root: Path) -> dict[str, str]:
    """The pinned checksums: relative path -> SHA-256. ``ValueError`` for a manifest that is not a
    regular file of at most ``MAX_MANIFEST_BYTES``, or that has a line (blank ones aside) other than
    ``<SHA-256 in hex>  <path>``, naming it."""
    path = root / MANIFEST
    try:
        text = read_text(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: cannot read it: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    pinned = {}
    for number, line in enumerate(text.split("\n"), 1):
        digest, _, name = line.partition("  ")
        if _DIGEST.fullmatch(digest) and name:
            pinned[name] = digest
        elif line.strip():
            raise ValueError(f"{path}:{number}: not a line of '<sha256>  <path>': {line[:200]!r}")
    return pinned


def record(root: Path, cases: Cases) -> list[Path]:
    """Write the fixtures of every case in ``cases`` that has none yet; return the new files.

    Writes under ``root`` only: a type id or case name that is not one plain path component, a
    ``root`` that is a symbolic link or not a directory, or a link anywhere under it is a
    ``ValueError``, and so is anything under it that is neither a file nor a directory (a FIFO
    would hold a read or a write forever), a name that is not UTF-8 (the manifest could not list
    it) and a released fixture that was edited or removed. Every new message is built and encoded
    before the first file is written, and a case's ``.bin`` after its ``.json``, so that a record
    stopped part of the way leaves no case that the next one takes as recorded and is not whole;
    the manifest is rewritten only when it changes.
    """
    if root.is_symlink():
        raise ValueError(f"{root}: the fixture directory is a symbolic link; give the directory it points to")
    if root.exists() and not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    found = find(root) if root.exists() else []
    links = sorted(p.relative_to(root).as_posix() for p in found if p.is_symlink())
    if links:
        raise ValueError(f"{root}: holds symbolic links ({', '.join(links)}); fixtures are plain files")
    odd = sorted(p.relative_to(root).as_posix() for p in found if not (p.is_dir() or p.is_file()))
    if odd:
        what = ", ".join(odd)
        raise ValueError(f"{root}: holds what is neither a file nor a directory ({what}); fixtures are plain files")
    unnamed = sorted(ascii(name) for p in found if not _utf8(name := p.relative_to(root).as_posix()))
    if unnamed:
        what = ", ".join(unnamed)
        raise ValueError(f"{root}: holds names that are not UTF-8 ({what}); the manifest lists fixtures by UTF-8 name")
    pinned = read_manifest(root)
    current = manifest_lines(root)
    edited = sorted(name for name, digest in pinned.items() if current.get(name) != digest)
    if edited:
        raise ValueError(f"released fixtures were edited or removed: {', '.join(edited)}; restore them")
    pending: list[tuple[Path, bytes]] = []
    encoder = Encoder()
    for type_id, builders in cases.items():
        for case, build in builders:
            for what, name in (("type id", type_id), ("case name", case)):
                if not isinstance(name, str) or not _NAME.fullmatch(name):
                    raise ValueError(f"{what} {name!r} is not a plain file name: it would be written outside {root}")
            message = build()
            version = type(message).__tw_type__.version
            folder = root / type_id / f"v{version}"  # (a case named "a.b" is a.b.bin, not a.bin)
            if (folder / f"{case}.bin").exists():
                continue  # released: never rewritten
            pending += [  # the .bin last: it says a case was recorded
                (folder / f"{case}.json", description_text(message).encode()),
                (folder / f"{case}.bin", join(encoder.encode(message))),
            ]
    written: list[Path] = []
    for path, data in pending:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.write_bytes(data)
        except BaseException:  # (a full disk, Ctrl-C) no part of a file is left to read as whole
            path.unlink(missing_ok=True)
            raise
        written.append(path)
    pinned.update({name: digest for name, digest in manifest_lines(root).items() if name not in pinned})
    text = "".join(f"{digest}  {name}\n" for name, digest in sorted(pinned.items()))
    manifest = root / MANIFEST
    if not manifest.is_file() or manifest.read_text() != text:
        root.mkdir(parents=True, exist_ok=True)
        manifest.write_text(text)
    return written
