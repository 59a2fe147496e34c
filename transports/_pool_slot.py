"""One slot of a sender's pool: the size classes of the pool's slots (``size_class``), a slot as its
creator sees it (``Slot``), the hold of an ``empty`` tensor on the slot it lives in
(``_SenderLease``), and letting go of a slot (``_let_go``) or of a forked child's copy of one
(``_let_go_copy``).
"""

from __future__ import annotations

import functools
import mmap
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tensorwire import _memory as memory
from tensorwire.transports._page import Page
from tensorwire.transports._segment import remove_own

if TYPE_CHECKING:
    from tensorwire.transports._pool import Pool

__all__ = ["MIN_CLASS", "Slot", "size_class"]

MIN_CLASS = 64 * 1024


@functools.lru_cache(maxsize=1024)  # (a send asks for the same few sizes again and again)
def size_class(nbytes: int) -> int:
    """The smallest class holding ``nbytes``: 4, 5, 6 or 7 times a power of two, page aligned."""
    if nbytes <= MIN_CLASS:
        return MIN_CLASS
    top = 1 << (nbytes - 1).bit_length()  # the power of two at or above
    for numerator in (5, 6, 7):
        candidate = top // 8 * numerator
        if candidate >= nbytes:
            return -(-candidate // 4096) * 4096
    return top


@dataclass(eq=False)
class Slot:
    """One pooled segment as its creator sees it (``path`` None: a memfd)."""

    name: str
    fd: int
    mapping: mmap.mmap
    page: Page
    capacity: int
    address: int  # of the data area
    path: Path | None
    last_used: float = field(default_factory=time.monotonic)
    passed: int = 0  # sends in a row that found it busy on their way to a free slot
    parked: bool = False  # at the back of its class, looked at only by close walks
    sending: int = 0  # the generation this process holds it under (being written, or an ``empty``
    # tensor unsent), 0 if none: never taken, evicted or dropped while held, whatever a receiver
    # writes in its page meanwhile
    allocated: bool = False  # held for an ``empty`` tensor (not for a copy): what ``hand_over_allocated`` sends
    lent: int = 0  # the generation ``hand_over_allocated`` sent it under while its ``empty`` tensor lives (0:
    # none; a later take's generation differs): undoing that hand-over gives the slot back to the tensor
    settled: tuple[int, bool] = (0, False)  # the last hand-over before the current one: its generation,
    # and whether another process claimed it (``Pool.claimed``, once the slot has moved on)

    @property
    def state(self) -> int:
        return self.page.state

    @property
    def generation(self) -> int:
        return self.page.generation


class _SenderLease:
    """Backs a tensor from ``Pool.empty_array``: holds a view of the mapping (so it is never closed
    under the tensor) and frees the slot if the tensor dies without being sent."""

    __slots__ = ("_generation", "_mapped", "_nbytes", "_pool", "_slot")

    def __init__(self, pool: Pool, slot: Slot, nbytes: int) -> None:
        self._pool, self._slot, self._generation, self._nbytes = pool, slot, slot.sending, nbytes
        self._mapped = memoryview(slot.mapping)  # an export: the mapping cannot be closed while it lives

    @property
    def __array_interface__(self) -> dict[str, Any]:
        """The slot's bytes to numpy (where no ctypes type of their size is kept)."""
        return memory.byte_interface(self._slot.address, self._nbytes)

    def __del__(self) -> None:
        self._pool.unused(self._slot, self._generation)


def _let_go(slot: Slot, *, unmap: bool, unlink: bool = True) -> None:
    """Tell receivers the slot is dropped, unlink its name, close its fd and (``unmap``) its mapping,
    unless a view of it is still alive in this process (then the mapping goes with the last one)."""
    try:
        slot.page.mark_dropped()
        slot.page.release()
    except ValueError:  # already let go
        return
    try:
        if slot.path is not None and unlink:
            remove_own(slot.path, slot.fd)
    finally:
        slot.page.close_fd()
    if unmap:
        try:
            slot.mapping.close()
        except BufferError:
            pass  # a tensor of this process still points into it


def _let_go_copy(slot: Slot) -> None:
    """A forked child's copy of its parent's slot: close its fd (and with it the child's share of the
    parent's mark on a named file) and unmap it, unless a view of it is alive here (then the mapping
    goes with the last one)."""
    with suppress(OSError):  # (closed by a parent thread as it forked)
        slot.page.close_fd()
    with suppress(ValueError):
        slot.page.release()
    with suppress(BufferError):
        slot.mapping.close()
