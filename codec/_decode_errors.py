"""What a failed decode raises: the ``DecodeError`` naming what is wrong, and nothing of the message.

``decode_error`` words the error for a frame 0 msgspec rejected: what its tag or fingerprint says
is wrong (``refusal``), else msgspec's own words with the path into the body (a map entry by its
key); ``table_error`` words the error for a buffer table msgspec rejected (a handle of a transport
the decoder does not have named as such); ``typed_error`` adds the type and version frame 0's tag
names to an error raised while the body was read (a refusal of frame 0's nesting, raised before
frame 0 is decoded, is worded by ``_scan.nesting_error``). ``clear_locals`` clears
the locals of the failed frames in an error's traceback, so the error, kept by the caller, holds
none of the imported buffers or the message's frames.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from traceback import clear_frames
from types import FrameType, TracebackType
from typing import Any

import msgspec

from tensorwire._body import stand_in
from tensorwire._locate import entry_path, header_path, msgspec_error
from tensorwire._wire import MAGIC, WIRE_VERSION, parse_tag
from tensorwire.errors import DecodeError, ValidationError, printable
from tensorwire.registry import Registry, UnknownTypeError

__all__ = ["clear_locals", "decode_error", "refusal", "table_error", "typed_error"]


class _Peek(msgspec.Struct, array_like=True):
    """The first two items of frame 0, whatever they hold (for error messages)."""

    tag: Any
    fingerprint: Any = None


_PEEK = msgspec.msgpack.Decoder(_Peek)


class _Table(msgspec.Struct, array_like=True):
    """The first four items of frame 0: the buffer table last, as it is (for error messages)."""

    tag: Any
    fingerprint: Any
    data: Any
    buffers: Any


_TABLE = msgspec.msgpack.Decoder(_Table)
_TRANSPORT_AT = re.compile(r"\$\[3\]\[(\d+)\]\[1\]\.transport")  # msgspec's path to a handle's tag


def decode_error(head: Any, exc: Exception, registry: Registry, strict: bool) -> DecodeError:
    """The error for a frame 0 msgspec rejected: what its tag or fingerprint says is wrong, else
    msgspec's own words with the path into the body (a map entry by its key)."""
    refused = refusal(head, registry, strict)
    if refused is not None:
        return refused
    ident = _ident(head)
    problem, path, on_key = msgspec_error(str(exc))
    message = f"invalid map key: {problem}" if on_key else problem
    if path is not None:
        if ident is not None and path.startswith("$[4]") and ("[...]" in path or on_key):
            path = _entry_path(head, ident, path, problem, on_key, registry)
        path = header_path(path)
    rule = exc.__cause__
    inner = rule.path if isinstance(rule, ValidationError) else None
    if path is not None and not on_key and inner and inner.startswith("$"):
        path += inner[1:]  # a struct's rule: msgspec names the struct, the rule its field
    if ident is None:
        return DecodeError(f"invalid header: {message}", path=path)
    return DecodeError(message, path=path, type_id=ident[0], version=ident[1])


def _entry_path(head: Any, ident: tuple[str, int], path: str, problem: str, on_key: bool, registry: Registry) -> str:
    """msgspec's ``path`` into frame 0 with the map entries it names ``[...]`` found by their keys."""
    try:
        frame = msgspec.msgpack.decode(head)  # its nesting was bounded before the typed decode
        cls = registry.type(*ident)
        found = entry_path(cls, frame[4], "$" + path[4:], problem, on_key, stand_in)
    except Exception:  # the locator only improves a message; it never replaces the error
        return path
    return path if found is None else "$[4]" + found[1:]


def table_error(head: Any, exc: Exception, transports: Sequence[str]) -> DecodeError:
    """The error for a buffer table msgspec rejected: msgspec's own words with the path into the
    table, or, for a handle of a transport not among ``transports`` (the tags this decoder reads),
    which transport the buffer needs and which the decoder has."""
    problem, path, on_key = msgspec_error(str(exc))
    if path is None:
        return DecodeError(f"invalid buffer table: {problem}")
    found = None if on_key else _TRANSPORT_AT.fullmatch(path)
    if found is not None and problem.startswith("Invalid value"):
        name = _transport(head, int(found.group(1)))
        if name is not None and name not in transports:
            return DecodeError(
                f"buffer {found.group(1)} travels by {printable(name)}, a transport this decoder does not have"
                f" (it has: {', '.join(transports)})",
                path=header_path(path),
            )
    key = "invalid map key: " if on_key else ""
    return DecodeError(f"invalid buffer table: {key}{problem}", path=header_path(path))


