"""POSIX shared memory, with lifetime owned by tensorwire (never by Python's resource tracker).

By default buffers go through a warm pool of reusable slots (``transports.pool``): no page faults,
no create or unlink in steady state, and ``empty()`` hands out tensors that travel with no copy at
all. A buffer the pool cannot take (``pool=False``, or past the pool's memory budget) gets a
one-shot segment, as below.

Segments live in ``/dev/shm`` and are named ``tw-<pid>-<token>-<seq>``: the creator's pid, a
random 128-bit token drawn once per process, and a counter. The sender reserves the space with
``posix_fallocate`` (a full /dev/shm is a ``TransportError`` before any byte is copied, never a
SIGBUS), copies the buffer in, and closes it. The receiver accepts only names of this exact
pattern, with one pid and token per message and no name twice; it opens the segment, checks its
real size, maps it, unlinks it, and returns a private copy or (``borrow``) the mapping itself,
which stays alive until the last numpy or torch view of it dies. ``reap()`` removes segments
whose creator has died.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import re
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from codec.errors import DecodeError, TransportError
from transports.base import Buffer, Handle
from transports.copy import copy_into
from transports.pool import CONTROL_BYTES, POPULATE, SENDER, Pool, SlotReader, alive, create_segment, map_segment
from transports.retention import Retention

__all__ = ["SHM_DIR", "ShmHandle", "ShmTransport", "SlotHandle", "our_segments", "reap"]

SHM_DIR = Path("/dev/shm")
_NAME = re.compile(r"tw-([1-9][0-9]{0,9})-([0-9a-f]{32})-([0-9a-f]{1,16})")
_TOKEN = secrets.token_hex(16)
_TOKEN_PID = os.getpid()
_lock = threading.Lock()
_counter = 0


def _process_token() -> str:
    """This process's token; a forked child draws its own."""
    global _TOKEN, _TOKEN_PID
    if _TOKEN_PID != os.getpid():
        _TOKEN, _TOKEN_PID = secrets.token_hex(16), os.getpid()
    return _TOKEN


def _next_name() -> str:
    global _counter
    with _lock:
        _counter += 1
        seq = _counter
    return f"tw-{os.getpid()}-{_process_token()}-{seq:x}"


class ShmHandle(Handle, tag="shm", frozen=True):
    """A one-shot segment in /dev/shm holding exactly the buffer; the receiver unlinks it."""

    name: str


class SlotHandle(Handle, tag="shm-slot", frozen=True):
    """Bytes ``[offset, offset + nbytes)`` of a pool slot, handed over as ``generation``."""

    name: str
    offset: int
    generation: int


