"""IR -> message classes at run time (``msgspec.defstruct``), for schemas loaded without generation."""

from __future__ import annotations

import copy
import enum
import re
import sys
import unicodedata
from typing import Annotated, Any, Literal, Optional, Union

import msgspec
import numpy as np
import torch

from tensorwire._contract import struct_check
from tensorwire.gen._docs import class_doc
from tensorwire.gen._model import (
    default_value,
    made_per_instance,
    member_name,
    meta_of,
    rules_for,
    type_info,
    untracked,
)
from tensorwire.registry import Registry
from tensorwire.schema import SchemaSet, class_name
from tensorwire.schema.ir import (
    ArrayT,
    EnumT,
    Field,
    MapT,
    MessageRefT,
    Node,
    NullableT,
    ScalarT,
    StructT,
    TensorT,
    TreeT,
    TupleT,
    UnionT,
    unhandled,
)

__all__ = ["build_registry"]


class _Types:
    def __init__(self, schemas: SchemaSet) -> None:
        self.schemas = schemas
        self.enums: dict[tuple[str, str], type[enum.Enum]] = {}
        self.structs: dict[int, type[Any]] = {}  # id(StructT) -> class

    def enum_class(self, node: EnumT) -> type[enum.Enum]:
        key = (node.namespace, node.name)
        if key not in self.enums:
            # each name as Python reads the generated module's (NFKC-normalized), so that the two
            # back ends' classes have the same members (a bold 'a' in a caller's source is 'a')
            members = [(unicodedata.normalize("NFKC", member_name(v)), v) for v in node.values]
            cls = enum.Enum(node.name, members, type=str, module=f"tensorwire.loaded.{node.namespace}")  # type: ignore[misc]
            cls.__doc__ = node.description or f"Enum {node.namespace}.{node.name}."
            self.enums[key] = cls
        return self.enums[key]

    def annotation(self, node: Node) -> Any:
        match node:
            case ScalarT():
                if node.const is not None:
                    return Literal[node.const]
                base: Any = {"bool": bool, "int": int, "float": float, "str": str, "bytes": bytes}[node.kind]
                return _limited(base, node)
            case EnumT():
                return self.enum_class(node)
            case ArrayT():
                items = self.annotation(node.items)
                return _limited(frozenset[items] if node.unique else list[items], node)  # type: ignore[valid-type]
            case TupleT():
                return tuple[tuple(self.annotation(i) for i in node.items)]  # type: ignore[misc]
            case MapT():
                return _limited(dict[str, self.annotation(node.values)], node)  # type: ignore[misc]
            case NullableT():
                return Optional[self.annotation(node.inner)]  # noqa: UP045
            case TensorT():
                return torch.Tensor if node.kind == "tensor" else np.ndarray
            case TreeT():
                return Any
            case MessageRefT():
                return self.struct_class(node.target)
            case UnionT():
                return Union[tuple(self.annotation(v) for v in node.variants)]  # noqa: UP007
            case StructT():
                return self.struct_class(node)
            case _:
                unhandled(node)

    def struct_class(self, struct: StructT) -> type[Any]:
        if id(struct) in self.structs:
            return self.structs[id(struct)]
        fields = [self._field(f) for f in struct.fields]
        namespace: dict[str, Any] = {"__doc__": class_doc(struct)}
        rules = rules_for(struct)
        if rules is not None:
            namespace["__tw_rules__"] = rules
            namespace["__post_init__"] = struct_check(rules)  # the rules compiled: msgspec calls it as it is
        info = type_info(self.schemas, struct)
        if info is not None:
            namespace["__tw_type__"] = info
        options: dict[str, Any] = {"forbid_unknown_fields": True} if struct.closed else {}
        if untracked(struct):
            options["gc"] = False
        if struct.tag_field is not None:
            options |= {"tag_field": struct.tag_field, "tag": struct.tag}
        cls = msgspec.defstruct(
            class_name(self.schemas, struct),
            fields,
            kw_only=True,
            omit_defaults=True,
            namespace=namespace,
            module=f"tensorwire.loaded.{struct.namespace}",
            **options,
        )
        self.structs[id(struct)] = cls
        return cls

    def _field(self, f: Field) -> tuple[str, Any] | tuple[str, Any, Any]:
        annotation = self.annotation(f.type)
        if not f.has_default:
            return (f.name, annotation)
        value = default_value(f.type, f.default, lambda e, v: self.enum_class(e)(v))
        if made_per_instance(value):
            return (f.name, annotation, msgspec.field(default_factory=_copier(value)))
        return (f.name, annotation, _as_constant(value))


_NAME_CHARS = re.compile(r"[A-Za-z0-9_]*")


def _as_constant(value: Any) -> Any:
    """A default as generated source holds it: a string of ASCII letters, digits and underscores
    interned, as Python interns such a constant. msgspec leaves a field out of the body only where
    its value *is* the default object, so a value equal to this default (an interned literal of the
    caller's) is left out by both back ends alike, not by the generated class alone."""
    if type(value) is str and _NAME_CHARS.fullmatch(value):
        return sys.intern(value)
    return value


def _copier(value: Any) -> Any:
    def factory() -> Any:
        return copy.deepcopy(value)

    return factory


def _limited(base: Any, node: ScalarT | ArrayT | MapT) -> Any:
    """``base``, annotated with the limits of ``node`` if it has any."""
    meta = meta_of(node)
    return Annotated[base, msgspec.Meta(**meta)] if meta else base


def build_registry(schemas: SchemaSet) -> Registry:
    """Build a class for every message type of ``schemas`` and return them as a ``Registry``."""
    types = _Types(schemas)
    return Registry(types.struct_class(m.struct) for m in schemas.messages)
