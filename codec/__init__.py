"""tensorwire codec: schema-driven message types for processes that exchange large tensors.

Public contract::

    reg = codec.load_schemas("schemas/")     # or codec.generated.REGISTRY
    Video = reg.type("media.Video")          # latest version; reg.type("media.Video", 1)
"""

from __future__ import annotations

import os

from codec.contract import TypeInfo, register_validator
from codec.dtypes import DTYPE_NAMES, DTYPES
from codec.errors import (
    CodecError,
    CompatError,
    DecodeError,
    EncodeError,
    SchemaError,
    TransportError,
    ValidationError,
)
from codec.registry import Registry, UnknownTypeError

__all__ = [
    "DTYPES",
    "DTYPE_NAMES",
    "CodecError",
    "CompatError",
    "DecodeError",
    "EncodeError",
    "Registry",
    "SchemaError",
    "TransportError",
    "TypeInfo",
    "UnknownTypeError",
    "ValidationError",
    "load_schemas",
    "register_validator",
]


def load_schemas(directory: str | os.PathLike[str]) -> Registry:
    """Compile a schema directory into message classes at run time (no generation step)."""
    from codec.gen.runtime import build_registry
    from codec.schema import load_dir

    return build_registry(load_dir(directory))
