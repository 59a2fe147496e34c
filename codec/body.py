"""The message body: msgspec encoding with tensors as extensions (``codec.wire``) and tree tuples as ext(2, list).

msgpack has no tuple, so tuples inside ``x-tree`` values are wrapped before encoding, and sets are
written in sorted order so that equal messages give equal bytes (both on shallow copies: the
caller's object is never touched); tuples come back as tuples. The encoder's schema check
decodes the body it is about to send with the caller's own tensors in place of their extensions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextvars import ContextVar
from functools import cache
from typing import Any

import msgspec
import msgspec.inspect as mi
import numpy as np
import torch

from codec.contract import LEAF_TYPES, LEAVES_ONLY, TREE_LEAVES
from codec.errors import DecodeError, EncodeError
from codec.locate import locate
from codec.tensors import Outgoing
from codec.wire import EXT_TUPLE

__all__ = [
    "INCOMING",
    "TupleMarker",
    "check_body",
    "checker",
    "encode_body",
    "ext_hook",
    "int_error",
    "needs_prepare",
    "prepare",
    "use_incoming",
]


class TupleMarker:
    """A tuple inside a tree, on its way to the wire."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items


_OUTGOING: ContextVar[Outgoing] = ContextVar("tensorwire_outgoing")
_INCOMING: ContextVar[Any] = ContextVar("tensorwire_incoming")  # codec.incoming.Incoming
_CHECKING: ContextVar[list[Any]] = ContextVar("tensorwire_checking")  # [values, next index]

_ARRAYS = (torch.Tensor, np.ndarray)


class _Rejected(Exception):
    """A tensor the encoder refused, carried out of msgspec so that its path can be found."""

    def __init__(self, error: EncodeError, value: Any) -> None:
        super().__init__(str(error))
        self.value = value


def _enc_hook(value: Any) -> Any:
    if isinstance(value, _ARRAYS):
        try:
            if isinstance(value, torch.Tensor):
                return _OUTGOING.get().tensor(value)
            return _OUTGOING.get().array(value)
        except EncodeError as exc:
            raise _Rejected(exc, value) from None
    if isinstance(value, TupleMarker):
        return msgspec.msgpack.Ext(EXT_TUPLE, msgspec.msgpack.encode(value.items, enc_hook=_enc_hook))
    raise NotImplementedError


def ext_hook(code: int, data: memoryview) -> Any:
    """The decoder's extension hook: tensors built by the call's ``Incoming``, tree tuples."""
    if code == EXT_TUPLE:
        return _tuple(data, ext_hook)
    state = _INCOMING.get()
    if type(state) is tuple:  # the first tensor of this decode: its state is made now
        state = _make_incoming(*state)
        _INCOMING.set(state)
    return state.ext(code, data)


def _tuple(data: memoryview, hook: Callable[[int, memoryview], Any]) -> tuple[Any, ...]:
    """A tree tuple from its ``ext(2)`` payload (its nesting was bounded before the decode began)."""
    items = msgspec.msgpack.decode(data, ext_hook=hook)
    if not isinstance(items, list):
        raise DecodeError("a tree tuple must hold an array")
    return tuple(items)


def _check_hook(code: int, data: memoryview) -> Any:
    """The encoder's schema check: each tensor extension stands for the caller's own tensor, in body order."""
    if code == EXT_TUPLE:
        return _tuple(data, _check_hook)
    state = _CHECKING.get()
    index = state[1]
    state[1] = index + 1
    return state[0][index]


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)


def encode_body(message: Any, outgoing: Outgoing, max_depth: int, origin: Any = None) -> bytes:
    """msgpack of ``message`` (already ``prepare``d): each tensor becomes the extension ``outgoing`` gives it.

    Per-call state travels in a context variable, so the hooks (and the cached encoder) hold no
    reference to it: a call's tensors are let go the moment the call ends. A tensor ``outgoing``
    refuses, or an int msgpack cannot hold, is an ``EncodeError`` ending with its field path in
    ``origin`` (the caller's message, before ``prepare``; ``message`` by default).
    """
    origin = message if origin is None else origin
    token = _OUTGOING.set(outgoing)
    try:
        return _ENCODER.encode(message)
    except _Rejected as exc:
        rejected = exc.value
        raise EncodeError(f"{exc}{_at(locate(origin, lambda v: v is rejected, max_depth))}") from None
    except OverflowError as exc:
        raise int_error(origin, max_depth, exc) from None
    finally:
        _OUTGOING.reset(token)


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what a msgpack int holds


def _too_big(value: Any) -> bool:
    return isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX


def int_error(message: Any, max_depth: int, error: OverflowError) -> EncodeError:
    """The error for an int msgpack cannot hold, naming the first one in ``message`` and its path."""
    found = locate(message, _too_big, max_depth)
    if found is None:  # not found within the depth limit: msgspec's own words
        return EncodeError(str(error))
    path, value = found
    return EncodeError(f"integer {value} does not fit the wire (msgpack holds -2**63 .. 2**64-1) - at `{path}`")


def _at(found: tuple[str, Any] | None) -> str:
    """`` - at `path` `` for a value ``locate`` found; nothing if it found none."""
    return "" if found is None else f" - at `{found[0]}`"


def check_body(check: msgspec.msgpack.Decoder[Any], body: bytes, values: list[Any]) -> None:
    """Decode ``body`` with ``check`` (a ``checker``) and the caller's own tensors ``values`` in place of
    its extensions: every type, range and rule of the schema is checked (``msgspec.ValidationError``
    or ``CodecError``)."""
    token = _CHECKING.set([values, 0])
    try:
        check.decode(body)
    finally:
        _CHECKING.reset(token)


@cache
def checker(cls: type) -> msgspec.msgpack.Decoder[Any]:
    """The decoder of the encoder's schema check for ``cls``."""
    return msgspec.msgpack.Decoder(cls, ext_hook=_check_hook)


INCOMING = _INCOMING  # the decoder sets it to ``(decoder, frames, head)`` for the length of a decode;
# the first tensor makes that an ``Incoming`` (``codec.incoming``, registered by ``use_incoming``)
_make_incoming: Callable[..., Any]


def use_incoming(make: Callable[..., Any]) -> None:
    """Register the class whose instances hold a decode's state."""
    global _make_incoming
    _make_incoming = make


# -- tuples in trees ---------------------------------------------------------------------------


def needs_prepare(cls: type) -> bool:
    """Whether messages of ``cls`` may hold a tree or a set (which ``prepare`` rewrites)."""
    return bool(_plan(cls))


def prepare(message: Any, max_depth: int) -> Any:
    """``message`` with tree tuples wrapped and sets sorted, copying only the structs and containers on the way."""
    return _struct(message, 0, max_depth)


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
        if depth > max_depth:
            raise EncodeError(f"nesting deeper than the limit of {max_depth}")
        new = rewrite(old, depth, max_depth)
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
        return lambda value, depth, max_depth: _sorted(value) if isinstance(value, set | frozenset) else value
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
        if depth > max_depth:
            raise EncodeError(f"nesting deeper than the limit of {max_depth}")
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


def _sorted(values: set[Any] | frozenset[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=repr)


def _tree(value: Any, depth: int, max_depth: int) -> Any:
    if type(value) in LEAF_TYPES:
        return value
    if depth > max_depth:
        raise EncodeError(f"nesting deeper than the limit of {max_depth}")
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
        raise EncodeError(f"{type(value).__name__} is not allowed in a tree")
    return value
