"""Writable buffers over host memory at a raw address, each keeping what owns that memory alive.

A ``ctypes.c_char * n`` made with ``from_address`` is the cheapest such buffer Python can make
(~0.5 us, against ~3 us for ``numpy.asarray`` of an ``__array_interface__``, and ~5 against ~12
when the caches are cold, as when a process wakes for a message). A type costs ~3 KB and ~10 us to
make, so a ``Chars`` keeps those of its first ``kept`` sizes only; past them, its caller takes the
numpy way.
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["Chars", "byte_interface"]


def byte_interface(address: int, nbytes: int) -> dict[str, Any]:
    """The ``__array_interface__`` of the ``nbytes`` writable bytes at ``address`` (the numpy way)."""
    return {"data": (address, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}


class Chars:
    """``ctypes.c_char * n`` types by size ``n``, those of the first ``kept`` sizes asked for."""

    __slots__ = ("kept", "types")

    def __init__(self, kept: int = 256) -> None:
        self.kept = kept
        self.types: dict[int, Any] = {}  # a hot path reads ``types.get(n)`` first, then calls ``type(n)``

    def type(self, nbytes: int) -> Any:
        """``ctypes.c_char * nbytes``, made and kept while fewer than ``kept`` sizes are; None past them."""
        found = self.types.get(nbytes)
        if found is None and len(self.types) < self.kept:
            found = self.types[nbytes] = ctypes.c_char * nbytes
        return found

    def view(self, address: int, nbytes: int, owner: Any) -> Any:
        """A writable buffer of the ``nbytes`` bytes at ``address``, whose ``base`` is ``owner``: kept
        alive as long as the buffer or anything made on it is, it must keep that memory mapped. None
        when no type of that size is kept."""
        kind = self.types.get(nbytes) or self.type(nbytes)
        if kind is None:
            return None
        buffer = kind.from_address(address)
        buffer.base = owner  # (as a numpy array names what it is a view of)
        return buffer
