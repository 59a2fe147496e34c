"""The intermediate representation of a schema directory: frozen, typed nodes.

Every node has ``canonical()``: a JSON-able description without documentation, from which the
type's fingerprint is computed. Message types are referenced (not inlined) by id, version and
fingerprint, so a type's fingerprint changes whenever the shape of anything it carries changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, TypeAlias

__all__ = [
    "ArrayT",
    "Constraint",
    "EnumT",
    "Field",
    "MapT",
    "MessageRefT",
    "Node",
    "NullableT",
    "ScalarT",
    "StructT",
    "TensorT",
    "TreeT",
    "TupleT",
    "UnionT",
    "MISSING",
    "children",
    "height",
    "member_name",
    "unhandled",
]

JSON: TypeAlias = Any


def member_name(value: str) -> str:
    """Enum member name for a wire value: ``negative_one_to_one`` -> ``NEGATIVE_ONE_TO_ONE``."""
    name = re.sub(r"\W", "_", value).upper()
    return f"_{name}" if not name or name[0].isdigit() else name


class _Missing:
    """Marks a field without a default."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True, slots=True)
class ScalarT:
    """A boolean, integer, number, string or bytes value, with the limits msgspec checks in C.

    ``exclusive_minimum``/``exclusive_maximum`` say the bound itself is not allowed (numbers only:
    an integer's exclusive bound is stored as the inclusive one next to it); ``min_length`` and
    ``max_length`` count characters of a string and bytes of bytes; ``pattern`` is a Python ``re``
    searched in a string; ``const`` is the one value allowed.
    """

    kind: Literal["bool", "int", "float", "str", "bytes"]
    minimum: int | float | None = None
    maximum: int | float | None = None
    max_length: int | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    multiple_of: int | float | None = None
    min_length: int | None = None
    pattern: str | None = None
    const: bool | int | str | None = None

    def canonical(self) -> JSON:
        out: dict[str, JSON] = {"kind": self.kind}
        for key in _SCALAR_LIMITS:
            value = getattr(self, key)
            if value is not None and (value is not False or key == "const"):  # flags only when set
                out[key] = value
        return out


_SCALAR_LIMITS = (
    "minimum",
    "maximum",
    "max_length",
    "exclusive_minimum",
    "exclusive_maximum",
    "multiple_of",
    "min_length",
    "pattern",
    "const",
)


@dataclass(frozen=True, slots=True)
class EnumT:
    namespace: str
    name: str
    values: tuple[str, ...]
    description: str = ""

    def canonical(self) -> JSON:
        return {"kind": "enum", "name": f"{self.namespace}.{self.name}", "values": list(self.values)}


@dataclass(frozen=True, slots=True)
class ArrayT:
    """A list (a set with ``unique``), optionally with bounds on its number of items."""

    items: Node
    unique: bool = False
    min_items: int | None = None
    max_items: int | None = None

    def canonical(self) -> JSON:
        out: dict[str, JSON] = {"kind": "set" if self.unique else "array", "items": self.items.canonical()}
        return _with_counts(out, "items", self.min_items, self.max_items)


@dataclass(frozen=True, slots=True)
class TupleT:
    items: tuple[Node, ...]

    def canonical(self) -> JSON:
        return {"kind": "tuple", "items": [item.canonical() for item in self.items]}


@dataclass(frozen=True, slots=True)
class MapT:
    """A dict of string keys, optionally with bounds on its number of entries."""

    values: Node
    min_properties: int | None = None
    max_properties: int | None = None

    def canonical(self) -> JSON:
        out: dict[str, JSON] = {"kind": "map", "values": self.values.canonical()}
        return _with_counts(out, "properties", self.min_properties, self.max_properties)


def _with_counts(out: dict[str, JSON], noun: str, low: int | None, high: int | None) -> dict[str, JSON]:
    if low is not None:
        out[f"min_{noun}"] = low
    if high is not None:
        out[f"max_{noun}"] = high
    return out


@dataclass(frozen=True, slots=True)
class NullableT:
    inner: Node

    def canonical(self) -> JSON:
        return {"kind": "nullable", "inner": self.inner.canonical()}


@dataclass(frozen=True, slots=True)
class TensorT:
    """``x-tensor`` (torch.Tensor) or ``x-ndarray`` (numpy.ndarray)."""

    kind: Literal["tensor", "ndarray"]
    dtypes: tuple[str, ...] | None = None
    shape: tuple[int | str | None, ...] | None = None  # fixed size, named dim, or free
    devices: tuple[str, ...] | None = None
    contiguous: bool | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def canonical(self) -> JSON:
        out: dict[str, JSON] = {"kind": self.kind}
        if self.dtypes is not None:
            out["dtypes"] = sorted(self.dtypes)
        if self.shape is not None:
            out["shape"] = list(self.shape)
        if self.devices is not None:
            out["devices"] = sorted(self.devices)
        if self.contiguous is not None:
            out["contiguous"] = self.contiguous
        return out


