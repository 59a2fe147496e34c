"""The message body: msgspec encoding with tensors as extensions (``tensorwire._wire``) and tree tuples as ext(2, list).

The body written (``encode_body``) is that of a message already rewritten by ``tensorwire._prepare``
(tuples inside trees wrapped, sets sorted); tuples come back as tuples (``tree_tuple``). The encoder's
schema check decodes the body it is about to send with the caller's own tensors in place of their
extensions (``Checker``). A value it refuses is named with its path by ``tensorwire._encode_errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import torch

from tensorwire._encode_errors import Foreign, Rejected, int_error, located, no_wire_form, text_error
from tensorwire._prepare import TupleMarker
from tensorwire._tensors import Outgoing
from tensorwire._wire import EXT_TUPLE, unpack_descriptor
from tensorwire.errors import DecodeError, EncodeError

__all__ = ["KEEP", "Checker", "Checking", "encode_body", "stand_in", "tree_tuple"]

_ARRAYS = (torch.Tensor, np.ndarray)
KEEP = 8  # idle hooked codecs kept per pool: more than the calls a process runs at once, nested included


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
                raise Rejected(exc, value) from None
            except RuntimeError as exc:  # torch's own refusal to read it (a nested tensor, a zero tensor)
                problem = (
                    "a nested tensor cannot travel; send its tensors (tensor.unbind())"
                    if getattr(value, "is_nested", False)
                    else f"this tensor cannot be read: {exc}"
                )
                raise Rejected(EncodeError(problem), value) from None
            except MemoryError:
                raise
            except Exception as exc:  # the caller's code (a tensor subclass's method) raised
                raise Rejected(EncodeError(f"reading the tensor raised {type(exc).__name__}: {exc}"), value) from exc
        if isinstance(value, TupleMarker):
            return msgspec.msgpack.Ext(EXT_TUPLE, msgspec.msgpack.encode(value.items, enc_hook=self.hook))
        return no_wire_form(value)


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
    except Rejected as exc:
        raise located(message if origin is None else origin, exc, max_depth) from exc.__cause__
    except OverflowError as exc:
        raise int_error(message if origin is None else origin, max_depth, exc) from None
    except UnicodeEncodeError as exc:
        raise text_error(message if origin is None else origin, max_depth, exc) from None
    finally:
        writing.outgoing = None
        if len(_WRITERS) < KEEP:
            _WRITERS.append(writing)


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
