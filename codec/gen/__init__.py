"""Code generation: IR -> Python source (checked in) or -> classes at run time.

``generate(schema_dir, out_dir)`` writes the package; ``check(schema_dir, out_dir)`` regenerates in
memory and returns a unified diff of every drifted file (empty when the tree is up to date).
``registry`` names the module that holds ``REGISTRY`` (the package's ``__init__`` by default).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from tensorwire.gen._source import HEADER_PREFIX, render_package
from tensorwire.schema import META_DIR, load_dir
from tensorwire.schema._meta import META_SCHEMA_NAME, meta_schema_text

__all__ = ["build_registry", "check", "expected_files", "generate", "render_package"]

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


def _stale(out_dir: Path, expected: dict[Path, str]) -> list[Path]:
    """Generated modules in ``out_dir`` that no schema produces any more."""
    if not out_dir.is_dir():
        return []
    return [
        path
        for path in sorted(out_dir.glob("*.py"))
        if path not in expected and path.read_text(encoding="utf-8").startswith(HEADER_PREFIX)
    ]


def generate(schema_dir: Path, out_dir: Path, registry: str = "__init__") -> list[Path]:
    """Write the generated package; return the files that changed (stale modules are removed)."""
    expected = expected_files(schema_dir, out_dir, registry)
    changed: list[Path] = []
    for path, text in expected.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for path in _stale(out_dir, expected):
        path.unlink()
        changed.append(path)
    return changed


def check(schema_dir: Path, out_dir: Path, registry: str = "__init__") -> str:
    """Unified diff between the files on disk and what ``generate`` would write ('' if none)."""
    expected = expected_files(schema_dir, out_dir, registry)
    chunks: list[str] = []
    for path, text in expected.items():
        actual = path.read_text(encoding="utf-8") if path.exists() else ""
        if actual != text:
            chunks.extend(
                difflib.unified_diff(
                    actual.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile=f"{path} (on disk)" if path.exists() else "/dev/null",
                    tofile=f"{path} (generated)",
                )
            )
    for path in _stale(out_dir, expected):
        old = path.read_text(encoding="utf-8").splitlines(keepends=True)
        chunks.extend(difflib.unified_diff(old, [], fromfile=f"{path} (stale)", tofile="/dev/null"))
    return "".join(chunks)
