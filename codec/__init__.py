"""tensorwire: schema-driven message types for processes that exchange large tensors.

Public contract::

    import tensorwire as tw

    reg = tw.load_schemas("schemas/")        # or the built-ins: tw.builtins.REGISTRY
    Video = reg.type("media.Video")          # latest version; reg.type("media.Video", 1)
    frames = tw.Encoder(transport=tw.transports.ShmTransport()).encode(msg)
    msg2 = tw.Decoder(reg, transports=[tw.transports.ShmTransport()]).decode(frames)
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tensorwire._version import __version__
from tensorwire._wire import join, split
from tensorwire.dtypes import DTYPE_NAMES, DTYPES
from tensorwire.errors import (
    CodecError,
    CompatError,
    DecodeError,
    EncodeError,
    SchemaError,
    TransportError,
    ValidationError,
)
from tensorwire.options import DecodeOptions, EncodeOptions, Limits
from tensorwire.registry import Registry, UnknownTypeError
from tensorwire.rules import TypeInfo, register_validator

if TYPE_CHECKING:
    from tensorwire import transports
    from tensorwire._decoder import Decoder
    from tensorwire._encoder import Encoder

__all__ = [
    "__version__",
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
    "transports",
]


# The runtime needs torch and numpy; it is imported when first used, so that the schema compiler,
# the code generator and the compat checker (and ``import tensorwire`` for them) run without either.
# The built-in types (``tw.builtins``) are a plug-in of the core, likewise imported only when named.
_LAZY = {
    "Decoder": "tensorwire._decoder",
    "Encoder": "tensorwire._encoder",
    "builtins": "tensorwire.builtins",
    "transports": "tensorwire.transports",
}
_SUBMODULES = frozenset({"builtins", "transports"})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorwire' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if name in _SUBMODULES else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names: ``__all__`` and the public submodules imported so far (``tw.errors``, ...),
    not the names the package uses itself (``os``, ``Any``)."""
    submodules = (n for n, v in globals().items() if isinstance(v, ModuleType) and v.__name__ == f"{__name__}.{n}")
    return sorted({*__all__, *(n for n in submodules if not n.startswith("_"))})


def load_schemas(directory: str | os.PathLike[str]) -> Registry:
    """Compile a schema directory into message classes at run time (no generation step)."""
    from tensorwire.gen._runtime import build_registry
    from tensorwire.schema import load_dir

    return build_registry(load_dir(directory))
