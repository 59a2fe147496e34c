"""Shared helpers: the repository paths and a writer for temporary schema directories."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILTIN_SCHEMAS = REPO / "schemas"
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # repository tooling (tools/) is tested too, but not installed

CLIP = {
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
