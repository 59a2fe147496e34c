"""A one-page shared-memory mailbox through which a receiver acknowledges what it has received.

The sender creates the page (a tensorwire segment name, so the reaper removes it if the sender
dies) and reads it; the receiver opens it by name (our pattern only, exact size and magic
checked) and writes the highest position it has received. A position is one 8-byte word, written
and read whole, so no reader sees half of it; positions only grow.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from codec.errors import DecodeError
from transports.pool import create_segment, map_segment

__all__ = ["AckPage"]

_MAGIC = b"TWACK001"
_SIZE = 4096
_WORD = struct.Struct("<Q")
_POSITION = 8


class AckPage:
    """The mailbox: ``position`` is what the receiver has acknowledged (0: nothing yet)."""

    def __init__(self, path: Path, mapping: mmap.mmap, owner: bool) -> None:
        self.path, self.name, self._mapping, self._owner = path, path.name, mapping, owner

    @classmethod
    def create(cls, path: Path) -> AckPage:
        mapping = create_segment(path, _SIZE)
        mapping[: len(_MAGIC)] = _MAGIC
        return cls(path, mapping, owner=True)

    @classmethod
    def open(cls, path: Path) -> AckPage:
        mapping = map_segment(path, "ack page", _SIZE)
        if len(mapping) != _SIZE or mapping[: len(_MAGIC)] != _MAGIC:
            mapping.close()
            raise DecodeError(f"ack page {path.name} is not a {_SIZE}-byte page with its magic")
        return cls(path, mapping, owner=False)

    @property
    def position(self) -> int:
        value: int = _WORD.unpack_from(self._mapping, _POSITION)[0]
        return value

    def acknowledge(self, position: int) -> None:
        """Record ``position`` as received, unless a later one already is."""
        if position > self.position:
            _WORD.pack_into(self._mapping, _POSITION, position)

    def close(self) -> None:
        """Unmap; the sender's close also removes the page."""
        if self._owner:
            self.path.unlink(missing_ok=True)
        self._mapping.close()
