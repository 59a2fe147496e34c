"""Tensors and ndarrays -> wire descriptors: the only module that knows how tensors become bytes.

Encoding (``Outgoing``, one per encode call) turns each tensor into the extension the body
carries (see ``tensorwire._wire``). A small host tensor travels inside frame 0; the others travel in
buffers, one per memory block: every view of one storage in the message shares one buffer
covering just the bytes the views reach (aligned down to 16 bytes so each view keeps an
element-aligned offset), so aliasing survives. A strided view that is the only view of its
storage in the message and reaches far more bytes than it holds (a column slice) sends only its
own elements, once however often it stands in the message (one storage, offset, shape and
strides are one view). Strides travel within ``Limits.max_tensor_bytes``: a dim of size 1 past it
takes its canonical stride, and views sharing a buffer with a stride past it are refused. Values
are raw bits: bf16, fp8 and NaN payloads are never converted. Tensors on a device stay there:
their buffer carries the device storage and no host view.

Whether a storage is shared is known only once the whole body is written, so the first pass
assumes every tensor is alone; if one is not, the body is written again with the shared
extents known (``Outgoing.rerun``). The blocks and the buffers cut from them are
``tensorwire._blocks``; decoding checks each descriptor against its buffer and the limits before it
builds anything on it (``tensorwire._descriptors``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import torch

from tensorwire import _memory as memory
from tensorwire._blocks import BufferPlan, Group, compact, compact_array, host_bytes, numpy_group
from tensorwire._shape import extent, fit_strides, own_strides, shape_problem, strides_within, travel_strides
from tensorwire._wire import DATA_MAX, EXT_INLINE, EXT_TENSOR, INLINE_DIMS, pack_descriptor, pack_inline
from tensorwire.dtypes import DTYPE_NAMES, DTYPES
from tensorwire.errors import EncodeError
from tensorwire.options import Limits

__all__ = ["Outgoing", "embed_room", "quick_below"]

# The types of the views of small tensors' bytes that the join of frame 0 copies straight from their
# memory (one copy, made while the encode call holds the tensor), kept apart from those of every
# other byte view of a host tensor (``_blocks._VIEWS``) so that neither crowds the other out; a size
# past those kept goes through numpy.
_CHARS = memory.Chars()
_CODES = {name: code for code, name in enumerate(DTYPE_NAMES)}
_TORCH = {getattr(torch, d.torch_name): (_CODES[d.name], d.itemsize) for d in DTYPES.values()}
_NUMPY = {np.dtype(d.numpy_name): (_CODES[d.name], d.itemsize) for d in DTYPES.values() if d.numpy_name}
_COMPLEX = frozenset(getattr(torch, d.torch_name) for d in DTYPES.values() if d.name.startswith("complex"))
SPARSE = 2  # a lone strided view reaching at least this many times its own bytes sends only its elements
Ext = msgspec.msgpack.Ext
_AGAIN = Ext(EXT_TENSOR, b"")  # a placeholder for a view of a shared block, replaced in the second pass


def embed_room(limits: Limits) -> int:
    """The most bytes of tensors one frame 0 carries: half its size limit (the rest is for the body),
    within what a msgpack bin holds."""
    return min(limits.max_header_bytes // 2, DATA_MAX)


def quick_below(embed_below: int, limits: Limits) -> int:
    """Host tensors of fewer bytes may take the quick copy into frame 0: below ``embed_below`` and
    within ``limits.max_tensor_bytes``."""
    return min(embed_below, limits.max_tensor_bytes + 1)


class Outgoing:
    """Per-encode state: the tensors of one message, in the order the body holds them.

    ``tensor(value)`` and ``array(value)`` serve the encoder's hook; after the body is written,
    ``rerun`` says whether it must be written again (a storage turned out to be shared),
    ``data`` holds the bytes of the tensors carried inside frame 0 (``data_bytes`` of them; at most
    ``embed_room(limits)``: past that, small tensors travel in buffers) and ``buffers`` lists what to send.
    """

    __slots__ = (
        "_groups",
        "_quick_below",
        "_room",
        "_runtime",
        "_shared",
        "buffers",
        "data",
        "data_bytes",
        "embed_below",
        "limits",
        "rerun",
        "subclassed",
        "values",
    )

    def __init__(
        self,
        limits: Limits,
        embed_below: int,
        quick: int,
        room: int,
        shared: dict[Any, Group] | None = None,
        runtime: Callable[[], Any] | None = None,
    ) -> None:
        self.limits = limits
        self.embed_below = embed_below  # host tensors of fewer bytes travel inside frame 0
        self._quick_below = quick  # ``quick_below(embed_below, limits)``, worked out once by the encoder
        self.values: list[Any] = []  # every tensor occurrence, in body order
        self.buffers: list[BufferPlan] = []
        self.data: list[Any] = []  # the bytes of the tensors inside frame 0, in order (bytes, or views the join copies)
        self.data_bytes = 0  # their total
        self._room = room  # ``embed_room(limits)``: the most bytes of tensors frame 0 takes (the rest: buffers)
        self._groups: dict[Any, Any] = {}  # block key -> Group, or (lo, hi, storage) of one embedded view
        self._shared = shared  # second pass: blocks with several views, their full extents known
        self.rerun = False  # first pass: some block holds several views (the body must be written again)
        self._runtime = runtime  # the transport's ``device_runtime`` (None: torch's own)
        self.subclassed = False  # whether a tensor's own type (a subclass's ``__torch_function__``) ran code

    def again(self) -> Outgoing:
        """The state for the second pass, knowing which blocks are shared and how far their views reach."""
        shared = {
            key: g
            for key, g in self._groups.items()
            if type(g) is Group and (g.count > 1 or g.repeated) and g.shareable
        }
        return Outgoing(self.limits, self.embed_below, self._quick_below, self._room, shared, self._runtime)

    def _copies_from(self, t: torch.Tensor) -> bool:
        """Whether the transport's device runtime copies ``t``, whose storage has no address (torch's
        own runtime copies none: a meta tensor has no memory; a test's stand-in device may)."""
        runtime = None if self._runtime is None else self._runtime()
        return runtime is not None and bool(runtime.is_device(t))

    def _too_many(self) -> EncodeError:
        return EncodeError(f"more than {self.limits.max_tensors} tensors in one message (limit max_tensors)")

    def tensor(self, tensor: torch.Tensor) -> Ext:
        """The extension for one torch tensor of the body."""
        if len(self.values) >= self.limits.max_tensors:
            raise self._too_many()
        self.values.append(tensor)  # also keeps ``id(tensor)`` from being reused during the call
        if type(tensor) is not torch.Tensor:
            self.subclassed = True
        dtype = tensor.dtype
        known = _TORCH.get(dtype)
        if known is None:
            raise EncodeError(f"dtype {dtype} is not in the wire dtype table")
        if tensor.layout is not torch.strided:
            raise EncodeError(f"only strided tensors travel, got layout {tensor.layout}")
        code, itemsize = known
        t = tensor.detach() if tensor.requires_grad else tensor
        if t.is_neg() or (dtype in _COMPLEX and t.is_conj()):  # (the imaginary part of a conjugate view
            t = t.resolve_conj().resolve_neg()  # is a real tensor with the negative bit: its memory holds -value)
        shape = t.shape
        nbytes = t.numel() * itemsize
        rank = len(shape)
        if (
            0 < nbytes < self._quick_below
            and rank < 16
            and self.data_bytes + nbytes <= self._room
            and t.is_cpu
            and t.is_contiguous()
            and 1 not in shape
        ):
            # the quick way for the common small tensor: inside frame 0, if it is the first view of
            # its storage (a later view of it makes the body be written again, see ``_note``)
            storage = t.untyped_storage()
            key: Any = (True, storage.data_ptr(), storage.nbytes())
            start: int = t.data_ptr()
            if (
                rank <= self.limits.max_rank
                and key[1] <= start
                and start + nbytes <= key[1] + key[2]  # within its storage (one can be shrunk under a view)
                and key not in self._groups
                and not (self._shared and key in self._shared)
            ):
                self._groups[key] = (start, start + nbytes, storage)
                # a plain CPU tensor's bytes copied straight from its memory by the join of frame 0
                # (``numpy()`` costs more); the storage kept in ``_groups`` keeps that memory alive
                # until then, also that of a tensor made here (``resolve_conj``)
                offset = self.data_bytes
                self.data_bytes = offset + nbytes
                chars = (_CHARS.types.get(nbytes) or _CHARS.type(nbytes)) if type(t) is torch.Tensor else None
                self.data.append(bytes(host_bytes(t, nbytes)) if chars is None else chars.from_address(start))
                return Ext(EXT_INLINE, INLINE_DIMS[rank].pack(0, code, rank, 0, offset, nbytes, *shape))
        strides = t.stride()
        limit = self.limits.max_tensor_bytes
        if not nbytes or rank > self.limits.max_rank or nbytes > limit:  # (only then is there anything to refuse)
            strides = fit_strides(shape, strides, limit)
            self._check(shape, nbytes, itemsize, strides)
        if not nbytes:
            return Ext(EXT_INLINE, pack_inline(0, code, shape, 0, 0, own_strides(shape, strides)))
        cpu = t.is_cpu
        contiguous = t.is_contiguous()
        storage = t.untyped_storage()
        size, address = storage.nbytes(), storage.data_ptr()
        key = (cpu or t.device, address, size) if size and address else id(t)
        start = address + int(t.storage_offset()) * itemsize
        layout = None if contiguous and 1 not in shape else travel_strides(shape, strides, contiguous, limit)
        lo, hi = (start, start + nbytes) if contiguous else extent(start, shape, strides, itemsize)
        if lo < address or hi > address + size:
            raise EncodeError(
                f"the tensor's elements reach {hi - address} bytes into a storage of {size} bytes "
                "(a storage resized under its view cannot travel)"
            )
        if not address and not self._copies_from(t):  # a meta tensor: a shape and a dtype, no memory
            raise EncodeError(f"a tensor on device {t.device} has no data to send (its storage has no memory)")
        shared = self._shared.get(key) if self._shared is not None else None
        if shared is not None:
            if shared.count == 1 and shared.compact:  # one sparse view, repeated: one compact copy
                return self._shared_ext(shared, 0, code, shape, None, 0, nbytes, lambda: compact(t, nbytes))
            return self._shared_ext(shared, 0, code, shape, strides_within(layout, limit), start, nbytes)
        group = self._groups.get(key)
        if group is not None:  # a later view of its block: written again in the second pass
            self._note(key, None, lo, hi, t)
            return _AGAIN
        group = self._groups[key] = Group(None, address, storage, cpu)  # its first view (what ``_note`` counts)
        group.count, group.lo, group.hi, group.first = 1, lo, hi, t
        # a view reaching far more than its bytes, or with strides no decoder takes, is sparse
        sparse = not contiguous and (hi - lo >= SPARSE * nbytes or strides_within(layout, limit, False) is None)
        group.compact = cpu and sparse
        embed = nbytes < self.embed_below and self.data_bytes + nbytes <= self._room
        if cpu and (sparse or (contiguous and embed)):
            if embed:  # a lone sparse view: only its own elements
                c = t.contiguous() if sparse else t
                own = None if sparse else layout
                return Ext(EXT_INLINE, pack_inline(0, code, shape, self._embed(host_bytes(c, nbytes)), nbytes, own))
            return self._placed(0, code, shape, None, compact(t, nbytes), 0, nbytes)
        plan = group.plan(lo, hi)
        return self._placed(
            0, code, shape, strides_within(layout, limit), plan, start - group.base - plan.start, nbytes
        )

    def array(self, array: np.ndarray) -> Ext:
        """The extension for one numpy array of the body."""
        if len(self.values) >= self.limits.max_tensors:
            raise self._too_many()
        self.values.append(array)
        if type(array) is not np.ndarray:
            raise EncodeError(
                f"{_type_name(type(array))} is a subclass of numpy.ndarray and cannot travel (its extra state "
                "would be lost); send numpy.asarray(value) for its data"
            )
        dtype = array.dtype
        known = _NUMPY.get(dtype) if dtype.isnative and not dtype.fields and not dtype.subdtype else None
        if known is None:
            raise EncodeError(f"numpy dtype {dtype.str!r} ({dtype}) is not in the wire dtype table")
        code, itemsize = known
        if any(s % itemsize for s in array.strides):
            array = np.ascontiguousarray(array)  # byte strides that are not whole elements: one copy
        start = array.__array_interface__["data"][0]
        if start % itemsize:  # cut at a byte that is not a whole element (no decoder takes that offset):
            array = array.copy()  # one copy, aligned
            start = array.__array_interface__["data"][0]
        shape = array.shape
        strides = tuple(s // itemsize for s in array.strides)
        nbytes = array.size * itemsize
        limit = self.limits.max_tensor_bytes
        if not nbytes:
            strides = fit_strides(shape, strides, limit)
        self._check(shape, nbytes, itemsize, strides)
        if not nbytes:
            return Ext(EXT_INLINE, pack_inline(1, code, shape, 0, 0, own_strides(shape, strides)))
        contiguous = bool(array.flags.c_contiguous)
        layout = None if contiguous and 1 not in shape else travel_strides(shape, strides, contiguous, limit)
        root: Any = array
        while isinstance(root, np.ndarray) and root.base is not None:
            root = root.base
        key = ("numpy", id(root))
        shared = self._shared.get(key) if self._shared is not None else None
        if shared is not None:
            if shared.count == 1 and shared.compact:  # one sparse view, repeated: one compact copy
                copy = lambda: compact_array(array, nbytes)  # noqa: E731
                return self._shared_ext(shared, 1, code, shape, None, 0, nbytes, copy)
            return self._shared_ext(shared, 1, code, shape, strides_within(layout, limit), start, nbytes)
        lo, hi = (start, start + nbytes) if contiguous else extent(start, shape, strides, itemsize)
        first = key not in self._groups
        group = self._note(key, lambda: numpy_group(root, lo, hi), lo, hi, array)
        if not first and group.raw is not None:
            return _AGAIN  # written again in the second pass
        # a view reaching far more than its bytes, or with strides no decoder takes, is sparse
        lone_sparse = not contiguous and (hi - lo >= SPARSE * nbytes or strides_within(layout, limit, False) is None)
        if first:
            group.compact = lone_sparse
        embed = nbytes < self.embed_below and self.data_bytes + nbytes <= self._room
        if (contiguous and embed) or lone_sparse or group.raw is None:
            # small, a lone sparse view, or a block that is not one run of bytes: a contiguous copy
            if embed:
                c = array if contiguous else np.ascontiguousarray(array)
                own = layout if contiguous else None
                return Ext(EXT_INLINE, pack_inline(1, code, shape, self._embed(c.data.cast("B")), nbytes, own))
            return self._placed(1, code, shape, None, compact_array(array, nbytes), 0, nbytes)
        plan = group.plan(lo, hi)
        return self._placed(1, code, shape, layout, plan, start - group.base - plan.start, nbytes)

    def moved(self) -> int | None:
        """The data address (0 for a storage emptied) of a torch storage whose memory this message
        reads without a copy (by address, at the join of frame 0 or in an export) that was resized
        or moved since it was looked at: by code of the caller's that ran after (a named validator,
        a tensor subclass's); None if every one is as it was."""
        kept = [*self._groups.items(), *(self._shared or {}).items()]
        for key, block in kept:
            if type(block) is tuple:  # one view inside frame 0: (lo, hi, storage), its storage's address in the key
                storage, base, hi = block[2], key[1], block[1]
            elif block.storage is not None:
                storage, base, hi = block.storage, block.base, block.hi
            else:  # numpy memory: no view of it can be resized while the message holds one
                continue
            now = storage.data_ptr()
            if now != base or storage.nbytes() < hi - base:
                return int(now)
        return None

    def _embed(self, data: memoryview) -> int:
        """Append a copy of ``data`` to frame 0's data; its offset there."""
        offset = self.data_bytes
        self.data_bytes = offset + data.nbytes
        self.data.append(bytes(data))
        return offset

    def _note(self, key: Any, make: Any, lo: int, hi: int, view: Any) -> Group:
        """Count one more occurrence of ``view`` of block ``key``, reaching [lo, hi) (``make()``: the
        group of a block not seen before); the same view as the block's first counts once."""
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = make()
            group.first = view
        elif type(group) is tuple:  # a torch storage whose first view went inside frame 0
            first_lo, first_hi, storage = group
            group = self._groups[key] = Group(None, storage.data_ptr(), storage, True)
            group.count = 1
            group.reach(first_lo, first_hi)
        elif _same_view(view, group.first):  # still one view, written again in the second pass
            same: Group = group
            same.repeated = True
            if self._shared is None and same.shareable:
                self.rerun = True
            return same
        group.count += 1
        if group.count > 1 and self._shared is None and group.shareable:
            self.rerun = True
        group.reach(lo, hi)
        return group

    def _placed(
        self, kind: int, code: int, shape: Any, strides: Any, plan: BufferPlan, offset: int, nbytes: int
    ) -> Ext:
        """The descriptor of a tensor at ``offset`` in a new buffer ``plan``."""
        self.buffers.append(plan)
        return Ext(EXT_TENSOR, pack_descriptor(kind, code, shape, strides, len(self.buffers) - 1, offset, nbytes))

    def _shared_ext(
        self,
        group: Group,
        kind: int,
        code: int,
        shape: Any,
        strides: Any,
        start: int,
        nbytes: int,
        compact: Callable[[], BufferPlan] | None = None,
    ) -> Ext:
        """A descriptor in the one buffer of a shared block (second pass: its extent is known), or,
        with ``compact``, in the one compact copy of its one view (at offset 0)."""
        if group.buffer is None:
            group.buffer = group.plan(group.lo, group.hi) if compact is None else compact()
            group.index = len(self.buffers)
            self.buffers.append(group.buffer)
        offset = 0 if compact is not None else start - group.base - group.buffer.start
        return Ext(EXT_TENSOR, pack_descriptor(kind, code, shape, strides, group.index, offset, nbytes, True))

    def _check(self, shape: Any, nbytes: int, itemsize: int, strides: Any) -> None:
        limits = self.limits
        if len(shape) > limits.max_rank:
            raise EncodeError(f"rank {len(shape)} is over the limit of {limits.max_rank}")
        if nbytes > limits.max_tensor_bytes:
            raise EncodeError(f"tensor of {nbytes} bytes is over the limit of {limits.max_tensor_bytes}")
        if not nbytes:  # an empty tensor can still have dimensions or strides no decoder takes
            problem = shape_problem(list(shape), itemsize, limits.max_tensor_bytes)
            if problem is None:
                problem = next(
                    (
                        (f".strides[{a}]", f"{s} is out of range (over the limit of {limits.max_tensor_bytes})")
                        for a, s in enumerate(strides)
                        if abs(s) > limits.max_tensor_bytes
                    ),
                    None,
                )
            if problem is not None:
                raise EncodeError(f"{problem[0][1:]}: {problem[1]}")


def _same_view(a: Any, b: Any) -> bool:
    """Whether tensors (or arrays) ``a`` and ``b`` are one view: the same memory, dtype, shape and strides."""
    if a is b:
        return True
    if b is None:
        return False
    if isinstance(a, np.ndarray):
        same = a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.strides == b.strides
    else:
        same = a.data_ptr() == b.data_ptr() and a.stride() == b.stride()
    return bool(same and a.dtype == b.dtype and a.shape == b.shape)


def _type_name(cls: type) -> str:
    """``cls`` by its shortest public name, e.g. ``numpy.ma.MaskedArray`` for ``numpy.ma.core.MaskedArray``."""
    parts = cls.__module__.split(".")
    for end in range(1, len(parts)):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None and getattr(module, cls.__qualname__, None) is cls:
            return f"{'.'.join(parts[:end])}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"
