"""The message body: msgspec encoding with tensors as extensions (``tensorwire._wire``) and tree tuples as ext(2, list).

msgpack has no tuple, so tuples inside ``x-tree`` values are wrapped before encoding, and sets are
written in sorted order so that equal messages give equal bytes (both on shallow copies: the
caller's object is never touched); tuples come back as tuples. The encoder's schema check
decodes the body it is about to send with the caller's own tensors in place of their extensions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from typing import Any

import msgspec
import msgspec.inspect as mi
import numpy as np
import torch

from tensorwire._compile import build, read_field
from tensorwire._contract import LEAF_TYPES, LEAVES_ONLY, SCALAR_TYPES, TREE_LEAVES
from tensorwire._locate import locate, set_order
from tensorwire._tensors import Outgoing
from tensorwire._wire import EXT_TUPLE, unpack_descriptor
from tensorwire.errors import DecodeError, EncodeError

__all__ = [
    "KEEP",
    "Checker",
    "Checking",
    "Foreign",
    "TupleMarker",
    "encode_body",
    "foreign_error",
    "int_error",
    "preparer",
    "prepare",
    "stand_in",
    "text_error",
    "tree_tuple",
    "unsupported_error",
]


class TupleMarker:
    """A tuple inside a tree, on its way to the wire."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items


_ARRAYS = (torch.Tensor, np.ndarray)
KEEP = 8  # idle hooked codecs kept per pool: more than the calls a process runs at once, nested included


class _Rejected(Exception):
    """A value the encoder refused (a tensor, a value with no wire form, one nested too deep),
    carried out of msgspec or ``prepare`` so that its path can be found (``_located``)."""

    def __init__(self, error: EncodeError, value: Any) -> None:
        super().__init__(str(error))
        self.error = error
        self.value = value


class _Writing:
    """A msgspec encoder whose hook hands each tensor to ``outgoing``, this call's ``Outgoing``.

    Encoders are pooled: a call takes one, sets ``outgoing`` and clears it before giving the
    encoder back, so no hook holds a call's tensors after the call, and concurrent or nested
    calls never share one.
    """

    __slots__ = ("encode", "outgoing")

    def __init__(self) -> None:
        self.outgoing: Outgoing | None = None
        self.encode = msgspec.msgpack.Encoder(enc_hook=self.hook).encode

    def hook(self, value: Any) -> Any:
        if isinstance(value, _ARRAYS):
            outgoing = self.outgoing
            assert outgoing is not None
            try:
                if isinstance(value, torch.Tensor):
                    return outgoing.tensor(value)
                return outgoing.array(value)
            except EncodeError as exc:
                raise _Rejected(exc, value) from None
            except RuntimeError as exc:  # torch's own refusal to read it (a nested tensor, a zero tensor)
                problem = (
                    "a nested tensor cannot travel; send its tensors (tensor.unbind())"
                    if getattr(value, "is_nested", False)
                    else f"this tensor cannot be read: {exc}"
                )
                raise _Rejected(EncodeError(problem), value) from None
            except MemoryError:
                raise
            except Exception as exc:  # the caller's code (a tensor subclass's method) raised
                raise _Rejected(EncodeError(f"reading the tensor raised {type(exc).__name__}: {exc}"), value) from exc
        if isinstance(value, TupleMarker):
            return msgspec.msgpack.Ext(EXT_TUPLE, msgspec.msgpack.encode(value.items, enc_hook=self.hook))
        return _no_wire_form(value)


def _no_wire_form(value: Any) -> Any:
    """An encoder hook's refusal of a value msgpack has no form for (msgspec's words), with the value."""
    raise _Rejected(EncodeError(f"Encoding objects of type {type(value).__name__} is unsupported"), value)


def _located(origin: Any, rejected: _Rejected, max_depth: int) -> EncodeError:
    """The ``EncodeError`` of ``rejected`` with the path of its value in ``origin`` (the caller's
    message), found by identity; the error's own path if the value is not found, or is a scalar
    (one object may stand in many places: a small int, an interned string)."""
    value = rejected.value
    error = rejected.error
    found = None if type(value) in SCALAR_TYPES else locate(origin, lambda v: v is value, max_depth)
    return EncodeError(error.message, path=error.path if found is None else found[0])