@dataclass(frozen=True, slots=True)
class TreeT:
    """``x-tree``: nested dict/list/tuple of scalars, str, bytes, tensors and ndarrays."""

    max_depth: int = 64
    json_only: bool = False

    def canonical(self) -> JSON:
        return {"kind": "tree", "max_depth": self.max_depth, "json": self.json_only}


@dataclass(frozen=True, slots=True)
class Constraint:
    """A cross-field rule: ``at_most_one_of`` or ``exactly_one_of`` over field names."""

    rule: Literal["at_most_one_of", "exactly_one_of"]
    fields: tuple[str, ...]

    def canonical(self) -> JSON:
        return {"rule": self.rule, "fields": list(self.fields)}


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: Node
    required: bool
    default: JSON = MISSING
    description: str = ""
    deprecated: bool = False  # documentation only, like read_only and write_only
    read_only: bool = False
    write_only: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not MISSING

    def canonical(self) -> JSON:
        out: dict[str, JSON] = {"name": self.name, "type": self.type.canonical(), "required": self.required}
        if self.has_default:
            out["default"] = self.default
        return out


@dataclass(frozen=True, slots=True)
class StructT:
    """An object type: a message type (``type_id`` and ``version`` set) or a named nested struct."""

    namespace: str
    name: str
    fields: tuple[Field, ...]
    constraints: tuple[Constraint, ...] = ()
    validators: tuple[str, ...] = ()
    tag_field: str | None = None
    tag: str | None = None
    description: str = ""
    type_id: str | None = None
    version: int | None = None
    source: str = ""  # file the type is declared in (display path)
    pointer: str = ""
    closed: bool = False  # additionalProperties: false (unknown fields rejected on decode)
    deprecated: bool = False  # documentation only

    def canonical(self) -> JSON:
        out: dict[str, JSON] = {
            "kind": "struct",
            "name": f"{self.namespace}.{self.name}",
            "fields": sorted((f.canonical() for f in self.fields), key=lambda f: f["name"]),
        }
        if self.type_id is not None:
            out["type_id"] = self.type_id
            out["version"] = self.version
        if self.constraints:
            out["constraints"] = [c.canonical() for c in self.constraints]
        if self.validators:
            out["validators"] = sorted(self.validators)
        if self.tag_field is not None:
            out["tag_field"] = self.tag_field
            out["tag"] = self.tag
        if self.closed:
            out["closed"] = True
        return out


@dataclass(frozen=True, slots=True)
class MessageRefT:
    """A field whose type is another message type (a ``$ref`` to another file's root)."""

    target: StructT
    fingerprint: str

    def canonical(self) -> JSON:
        return {
            "kind": "ref",
            "type_id": self.target.type_id,
            "version": self.target.version,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True, slots=True)
class UnionT:
    """A tagged union (``oneOf`` + ``discriminator``) of struct variants, optionally nullable."""

    tag_field: str
    variants: tuple[StructT | MessageRefT, ...]

    def canonical(self) -> JSON:
        return {
            "kind": "union",
            "tag_field": self.tag_field,
            "variants": sorted((v.canonical() for v in self.variants), key=_sort_key),
        }


def _sort_key(value: JSON) -> str:
    import json

    return json.dumps(value, sort_keys=True)


Node: TypeAlias = (
    ScalarT | EnumT | ArrayT | TupleT | MapT | NullableT | TensorT | TreeT | StructT | MessageRefT | UnionT
)


def unhandled(node: NoReturn) -> NoReturn:
    """The last case of a ``match`` over ``Node`` in every pass: mypy rejects the call wherever a
    node kind can reach it, so a kind added to ``Node`` fails the type check of each pass that
    does not handle it."""
    raise AssertionError(f"unhandled IR node {node!r}")


def children(node: Node) -> tuple[Node, ...]:
    """The types ``node`` holds directly (a message reference: the message's struct)."""
    match node:
        case ArrayT():
            return (node.items,)
        case TupleT():
            return node.items
        case MapT():
            return (node.values,)
        case NullableT():
            return (node.inner,)
        case StructT():
            return tuple(f.type for f in node.fields)
        case MessageRefT():
            return (node.target,)
        case UnionT():
            return node.variants
        case _:
            return ()


def height(node: Node, known: dict[int, tuple[Node, int]]) -> int:
    """Levels of types in ``node`` (a scalar: 1), found without recursion; ``known`` holds the
    heights found so far by ``id`` (with the node, so that no id is reused while it is there)."""
    pending = [node]
    while pending:
        top = pending[-1]
        if id(top) in known:
            pending.pop()
            continue
        inner = [c for c in children(top) if id(c) not in known]
        if inner:
            pending.extend(inner)
            continue
        known[id(top)] = (top, 1 + max((known[id(c)][1] for c in children(top)), default=0))
        pending.pop()
    return known[id(node)][1]
