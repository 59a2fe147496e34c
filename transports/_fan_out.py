"""A broadcast's transport (``ShmTransport.fan_out(readers)``): each buffer goes to one pool slot
that every one of ``readers`` receivers claims, freed when the last lets go; reading and closing
are the ``ShmTransport``'s.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from tensorwire.errors import TransportError
from tensorwire.transports._page_layout import MAX_READERS
from tensorwire.transports._page_lock import one_wait
from tensorwire.transports._shm_handles import ShmHandle, SlotHandle
from tensorwire.transports.base import Buffer, Handle, Transport

if TYPE_CHECKING:
    from tensorwire.transports.shm import ShmTransport

__all__ = ["FanOut"]


class FanOut(Transport):
    """``ShmTransport.fan_out(readers)``: exports to pool slots that ``readers`` receivers each
    claim (one buffer for every receiver of a broadcast; freed when the last has let go). Reading
    and closing are the ``ShmTransport``'s."""

    name: ClassVar[str] = "shm"
    handle_types: ClassVar[tuple[type[Handle], ...]] = (ShmHandle, SlotHandle)

    def __init__(self, shm: ShmTransport, readers: int) -> None:
        if shm.pool is None:
            raise ValueError("a broadcast needs the pool (ShmTransport(pool=True))")
        if not 1 <= readers <= MAX_READERS:
            raise ValueError(f"a broadcast is for 1 to {MAX_READERS} receivers, not {readers}")
        self.shm, self.readers = shm, readers

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        if data.nbytes == 0:
            raise TransportError(errno.EINVAL, "a 0-byte buffer never gets a segment; send it inline")
        handle = self.shm._export_pooled(data, self.readers)
        if handle is None:
            raise TransportError(
                errno.ENOMEM, f"the pool's memory budget has no room for a {data.nbytes}-byte broadcast buffer"
            )
        return handle

    def withdraw(self, handle: Handle, readers: int) -> None:
        """``readers`` of the receivers ``handle`` was broadcast to will never get it."""
        pool = self.shm.pool
        if isinstance(handle, SlotHandle) and pool is not None:
            pool.withdraw(handle.name, handle.generation, handle.capability, readers)

    def withdraw_all(self, handles: Sequence[Handle], readers: int) -> None:
        """``withdraw`` each of ``handles``, their waits for pages another process keeps locked lasting
        no longer together than one does (a receiver that keeps every page it mapped locked holds a
        failed broadcast up once, not once per buffer; a page not counted goes at its claim deadline)."""
        with one_wait():
            for handle in handles:
                self.withdraw(handle, readers)

    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        self.shm.verify(handles, frames)

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        return self.shm.import_(handle, frames, nbytes, borrow=borrow)

    def release(self, handle: Handle) -> None:
        self.shm.release(handle)

    def release_all(self, handles: Sequence[Handle]) -> None:
        self.shm.release_all(handles)

    def close(self) -> None:
        """Nothing: the pool is the ``ShmTransport``'s."""
