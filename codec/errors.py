"""The exception hierarchy of tensorwire."""

from __future__ import annotations

__all__ = [
    "CodecError",
    "CompatError",
    "DecodeError",
    "EncodeError",
    "SchemaError",
    "TransportError",
    "ValidationError",
]


class CodecError(Exception):
    """Base class of every error raised by tensorwire."""


class SchemaError(CodecError):
    """A schema file or directory is invalid (names file, line:col, JSON pointer, expectation)."""


class ValidationError(CodecError, ValueError):
    """A message violates its schema's contract (constraints, tensor specs, named rules)."""


class EncodeError(CodecError, ValueError):
    """A message cannot be encoded: a value it holds cannot travel (what is not a message type at
    all is a ``TypeError``, a usage error)."""


class DecodeError(CodecError, ValueError):
    """Bytes cannot be decoded into a message."""


class TransportError(CodecError, OSError):
    """A transport failed to export, import or release a buffer."""


class CompatError(CodecError):
    """A compatibility check could not be carried out."""
