"""Per-decode state: the buffers of one message, imported once, and the tensors built on them.

The body's extensions arrive through ``Reading.ext``, the hook of a pooled frame 0 decoder, as
msgspec reads the body: it counts them and builds the common small tensor itself; any other goes
to the call's ``Incoming`` (made on first need). The first one that lives in a buffer makes the
decode read frame 0's buffer table, verify every handle and the limits, and import the buffers
(each transport proves a handle's capability before any side effect). Each descriptor is
checked against its buffer and the limits before anything is built on it. ``fail`` lets go of
everything a failed decode holds and gives back the buffers it did not import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np
import torch

from tensorwire._body import tree_tuple
from tensorwire._decode_errors import table_error
from tensorwire._descriptors import BUILD, as_base, build, build_inline, verify_descriptor
from tensorwire._wire import (
    DIMS,
    EXT_INLINE,
    EXT_TENSOR,
    EXT_TUPLE,
    HEADER_LEVELS,
    INLINE,
    SHARED,
    data_span,
    unpack_descriptor,
)
from tensorwire.dtypes import DTYPE_NAMES
from tensorwire.errors import DecodeError
from tensorwire.inspection import tensor_paths
from tensorwire.transports.base import Buffer, Handle

__all__ = ["Incoming", "Reading"]


class Incoming:
    """The state of one ``Decoder.decode`` call (``decoder`` is that ``Decoder``)."""

    __slots__ = (
        "_bases",
        "_built",
        "_paths",
        "_placed",
        "_sizes",
        "buffers",
        "decoder",
        "frames",
        "handles",
        "head",
    )

    def __init__(self, decoder: Any, frames: Sequence[Buffer], head: Any) -> None:
        self.decoder = decoder
        self.frames = frames
        self.head = head
        self.handles: list[Handle] | None = None  # None until the buffer table is read
        self.buffers: list[Any] = []  # imported so far, in handle order
        self._sizes: list[int] = []  # of the buffers, once imported
        self._built: dict[bytes, Any] = {}
        self._bases: dict[int, torch.Tensor] = {}
        self._paths: list[str | None] | None = None
        self._placed: dict[tuple[int, torch.device], torch.Tensor] = {}

    def ext(self, code: int, data: memoryview, index: int, inline: memoryview | None = None) -> Any:
        """The tensor or array of extension ``index`` (in body order) of the body (``inline``:
        frame 0's data, for an ``ext(3)``)."""
        if code != EXT_INLINE and code != EXT_TENSOR:
            raise DecodeError(f"unknown msgpack extension type {code}")
        limits = self.decoder.options.limits
        try:
            desc = unpack_descriptor(code, data)
        except DecodeError as exc:
            raise DecodeError(exc.message, path=self.where(index)) from None
        placement = self.decoder.placement
        if code == EXT_TENSOR:
            # the same descriptor again is the same tensor (unless paths may place them apart)
            key = bytes(data) if placement is None or list(placement.by_path) == ["*"] else bytes(data) + b"%d" % index
            known = self._built.get(key)
            if known is not None:
                return known
            if self.handles is None:
                self.read_buffers()
        if code == EXT_INLINE and inline is None:
            inline = frame_data(self.head)
        problem = verify_descriptor(desc, self._sizes, limits, 0 if inline is None else len(inline))
        if problem is not None:
            raise DecodeError(problem[1], path=self.where(index) + problem[0])
        device = None if placement is None or desc.kind != "tensor" else self._target(placement, index, desc.buffer)
        try:
            if inline is not None:
                if device is not None:
                    own = bytearray(inline[desc.offset : desc.offset + desc.nbytes])
                    base = placement.upload_one(-1, own, device)
                    return build(desc._replace(offset=0), None, base)
                return build_inline(desc, inline)
            value = self._build_placed(desc, data[3] & SHARED, device)
        except (TypeError, ValueError, OverflowError, RuntimeError, BufferError) as exc:  # not expected after
            # ``verify_descriptor``; a guard so that no torch or numpy error ever leaves a decode
            if isinstance(exc, DecodeError):
                raise
            raise DecodeError(f"tensor {index} of shape {list(desc.shape)} cannot be built: {exc}") from None
        self._built[key] = value
        return value

    def _build_placed(self, desc: Any, shared: int, device: torch.device | None) -> Any:
        buffer = self.buffers[desc.buffer]
        if device is not None:
            base = self._placed.get((desc.buffer, device))
            if base is None:
                base = self._placed[(desc.buffer, device)] = self.decoder.placement.upload_one(
                    desc.buffer, buffer, device
                )
            return build(desc, None, base)
        if isinstance(buffer, torch.Tensor) and not buffer.is_cpu and desc.kind == "ndarray":
            buffer = self.buffers[desc.buffer] = buffer.cpu().numpy()  # delivered on a device: to the host once
        if not isinstance(buffer, torch.Tensor) and memoryview(buffer).readonly:
            if self.decoder.options.copy_readonly or desc.kind == "tensor":  # torch has no read-only tensors
                buffer = self.buffers[desc.buffer] = bytearray(buffer)
                self._bases.pop(desc.buffer, None)
        if type(buffer) is memoryview:  # (a frame not copied above): numpy takes a view's object as an
            # array's base and lets go of the view, so an array (or a tensor on one) would not keep the
            # memory exported: a ``pipe.Receiver`` would read the next message into it, a bytearray could
            # be resized or an mmap closed under it. An array over the view keeps the view, once per buffer.
            buffer = self.buffers[desc.buffer] = np.frombuffer(buffer, np.uint8)
        if desc.kind == "ndarray":
            return build(desc, buffer, None)
        if shared or isinstance(buffer, torch.Tensor):
            base = self._bases.get(desc.buffer)
            if base is None:
                base = self._bases[desc.buffer] = as_base(buffer)
            return build(desc, buffer, base)
        return build(desc, buffer, None)

    def _target(self, placement: Any, index: int, buffer: int) -> torch.device | None:
        """Where tensor ``index`` of the body goes: a device, or None to leave it where it arrived."""
        by_path = placement.by_path
        default = by_path.get("*")
        if len(by_path) == 1 and default is not None:
            target = default
        else:
            paths = self._tensor_paths()
            path = paths[index] if index < len(paths) else None
            target = by_path.get(path, default) if isinstance(path, str) else default
        if target is None:
            return None
        delivered = self.buffers[buffer] if buffer >= 0 else None
        if target.type != "cpu" or (isinstance(delivered, torch.Tensor) and not delivered.is_cpu):
            return target  # type: ignore[no-any-return]
        return None

    def _tensor_paths(self) -> list[str | None]:
        """The body path of each tensor of the message, in the order the decode meets them (found
        once, within the decoder's depth limit, as the decode itself)."""
        if self._paths is None:
            limit = self.decoder.options.limits.max_depth + HEADER_LEVELS
            self._paths = tensor_paths(self.head, self.decoder.registry, limit)
        return self._paths

    def where(self, index: int) -> str:
        """The body path of tensor ``index`` (e.g. ``$.media.video.tensor``), or its position."""
        try:
            path = self._tensor_paths()[index]
        except Exception:  # the locator only improves a message; it never replaces the error
            path = None
        return path if isinstance(path, str) else f"$.<tensor {index}>"

    def read_buffers(self) -> None:
        """Read the buffer table, verify every handle and the limits, then import every buffer."""
        decoder = self.decoder
        try:
            entries = decoder.table.decode(self.head).buffers
        except Exception as exc:  # msgspec's errors: the envelope was checked, the table was not
            raise table_error(self.head, exc, decoder._transport_names()) from None
        handles: list[Handle] = []
        sizes: list[int] = []
        for size, handle in entries:
            sizes.append(size)
            handles.append(handle)
        decoder.verify_handles(handles, self.frames)  # before this, nothing is released: the handles
        self.handles = handles  # may name what their sender did not create
        limits = decoder.options.limits
        total = sum(sizes)
        if total > limits.max_message_bytes:
            raise DecodeError(f"{total} buffer bytes is over the limit of {limits.max_message_bytes}", path="$.buffers")
        borrow = decoder.options.borrow
        frames, buffers = self.frames, self.buffers
        if len(entries) > 1:  # a transport whose imports may wait gives all of them one budget
            with ExitStack() as stack:
                for transport in {id(t): t for t in map(decoder.reader, handles)}.values():
                    stack.enter_context(transport.importing())
                for size, handle in entries:
                    buffers.append(decoder.reader(handle).import_(handle, frames, size, borrow=borrow))
        else:
            for size, handle in entries:
                buffers.append(decoder.reader(handle).import_(handle, frames, size, borrow=borrow))
        self._sizes = sizes  # each transport checked its buffer's size

    def finish(self, has_buffers: bool) -> None:
        """After the body: a message whose buffers no tensor named still has its handles checked
        (and its buffers given back)."""
        if self.handles is None and (has_buffers or len(self.frames) > 1):
            self.read_buffers()
            self.buffers.clear()

    def _verified(self) -> list[Handle]:
        """The handles of a message that failed before its buffer table was read, if they are well-formed."""
        try:
            handles = [entry[1] for entry in self.decoder.table.decode(self.head).buffers]
            self.decoder.verify_handles(handles, self.frames)
        except Exception:  # not well-formed: nothing is released
            return []
        return handles

    def fail(self) -> None:
        """Let go of what this decode holds (a borrowed slot is freed as its last view dies) and give
        back the buffers it did not import, each only if its handle proves its capability."""
        unread = self.handles[len(self.buffers) :] if self.handles is not None else self._verified()
        self.buffers.clear()
        self._built.clear()
        self._bases.clear()
        self._placed.clear()
        self.decoder.release(unread)


class Reading:
    """A frame 0 decoder of one ``Decoder`` whose extension hook serves the current call: ``state``
    is the call's frames until a tensor needs more than the common small-tensor path, which makes
    it an ``Incoming``; None between calls. ``count``: the call's tensors so far;
    ``data``: frame 0's data, once a tensor needed it; ``taken``: the bytes of it the call's tensors
    read so far (at most all of it, once each: its copies are bounded by frame 0's size).

    Each ``Decoder`` pools these: a call takes one and clears its state before giving it back, so
    no hook holds a call's tensors after the call, and concurrent or nested calls never share one.
    """

    __slots__ = (
        "_decoder",
        "_max_bytes",
        "_max_rank",
        "_max_tensors",
        "_quick",
        "count",
        "data",
        "decode",
        "state",
        "taken",
    )

    def __init__(self, decoder: Any, make: Callable[[Callable[[int, memoryview], Any]], Any]) -> None:
        """``make(hook)``: the msgspec decoder of frame 0 with extension hook ``hook``."""
        limits = decoder.options.limits
        self._decoder = decoder
        self._max_tensors: int = limits.max_tensors
        self._max_rank = min(limits.max_rank, len(DIMS) - 1)
        self._max_bytes: int = limits.max_tensor_bytes
        self._quick = decoder.placement is None  # small tensors built here, on the host
        self.state: Sequence[Buffer] | Incoming | None = None
        self.count = 0
        self.taken = 0
        self.data: memoryview | None = None
        self.decode: Callable[[Any], Any] = make(self.ext).decode

    def ext(self, code: int, data: memoryview) -> Any:
        """The decode's extension hook: tree tuples, tensors and arrays.

        The common small tensor (non-empty, C-contiguous, a numpy-able dtype, inside frame 0) is
        checked and built here at once; anything else goes to the call's ``Incoming``, which names
        what is wrong.
        """
        if code == EXT_TUPLE:
            return tree_tuple(data, self.ext)
        index = self.count
        self.count = index + 1
        if index >= self._max_tensors:
            raise DecodeError(f"more than {self._max_tensors} tensors in one message (limit max_tensors)")
        inline = None
        if code == EXT_INLINE:
            inline = self.data
            if inline is None:
                inline = self.data = frame_data(self.head())
        if inline is not None and len(data) >= INLINE.size:
            kind, dtype, rank, flags, offset, nbytes = INLINE.unpack_from(data)
            taken = self.taken + nbytes
            self.taken = taken
            if taken > len(inline) and offset + nbytes <= len(inline):  # (a range outside the data: its own error)
                raise DecodeError(
                    f"the tensors inside frame 0 read {taken} bytes of its {len(inline)} bytes of data "
                    "(each byte may be read once)",
                    path=self.incoming().where(index) + ".nbytes",
                )
            known = _QUICK_TORCH.get(dtype)
            if (
                self._quick
                and not (kind or flags or known is None or rank > self._max_rank)
                and len(data) == INLINE.size + 8 * rank
            ):
                shape = DIMS[rank].unpack_from(data, INLINE.size)
                numel = math.prod(shape)
                if (
                    numel
                    and numel * known[2] == nbytes
                    and nbytes <= self._max_bytes
                    and offset + nbytes <= len(inline)
                ):
                    return torch.from_numpy(np.ndarray(shape, known[1], bytearray(inline[offset : offset + nbytes])))
        return self.incoming().ext(code, data, index, inline)

    def head(self) -> Any:
        """The current call's frame 0."""
        state = self.state
        assert state is not None
        return state.head if isinstance(state, Incoming) else state[0]

    def incoming(self) -> Incoming:
        """The current call's ``Incoming`` (made now if no tensor made it yet)."""
        state = self.state
        if not isinstance(state, Incoming):
            assert state is not None
            state = self.state = Incoming(self._decoder, state, state[0])
        return state


def frame_data(head: Any) -> memoryview:
    """The data item of frame 0 ``head`` (its msgspec decode has read that far: it is well-formed)."""
    view = memoryview(head).cast("B")
    span = data_span(view)
    if span is None:
        raise DecodeError("invalid header: frame 0 does not open as [tag, fingerprint, data, ...]")
    return view[span[0] : span[1]]


_QUICK_TORCH = {
    code: (torch_dtype, numpy_dtype, itemsize)
    for code, (torch_dtype, numpy_dtype, itemsize) in enumerate(BUILD[name] for name in DTYPE_NAMES)
    if numpy_dtype is not None
}
