"""tensorwire codec: schema-driven message types for processes that exchange large tensors.

Public contract::

    reg = codec.load_schemas("schemas/")     # or codec.generated.REGISTRY
    Video = reg.type("media.Video")          # latest version; reg.type("media.Video", 1)
    frames = codec.Encoder(transport=transports.ShmTransport()).encode(msg)
    msg2 = codec.Decoder(reg, transports=[transports.ShmTransport()]).decode(frames)
"""

from __future__ import annotations

import os

from codec.contract import TypeInfo, register_validator
from codec.decoder import Decoder
from codec.dtypes import DTYPE_NAMES, DTYPES
from codec.encoder import Encoder
from codec.errors import (
    CodecError,
    CompatError,
    DecodeError,
    EncodeError,
    SchemaError,
    TransportError,
    ValidationError,
)
from codec.options import DecodeOptions, EncodeOptions, Limits
from codec.registry import Registry, UnknownTypeError
from codec.wire import join, split

__all__ = [
    "DTYPES",
    "DTYPE_NAMES",
    "CodecError",
    "CompatError",
    "DecodeError",
    "DecodeOptions",
    "Decoder",
    "EncodeOptions",
    "Encoder",
    "EncodeError",
    "Limits",
    "Registry",
    "SchemaError",
    "TransportError",
    "TypeInfo",
    "UnknownTypeError",
    "ValidationError",
    "join",
    "load_schemas",
    "register_validator",
    "split",
]


def load_schemas(directory: str | os.PathLike[str]) -> Registry:
    """Compile a schema directory into message classes at run time (no generation step)."""
    from codec.gen.runtime import build_registry
    from codec.schema import load_dir

    return build_registry(load_dir(directory))
