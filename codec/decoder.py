"""``Decoder``: frames -> a typed message, verifying everything before anything is mapped.

Order of one ``decode`` call: bound the nesting depth of frame 0; decode the header; check magic,
wire version, type id and version; verify every handle (names of our pattern only) and every
tensor descriptor (dtype in the table, sizes, strides and offsets inside their buffer, limits);
import the buffers (each transport proves the handle's capability before any side effect); copy
the buffers of tensors placed on a device there (``device=``, see ``codec.placement``); decode the
body against the message class (its rules run as it is built). If any step after the handles
were verified fails, the decode lets go of what it imported and gives back the rest, each
transport acting only on handles that prove their capability: a forged handle changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from codec.body import decode_body
from codec.errors import CodecError, DecodeError
from codec.inspect import describe
from codec.options import DecodeOptions
from codec.placement import DeviceSpec, Placement
from codec.registry import Registry, UnknownTypeError
from codec.scan import check_depth
from codec.tensors import TensorBuilder, verify_descriptor
from codec.wire import MAGIC, WIRE_VERSION, header_type
from transports.base import Buffer, Handle, Transport
from transports.cuda_runtime import CudaRuntime
from transports.inline import InlineHandle, InlineTransport

__all__ = ["Decoder"]

_HEADER_LEVELS = 2  # the header map and its body entry sit above the message's own nesting


class Decoder:
    """Decodes messages of the types in ``registry``; immutable and safe to share between threads.

    ``device``: put decoded torch tensors on a device: ``"cuda:0"``, a mapping from body path to
    device, or a ``codec.placement.Placement`` (see that module); ``runtime``: its CUDA adapter.
    """

    __slots__ = ("_by_type", "_header", "_sealed", "options", "placement", "registry")

    def __init__(
        self,
        registry: Registry,
        transports: Iterable[Transport] = (),
        options: DecodeOptions | None = None,
        *,
        device: DeviceSpec | Placement | None = None,
        runtime: CudaRuntime | None = None,
    ) -> None:
        self.registry = registry
        self.placement = device if isinstance(device, Placement) or device is None else Placement(device, runtime)
        self.options = options if options is not None else DecodeOptions()
        known: dict[str, Transport] = {}  # handle tag -> the transport that reads it
        for transport in [InlineTransport(), *transports]:
            for handle_type in transport.handle_types:
                known[str(handle_type.__struct_config__.tag)] = transport
        handle_types = list({id(h): h for t in known.values() for h in t.handle_types}.values())
        self._by_type = {h: known[str(h.__struct_config__.tag)] for h in handle_types}  # handle class -> reader
        self._header = msgspec.msgpack.Decoder(header_type(handle_types))
        self._sealed = True

    def decode(self, frames: Sequence[Buffer]) -> Any:
        """The message carried by ``frames`` (as returned by ``Encoder.encode`` or ``codec.split``)."""
        limits = self.options.limits
        if not frames:
            raise DecodeError("no frames: a message has at least its header frame")
        head = memoryview(frames[0]).cast("B")
        if head.nbytes > limits.max_header_bytes:
            raise DecodeError(f"header frame of {head.nbytes} bytes is over the limit of {limits.max_header_bytes}")
        check_depth(head, limits.max_depth + _HEADER_LEVELS)
        try:
            header = self._header.decode(head)
        except msgspec.MsgspecError as exc:
            raise DecodeError(f"invalid header: {exc}") from None
        handles = [entry.handle for entry in header.buffers]
        self._verify_handles(handles, frames)
        buffers: list[Any] = []  # imported so far, in handle order
        builder = _NO_TENSORS
        try:
            cls = self._resolve(header)
            if handles or header.tensors:
                self._verify_tensors(header, head)
            if handles:
                self._import(header, frames, buffers)
            devices: dict[int, Any] | None = None
            placed: dict[tuple[int, Any], Any] | None = None
            if self.placement is not None:
                devices = self.placement.targets(header, head, buffers)
                if devices:
                    wanted = {(header.tensors[i].buffer, device) for i, device in devices.items()}
                    placed = self.placement.upload(buffers, wanted)
            if header.tensors:
                builder = TensorBuilder(header.tensors, buffers, devices, placed)
            try:
                return decode_body(cls, header.body, builder.build)
            except (msgspec.MsgspecError, CodecError) as exc:
                raise DecodeError(f"{header.type} v{header.version}: {exc}") from None
        except BaseException:
            # Let go of what this decode holds (a borrowed slot is freed as its last view dies) and
            # give back the buffers it did not import, each only if its handle proves its capability.
            unread = handles[len(buffers) :]
            buffers.clear()
            if builder is not _NO_TENSORS:
                builder.clear()
            self._release(unread)
            raise

    def _resolve(self, header: Any) -> Any:
        if header.magic != MAGIC:
            raise DecodeError(f"not a tensorwire message: magic {header.magic!r} - at `$.magic`")
        if header.wire != WIRE_VERSION:
            raise DecodeError(
                f"wire format version {header.wire} is not supported (this reader: {WIRE_VERSION}) - at `$.wire`"
            )
        try:
            cls = self.registry.type(header.type, header.version)
        except UnknownTypeError as exc:
            raise DecodeError(f"{exc} - at `$.type`") from None
        if self.options.strict_fingerprint and cls.__tw_type__.fingerprint != header.fingerprint:
            raise DecodeError(
                f"{header.type} v{header.version}: schema fingerprint {header.fingerprint[:16]}... differs from "
                f"this reader's {cls.__tw_type__.fingerprint[:16]}... - at `$.fingerprint`"
            )
        return cls

    def _verify_handles(self, handles: list[Handle], frames: Sequence[Buffer]) -> None:
        """Every handle well-formed for its transport, before anything is opened or released."""
        limits = self.options.limits
        if len(handles) > limits.max_buffers:
            raise DecodeError(f"{len(handles)} buffers is over the limit of {limits.max_buffers} - at `$.buffers`")
        by_transport: dict[Transport, list[Handle]] = {}
        inline = 0
        for handle in handles:
            kind = type(handle)
            inline += kind is InlineHandle
            by_transport.setdefault(self._by_type[kind], []).append(handle)
        for transport, group in by_transport.items():
            transport.verify(group, frames)
        if inline != len(frames) - 1:
            raise DecodeError(f"the message has {len(frames)} frames but its header names {inline} inline buffers")

    def _verify_tensors(self, header: Any, head: memoryview) -> None:
        """Every descriptor inside its buffer and the limits."""
        limits = self.options.limits
        if len(header.tensors) > limits.max_tensors:
            raise DecodeError(
                f"{len(header.tensors)} tensors is over the limit of {limits.max_tensors} - at `$.tensors`"
            )
        sizes = [entry.nbytes for entry in header.buffers]
        if sum(sizes) > limits.max_message_bytes:
            raise DecodeError(
                f"{sum(sizes)} buffer bytes is over the limit of {limits.max_message_bytes} - at `$.buffers`"
            )
        for i, desc in enumerate(header.tensors):
            problem = verify_descriptor(desc, sizes, limits)
            if problem is not None:
                suffix, reason = problem.split(": ", 1)
                where = _locate(head, i, limits.max_depth + _HEADER_LEVELS) + suffix
                raise DecodeError(f"{header.type} v{header.version}: {reason} - at `{where}`")

    def _import(self, header: Any, frames: Sequence[Buffer], buffers: list[Any]) -> None:
        """Import every buffer into ``buffers``. A read-only one is copied when ``copy_readonly`` says
        so, and always when a torch tensor lives in it (torch has no read-only tensors)."""
        options = self.options
        by_type = self._by_type
        torch_buffers: set[int] | None = None
        for index, entry in enumerate(header.buffers):
            transport = by_type[type(entry.handle)]
            data = transport.import_(entry.handle, frames, entry.nbytes, borrow=options.borrow)
            if memoryview(data).readonly:
                if torch_buffers is None:
                    torch_buffers = {desc.buffer for desc in header.tensors if desc.kind == "tensor"}
                if options.copy_readonly or index in torch_buffers:
                    data = bytearray(data)
            buffers.append(data)

    def _release(self, handles: list[Handle]) -> None:
        """Give back buffers this decode will not read (each transport acts only on proven handles)."""
        for handle in handles:
            try:
                self._by_type[type(handle)].release(handle)
            except Exception:
                pass

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, "_sealed"):
            raise AttributeError(f"{type(self).__name__} is immutable; build a new one")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        tags = sorted(str(h.__struct_config__.tag) for h in self._by_type)
        return f"Decoder({self.registry!r}, transports={tags}, options={self.options})"


_NO_TENSORS = TensorBuilder([], [])  # for a message without tensors: any reference is an error, nothing is kept


def _locate(head: memoryview, index: int, max_depth: int) -> str:
    """The body path of tensor ``index`` (e.g. ``$.media.video.tensor``), or its header path."""
    try:
        path = describe(head, max_depth)["tensors"][index]["path"]
    except Exception:  # the locator only improves a message; it never replaces the error
        path = None
    return path if isinstance(path, str) else f"$.tensors[{index}]"