def unsupported_error(message: Any, max_depth: int, error: TypeError) -> EncodeError:
    """The error for msgspec's ``TypeError`` while encoding ``message`` without a hook: a value with
    no wire form, named with its path (found by encoding again, only on this error path); else
    msgspec's own words."""
    try:
        msgspec.msgpack.encode(message, enc_hook=_no_wire_form)
    except _Rejected as exc:
        return _located(message, exc, max_depth)
    except Exception:  # another problem: msgspec's words stand
        pass
    return EncodeError(str(error))


_WRITERS: list[_Writing] = []


def tree_tuple(data: memoryview, hook: Callable[[int, memoryview], Any]) -> tuple[Any, ...]:
    """A tree tuple from its ``ext(2)`` payload (its nesting was bounded before the decode began)."""
    items = msgspec.msgpack.decode(data, ext_hook=hook)
    if not isinstance(items, list):
        raise DecodeError("a tree tuple must hold an array")
    return tuple(items)


def stand_in(code: int, data: memoryview) -> Any:
    """An extension hook for error paths: a tree tuple as itself, a tensor as an empty tensor (or
    array) of its kind; nothing the message names is opened."""
    if code == EXT_TUPLE:
        return tree_tuple(data, stand_in)
    try:
        kind = unpack_descriptor(code, data).kind
    except DecodeError:
        return None
    return torch.empty(0) if kind == "tensor" else np.empty(0)


def encode_body(message: Any, outgoing: Outgoing, max_depth: int, origin: Any = None) -> bytes:
    """msgpack of ``message`` (already ``prepare``d): each tensor becomes the extension ``outgoing`` gives it.

    A tensor ``outgoing`` refuses, or an int msgpack cannot hold, is an ``EncodeError`` ending
    with its field path in ``origin`` (the caller's message, before ``prepare``; ``message`` by
    default).
    """
    try:
        writing = _WRITERS.pop()
    except IndexError:
        writing = _Writing()
    writing.outgoing = outgoing
    try:
        return writing.encode(message)
    except _Rejected as exc:
        raise _located(message if origin is None else origin, exc, max_depth) from exc.__cause__
    except OverflowError as exc:
        raise int_error(message if origin is None else origin, max_depth, exc) from None
    except UnicodeEncodeError as exc:
        raise text_error(message if origin is None else origin, max_depth, exc) from None
    finally:
        writing.outgoing = None
        if len(_WRITERS) < KEEP:
            _WRITERS.append(writing)


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what a msgpack int holds


def _too_big(value: Any) -> bool:
    return isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX


def int_error(message: Any, max_depth: int, error: OverflowError) -> EncodeError:
    """The error for an int msgpack cannot hold, naming the first one in ``message`` and its path."""
    found = locate(message, _too_big, max_depth)
    if found is None:  # not found within the depth limit: msgspec's own words
        return EncodeError(str(error))
    path, value = found
    return EncodeError(f"integer {value} does not fit the wire (msgpack holds -2**63 .. 2**64-1)", path=path)