def _transport(head: Any, index: int) -> str | None:
    """The transport that buffer ``index``'s handle in frame 0 names, if it names one by a string."""
    try:
        name = _TABLE.decode(head).buffers[index][1]["transport"]
    except Exception:  # the locator only improves a message; it never replaces the error
        return None
    return name if isinstance(name, str) else None


def typed_error(head: Any, exc: DecodeError) -> DecodeError:
    """``exc`` with the type and version of the message it is about, where frame 0's tag names them."""
    if exc.type_id is not None:
        return exc
    ident = _ident(head)
    if ident is None:
        return exc
    return DecodeError(exc.message, path=exc.path, type_id=ident[0], version=ident[1])


def _ident(head: Any) -> tuple[str, int] | None:
    """``(type_id, version)`` of a frame 0 whose tag reads well, else None."""
    try:
        parsed = parse_tag(_PEEK.decode(head).tag)
    except (msgspec.MsgspecError, RecursionError):  # (msgspec skips the rest of the frame recursively)
        return None
    return None if parsed is None else (parsed[1], parsed[2])


def refusal(head: Any, registry: Registry, strict: bool) -> DecodeError | None:
    """Why frame 0's tag or fingerprint is refused; None if they are not the problem."""
    try:
        peek = _PEEK.decode(head)
    except (msgspec.MsgspecError, RecursionError):
        try:
            old = msgspec.msgpack.decode(head)
        except (msgspec.MsgspecError, RecursionError):
            return None
        if isinstance(old, dict) and old.get("magic") == MAGIC:
            return DecodeError(
                f"wire format version {old.get('wire')!r} is not supported (this reader: {WIRE_VERSION})",
                path="$.wire",
            )
        expected = "a msgpack array of [tag, fingerprint, data, buffers, body]"
        return DecodeError(f"invalid header: frame 0 is not {expected}, got {type(old).__name__}")
    parsed = parse_tag(peek.tag)
    if parsed is None:
        tag = peek.tag
        shown = (
            repr(tag)
            if tag is None or isinstance(tag, str | bytes | int | float)
            else f"is a {type(tag).__name__}, not a str"
        )
        return DecodeError(f"not a tensorwire message: tag {shown}", path="$[0]")  # (a container's repr could
        # name the addresses of its objects: the same frame would give another message each time)
    wire, type_id, version = parsed
    if wire != WIRE_VERSION:
        return DecodeError(f"wire format version {wire} is not supported (this reader: {WIRE_VERSION})", path="$[0]")
    try:
        cls = registry.type(type_id, version)
    except UnknownTypeError as exc:
        return DecodeError(str(exc), path="$[0]")
    fingerprint = cls.__tw_type__.fingerprint
    if strict and peek.fingerprint != fingerprint:
        shown = peek.fingerprint[:16] if isinstance(peek.fingerprint, str) else repr(peek.fingerprint)
        return DecodeError(
            f"schema fingerprint {shown}... differs from this reader's {fingerprint[:16]}...",
            path="$[1]",
            type_id=type_id,
            version=version,
        )
    return None


def clear_locals(exc: BaseException, here: FrameType) -> None:
    """Clear the locals of the finished frames in the tracebacks of ``exc`` and of the errors it was
    raised from or during that were raised inside the call running in frame ``here`` (not an error
    its caller was handling, nor one a validator chained from elsewhere). Their lines stay printable."""
    seen: set[int] = set()  # a chain set by hand may loop
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        tb = error.__traceback__
        if error is not exc and not _raised_below(tb, here):
            continue
        pending += (error.__cause__, error.__context__)
        clear_frames(tb)


def _raised_below(tb: TracebackType | None, here: FrameType) -> bool:
    """Whether the error with traceback ``tb`` was caught in a frame that ``here`` called."""
    frame = tb.tb_frame if tb is not None else None
    while frame is not None:
        if frame is here:
            return True
        frame = frame.f_back
    return False
