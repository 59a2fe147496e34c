"""The shm transport's handles, as they travel in a message's frame 0: a one-shot segment's
(``ShmHandle``) and some bytes of a pool slot's (``SlotHandle``), each with the capability its
receiver proves against the segment's control page (``Capability``: exactly 16 bytes).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from tensorwire.transports._page_layout import CAPABILITY_BYTES
from tensorwire.transports.base import Handle

__all__ = ["Capability", "ShmHandle", "SlotHandle"]

Capability = Annotated[bytes, msgspec.Meta(min_length=CAPABILITY_BYTES, max_length=CAPABILITY_BYTES)]


class ShmHandle(Handle, tag="shm", frozen=True):
    """A one-shot segment in /dev/shm (a control page, then exactly the buffer); the receiver unlinks it."""

    name: str
    capability: Capability

    def __repr__(self) -> str:
        return f"ShmHandle(name={self.name!r}, capability=<{len(self.capability)} bytes>)"


class SlotHandle(Handle, tag="shm-slot", frozen=True, omit_defaults=True):
    """Bytes ``[offset, offset + nbytes)`` of a pool slot, handed over as ``generation``; ``fd``: the
    creator's fd of a memfd-backed slot (None: a named segment in /dev/shm)."""

    name: str
    offset: int
    generation: int
    capability: Capability
    fd: int | None = None

    def __repr__(self) -> str:
        return (
            f"SlotHandle(name={self.name!r}, offset={self.offset}, generation={self.generation}, "
            f"capability=<{len(self.capability)} bytes>, fd={self.fd})"
        )
