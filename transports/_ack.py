"""A one-page shared-memory mailbox through which a receiver acknowledges what it has received.

The sender creates the page (a tensorwire segment name, so the reaper removes it if the sender
dies) and reads it; the receiver opens it by name (our pattern only, exact size and magic
checked) and writes the highest position it has received. A position is one 8-byte word, written
and read whole, so no reader sees half of it; positions only grow. A page serves one stream of
positions (one sending thread); ``InFlight`` is that stream's side: its page and what it keeps.
The sender's page is removed by its close, or at exit or when dropped without one (never by a
forked child: the page is its parent's).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorwire.errors import DecodeError, TransportError
from tensorwire.transports._segment import create_named, identity, open_named, remove_named, remove_own

__all__ = ["AckPage", "InFlight"]

_MAGIC = b"TWACK001"
_SIZE = 4096
_WORD = struct.Struct("<Q")
_POSITION = 8


class AckPage:
    """The mailbox: ``position`` is what the receiver has acknowledged (0: nothing yet)."""

    def __init__(self, path: Path, mapping: mmap.mmap, owner: tuple[int, int] | None) -> None:
        self.path, self.name, self._mapping = path, path.name, mapping
        # the sender's page goes with its close, or at exit or when dropped without one
        self._remove = None if owner is None else weakref.finalize(self, _remove, path, owner, os.getpid())

    @classmethod
    def create(cls, path: Path) -> AckPage:
        fd, mapping = create_named(path, _SIZE)
        try:
            made = identity(os.fstat(fd))
            mapping[: len(_MAGIC)] = _MAGIC
            page = cls(path, mapping, owner=made)
        except BaseException:  # (an interrupt too) before its removal is set up: it goes now
            remove_own(path, fd)
            mapping.close()
            raise
        finally:
            os.close(fd)
        return page

    @classmethod
    def open(cls, path: Path) -> AckPage:
        fd = open_named(path, "ack page", exact=_SIZE)
        try:
            mapping = mmap.mmap(fd, _SIZE, flags=mmap.MAP_SHARED)
        except OSError as exc:
            raise TransportError(exc.errno, f"cannot map ack page {path.name}: {exc.strerror}") from None
        finally:
            os.close(fd)
        if len(mapping) != _SIZE or mapping[: len(_MAGIC)] != _MAGIC:
            mapping.close()
            raise DecodeError(f"ack page {path.name} is not a {_SIZE}-byte page with its magic")
        return cls(path, mapping, owner=None)

    @property
    def position(self) -> int:
        value: int = _WORD.unpack_from(self._mapping, _POSITION)[0]
        return value

    def acknowledge(self, position: int) -> None:
        """Record ``position`` as received, unless a later one already is."""
        if position > self.position:
            _WORD.pack_into(self._mapping, _POSITION, position)

    def close(self) -> None:
        """Unmap; the sender's close also removes the page (a name that no longer names the file it
        made, because a neighbour gave it to another file or a directory, or that is gone, is left alone)."""
        try:
            if self._remove is not None:
                self._remove()
        finally:
            self._mapping.close()


def _remove(path: Path, made: tuple[int, int], pid: int) -> None:
    """Remove the page ``made`` at ``path`` in the process that made it (``remove_named``)."""
    if os.getpid() == pid:
        remove_named(path, made)


class InFlight:
    """What one stream sent and its receiver has not acknowledged yet, each object kept alive until
    the stream's page shows its position. The page is created on first use. Thread-safe."""

    def __init__(self, directory: Path, name: Callable[[], str]) -> None:
        self._directory, self._name = directory, name
        self._page: AckPage | None = None
        self._kept: deque[tuple[int, Any]] = deque()  # (position, object), positions growing
        self._lock = threading.Lock()

    def page_name(self) -> str:
        """The name of this stream's page (created now if it is not there yet)."""
        with self._lock:
            if self._page is None:
                self._page = AckPage.create(self._directory / self._name())
            return self._page.name

    def keep(self, position: int, obj: Any) -> None:
        """Hold ``obj`` until ``position`` is acknowledged."""
        with self._lock:
            self._kept.append((position, obj))

    def count(self) -> int:
        """Objects still held: let go of the acknowledged ones first."""
        with self._lock:
            acked = 0 if self._page is None else self._page.position
            while self._kept and self._kept[0][0] <= acked:
                self._kept.popleft()
            return len(self._kept)

    def close(self) -> None:
        """Let go of everything and remove the page (a later use makes a new one)."""
        with self._lock:
            self._kept.clear()
            if self._page is not None:
                self._page.close()
                self._page = None
