"""A message class's closed twin: the same struct, rejecting unknown fields, to read bodies with.

A body written by an encoder of the same schema (the same fingerprint) holds no field its reader
does not know. Decoded as the twin, such a body is read field by field with nothing skipped: an
unknown field is an error before its value is read, so the twin bounds the levels msgspec reads
where the class itself does not (``tensorwire._type_tree.closed_depth``). The twin adds nothing to
the class (no field, no slot, the same layout), so the instance it decodes is made one of the class
itself by setting its ``__class__`` (``BECOME``), which Python allows only between types of one
layout.

A class with structs inside it has a closed mirror instead (``closed_mirror``): a struct of the
same fields, encode names, defaults and tag, rejecting unknown fields, whose fields name the
mirrors of the structs inside them. A body the mirror decodes has no unknown field anywhere, so
the class itself reads it as the mirror did, field by field, no deeper than the mirror's depth.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Final, Literal, Union

import msgspec
import msgspec.inspect as mi

from tensorwire._type_tree import children

__all__ = ["BECOME", "closed_mirror", "closed_twin", "structs_inside"]

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


def closed_mirror(cls: Any) -> type | None:
    """The closed mirror of ``cls`` (see above), or None where a struct is inside itself (no
    depth bounds it) or one cannot be made (its annotations do not resolve, say: the decoder then
    counts, as without a mirror). Mirrors only decode: they run no rules and their instances are
    dropped at once (no garbage collector tracking)."""
    try:
        return _mirror(cls, {}, frozenset())
    except Exception:
        return None


class _Unbounded(Exception):
    """A struct inside itself."""


def _mirror(cls: Any, mirrors: dict[type, type], inside: frozenset[type]) -> type:
    """``cls``'s mirror, kept in ``mirrors``; ``inside``: the structs whose fields are being read."""
    if cls in mirrors:
        return mirrors[cls]
    if cls in inside:
        raise _Unbounded
    hints = typing.get_type_hints(cls, include_extras=True)
    info = mi.type_info(cls)
    fields: list[tuple[str, Any, Any]] = []
    for field in info.fields:  # type: ignore[attr-defined]
        for nested in _structs(field.type):
            _mirror(nested, mirrors, inside | {cls})
        if field.required:
            default: Any = msgspec.NODEFAULT
        elif field.default is not msgspec.NODEFAULT:
            default = msgspec.field(default=field.default)
        else:
            default = msgspec.field(default_factory=field.default_factory)
        fields.append((field.name, _with_mirrors(hints[field.name], mirrors), default))
    config = cls.__struct_config__
    mirror = msgspec.defstruct(
        cls.__name__,
        fields,
        kw_only=True,  # (the fields in the class's order, whatever their defaults)
        omit_defaults=config.omit_defaults,
        forbid_unknown_fields=True,
        tag=config.tag,
        tag_field=config.tag_field,
        rename={f.name: f.encode_name for f in info.fields},  # type: ignore[attr-defined]
        array_like=config.array_like,
        gc=False,
    )
    if mirror.__struct_encode_fields__ != cls.__struct_encode_fields__:
        raise TypeError(f"{cls.__name__}'s mirror reads other fields")
    mirrors[cls] = mirror
    return mirror


def structs_inside(cls: Any) -> set[type]:
    """The struct classes the fields of struct class ``cls`` may hold (not looking inside them)."""
    return {nested for field in mi.type_info(cls).fields for nested in _structs(field.type)}  # type: ignore[attr-defined]


def _structs(t: Any) -> set[type]:
    """The struct classes in declared type ``t``, not looking inside them."""
    if isinstance(t, mi.StructType):
        return {t.cls}
    found = {cls for child in children(t) for cls in _structs(child)}
    return found | _structs(t.type) if isinstance(t, mi.Metadata) else found


def _with_mirrors(hint: Any, mirrors: dict[type, type]) -> Any:
    """Annotation ``hint`` with each struct class in it replaced by its mirror."""
    if isinstance(hint, type) and hint in mirrors:
        return mirrors[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None or origin is Literal or not args:
        return hint
    if origin is Annotated:
        return Annotated[(_with_mirrors(args[0], mirrors), *hint.__metadata__)]
    swapped = tuple(_with_mirrors(arg, mirrors) for arg in args)
    if swapped == args:
        return hint
    if origin is Union or origin is typing.get_origin(int | None):
        return Union[swapped]  # noqa: UP007 (a tuple of members)
    return origin[swapped]