def _not_utf8(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return True
    return False


def text_error(message: Any, max_depth: int, error: UnicodeEncodeError) -> EncodeError:
    """The error for a string msgpack cannot hold (not UTF-8: a lone surrogate), in the encoder's
    words, with the path of the first such string in ``message`` (a map key at its entry) if it is
    within the depth limit."""
    found = locate(message, _not_utf8, max_depth)
    bad = error.object[error.start : error.start + 1]
    return EncodeError(
        f"string is not valid UTF-8: {error.reason} (character {error.start}, {bad!a})",
        path=None if found is None else found[0],
    )


class Checking:
    """A decoder of ``cls`` whose hook puts the caller's own tensors (``values``, in body order)
    where the body has their extensions; pooled as the encoders are."""

    __slots__ = ("decode", "index", "values")

    def __init__(self, cls: type) -> None:
        self.values: list[Any] = []
        self.index = 0
        self.decode: Callable[[bytes], Any] = msgspec.msgpack.Decoder(cls, ext_hook=self.hook).decode

    def hook(self, code: int, data: memoryview) -> Any:
        if code == EXT_TUPLE:
            return tree_tuple(data, self.hook)
        index = self.index
        self.index = index + 1
        try:
            return self.values[index]
        except IndexError:  # more extensions than the encoder wrote
            raise Foreign from None


class Foreign(Exception):
    """The body holds an extension the encoder did not write: a ``msgspec.msgpack.Ext`` or
    ``msgspec.Raw`` in the message, which msgspec writes as it is, past the encoder's hook."""


def _foreign(value: Any) -> bool:
    return isinstance(value, msgspec.msgpack.Ext | msgspec.Raw)


def foreign_error(message: Any, max_depth: int) -> EncodeError:
    """The error for a ``Foreign`` body: the first ``Ext`` or ``Raw`` in ``message``, with its path."""
    found = locate(message, _foreign, max_depth)
    if found is None:
        return EncodeError("the body holds an extension the encoder did not write (a msgspec Ext or Raw value)")
    path, value = found
    name = "msgspec.msgpack.Ext" if isinstance(value, msgspec.msgpack.Ext) else "msgspec.Raw"
    return EncodeError(f"a {name} is not a value of the schema (the encoder writes the body's extensions)", path=path)


class Checker:
    """The encoder's schema check for ``cls``: decode the body about to be sent, so that every
    type, range and rule of the schema is checked (``msgspec.ValidationError`` or ``CodecError``).

    ``plain`` checks a body without tensors or trees. A body with them is decoded by a pooled
    ``Checking`` (``free``, or ``new()`` when none is idle) whose ``values`` are the caller's own
    tensors in body order; ``Encoder.encode`` takes one, runs it and clears it inline.
    """

    __slots__ = ("_cls", "free", "plain")

    def __init__(self, cls: type) -> None:
        self._cls = cls
        self.free: list[Checking] = []
        self.plain: Callable[[bytes], Any] = msgspec.msgpack.Decoder(cls).decode

    def new(self) -> Checking:
        """A checking decoder for when every pooled one is in use."""
        return Checking(self._cls)


# -- tuples in trees ---------------------------------------------------------------------------


def preparer(cls: type) -> Callable[[Any, int], Any] | None:
    """``prepare`` for messages of ``cls``; None if they hold no tree or set (nothing to rewrite).

    When every field it may rewrite is a tree, a map of trees, a list of trees or an optional
    struct, the function first checks, at C speed per field, whether each holds a leaf, a flat list
    or a flat map of leaves, or None: then there is nothing to rewrite and the message is returned
    as it is.
    """
    plan = _plan(cls)
    if not plan:
        return None
    kinds = {f.name: _flat_kind(f.type) for f in mi.type_info(cls).fields}  # type: ignore[attr-defined]
    fields = tuple((name, kinds[name]) for name, _ in plan)
    if any(kind is None for _, kind in fields):
        return prepare
    return _quick_preparer(fields)


# What a field of each kind may hold for ``prepare`` to have nothing to rewrite in it (``v``: its value).
# An empty list or map is let through before ``LEAVES_ONLY``, which first makes a set of what it is given.
_NOTHING_TO_REWRITE = {
    "tree": "v is None or type(v) in LEAF_TYPES or (type(v) is list and (not v or LEAVES_ONLY(map(type, v))))"
    " or (type(v) is dict and (not v or LEAVES_ONLY(map(type, v.values()))))",
    "map": "v is None or (type(v) is dict and (not v or LEAVES_ONLY(map(type, v.values()))))",
    "list": "v is None or (type(v) is list and (not v or LEAVES_ONLY(map(type, v))))",
    "optional": "v is None",
}


def _quick_preparer(fields: tuple[tuple[str, str | None], ...]) -> Callable[[Any, int], Any]:
    """``prepare`` that first checks, in one straight-line function (``tensorwire._compile``),
    whether each field holds None, a leaf, a flat list or a flat map of leaves (as its kind
    allows; an optional struct: None only): then the message is returned as it is."""
    bound: dict[str, Any] = {"LEAF_TYPES": LEAF_TYPES, "LEAVES_ONLY": LEAVES_ONLY, "prepare": prepare}
    lines = ["def quick(message, max_depth):", "    if max_depth < 2:", "        return prepare(message, max_depth)"]
    # past the check above, a flat container (two levels down) cannot be in the way of the limit
    for i, (name, kind) in enumerate(fields):
        assert kind is not None
        lines.append(f"    v = {read_field('message', name, f'N{i}', bound)}")
        lines.append(f"    if not ({_NOTHING_TO_REWRITE[kind]}):")
        lines.append("        return prepare(message, max_depth)")
    lines.append("    return message")
    return build(lines, bound, "quick")


def _flat_kind(t: Any) -> str | None:
    """``"tree"``, ``"map"`` (of trees), ``"list"`` (of trees) or ``"optional"`` (structs or None) for
    a field type of that shape."""
    if isinstance(t, mi.UnionType) and all(isinstance(u, mi.StructType | mi.NoneType) for u in t.types):
        return "optional" if any(isinstance(u, mi.NoneType) for u in t.types) else None
    if isinstance(t, mi.AnyType):
        return "tree"
    if isinstance(t, mi.DictType) and isinstance(t.value_type, mi.AnyType):
        return "map"
    if isinstance(t, mi.ListType) and isinstance(t.item_type, mi.AnyType):
        return "list"
    return None


def prepare(message: Any, max_depth: int) -> Any:
    """``message`` with tree tuples wrapped and sets sorted, copying only the structs and containers
    on the way. A value a tree may not hold, or one nested deeper than ``max_depth``, is an
    ``EncodeError`` with its path."""
    try:
        return _struct(message, 0, max_depth)
    except _Rejected as exc:
        raise _located(message, exc, max_depth) from exc.__cause__


def _too_deep(value: Any, max_depth: int) -> _Rejected:
    return _Rejected(EncodeError(f"nesting deeper than the limit of {max_depth}"), value)


# What the rewriters go into: each is a level of the body (an array, a map or a tuple's ext). Any
# other value (a scalar, a tensor) is none, and passes at any depth, as a decoder counts it.
_NESTS = (dict, list, tuple, set, frozenset, msgspec.Struct)


Rewrite = Callable[[Any, int, int], Any]  # (value, depth, max_depth) -> value, or a rewritten copy


@cache
def _plan(cls: type) -> tuple[tuple[str, Rewrite], ...]:
    """Fields of ``cls`` whose values ``prepare`` may rewrite, each with its rewriter."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    seen = frozenset({cls})
    return tuple((f.name, _rewriter(f.type)) for f in info.fields if _rewritable(f.type, seen))


def _rewritable(t: Any, seen: frozenset[type]) -> bool:
    """Whether values of ``t`` may hold a tree or a set (both are rewritten before encoding)."""
    if isinstance(t, mi.AnyType | mi.SetType | mi.FrozenSetType):
        return True
    if isinstance(t, mi.StructType):
        return t.cls not in seen and any(_rewritable(f.type, seen | {t.cls}) for f in t.fields)
    if isinstance(t, mi.UnionType):
        return any(_rewritable(u, seen) for u in t.types)
    if isinstance(t, mi.ListType | mi.VarTupleType):
        return _rewritable(t.item_type, seen)
    if isinstance(t, mi.TupleType):
        return any(_rewritable(u, seen) for u in t.item_types)
    if isinstance(t, mi.DictType):
        return _rewritable(t.value_type, seen)
    return False


def _struct(obj: Any, depth: int, max_depth: int) -> Any:
    plan = _plan(type(obj))  # type: ignore[arg-type]
    if not plan:
        return obj
    depth += 1
    changes = None
    for name, rewrite in plan:
        old = getattr(obj, name)
        if old is None:
            continue
        if depth > max_depth and isinstance(old, _NESTS):
            raise _too_deep(old, max_depth)
        try:
            new = rewrite(old, depth, max_depth)
        except (_Rejected, MemoryError):
            raise
        except Exception as exc:  # the caller's code (a container's ``__getitem__``, ``items``) raised
            raise _Rejected(EncodeError(f"reading the value raised {type(exc).__name__}: {exc}"), old) from exc
        if new is not old:
            if changes is None:
                changes = {}
            changes[name] = new
    if changes is None:
        return obj
    clone = copy.copy(obj)
    for name, value in changes.items():
        msgspec.structs.force_setattr(clone, name, value)
    return clone


def _rewriter(t: Any) -> Rewrite:
    """The function that rewrites a value of declared type ``t`` (built once per field).

    Each rewriter takes a non-None value at ``depth`` (its caller checked the depth limit);
    anything that does not have the declared shape is left as it is (the schema check reports it).
    """
    if isinstance(t, mi.AnyType):
        return _tree
    if isinstance(t, mi.StructType):
        cls = t.cls
        return lambda value, depth, max_depth: _struct(value, depth, max_depth) if isinstance(value, cls) else value
    if isinstance(t, mi.UnionType):
        return _union_rewriter(t)
    if isinstance(t, mi.SetType | mi.FrozenSetType):
        return lambda value, depth, max_depth: set_order(value) if isinstance(value, set | frozenset) else value
    if isinstance(t, mi.DictType):
        return _dict_rewriter(_rewriter(t.value_type))
    if isinstance(t, mi.ListType | mi.VarTupleType):
        return _sequence_rewriter(_rewriter(t.item_type))
    if isinstance(t, mi.TupleType):
        return _tuple_rewriter(tuple(_rewriter(u) for u in t.item_types))
    return _same


def _same(value: Any, depth: int, max_depth: int) -> Any:
    return value


def _checked(rewrite: Rewrite) -> Rewrite:
    """``rewrite`` for an item one level down: None passes, the depth limit is enforced."""

    def item(value: Any, depth: int, max_depth: int) -> Any:
        if value is None:
            return None
        if depth > max_depth and isinstance(value, _NESTS):
            raise _too_deep(value, max_depth)
        return rewrite(value, depth, max_depth)

    return item


def _union_rewriter(t: Any) -> Rewrite:
    structs = tuple(option.cls for option in t.types if isinstance(option, mi.StructType))
    has_tree = any(isinstance(option, mi.AnyType) for option in t.types)

    def union(value: Any, depth: int, max_depth: int) -> Any:
        if structs and isinstance(value, structs):
            return _struct(value, depth, max_depth)
        if has_tree:
            return _tree(value, depth, max_depth)
        return value

    return union


def _dict_rewriter(inner: Rewrite) -> Rewrite:
    item = _checked(inner)
    trees = inner is _tree

    def rewrite(value: Any, depth: int, max_depth: int) -> Any:
        if not isinstance(value, dict):
            return value
        if trees and depth < max_depth and LEAVES_ONLY(map(type, value.values())):
            return value  # leaves only: nothing to rewrite
        items = {k: item(v, depth + 1, max_depth) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value

    return rewrite


def _sequence_rewriter(inner: Rewrite) -> Rewrite:
    item = _checked(inner)
    trees = inner is _tree

    def rewrite(value: Any, depth: int, max_depth: int) -> Any:
        if not isinstance(value, list | tuple):
            return value
        if trees and depth < max_depth and LEAVES_ONLY(map(type, value)):
            return value
        seq = [item(v, depth + 1, max_depth) for v in value]
        return type(value)(seq) if any(a is not b for a, b in zip(seq, value, strict=True)) else value

    return rewrite


def _tuple_rewriter(inners: tuple[Rewrite, ...]) -> Rewrite:
    items = tuple(_checked(inner) for inner in inners)

    def rewrite(value: Any, depth: int, max_depth: int) -> Any:
        if not isinstance(value, tuple) or len(value) != len(items):
            return value
        seq = [item(v, depth + 1, max_depth) for v, item in zip(value, items, strict=True)]
        return tuple(seq) if any(a is not b for a, b in zip(seq, value, strict=True)) else value

    return rewrite


def _tree(value: Any, depth: int, max_depth: int) -> Any:
    if type(value) in LEAF_TYPES:
        return value
    if depth > max_depth:
        raise _too_deep(value, max_depth)
    if isinstance(value, tuple):
        return TupleMarker([_tree(v, depth + 1, max_depth) for v in value])
    if isinstance(value, list):
        if LEAVES_ONLY(map(type, value)):
            return value  # the common leaf list, checked at C speed
        seq = [_tree(v, depth + 1, max_depth) for v in value]
        return seq if any(a is not b for a, b in zip(seq, value, strict=True)) else value
    if isinstance(value, dict):
        if LEAVES_ONLY(map(type, value.values())):
            return value
        items = {k: _tree(v, depth + 1, max_depth) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    if not isinstance(value, TREE_LEAVES):
        raise _Rejected(EncodeError(f"{type(value).__name__} is not allowed in a tree"), value)
    return value
