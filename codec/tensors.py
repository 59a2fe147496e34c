"""Tensors and ndarrays <-> (descriptor, buffer): the only module that knows how tensors become bytes.

Encoding groups tensors by the memory they live in: every view of one storage travels in one
buffer covering just the bytes the views reach (aligned down to 16 bytes so every view keeps an
element-aligned offset), so aliasing survives and a small view of a huge storage sends only its
own bytes. Values are raw bits: bf16, fp8 and NaN payloads are never converted. Tensors on a device stay
there: their buffer carries the device storage and no host view, and the encoder's transport
(or a staging copy) moves the bytes.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

from codec.dtypes import DTYPES
from codec.errors import DecodeError, EncodeError
from codec.options import Limits
from codec.wire import TensorDesc

__all__ = ["BufferPlan", "TensorBuilder", "TensorPlan", "shape_problem", "verify_descriptor"]

_ALIGN = 16  # the largest itemsize in the table (complex128)
_TORCH_NAMES = {getattr(torch, d.torch_name): (d.name, d.itemsize) for d in DTYPES.values()}
_BUILD = {  # name -> (torch dtype, numpy dtype or None, itemsize), for building tensors quickly
    d.name: (getattr(torch, d.torch_name), np.dtype(d.numpy_name) if d.numpy_name else None, d.itemsize)
    for d in DTYPES.values()
}
_COMPLEX = frozenset(name for name in DTYPES if name.startswith("complex"))


class BufferPlan:
    """One buffer to send: a flat byte view of host memory (None for device memory: see ``storage``)."""

    __slots__ = ("_storage", "_untyped", "nbytes", "start", "view")

    def __init__(
        self, view: memoryview | None, nbytes: int, untyped: torch.UntypedStorage | None = None, start: int = 0
    ) -> None:
        self.view = view
        self.nbytes = nbytes
        self.start = start  # byte offset of the buffer in ``storage``
        self._untyped = untyped
        self._storage: torch.Tensor | None = None

    @property
    def storage(self) -> torch.Tensor | None:
        """A uint8 tensor over the whole torch storage the buffer is cut from (None for numpy memory);
        made on first use: most transports only read ``view``."""
        if self._storage is None and self._untyped is not None:
            whole = torch.empty(0, dtype=torch.uint8, device=self._untyped.device)
            self._storage = whole.set_(self._untyped) if self._untyped.nbytes() else whole
        return self._storage


class _HostBlock:
    """Exposes ``size`` bytes of a host torch storage from ``address`` to numpy, keeping the storage alive."""

    __slots__ = ("__array_interface__", "storage")

    def __init__(self, storage: torch.UntypedStorage, address: int, size: int) -> None:
        self.storage = storage
        self.__array_interface__ = {"data": (address, False), "shape": (size,), "typestr": "|u1", "version": 3}


class _Group:
    """One memory block tensors of a message live in, and the byte range they reach."""

    __slots__ = ("base", "hi", "host", "lo", "raw", "storage")

    def __init__(
        self, raw: np.ndarray | None, base: int, storage: torch.UntypedStorage | None = None, host: bool = True
    ) -> None:
        self.raw = raw  # uint8 view of a numpy block (or a private copy), keeping it alive; None for a torch storage
        self.base = base  # address of the block's first byte
        self.storage = storage  # the torch storage the block is, if it is one
        self.host = host  # False: device memory, which has no host view (the transport moves it)
        self.lo = 2**63
        self.hi = 0

    def view(self, lo: int, hi: int) -> memoryview | None:
        """Bytes [lo, hi) of the block (offsets from ``base``) as a writable view that keeps it alive;
        None on a device."""
        if self.raw is not None:
            return memoryview(self.raw[lo:hi])  # type: ignore[arg-type]
        if not self.host:
            return None
        if hi == lo:
            return memoryview(bytearray())
        assert self.storage is not None
        return memoryview(np.asarray(_HostBlock(self.storage, self.base + lo, hi - lo)))  # type: ignore[arg-type]


class _Entry:
    """One registered tensor: its descriptor fields and the group it lives in."""

    __slots__ = ("dtype", "group", "kind", "nbytes", "shape", "start", "strides")

    def __init__(
        self, kind: str, dtype: str, shape: list[int], strides: list[int], start: int, group: _Group, nbytes: int
    ) -> None:
        self.kind = kind
        self.dtype = dtype
        self.shape = shape
        self.strides = strides
        self.start = start  # absolute address of the element at index 0
        self.group = group
        self.nbytes = nbytes  # prod(shape) * itemsize


class TensorPlan:
    """Per-encode state: every tensor seen, grouped by the memory block it lives in."""

    __slots__ = ("_by_id", "_groups", "entries", "limits", "values")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.entries: list[_Entry] = []
        self.values: list[Any] = []  # the registered tensors and arrays, by descriptor index
        self._by_id: dict[int, int] = {}
        self._groups: dict[Any, _Group] = {}

    def add(self, value: Any) -> int:
        """Register a tensor or ndarray; return its descriptor index (the same object -> same index)."""
        known = self._by_id.get(id(value))
        if known is not None:
            return known
        limits = self.limits
        if len(self.entries) >= limits.max_tensors:
            raise EncodeError(f"more than {limits.max_tensors} tensors in one message (limit max_tensors)")
        if isinstance(value, torch.Tensor):
            entry, contiguous = self._torch(value)
        else:
            entry, contiguous = self._numpy(value)
        if len(entry.shape) > limits.max_rank:
            raise EncodeError(f"rank {len(entry.shape)} is over the limit of {limits.max_rank}")
        nbytes = entry.nbytes
        if nbytes > limits.max_tensor_bytes:
            raise EncodeError(f"tensor of {nbytes} bytes is over the limit of {limits.max_tensor_bytes}")
        problem = _layout_problem(entry, limits.max_tensor_bytes) if not nbytes else None
        if problem is not None:  # an empty tensor can still have dimensions or strides no decoder takes
            raise EncodeError(f"{problem[0][1:]}: {problem[1]}")
        index = len(self.entries)
        self.entries.append(entry)
        self._by_id[id(value)] = index
        self.values.append(value)  # also keeps ``id(value)`` from being reused during the call
        if nbytes:
            if contiguous:
                lo, hi = entry.start, entry.start + nbytes
            else:
                lo, hi = _extent(entry.start, entry.shape, entry.strides, DTYPES[entry.dtype].itemsize)
            group = entry.group
            if lo < group.lo:
                group.lo = lo
            if hi > group.hi:
                group.hi = hi
        return index

    def _torch(self, tensor: torch.Tensor) -> tuple[_Entry, bool]:
        if tensor.layout is not torch.strided:
            raise EncodeError(f"only strided tensors travel, got layout {tensor.layout}")
        known = _TORCH_NAMES.get(tensor.dtype)
        if known is None:
            raise EncodeError(f"dtype {tensor.dtype} is not in the wire dtype table")
        name, itemsize = known
        t = tensor.detach() if tensor.requires_grad else tensor
        if name in _COMPLEX and (t.is_conj() or t.is_neg()):
            t = t.resolve_conj().resolve_neg()
        storage = t.untyped_storage()
        size = storage.nbytes()
        address = storage.data_ptr()
        cpu = t.is_cpu
        key = (cpu or t.device, address, size) if size and address else id(t)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(None, address, storage, cpu)  # its host view is made by ``finish``
        start = address + int(t.storage_offset()) * itemsize
        entry = _Entry("tensor", name, list(t.shape), list(t.stride()), start, group, int(t.numel()) * itemsize)
        return entry, t.is_contiguous()

    def _numpy(self, array: np.ndarray) -> tuple[_Entry, bool]:
        if type(array) is not np.ndarray:
            raise EncodeError(
                f"{_type_name(type(array))} is a subclass of numpy.ndarray and cannot travel (its extra state "
                "would be lost); send numpy.asarray(value) for its data"
            )
        dtype = array.dtype
        name = dtype.name if dtype.isnative and not dtype.fields and not dtype.subdtype else None
        if name not in DTYPES or DTYPES[name].numpy_name is None:
            raise EncodeError(f"numpy dtype {dtype.str!r} ({dtype}) is not in the wire dtype table")
        itemsize = dtype.itemsize
        if any(s % itemsize for s in array.strides):
            array = np.ascontiguousarray(array)  # byte strides that are not whole elements: one copy
        group, array = self._numpy_group(array)
        start = array.__array_interface__["data"][0]
        strides = [s // itemsize for s in array.strides]
        entry = _Entry("ndarray", name, list(array.shape), strides, start, group, array.size * itemsize)
        return entry, bool(array.flags.c_contiguous)

    def _numpy_group(self, array: np.ndarray) -> tuple[_Group, np.ndarray]:
        """The memory block ``array`` lives in, and the array to describe (a private copy if that
        block cannot be addressed as one flat run of bytes)."""
        root: Any = array
        while isinstance(root, np.ndarray) and root.base is not None:
            root = root.base
        key = ("numpy", id(root))
        group = self._groups.get(key)
        if group is not None:
            return group, array
        try:
            if isinstance(root, np.ndarray):
                block = root
            elif hasattr(root, "__array_interface__"):
                block = np.asarray(root)  # e.g. a lease over a shared-memory mapping
            else:
                block = np.frombuffer(root, dtype=np.uint8)
            raw = block.reshape(-1, order="A").view(np.uint8) if block.size else np.empty(0, np.uint8)
            base = raw.ctypes.data
            lo, hi = _extent(
                array.__array_interface__["data"][0],
                list(array.shape),
                [s // array.itemsize for s in array.strides],
                array.itemsize,
            )
            if array.size and not (base <= lo and hi <= base + raw.nbytes):
                raise ValueError("the array is not inside its base's bytes")
        except (TypeError, ValueError, BufferError):
            array = np.ascontiguousarray(array).copy()  # a block we cannot address: send a private copy
            raw = array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)
            key, root, base = ("copy", id(array)), array, raw.ctypes.data
        group = self._groups[key] = _Group(raw, base)
        return group, array

    def finish(self) -> tuple[list[BufferPlan], list[TensorDesc]]:
        """The buffers to send (one per memory block, in first-use order) and every descriptor."""
        buffers: list[BufferPlan] = []
        index_of: dict[int, int] = {}
        descriptors = []
        for entry in self.entries:
            group = entry.group
            index = index_of.get(id(group))
            if index is None:
                index = index_of[id(group)] = len(buffers)
                if group.hi <= group.lo:
                    group.lo = group.hi = group.base
                group.lo -= (group.lo - group.base) % _ALIGN
                lo, hi = group.lo - group.base, group.hi - group.base
                view = group.view(lo, hi)
                if view is None and hi == lo:  # nothing to move off the device
                    buffers.append(BufferPlan(memoryview(b""), 0))
                else:
                    buffers.append(BufferPlan(view, hi - lo, group.storage, lo))
            offset = entry.start - group.lo if entry.nbytes else 0
            descriptors.append(
                TensorDesc(entry.kind, entry.dtype, entry.shape, entry.strides, offset, index, entry.nbytes)
            )
        return buffers, descriptors


def _extent(start: int, shape: list[int], strides: list[int], itemsize: int) -> tuple[int, int]:
    """[lo, hi) byte range reached by a non-empty view starting at address ``start``."""
    low = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0)
    return start + low * itemsize, start + (high + 1) * itemsize


def shape_problem(shape: list[int], itemsize: int, limit: int) -> tuple[str, str] | None:
    """Why ``shape`` is out of bounds, as ``(".shape[axis]", reason)``; None if it is within them.

    Every dimension, and the product of the non-zero ones times the itemsize, must be at most
    ``limit`` (``max_tensor_bytes``), for an empty tensor too: torch and numpy then never meet a
    size they cannot compute.
    """
    running = itemsize
    for axis, dim in enumerate(shape):
        if dim > limit:
            return f".shape[{axis}]", f"dimension {dim} is larger than the limit of {limit}"
        if dim:
            running *= dim
            if running > limit:
                return f".shape[{axis}]", f"{dim} makes the tensor larger than the limit of {limit} bytes"
    if running > limit:
        return ".dtype", f"an element of {itemsize} bytes is larger than the limit of {limit} bytes"
    return None


def _layout_problem(entry: _Entry, limit: int) -> tuple[str, str] | None:
    """Why a decoder would reject the shape or strides of ``entry`` (see ``verify_descriptor``)."""
    problem = shape_problem(entry.shape, DTYPES[entry.dtype].itemsize, limit)
    if problem is not None:
        return problem
    for axis, stride in enumerate(entry.strides):
        if abs(stride) > limit:
            return f".strides[{axis}]", f"{stride} is out of range (over the limit of {limit})"
    return None


def _type_name(cls: type) -> str:
    """``cls`` by its shortest public name, e.g. ``numpy.ma.MaskedArray`` for ``numpy.ma.core.MaskedArray``."""
    parts = cls.__module__.split(".")
    for end in range(1, len(parts)):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None and getattr(module, cls.__qualname__, None) is cls:
            return f"{'.'.join(parts[:end])}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _numel(shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def verify_descriptor(desc: TensorDesc, buffer_sizes: list[int], limits: Limits) -> str | None:
    """Why ``desc`` cannot be trusted (with a path suffix like ``.shape[2]``); None if it is sound."""
    kind = desc.kind
    if kind != "tensor" and kind != "ndarray":
        return f".kind: {kind!r} is neither 'tensor' nor 'ndarray'"
    known = _BUILD.get(desc.dtype)
    if known is None:
        return f".dtype: {desc.dtype!r} is not in the wire dtype table"
    _, numpy_dtype, itemsize = known
    if kind == "ndarray" and numpy_dtype is None:
        return f".dtype: numpy has no dtype {desc.dtype!r}"
    shape, strides = desc.shape, desc.strides
    rank = len(shape)
    if rank > limits.max_rank:
        return f".shape: rank {rank} is over the limit of {limits.max_rank}"
    if len(strides) != rank:
        return f".strides: {len(strides)} strides for rank {rank}"
    problem = shape_problem(shape, itemsize, limits.max_tensor_bytes)
    if problem is not None:
        return f"{problem[0]}: {problem[1]}"
    numel = _numel(shape)
    if desc.nbytes != numel * itemsize:
        return f".nbytes: {desc.nbytes} != prod(shape) * itemsize = {numel * itemsize}"
    if desc.buffer >= len(buffer_sizes):
        return f".buffer: {desc.buffer} names no buffer (the message has {len(buffer_sizes)})"
    size = buffer_sizes[desc.buffer]
    offset = desc.offset
    if offset % itemsize:
        return f".offset: {offset} is not a multiple of the itemsize {itemsize}"
    expected = 1  # the strides of a C-contiguous layout, from the last axis
    contiguous = True
    for axis in range(rank - 1, -1, -1):
        if strides[axis] != expected or expected > limits.max_tensor_bytes:
            contiguous = False
            break
        expected *= shape[axis]
    if not contiguous:
        for axis, stride in enumerate(strides):
            if abs(stride) > limits.max_tensor_bytes:
                return f".strides[{axis}]: {stride} is out of range"
            if stride < 0 and kind == "tensor":
                return f".strides[{axis}]: torch tensors have no negative strides, got {stride}"
    if numel == 0:
        return None if offset <= size else f".offset: {offset} is past the end of a {size}-byte buffer"
    lo, hi = (offset, offset + desc.nbytes) if contiguous else _extent(offset, shape, strides, itemsize)
    if lo < 0 or hi > size:
        return f".strides: elements reach bytes [{lo}, {hi}) outside the {size}-byte buffer {desc.buffer}"
    return None


class TensorBuilder:
    """Per-decode state: builds each described tensor once, on the buffers of the message."""

    __slots__ = ("_built", "_counts", "_torch_bases", "buffers", "descriptors", "device_buffers", "devices")

    def __init__(
        self,
        descriptors: list[TensorDesc],
        buffers: list[Any],
        devices: dict[int, torch.device] | None = None,
        device_buffers: dict[tuple[int, torch.device], torch.Tensor] | None = None,
    ) -> None:
        self.descriptors = descriptors
        self.buffers = buffers
        self.devices = devices or {}  # descriptor index -> device, for tensors placed off the host
        self.device_buffers = device_buffers or {}  # (buffer index, device) -> uint8 copy there
        self._built: dict[int, Any] = {}
        self._torch_bases: dict[int, torch.Tensor] = {}
        self._counts: dict[int, int] | None = None  # tensors per buffer, counted on first use

    def clear(self) -> None:
        """Drop every built tensor and buffer (a failed decode lets go of borrowed memory at once)."""
        self._built.clear()
        self._torch_bases.clear()
        self.buffers = []

    def build(self, index: int) -> Any:
        value = self._built.get(index)
        if value is not None:
            return value
        if index >= len(self.descriptors):
            raise DecodeError(f"tensor reference {index} names no descriptor (the message has {len(self.descriptors)})")
        desc = self.descriptors[index]
        try:
            value = self._make(index, desc)
        except (TypeError, ValueError, OverflowError, RuntimeError, BufferError) as exc:  # not expected after
            # ``verify_descriptor``; a guard so that no torch or numpy error ever leaves a decode
            raise DecodeError(f"tensor {index} of shape {desc.shape} cannot be built: {exc}") from None
        self._built[index] = value
        return value

    def _make(self, index: int, desc: TensorDesc) -> Any:
        """The tensor or array ``desc`` (descriptor ``index``, verified) describes, on its buffer."""
        torch_dtype, numpy_dtype, itemsize = _BUILD[desc.dtype]
        if desc.kind == "ndarray":
            return np.ndarray(
                desc.shape,
                dtype=numpy_dtype,
                buffer=self._host(desc.buffer),
                offset=desc.offset,
                strides=[s * itemsize for s in desc.strides],
            )
        device = self.devices.get(index)
        if device is None and self._alone(desc.buffer):
            value = self._quick(desc, torch_dtype, numpy_dtype, itemsize)
            if value is not None:
                return value
        base = self._torch_base(desc.buffer) if device is None else self.device_buffers[(desc.buffer, device)]
        offset = base.storage_offset() + desc.offset  # a delivered tensor may start inside its storage
        return torch.empty(0, dtype=torch_dtype, device=base.device).set_(
            base.untyped_storage(), offset // itemsize, desc.shape, desc.strides
        )

    def _alone(self, buffer: int) -> bool:
        """Whether buffer ``buffer`` holds one tensor only (no storage to share with another view)."""
        if len(self.descriptors) == 1:
            return True
        if self._counts is None:
            counts: dict[int, int] = {}
            for desc in self.descriptors:
                counts[desc.buffer] = counts.get(desc.buffer, 0) + 1
            self._counts = counts
        return self._counts[buffer] == 1

    def _quick(
        self, desc: TensorDesc, torch_dtype: torch.dtype, numpy_dtype: np.dtype[Any] | None, itemsize: int
    ) -> torch.Tensor | None:
        """A C-contiguous tensor read straight from its writable host buffer (the quick way), or None
        where that does not apply (a buffer delivered as a tensor, read-only, empty, other strides)."""
        buffer = self.buffers[desc.buffer]
        if not desc.nbytes or isinstance(buffer, torch.Tensor) or memoryview(buffer).readonly:
            return None
        shape, strides = desc.shape, desc.strides
        expected = 1
        for axis in range(len(shape) - 1, -1, -1):
            if strides[axis] != expected:
                return None
            expected *= shape[axis]
        if len(shape) != 1 and numpy_dtype is not None:  # faster than torch.frombuffer + view
            return torch.from_numpy(np.ndarray(shape, numpy_dtype, buffer, desc.offset))
        flat = torch.frombuffer(buffer, dtype=torch_dtype, count=desc.nbytes // itemsize, offset=desc.offset)
        return flat if len(shape) == 1 else flat.view(shape)

    def _host(self, index: int) -> Any:
        """Buffer ``index`` in host memory (a buffer a transport delivered on a device is copied once)."""
        buffer = self.buffers[index]
        if isinstance(buffer, torch.Tensor) and not buffer.is_cpu:
            buffer = self.buffers[index] = buffer.cpu().numpy()
        return buffer

    def _torch_base(self, index: int) -> torch.Tensor:
        base = self._torch_bases.get(index)
        if base is None:
            buffer = self.buffers[index]
            if isinstance(buffer, torch.Tensor):  # delivered as a uint8 tensor, e.g. on a device
                if buffer.storage_offset() % _ALIGN:
                    buffer = buffer.clone()  # its start in its storage would misalign wider dtypes
                self._torch_bases[index] = buffer
                return buffer
            base = (
                torch.frombuffer(buffer, dtype=torch.uint8)
                if memoryview(buffer).nbytes
                else torch.empty(0, dtype=torch.uint8)
            )
            self._torch_bases[index] = base
        return base