class ShmTransport:
    """Out-of-band buffers in POSIX shared memory: pooled slots by default, one-shot segments otherwise.

    ``pool``: reuse warm slots (default). ``cache_fraction`` / ``max_cached_bytes``: the most the
    pool keeps (a fraction of /dev/shm's free space, or a fixed number of bytes); past it a buffer
    gets a one-shot segment. ``idle_seconds``: free slots unused this long are given back.
    """

    name: ClassVar[str] = "shm"
    handle_types: ClassVar[tuple[type[Handle], ...]] = (ShmHandle, SlotHandle)

    def __init__(
        self,
        directory: str | os.PathLike[str] = SHM_DIR,
        *,
        pool: bool = True,
        cache_fraction: float = 0.25,
        max_cached_bytes: int | None = None,
        idle_seconds: float = 30.0,
    ) -> None:
        self.directory = Path(directory)
        self.pool: Pool | None = None
        if pool:
            self.pool = Pool(
                self.directory,
                _next_name,
                retention=Retention(shm_fraction=cache_fraction, max_bytes=max_cached_bytes),
                idle_seconds=idle_seconds,
            )
        self._reader = SlotReader(self.directory)

    # -- zero-copy allocation -----------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A tensor living in a pool slot: encoding it sends only the slot reference (no copy).

        Ownership: write it, encode it, then stop writing; the slot returns to the pool when the
        receiver's last view of it dies (or when this tensor dies unsent). Reusing the tensor after
        that sees whatever the slot holds next.
        """
        itemsize = torch.empty(0, dtype=dtype).element_size()
        nbytes = math.prod(shape) * itemsize
        raw = self._pool_array(nbytes)
        if nbytes == 0:
            return torch.empty(tuple(shape), dtype=dtype)
        return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).view(tuple(shape))

    def empty_like(self, tensor: torch.Tensor) -> torch.Tensor:
        """``empty`` with the shape and dtype of ``tensor``."""
        return self.empty(tuple(tensor.shape), tensor.dtype)

    def empty_numpy(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """``empty`` for a numpy array."""
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        raw = self._pool_array(nbytes)
        array: np.ndarray = raw[:nbytes].view(dt).reshape(tuple(shape))
        return array

    def _pool_array(self, nbytes: int) -> np.ndarray:
        if self.pool is None:
            raise TransportError(errno.EINVAL, "empty() needs the pool (ShmTransport(pool=True))")
        raw = self.pool.empty_array(max(nbytes, 1))
        if raw is None:
            raise TransportError(errno.ENOMEM, f"the pool's memory budget has no room for {nbytes} bytes")
        return raw

    # -- sending ------------------------------------------------------------------------------
    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        nbytes = data.nbytes
        if nbytes == 0:
            raise TransportError(errno.EINVAL, "a 0-byte buffer never gets a segment; send it inline")
        if self.pool is not None:
            handle = self._export_pooled(data)
            if handle is not None:
                return handle
        return self._export_segment(data)

    def _export_pooled(self, data: memoryview) -> Handle | None:
        assert self.pool is not None
        nbytes = data.nbytes
        address = np.frombuffer(data, dtype=np.uint8).__array_interface__["data"][0]
        slot = self.pool.find(address, nbytes)
        if slot is not None:  # allocated by empty(): hand it over as it is
            return SlotHandle(name=slot.name, offset=address - slot.address, generation=self.pool.hand_over(slot))
        slot = self.pool.acquire(nbytes, SENDER)
        if slot is None:
            return None
        with memoryview(slot.mapping) as area:
            copy_into(area[CONTROL_BYTES : CONTROL_BYTES + nbytes], data)
        return SlotHandle(name=slot.name, offset=0, generation=self.pool.hand_over(slot))

    def _export_segment(self, data: memoryview) -> Handle:
        name = _next_name()
        path = self.directory / name
        mapping = create_segment(path, data.nbytes)
        try:
            with memoryview(mapping) as area:
                copy_into(area, data)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            mapping.close()
        return ShmHandle(name=name)

    def release(self, handle: Handle) -> None:
        if _creator(getattr(handle, "name", "")) is None:
            return
        if isinstance(handle, SlotHandle):
            if self.pool is None or not self.pool.release(handle.name, handle.generation):
                self._reader.discard(handle.name, handle.generation)
            return
        assert isinstance(handle, ShmHandle)
        _unlink(self.directory / handle.name)

    def trim(self, idle_seconds: float | None = None) -> int:
        """Give back pool slots idle for ``idle_seconds``; return the bytes freed."""
        return 0 if self.pool is None else self.pool.trim(idle_seconds)

    # -- receiving ----------------------------------------------------------------------------
    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        owner: tuple[str, str] | None = None
        seen: set[str] = set()
        for handle in handles:
            assert isinstance(handle, ShmHandle | SlotHandle)
            sender = _creator(handle.name)
            if sender is None:
                raise DecodeError(f"shm segment name {handle.name!r} is not a tensorwire name (tw-<pid>-<token>-<seq>)")
            if owner is None:
                owner = sender
            elif sender != owner:
                raise DecodeError(f"shm segment {handle.name!r} names a different creator than the message's others")
            if handle.name in seen:
                raise DecodeError(f"shm segment {handle.name!r} is named twice in one message")
            seen.add(handle.name)
            if isinstance(handle, SlotHandle) and (handle.offset < 0 or handle.generation < 1):
                raise DecodeError(f"pool slot {handle.name!r}: offset and generation must be positive")

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        if isinstance(handle, SlotHandle):
            return self._reader.open(handle.name, handle.offset, nbytes, handle.generation, borrow=borrow is not False)
        assert isinstance(handle, ShmHandle)
        mapping = map_segment(
            self.directory / handle.name,
            "shared memory segment",
            0,
            exact=nbytes,
            flags=mmap.MAP_SHARED if borrow else POPULATE,
            unlink=True,
        )
        if borrow:
            return mapping  # the mapping lives as long as any view of it
        try:
            return bytearray(mapping)
        finally:
            mapping.close()

    def close(self) -> None:
        """Unlink the pool's slots and forget mapped ones; one-shot segments belong to their messages."""
        if self.pool is not None:
            self.pool.close()
        self._reader.close()


_CREATORS: dict[str, tuple[str, str]] = {}  # names already checked (pool slot names recur) -> (pid, token)


def _creator(name: str) -> tuple[str, str] | None:
    """(pid, token) of a segment name of our pattern; None for any other name."""
    known = _CREATORS.get(name)
    if known is not None:
        return known
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    if len(_CREATORS) >= 4096:
        _CREATORS.clear()
    known = _CREATORS[name] = (match.group(1), match.group(2))
    return known


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def our_segments(directory: str | os.PathLike[str] = SHM_DIR) -> list[str]:
    """Names of tensorwire segments in ``directory``."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if _NAME.fullmatch(n))


def reap(directory: str | os.PathLike[str] = SHM_DIR) -> list[str]:
    """Remove tensorwire segments whose creator process is gone; return their names."""
    removed = []
    for name in our_segments(directory):
        match = _NAME.fullmatch(name)
        assert match is not None
        if not alive(int(match.group(1))):
            _unlink(Path(directory) / name)
            removed.append(name)
    return removed
