"""``Encoder``: a typed message -> frames, large tensors out-of-band through a transport.

Steps of one ``encode`` call (all state lives in the call): wrap tree tuples on shallow copies;
write the body once, each tensor as its descriptor (a small one with its bytes, inside frame 0);
check the body against the message's schema by decoding it with the caller's own tensors in
place of their descriptors (types, enum members, ranges, lengths, tensor specs, constraints,
named rules: msgspec checks in C what it can); only then export the buffers. If anything fails,
every buffer exported by this call is released. The caller's message is never mutated. A message
of a type with no tensor and nothing to rewrite is one encode and the schema check (a failure
there is named by the full path); so is one whose type holds tensors only in trees (an
``rpc.Request``) when its trees hold lists and maps of plain leaves only. The first of those is
also compiled (``tensorwire._speedups``, where it is built: ``tensorwire._native``).

Tensors on a CUDA device stay there until export: a transport with ``export_device`` (e.g.
``CudaShmTransport``) copies them straight into shared memory; otherwise the encoder stages them
(a pinned side-stream copy after the producer's pending work, through the transport's
``device_runtime``) and sends the host copy.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any, Final

import msgspec

from tensorwire import _contract
from tensorwire._blocks import BufferPlan
from tensorwire._body import KEEP, encode_body, stand_in
from tensorwire._encode_errors import Foreign, foreign_error, int_error, moved_error, text_error, unsupported_error
from tensorwire._locate import entry_path, msgspec_error, too_deep
from tensorwire._native import SPEEDUPS
from tensorwire._plan import TypePlan, type_plan
from tensorwire._prepare import AS_IS
from tensorwire._scan import OPENERS, walk
from tensorwire._sealed import Sealed
from tensorwire._tensors import Outgoing, embed_room, quick_below
from tensorwire._wire import BIN8, BIN16, data_header
from tensorwire.errors import CodecError, DecodeError, EncodeError, TransportError, ValidationError
from tensorwire.options import EncodeOptions, Limits
from tensorwire.transports.base import Buffer, Handle, Transport
from tensorwire.transports.cuda_runtime import stage_to_host
from tensorwire.transports.inline import InlineTransport

__all__ = ["Encoder"]

_INLINE = InlineTransport()
_PLAIN = msgspec.msgpack.Encoder()
_FAILURES = (
    CodecError,
    msgspec.ValidationError,
    msgspec.DecodeError,
    TypeError,
    ValueError,
    AttributeError,
    RuntimeError,
    OverflowError,  # ``encode_body`` names the field of an int msgpack cannot hold; this is a guard
)


class Encoder(Sealed):
    """Encodes generated (or run-time) message types; immutable and safe to share between threads."""

    __slots__ = (
        "_embed_room",
        "_max_header",
        "_native",
        "_nothing_to_begin",
        "_plain_levels",
        "_quick_below",
        "_sealed",
        "_takes_storage",
        "options",
        "transport",
    )

    def __init__(self, transport: Transport | None = None, options: EncodeOptions | None = None) -> None:
        if transport is not None and not isinstance(transport, Transport):
            raise TypeError(f"Encoder transport must be a tensorwire Transport, got {transport!r}")
        if options is not None and not isinstance(options, EncodeOptions):
            raise TypeError(f"Encoder options must be an EncodeOptions, got {options!r}")
        self.transport: Final[Transport] = transport if transport is not None else _INLINE
        self.options: Final[EncodeOptions] = options if options is not None else EncodeOptions()
        self._quick_below = quick_below(self.options.embed_threshold, self.options.limits)
        self._embed_room = embed_room(self.options.limits)
        # whether the transport's class takes host storages (``export_storage``): only then is a
        # buffer's storage tensor made, which costs more than the rest of handing it a byte view
        self._takes_storage = type(self.transport).export_storage is not Transport.export_storage
        # whether it numbers messages (``begin_message``): a call less per message where it does not
        self._nothing_to_begin = type(self.transport).begin_message is Transport.begin_message
        self._max_header = self.options.limits.max_header_bytes
        # the levels below the message a type's typed part may reach for its one-encode path, which
        # is taken only with the schema check (-1: never) and needs no count of the body's nesting
        self._plain_levels = self.options.limits.max_depth if self.options.validate else -1
        # that path compiled (``tensorwire._native``): its state, or None where it is not built
        self._native = None if SPEEDUPS is None else (_ONE_ENCODE, self._plain_levels, self._max_header, _PLAIN.encode)
        self._sealed = True

    def encode(self, message: Any) -> list[Buffer]:
        """Frames of ``message``: ``frames[0]`` is the msgpack header, the rest are inline buffers."""
        native = self._native
        if native is not None:  # the one-encode path below, compiled: None where it is not taken
            written = _NATIVE_ONE_ENCODE(native, message)
            if written is not None:
                return written
        cls = type(message)
        plan: TypePlan | None = _PLANS.get(cls)
        if plan is None:
            plan = _plan(cls)
        check = plan.plain
        if check is not None and plan.levels <= self._plain_levels:  # nothing to rewrite, no tensor, no
            # nesting past the limit: one encode, one C check
            try:
                body = _PLAIN.encode(message)
                check(body)
            except Exception:  # the path below names what is wrong (a failing named validator runs again)
                pass
            else:
                head = plan.bare + body
                if len(head) <= self._max_header:
                    return [head]
        options = self.options
        body = b""
        if not plan.tensors:  # nothing but typed scalars, strings and structs: one encode, one C check
            try:
                body = _PLAIN.encode(
                    message if plan.prepare is None else plan.prepare(message, options.limits.max_depth)
                )
                if options.validate:
                    plan.check.plain(body)
                if plan.levels > options.limits.max_depth:
                    _check_levels(body, message, options.limits.max_depth)
            except OverflowError as exc:  # an int msgpack cannot hold: named with its path
                raise _failure(plan, cls, int_error(message, options.limits.max_depth, exc), body) from None
            except UnicodeEncodeError as exc:  # a string that is not UTF-8: named with its path
                raise _failure(plan, cls, text_error(message, options.limits.max_depth, exc), body) from None
            except TypeError as exc:  # a value msgpack has no form for: named with its path
                raise _failure(plan, cls, unsupported_error(message, options.limits.max_depth, exc), body) from None
            except _FAILURES as exc:
                raise _failure(plan, cls, exc, body) from exc.__cause__
            except MemoryError:
                raise
            except Exception as exc:  # the caller's code (a dunder of a value) raised
                raise _failure(plan, cls, _raised(exc), body) from exc
            head = plan.bare + body
            if len(head) > options.limits.max_header_bytes:
                raise _too_big(plan, len(head), options.limits)
            return [head]
        limits = options.limits
        try:
            if plan.trees is None:
                prepared = message if plan.prepare is None else plan.prepare(message, limits.max_depth)
            else:
                prepared = plan.trees(message, limits.max_depth)
                if prepared is AS_IS:  # its trees hold no tensor and nothing to rewrite: one encode, one C check
                    if plan.levels <= self._plain_levels:
                        written = _one_encode_frames(plan, message, limits.max_header_bytes)
                        if written is not None:
                            return written
                    prepared = message
            outgoing = Outgoing(
                limits,
                options.embed_threshold,
                self._quick_below,
                self._embed_room,
                None,
                self.transport.device_runtime,
            )
            body = encode_body(prepared, outgoing, limits.max_depth, message)
            if outgoing.rerun:  # a storage with several views: written again, knowing their extent
                outgoing = outgoing.again()
                body = encode_body(prepared, outgoing, limits.max_depth, message)
            runs = _contract.VALIDATOR_RUNS
            if options.validate:  # the schema check, inline (a call less): a pooled ``Checking``
                # decodes the body with the caller's own tensors in place of their extensions
                free = plan.check.free
                try:
                    checking = free.pop()
                except IndexError:
                    checking = plan.check.new()
                checking.values = outgoing.values
                checking.index = 0
                try:
                    checking.decode(body)
                    if checking.index != len(checking.values):
                        raise Foreign
                except Foreign:  # an Ext or Raw of the caller's, which msgspec writes past the hook
                    raise foreign_error(message, limits.max_depth) from None
                finally:
                    checking.values = []
                    if len(free) < KEEP:
                        free.append(checking)
            if plan.levels > limits.max_depth:
                _check_levels(body, message, limits.max_depth)
            if outgoing.subclassed or _contract.VALIDATOR_RUNS != runs:  # the caller's code ran since
                # the tensors' memory was looked at: read by address from here on, it must still be there
                moved = outgoing.moved()
                if moved is not None:
                    raise moved_error(message, moved, limits.max_depth)
        except _FAILURES as exc:
            raise _failure(plan, cls, exc, body) from exc.__cause__
        except MemoryError:
            raise
        except Exception as exc:  # the caller's code (a dunder of a value, a named validator) raised
            raise _failure(plan, cls, _raised(exc), body) from exc
        buffers = outgoing.buffers
        data = outgoing.data
        if not buffers:
            if not data:
                head = plan.bare + body
            else:  # the tensors' bytes copied once more, into frame 0 (the common data headers inline: a call less)
                n = outgoing.data_bytes
                header = BIN8(0xC4, n) if n < 0x100 else BIN16(0xC5, n) if n < 0x10000 else data_header(n)
                head = b"".join([plan.prefix, header, *data, b"\x90", body])
            if len(head) > limits.max_header_bytes:
                raise _too_big(plan, len(head), limits)
            return [head]
        size = len(plan.prefix) + 5 + outgoing.data_bytes + len(body) + 1  # without the buffer table
        if size > limits.max_header_bytes:  # before anything is exported
            raise _too_big(plan, size, limits)
        frames: list[Buffer] = [b""]
        entries: list[list[Any]] = []
        exported: list[tuple[Transport, Handle]] = []
        self._export_all(plan, buffers, frames, entries, exported)
        try:
            head = b"".join([plan.prefix, data_header(outgoing.data_bytes), *data, _PLAIN.encode(entries), body])
            if len(head) > limits.max_header_bytes:
                raise _too_big(plan, len(head), limits)
        except BaseException:
            _release(exported)
            raise
        frames[0] = head
        return frames

    def _export_all(
        self,
        plan: TypePlan,
        buffers: list[BufferPlan],
        frames: list[Buffer],
        entries: list[list[Any]],
        exported: list[tuple[Transport, Handle]],
    ) -> None:
        """Hand every buffer to its transport, filling ``frames``, the header's buffer ``entries`` and
        ``exported``; on any failure, release what was exported and raise."""
        limits = self.options.limits
        type_id = plan.type_id
        if len(buffers) > limits.max_buffers:
            raise EncodeError(
                f"{len(buffers)} buffers is over the limit of {limits.max_buffers}",
                type_id=type_id,
                version=plan.version,
            )
        total = 0
        for buffer in buffers:
            total += buffer.nbytes
        if total > limits.max_message_bytes:
            raise EncodeError(
                f"{total} bytes is over the limit of {limits.max_message_bytes}", type_id=type_id, version=plan.version
            )
        own, below = self.transport, self.options.inline_threshold
        begun = self._nothing_to_begin  # (a transport that numbers no messages has nothing to begin)
        try:
            for buffer in buffers:
                nbytes = buffer.nbytes
                transport = _INLINE if nbytes == 0 or nbytes < below else own
                if transport is own and not begun:  # once, before the first export to it
                    own.begin_message()
                    begun = True
                view = buffer.view
                if view is not None and not (self._takes_storage and transport is own):  # a host buffer: its bytes
                    handle = transport.export(view, frames)
                else:  # device memory, or a storage offered to a transport that takes one
                    handle = self._export(transport, buffer, frames)
                exported.append((transport, handle))
                entries.append([nbytes, handle])
        except BaseException as exc:
            _release(exported)
            if isinstance(exc, TransportError | KeyboardInterrupt):
                raise
            if isinstance(exc, OSError):
                raise TransportError(exc.errno, f"{type_id}: export failed: {exc}") from exc
            raise

    def _export(self, transport: Transport, buffer: BufferPlan, frames: list[Buffer]) -> Handle:
        """Hand one buffer that is not a plain host view to ``transport`` (``_export_all`` hands
        those to ``export`` itself): a device buffer to its ``export_device`` if it takes it, else
        staged to the host first; a torch storage to ``export_storage`` if it takes it (offered
        only where the transport's class defines one); else a byte view to ``export``."""
        view, start = buffer.view, buffer.start
        storage = buffer.storage
        if view is None:
            assert storage is not None
            handle = transport.export_device(storage, start, buffer.nbytes, frames)
            if handle is not None:
                return handle
            try:
                storage = stage_to_host(storage[start : start + buffer.nbytes], self.transport.device_runtime())
            except RuntimeError as exc:  # CudaCallError included
                raise TransportError(
                    errno.EIO, f"copying a {buffer.nbytes}-byte device buffer to the host: {exc}"
                ) from None
            view, start = memoryview(storage.numpy()), 0  # type: ignore[arg-type]
        if storage is not None:
            handle = transport.export_storage(storage, start, buffer.nbytes, frames)
            if handle is not None:
                return handle
        return transport.export(view, frames)

    def __repr__(self) -> str:
        return f"Encoder(transport={type(self.transport).__name__}, options={self.options})"


def _one_encode_frames(plan: TypePlan, message: Any, max_header: int) -> list[Buffer] | None:
    """The frames of ``message`` written by a plain msgpack encode and checked by ``plan.check.plain``
    (its type's trees and optional structs hold nothing the hooked encode handles); None if that
    fails, or frame 0 is over ``max_header`` bytes: the full path names what is wrong. (The type
    with no tensor at all does the same inline in ``Encoder.encode``: a call less.)"""
    try:
        body = _PLAIN.encode(message)
        plan.check.plain(body)
    except Exception:
        return None
    head = plan.bare + body
    return [head] if len(head) <= max_header else None


def _too_big(plan: TypePlan, size: int, limits: Limits) -> EncodeError:
    """The error for a frame 0 of ``size`` bytes, over ``limits.max_header_bytes`` (no decoder with
    the same limits would read it)."""
    return EncodeError(
        f"frame 0 of {size} bytes is over the limit of {limits.max_header_bytes} (limit max_header_bytes)",
        type_id=plan.type_id,
        version=plan.version,
    )


def _failure(plan: TypePlan, cls: type, exc: BaseException, body: bytes) -> EncodeError:
    """The ``EncodeError`` for ``exc``, raised while writing or checking ``body`` (b"" if not written
    yet) of a message of ``cls``: its words and path, with the message's type."""
    path = None
    if isinstance(exc, EncodeError | DecodeError):
        message, path = exc.message, exc.path
    elif isinstance(exc, msgspec.ValidationError):  # the schema check's own words, and its path
        problem, path, on_key = msgspec_error(str(exc))
        message = f"invalid map key: {problem}" if on_key else problem
        if path is not None and ("[...]" in path or on_key):
            path = _entry_path(cls, body, path, problem, on_key) or path
        rule = exc.__cause__
        if not on_key and isinstance(rule, ValidationError) and rule.path and rule.path.startswith("$"):
            path = (path or "$") + rule.path[1:]  # a struct's rule: msgspec names the struct, the rule its field
    else:
        message = str(exc)
    return EncodeError(message, path=path, type_id=plan.type_id, version=plan.version)


def _raised(exc: Exception) -> EncodeError:
    """The error for an exception the caller's own code raised while the message was read."""
    return EncodeError(f"reading the message raised {type(exc).__name__}: {exc}")


def _entry_path(cls: type, body: bytes, path: str, problem: str, on_key: bool) -> str | None:
    """``path`` with the keys of the map entries msgspec names as ``[...]``, found in ``body``."""
    try:
        return entry_path(cls, msgspec.msgpack.decode(body), path, problem, on_key, stand_in)
    except Exception:  # the locator only improves a message; it never replaces the error
        return None


def _check_levels(body: bytes, message: Any, max_depth: int) -> None:
    """``EncodeError`` if ``body`` nests more than ``max_depth`` levels below the message, as a
    decoder with the same limit counts them (a message's trees are bounded as they are rewritten:
    this is for its typed part, where its type lets it nest that deep)."""
    if len(body) - len(body.translate(None, OPENERS)) <= max_depth + 1:
        return  # fewer bytes that could open a level than the body's own and ``max_depth`` more
    try:
        walk(body, max_depth + 1, above=1)
    except DecodeError:
        raise EncodeError(f"nesting deeper than the limit of {max_depth}", path=too_deep(message, max_depth)) from None


def _release(exported: list[tuple[Transport, Handle]]) -> None:
    """Undo the exports of a message that will not be sent, newest first, each transport's in one
    ``release_all`` (whose waits for pages a peer keeps locked last no longer together than one)."""
    grouped: dict[Transport, list[Handle]] = {}
    for transport, handle in reversed(exported):
        grouped.setdefault(transport, []).append(handle)
    for transport, handles in grouped.items():
        try:
            transport.release_all(handles)
        except Exception:
            pass


_PLANS: dict[type, TypePlan] = {}
_ONE_ENCODE: dict[type, tuple[Callable[[bytes], Any], int, bytes]] = {}
"""Of the planned types whose message is one encode and one check (``TypePlan.plain``): that
check, ``TypePlan.levels`` and ``TypePlan.bare``, for the compiled one-encode path."""
_NATIVE_ONE_ENCODE: Final[Callable[[Any, Any], list[Buffer] | None]] = (
    SPEEDUPS.one_encode if SPEEDUPS is not None else lambda state, message: None
)


def _plan(cls: type) -> TypePlan:
    info = getattr(cls, "__tw_type__", None)
    if info is None:
        raise TypeError(f"{cls.__name__} is not a tensorwire message type (no __tw_type__)")
    if not issubclass(cls, msgspec.Struct):  # a class given another's __tw_type__ (its plan asserted this)
        raise TypeError(f"{cls.__name__} is not a tensorwire message type (not a msgspec Struct)")
    plan = type_plan(cls)
    if len(_PLANS) < 4096:
        _PLANS[cls] = plan
        if plan.plain is not None:
            _ONE_ENCODE[cls] = (plan.plain, plan.levels, plan.bare)
    return plan
