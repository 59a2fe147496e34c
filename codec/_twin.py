"""A message class's closed twin: the same struct, rejecting unknown fields, to read bodies with.

A body written by an encoder of the same schema (the same fingerprint) holds no field its reader
does not know. Decoded as the twin, such a body is read field by field with nothing skipped: an
unknown field is an error before its value is read, so the twin bounds the levels msgspec reads
where the class itself does not (``tensorwire._type_tree.closed_depth``). The twin adds nothing to
the class (no field, no slot, the same layout), so the instance it decodes is made one of the class
itself by setting its ``__class__`` (``BECOME``), which Python allows only between types of one
layout.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["BECOME", "closed_twin"]

BECOME: Final = object.__dict__["__class__"].__set__
"""``BECOME(obj, cls)``: make ``obj`` an instance of ``cls`` (of its layout: else ``TypeError``),
past the struct's own ``__setattr__``: msgspec's refuses a frozen struct anything, and starts
tracking a struct by the garbage collector when it is given a value the collector tracks (a class
is one), which a decoded struct of scalars is not."""

_STRUCT_META = type(msgspec.Struct)
_CONFIG = (
    "array_like",
    "cache_hash",
    "dict",
    "eq",
    "frozen",
    "gc",
    "omit_defaults",
    "order",
    "repr_omit_defaults",
    "tag",
    "tag_field",
    "weakref",
)


def closed_twin(cls: Any) -> type | None:
    """The subclass of ``cls`` that only forbids unknown fields, or None where ``cls`` needs none
    (it forbids them already) or where making one would run code of its own: its metaclass or its
    ``__init_subclass__``."""
    config = cls.__struct_config__
    if (
        config.forbid_unknown_fields
        or type(cls) is not _STRUCT_META
        or hasattr(cls.__init_subclass__, "__func__")  # a Python classmethod, not object's own
    ):
        return None
    tag: dict[str, Any] = {"tag": config.tag, "tag_field": config.tag_field} if config.tag_field is not None else {}
    twin: type = type(cls.__name__, (cls,), {"__module__": cls.__module__}, forbid_unknown_fields=True, **tag)
    same = twin.__struct_encode_fields__ == cls.__struct_encode_fields__  # type: ignore[attr-defined]
    if not same or any(getattr(twin.__struct_config__, k) != getattr(config, k) for k in _CONFIG):  # type: ignore[attr-defined]
        return None
    return twin
