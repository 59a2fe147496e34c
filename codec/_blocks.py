"""The memory blocks a message's tensors live in, and the buffers cut from them to send.

A ``Group`` is one block (a torch storage, or numpy memory that is one flat run of bytes): the
bytes its views in the message reach and the one buffer sent for them. A ``BufferPlan`` is one
buffer to send: a flat byte view of host memory that keeps it alive (``host_bytes``), or, for
device memory, the storage alone. ``compact`` and ``compact_array`` give a view's own elements,
C-contiguous, for a view that travels without its block.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tensorwire import _memory as memory
from tensorwire._shape import ALIGN

__all__ = ["BufferPlan", "Group", "compact", "compact_array", "host_bytes", "numpy_group"]

# The types of the byte views of host tensors but those of small tensors' bytes that the join of
# frame 0 copies (``_tensors._CHARS``, kept apart so that neither crowds the other out): a buffer
# to send, mostly; a size past those kept goes through numpy.
_VIEWS = memory.Chars()


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
        self.__array_interface__ = memory.byte_interface(address, size)


class Group:
    """One memory block tensors of a message live in: the bytes they reach and the buffer sent for it."""

    __slots__ = (
        "base",
        "buffer",
        "compact",
        "count",
        "first",
        "hi",
        "host",
        "index",
        "lo",
        "raw",
        "repeated",
        "storage",
    )

    def __init__(self, raw: Any, base: int, storage: torch.UntypedStorage | None = None, host: bool = True) -> None:
        self.raw = raw  # uint8 array over a numpy block (keeping it alive); None for a torch storage
        self.base = base  # address of the block's first byte
        self.storage = storage
        self.host = host  # False: device memory, which has no host view (the transport moves it)
        self.lo = 2**63  # [lo, hi): addresses the message's views reach
        self.hi = 0
        self.count = 0  # distinct views of this block in the message (the same view again counts once)
        self.first: Any = None  # its first view (None: not kept, for one that went inside frame 0 quickly)
        self.repeated = False  # whether a view of it stands more than once in the message
        self.compact = False  # whether its first view, alone, travels as a compact copy (a sparse host view)
        self.buffer: BufferPlan | None = None  # second pass: the one buffer of a shared block
        self.index = 0  # and its index

    @property
    def shareable(self) -> bool:
        """Whether its views can travel as one buffer: a torch storage, or numpy memory that is one
        flat run of bytes (else each view travels as bytes of its own)."""
        return self.raw is not None or self.storage is not None

    def reach(self, lo: int, hi: int) -> None:
        self.lo = min(self.lo, lo)
        self.hi = max(self.hi, hi)

    def plan(self, lo: int, hi: int) -> BufferPlan:
        """The buffer of bytes [lo, hi) (addresses) of the block."""
        lo -= (lo - self.base) % ALIGN
        start, end = lo - self.base, hi - self.base
        if self.raw is not None:
            view: memoryview | None = memoryview(self.raw[start:end])
        elif not self.host:
            view = None
        elif end == start:
            view = memoryview(bytearray())
        else:
            assert self.storage is not None
            view = _host_view(self.storage, lo, end - start)
        return BufferPlan(view, end - start, self.storage, start)


def numpy_group(root: Any, lo: int, hi: int) -> Group:
    """The block a numpy view reaching bytes [lo, hi) lives in (``root``: the end of its chain of
    bases). Its ``raw`` is None if that block is not one flat run of bytes holding the view, or does
    not start on a 16-byte boundary (a view's offset in it could then be off a whole element): each
    view of it travels as bytes of its own."""
    try:
        if isinstance(root, np.ndarray):
            block = root
        elif hasattr(root, "__array_interface__"):
            block = np.asarray(root)  # e.g. a lease over a shared-memory mapping
        else:
            block = np.frombuffer(root, dtype=np.uint8)
        raw = block.reshape(-1, order="A").view(np.uint8) if block.size else np.empty(0, np.uint8)
        base = raw.ctypes.data
    except (TypeError, ValueError, BufferError, AttributeError):
        return Group(None, 0)
    if base % ALIGN or not (base <= lo and hi <= base + raw.nbytes):
        return Group(None, 0)
    return Group(raw, base)


def compact(t: torch.Tensor, nbytes: int) -> BufferPlan:
    """A buffer of a host tensor's own elements, C-contiguous (a copy if it is not)."""
    c = t.contiguous()
    return BufferPlan(host_bytes(c, nbytes), nbytes, c.untyped_storage(), 0)


def compact_array(array: np.ndarray, nbytes: int) -> BufferPlan:
    """A buffer of an array's own elements, C-contiguous (a copy if it is not)."""
    c = np.ascontiguousarray(array)
    return BufferPlan(memoryview(c.reshape(-1).view(np.uint8)), nbytes)  # type: ignore[arg-type]


def host_bytes(t: torch.Tensor, nbytes: int) -> memoryview:
    """The bytes of a C-contiguous host tensor, without a copy."""
    if not nbytes:
        return memoryview(b"")
    return _host_view(t.untyped_storage(), t.data_ptr(), nbytes)


def _host_view(storage: torch.UntypedStorage, address: int, nbytes: int) -> memoryview:
    """A byte view of the ``nbytes`` bytes at ``address`` in host ``storage``, keeping it alive."""
    buffer = _VIEWS.view(address, nbytes, storage)
    if buffer is None:  # no ctypes type kept for this size
        buffer = np.asarray(_HostBlock(storage, address, nbytes))
    return memoryview(buffer).cast("B")
