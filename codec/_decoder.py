"""``Decoder``: frames -> a typed message, verifying everything before anything is mapped.

One ``decode`` call: bound the size of frame 0 and its nesting (msgspec recurses in C, also where
it skips an unknown field); then one typed msgspec decode of frame 0 as a tagged union of every registered
type (the tag names the wire version, type id and version; msgspec checks types, enum members,
ranges and lengths in C, and each struct's rules run as it is built). Tensors are built as the
body is read (``tensorwire._incoming``): the first one in a buffer makes the decode verify every
handle (names of our pattern only) and import the buffers, each transport proving the handle's
capability before any side effect; each descriptor is checked against its buffer and the limits
first. Tensors placed on a device (``device=``, see ``tensorwire.placement``) are copied there. If
anything fails, the decode lets go of what it imported and gives back the rest, each transport
acting only on handles that prove their capability: a forged handle changes nothing. The error it
raises holds none of it (the failed frames' locals are cleared; their lines stay in the traceback).

A message of a type that holds no tensor, tree or untyped value, as encoders write it (frame 0 up
to its body exactly that type's own: no data, no buffers), is read more shortly: its body's level
openers counted, then the body decoded alone as its class. So is one of a type that holds tensors
only in its trees or optional structs (an ``rpc.Request``), its tree tuples read as tuples; any
other extension there (an empty tensor's, which has no data) leaves it to the full decode. A
closed type (every struct in it rejects unknown fields, no union of structs, not recursive)
bounds the levels msgspec reads whatever the bytes: its body is not counted when that bound is
within the limit. So does a type whose only open struct is itself, read as its closed twin
(``tensorwire._twin``): an encoder of the same fingerprint writes no field its reader does not
know. A body with more level openers than
the count lets through (a long list of structs) is decoded by its type's closed mirror first,
where that bounds it, rather than walked. Anything else, and any failure there (an unknown
field), takes the full decode, which gives the same message or names what is wrong. That shorter
path is also compiled (``tensorwire._speedups``, where it is built: ``tensorwire._native``); compiled,
it reads a frame 0 of any size that is any contiguous buffer through a view of it (the Python code
copies a small one that is not ``bytes`` and walks a large one).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Final

import msgspec

from tensorwire._body import KEEP
from tensorwire._decode_errors import clear_locals, decode_error, typed_error
from tensorwire._frame_types import frame_type, table_decoder
from tensorwire._incoming import Reading
from tensorwire._native import SPEEDUPS
from tensorwire._plain import body_at, plain_bodies, unguarded
from tensorwire._scan import OPENERS, OTHERS, nesting_error, too_deep_for_the_stack, walk
from tensorwire._sealed import Sealed
from tensorwire._twin import BECOME
from tensorwire._wire import HEADER_LEVELS, data_span
from tensorwire.errors import DecodeError
from tensorwire.options import DecodeOptions
from tensorwire.placement import DeviceSpec, Placement
from tensorwire.registry import Registry
from tensorwire.transports.base import Buffer, Handle, Transport
from tensorwire.transports.cuda_runtime import CudaRuntime
from tensorwire.transports.inline import InlineHandle, InlineTransport

__all__ = ["Decoder"]


class Decoder(Sealed):
    """Decodes messages of the types in ``registry``; immutable and safe to share between threads.

    ``device``: put decoded torch tensors on a device: ``"cuda:0"``, a mapping from body path to
    device, or a ``tensorwire.placement.Placement`` (see that module); ``runtime``: its CUDA adapter.
    """

    __slots__ = (
        "_by_type",
        "_counted",
        "_depth",
        "_frame",
        "_free",
        "_max_header",
        "_native",
        "_plain",
        "_plain_budget",
        "_sealed",
        "options",
        "placement",
        "registry",
        "table",
    )

    def __init__(
        self,
        registry: Registry,
        transports: Iterable[Transport] = (),
        options: DecodeOptions | None = None,
        *,
        device: DeviceSpec | Placement | None = None,
        runtime: CudaRuntime | None = None,
    ) -> None:
        if not isinstance(registry, Registry):
            raise TypeError(f"Decoder registry must be a Registry, got {registry!r}")
        if not len(registry):
            raise ValueError("Decoder registry holds no message type: it would refuse every message")
        if options is not None and not isinstance(options, DecodeOptions):
            raise TypeError(f"Decoder options must be a DecodeOptions, got {options!r}")
        try:
            if isinstance(transports, Transport):  # one where an iterable of them is due
                raise TypeError
            transports = list(transports)
        except TypeError:
            raise TypeError(f"Decoder transports must be an iterable of transports, got {transports!r}") from None
        for transport in transports:
            if not isinstance(transport, Transport):
                raise TypeError(f"Decoder transports must be tensorwire Transports, got {transport!r}")
        self.registry: Final[Registry] = registry
        placement = device if isinstance(device, Placement) or device is None else Placement(device, runtime)
        self.placement: Final[Placement | None] = placement
        self.options: Final[DecodeOptions] = options if options is not None else DecodeOptions()
        known: dict[str, Transport] = {}  # handle tag -> the transport that reads it
        for transport in [InlineTransport(), *transports]:
            for handle_type in transport.handle_types:
                known[str(handle_type.__struct_config__.tag)] = transport
        handle_types = tuple({id(h): h for t in known.values() for h in t.handle_types}.values())
        self._by_type = {h: known[str(h.__struct_config__.tag)] for h in handle_types}  # handle class -> reader
        self._max_header = self.options.limits.max_header_bytes
        self._counted = min(_COUNTED, self._max_header)  # bytes of frame 0 counted at once, with no other check
        self._frame = frame_type(registry, self.options.strict_fingerprint)
        self._free: list[Reading] = []  # idle frame 0 decoders, each used by one call at a time
        self.table: Final = table_decoder(handle_types)
        self._depth = self.options.limits.max_depth + HEADER_LEVELS
        bodies, openers = plain_bodies(registry)
        self._plain = {  # frame 0 up to the body -> the body's typed decode, whether it is read within
            # the limit uncounted, the class a closed twin's instance is made one of, and the guard
            # decode where the count finds too many openers (see ``PlainBody``) if within the limit,
            # else one that refuses every body (``unguarded``: the full decode reads it)
            bare: (
                body.read,
                body.depth is not None and 1 + body.depth <= self._depth,
                body.become,
                body.guard if body.guard is not None and 1 + body.guard_depth <= self._depth else unguarded,
            )
            for bare, body in bodies.items()
        }
        self._plain_budget = self._depth - openers  # the level openers such a body may hold
        # that path compiled for one frame, any contiguous buffer (``tensorwire._native``): its state, or None
        # (and a list in which it remembers the table entry it found last)
        self._native = (
            None
            if SPEEDUPS is None
            else (self._plain, self._max_header, self._plain_budget, BECOME, [None, None, None])
        )
        self._sealed = True

    def decode(self, frames: Sequence[Buffer]) -> Any:
        """The message carried by ``frames`` (as returned by ``Encoder.encode`` or ``tw.split``)."""
        native = self._native
        if native is not None:  # the shorter path below, compiled: None where it is not taken
            message = _NATIVE_PLAIN_DECODE(native, frames)
            if message is not None:
                return message
        try:
            if not frames:
                raise DecodeError("no frames: a message has at least its header frame")
            try:
                head = frames[0]
            except (TypeError, KeyError):
                raise DecodeError(
                    "frames must be a sequence of buffers (as Encoder.encode returns them), "
                    f"got {type(frames).__name__}"
                ) from None
            flat = head if type(head) is bytes and len(head) <= _SMALL else self._flat(head)  # bytes to count in
            data = None
            if flat is None:  # large: walked first, counted only if it holds many values
                if type(head) is bytes and len(frames) == 1:  # unless its type bounds it (see below)
                    message = self._bounded(head)
                    if message is not _UNREAD:
                        return message
                data = self._check_depth(head, False)
            else:
                size = len(flat)
                if size > self._max_header:
                    raise DecodeError(f"header frame of {size} bytes is over the limit of {self._max_header}")
                first = flat[1] if size > 72 else 0  # where the data's bin header is if the tag and the
                at = first - 0x5C if 0xA0 <= first <= 0xBF else flat[2] + 69 if first == 0xD9 else 0  # fingerprint are
                # as encoders write them, else the count bounds it (``body_at``, inline: a call costs more)
                if size <= self._counted or (flat[at] == 0xC4 and flat[at + 1] < 64):  # counted whole: small, or
                    # little data (or a frame that fools the guess above: counting all of it bounds it as well)
                    if at and at + 3 < size and flat[at + 1] == 0 and len(frames) == 1:
                        # No data, no buffers: if frame 0 up to here (its empty data and buffer table
                        # included) is that of a type that holds no tensor, tree or untyped value (or holds
                        # tensors only in its trees or optional structs: ``tensorwire._plain``), its body
                        # is decoded alone, its level openers counted first (the quicker way for its size)
                        # unless the type (or its closed twin) bounds its depth; too many, its closed
                        # mirror decodes it first where that bounds it (``PlainBody``), else it is not
                        # read here. A failure takes the full decode below, which names what is wrong (a
                        # named validator runs again there).
                        found = self._plain.get(flat[: at + 3])
                        if found is not None:
                            read, bounded, cls, guard = found
                            body = flat[at + 3 :]
                            try:
                                if not bounded:
                                    n = len(body)
                                    if (
                                        n - len(body.translate(None, OPENERS))
                                        if n <= _COUNTED
                                        else len(body.translate(None, OTHERS))
                                    ) > self._plain_budget:
                                        guard(body)
                                message = read(body)
                                if cls is not None:  # decoded as the class's closed twin: now its own
                                    BECOME(message, cls)
                                return message
                            except Exception:
                                pass
                    if (
                        size - len(flat.translate(None, OPENERS))
                        if size <= _COUNTED
                        else len(flat.translate(None, OTHERS))
                    ) > self._depth:
                        data = self._check_depth(head, True)
                else:
                    span = data_span(flat)
                    if span is None:
                        data = self._check_depth(head, False)
                    else:
                        start, end = span
                        rest = flat[end:]  # its openers counted only if it has enough bytes to nest too deep
                        n = len(rest)
                        if n >= self._depth and 1 + n - len(rest.translate(None, OPENERS)) > self._depth:
                            data = self._check_depth(head, False)
                        elif start < end:
                            data = memoryview(head).cast("B")[start:end]
            free = self._free
            try:
                reading = free.pop()
            except IndexError:
                reading = Reading(self, partial(_frame_decoder, self._frame))
            reading.state = frames  # made into an Incoming by a tensor that needs one
            reading.data = data
            try:
                frame = reading.decode(head)
                if len(frames) != 1 or len(frame.buffers) != 1:  # 1 byte: the empty table
                    reading.incoming().finish(len(frame.buffers) != 1)
            except BaseException as exc:
                reading.incoming().fail()
                if isinstance(exc, msgspec.MsgspecError):
                    raise decode_error(head, exc, self.registry, self.options.strict_fingerprint) from None
                if isinstance(exc, DecodeError):
                    raise typed_error(head, exc) from None
                if isinstance(exc, RecursionError):  # a max_depth past what the stack holds
                    raise typed_error(head, too_deep_for_the_stack(self.options.limits.max_depth)) from None
                raise  # a transport's own error (with its errno), or not ours
            finally:
                reading.state = reading.data = None  # nothing of this call's frames stays referenced
                if reading.count:
                    reading.count = reading.taken = 0
                if len(free) < KEEP:
                    free.append(reading)
            return frame.body
        except BaseException as failure:
            # The error keeps its frames while the caller keeps the error, and with them their locals:
            # those below this one held the imported buffers (a sender's slot stayed claimed), this
            # one the message's frames (a pipe.Receiver read the next message into a fresh buffer).
            frames = head = flat = data = body = None  # type: ignore[assignment]
            clear_locals(failure, sys._getframe())
            raise

    def _bounded(self, head: bytes) -> Any:
        """The message of a large frame 0 as the shorter path reads it where its type, its closed twin
        or its closed mirror bound its depth: no data, no buffers, frame 0 up to the body that type's
        own, the body decoded alone uncounted (by the mirror first where neither of the others bounds
        it); else, or if a decode fails, ``_UNREAD`` (the full decode names what is wrong)."""
        at = body_at(head)
        found = self._plain.get(head[:at]) if at else None
        if found is not None:
            read, bounded, cls, guard = found
            body = head[at:]
            try:
                if not bounded:  # its closed mirror reads it first, where one bounds it
                    guard(body)
                message = read(body)
                if cls is not None:
                    BECOME(message, cls)
                return message
            except Exception:
                pass
        return _UNREAD

    def _flat(self, head: Any) -> bytes | None:
        """Frame 0 as ``bytes`` to count its level openers in: a copy of a frame of at most
        ``_SMALL`` bytes that is not ``bytes``; None for a larger one (walked instead). Checks its
        size against the limit first."""
        try:
            size = len(head) if type(head) is bytes else memoryview(head).nbytes
        except (TypeError, ValueError) as exc:  # not a buffer, or a released one
            if isinstance(head, int):  # the items of one buffer: given where its list of frames was due
                raise DecodeError(
                    "invalid header: frame 0 is an int, not a buffer (decode takes a sequence of frames, "
                    "as Encoder.encode returns them or tw.split(blob) gives them, not one buffer)"
                ) from None
            raise DecodeError(f"invalid header: {exc}") from None
        if size > self._max_header:
            raise DecodeError(f"header frame of {size} bytes is over the limit of {self._max_header}")
        if size > _SMALL:
            return None
        try:
            return bytes(memoryview(head).cast("B"))
        except (TypeError, ValueError) as exc:
            raise DecodeError(f"invalid header: {exc}") from None

    def _check_depth(self, head: Any, counted: bool) -> memoryview | None:
        """Bound the nesting of frame 0 before msgspec reads it: msgspec recurses in C, also where
        it skips a value (an unknown field, the buffer table it reads raw), so every frame is
        bounded, whatever its type (``counted``: all its level openers were counted, and were too
        many). Returns a view of frame 0's data if it holds any bytes, else None.

        A frame that opens as ``[tag, fingerprint, data,`` needs only what follows its data
        bounded (its buffer table and body): strings and bins cannot nest. The walk costs per
        value and skips tensor bytes, without copying a frame that is not ``bytes``; counting the
        bytes that could open a level costs per byte: a large frame is walked first, and counted
        only if it holds more than a few hundred values.
        """
        data: bytes | memoryview
        try:
            data = head if type(head) is bytes else memoryview(head).cast("B")
        except (TypeError, ValueError) as exc:
            raise DecodeError(f"invalid header: {exc}") from None
        span = data_span(data)
        if span is None:  # not as frame 0 opens: all of it is bounded
            start, depth, values, inline = 0, 0, 1, None
        else:
            start, depth, values = span[1], 1, 2
            inline = memoryview(data)[span[0] : span[1]] if span[0] < span[1] else None
        rest = len(data) - start
        if depth + rest <= self._depth:  # each level takes a byte at least: too few bytes to nest too deep
            return inline
        if rest > _SMALL and self._walk(data, start, depth, values, _BUDGET):
            return inline
        if span is not None or not counted:
            if depth + len(bytes(data[start:]).translate(None, OTHERS)) <= self._depth:
                return inline
        self._walk(data, start, depth, values, -1)
        return inline

    def _walk(self, data: bytes | memoryview, start: int, depth: int, values: int, budget: int) -> bool:
        """Walk ``values`` values from ``start``, ``depth`` levels down; False if one read ``budget``
        values without reaching its end. A frame nested too deep is refused naming its type and
        where (``nesting_error``)."""
        pos = start
        try:
            for _ in range(values):
                pos = walk(data, self._depth, depth, pos, budget, above=HEADER_LEVELS)
                if pos < 0:
                    return False
        except DecodeError as exc:
            raise nesting_error(data, exc, self.registry, self._depth) from None
        return True

    def reader(self, handle: Handle) -> Transport:
        """The transport that reads ``handle``."""
        return self._by_type[type(handle)]

    def verify_handles(self, handles: list[Handle], frames: Sequence[Buffer]) -> None:
        """Every handle well-formed for its transport, before anything is opened or released."""
        limits = self.options.limits
        if len(handles) > limits.max_buffers:
            raise DecodeError(f"{len(handles)} buffers is over the limit of {limits.max_buffers}", path="$.buffers")
        if len(handles) == 1:  # the common message: one buffer, one transport
            kind = type(handles[0])
            inline = int(kind is InlineHandle)
            self._by_type[kind].verify(handles, frames)
        else:
            inline = sum(type(handle) is InlineHandle for handle in handles)
            for transport, group in self._by_transport(handles).items():
                transport.verify(group, frames)
        if inline != len(frames) - 1:
            raise DecodeError(f"the message has {len(frames)} frames but its header names {inline} inline buffers")

    def release(self, handles: list[Handle]) -> None:
        """Give back buffers this decode will not read (each transport acts only on proven handles),
        each transport's in one call."""
        for transport, group in self._by_transport(handles).items():
            try:
                transport.release_all(group)
            except Exception:
                pass

    def _by_transport(self, handles: list[Handle]) -> dict[Transport, list[Handle]]:
        """``handles`` by the transport that reads each, in their order."""
        grouped: dict[Transport, list[Handle]] = {}
        for handle in handles:
            grouped.setdefault(self._by_type[type(handle)], []).append(handle)
        return grouped

    def _transport_names(self) -> list[str]:
        """The transports whose handles this decoder reads, by the tags the wire names them with, sorted."""
        return sorted(str(h.__struct_config__.tag) for h in self._by_type)

    def __repr__(self) -> str:
        return f"Decoder({self.registry!r}, transports={self._transport_names()}, options={self.options})"


_COUNTED = 512  # frame 0 up to this many bytes: all its level openers counted at once, first
_SMALL = 2048  # frame 0 up to this many bytes after its data: counting its level openers is cheaper than a walk
_BUDGET = 256  # values a large frame 0's first walk reads before its level openers are counted
_UNREAD = object()  # what ``Decoder._bounded`` gives for a frame the full decode reads
_NATIVE_PLAIN_DECODE: Final[Callable[[Any, Sequence[Buffer]], Any]] = (
    SPEEDUPS.plain_decode if SPEEDUPS is not None else lambda state, frames: None
)


def _frame_decoder(frame: Any, hook: Callable[[int, memoryview], Any]) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(frame, ext_hook=hook)
