"""The encoder's errors for a value it refuses, each with the path of that value in the caller's message.

A value the encoder refuses inside msgspec or ``prepare`` (a tensor, a value with no wire form,
one nested too deep) is carried out as ``Rejected`` and found again by identity (``located``); an
int or a string msgpack cannot hold, and an extension the encoder did not write (``Foreign``), are
found by what they are (``int_error``, ``text_error``, ``foreign_error``). The search runs only on
these error paths.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tensorwire._leaf_types import SCALAR_TYPES
from tensorwire._locate import locate
from tensorwire.errors import EncodeError

__all__ = [
    "Foreign",
    "Rejected",
    "foreign_error",
    "int_error",
    "located",
    "moved_error",
    "no_wire_form",
    "text_error",
    "unsupported_error",
]


class Rejected(Exception):
    """A value the encoder refused (a tensor, a value with no wire form, one nested too deep),
    carried out of msgspec or ``prepare`` so that its path can be found (``located``)."""

    def __init__(self, error: EncodeError, value: Any) -> None:
        super().__init__(str(error))
        self.error = error
        self.value = value


def no_wire_form(value: Any) -> Any:
    """An encoder hook's refusal of a value msgpack has no form for (msgspec's words), with the value."""
    raise Rejected(EncodeError(f"Encoding objects of type {type(value).__name__} is unsupported"), value)


def located(origin: Any, rejected: Rejected, max_depth: int) -> EncodeError:
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
        msgspec.msgpack.encode(message, enc_hook=no_wire_form)
    except Rejected as exc:
        return located(message, exc, max_depth)
    except Exception:  # another problem: msgspec's words stand
        pass
    return EncodeError(str(error))


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


class Foreign(Exception):
    """The body holds an extension the encoder did not write: a ``msgspec.msgpack.Ext`` or
    ``msgspec.Raw`` in the message, which msgspec writes as it is, past the encoder's hook."""


def _foreign(value: Any) -> bool:
    return isinstance(value, msgspec.msgpack.Ext | msgspec.Raw)


def moved_error(message: Any, address: int, max_depth: int) -> EncodeError:
    """The error for a tensor of ``message`` whose storage (now at ``address``) was resized or moved
    while the message was encoded, with the path of the first tensor over it."""
    import torch  # (only a message with tensors gets here)

    def over_it(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() == address

    found = locate(message, over_it, max_depth)
    return EncodeError(
        "the tensor's storage was resized or moved while the message was encoded (by a named validator, "
        "or a tensor subclass's code): its bytes are not there to send",
        path=None if found is None else found[0],
    )


def foreign_error(message: Any, max_depth: int) -> EncodeError:
    """The error for a ``Foreign`` body: the first ``Ext`` or ``Raw`` in ``message``, with its path."""
    found = locate(message, _foreign, max_depth)
    if found is None:
        return EncodeError("the body holds an extension the encoder did not write (a msgspec Ext or Raw value)")
    path, value = found
    name = "msgspec.msgpack.Ext" if isinstance(value, msgspec.msgpack.Ext) else "msgspec.Raw"
    return EncodeError(f"a {name} is not a value of the schema (the encoder writes the body's extensions)", path=path)
