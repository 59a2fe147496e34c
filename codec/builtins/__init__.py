"""The built-in message types: ``media``, ``diffusion`` and ``rpc``, a plug-in of the core.

Generated from the schema sources in ``SCHEMA_DIR`` (``tensorwire gen``), with their named
validators (``tensorwire.builtins.validators``, a ``tensorwire.validators`` entry point), the
demo and the cases of their golden fixtures; everything here uses the public API only::

    from tensorwire.builtins import REGISTRY, media   # generated classes (need torch)
    tw.load_schemas(tensorwire.builtins.SCHEMA_DIR)    # the same types built at run time

Importing this package needs no torch: the generated modules load on first use.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorwire.builtins import diffusion, media, rpc
    from tensorwire.builtins.registry import REGISTRY

__all__ = ["REGISTRY", "SCHEMA_DIR", "diffusion", "media", "rpc"]

SCHEMA_DIR = Path(__file__).parent / "schemas"
"""The built-in schema sources (one folder per namespace, and the meta-schema copy)."""

_MODULES = frozenset({"diffusion", "media", "rpc"})


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":
        value = importlib.import_module("tensorwire.builtins.registry").REGISTRY
    elif name in _MODULES:
        value = importlib.import_module(f"tensorwire.builtins.{name}")
    else:
        raise AttributeError(f"module 'tensorwire.builtins' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
