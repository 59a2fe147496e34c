"""Shared memory, with lifetime owned by tensorwire (never by Python's resource tracker).

By default buffers go through a warm pool of reusable slots (``transports._pool``), each a sealed
memfd that no other process can resize (no SIGBUS from a neighbour) and that disappears with its
last fd and mapping (a SIGKILL of every process leaves nothing behind). Receivers open it through
``/proc/<pid>/fd``, so sender and receiver must share a pid namespace and the sender must be alive
when the message is first read from a new slot. ``backing="named"`` pools files in /dev/shm
instead: they outlive their sender and cross pid namespaces, but a same-uid process can truncate
them. No copy at all for tensors from ``empty()``. A buffer the pool cannot take (``pool=False``,
or past the pool's memory budget) gets a one-shot named segment.

Every handle carries a fresh capability (128 random bits, in the handle only); the receiver
proves it against the segment's control page (``transports._page_layout``) before reading payload
bytes, claiming, freeing or unlinking anything. A handle that fails leaves its file as it was.

Named segments are ``tw-<pid>-<token>-<seq>`` (the creator's pid, a random token per process, a
counter followed by 32 random bits, so the next name cannot be guessed from the ones in the
directory). A one-shot segment is a control page then exactly the buffer; the receiver opens it (a
regular file of its own uid, of the exact size), claims it, unlinks it, and reads a private copy
with ``pread`` (never a SIGBUS). Only a receiver that asked for named segments (``backing="named"``)
maps one (``borrow``) or a named pool slot: a memfd receiver maps nothing another process can
resize. Unclaimed one-shots are unlinked by their sender within a few seconds of the claim
timeout (the janitor sweeps them, after the transport's close too, while the process lives);
``tensorwire shm reap`` removes those of dead creators.

The handles are ``_shm_handles``'s; the bookkeeping, receipt and sweep of one-shot segments are
``_one_shots``'s; a broadcast's transport (``fan_out``) is ``_fan_out``'s.
"""

from __future__ import annotations

import ctypes
import errno
import math
import operator
import os
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from tensorwire._timeouts import check_number
from tensorwire.errors import DecodeError, TransportError, quoted
from tensorwire.transports._fan_out import FanOut
from tensorwire.transports._one_shot_page import init_file
from tensorwire.transports._one_shots import _OneShots, _receive_one_shot, _void_one_shot
from tensorwire.transports._page_layout import CONTROL_BYTES, MAX_READERS, SENDER
from tensorwire.transports._page_lock import one_wait
from tensorwire.transports._parallel_copy import copy_into, write_at
from tensorwire.transports._pool import Pool, Slot
from tensorwire.transports._reaper import SHM_DIR, _creator, next_name, our_segments, reap
from tensorwire.transports._retention import Retention
from tensorwire.transports._segment import create_file, identity, remove_named, remove_own
from tensorwire.transports._shm_handles import Capability, ShmHandle, SlotHandle
from tensorwire.transports._slots import SlotReader
from tensorwire.transports.base import Buffer, Handle, Transport, not_read_by

__all__ = [
    "MAX_CLAIM_TIMEOUT",
    "MAX_READERS",
    "SHM_DIR",
    "Backing",
    "Capability",
    "FanOut",
    "ShmHandle",
    "ShmTransport",
    "SlotHandle",
    "check_options",
    "our_segments",
    "reap",
]

Backing = Literal["memfd", "named"]


def _dims(what: str, shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` as a tuple of ints, each at least 0 (``TransportError`` EINVAL naming the first that is not)."""
    try:
        items = list(shape)
    except TypeError:
        raise TransportError(errno.EINVAL, f"{what}: shape is {shape!r}; expected a sequence of ints") from None
    dims = []
    for axis, dim in enumerate(items):
        try:
            size = operator.index(dim) if not isinstance(dim, bool) else -1
        except TypeError:
            size = -1
        if size < 0:
            raise TransportError(errno.EINVAL, f"{what}: shape[{axis}] is {dim!r}; expected an int >= 0")
        dims.append(size)
    return tuple(dims)


def _address(data: memoryview) -> int:
    """The address of the first byte of a flat byte view (through ctypes when it is writable: a
    fifth of numpy's cost)."""
    if not data.readonly:
        try:
            return ctypes.addressof(ctypes.c_char.from_buffer(data))
        except (TypeError, ValueError):  # not one C-contiguous run, or empty: numpy answers, as it did before
            pass
    return int(np.frombuffer(data, dtype=np.uint8).ctypes.data)


class ShmTransport(Transport):
    """Out-of-band buffers in shared memory: pooled slots by default, one-shot segments otherwise.

    ``pool``: reuse warm slots (default). ``backing``: ``"memfd"`` (default: sealed, nameless; as a
    receiver, maps only sealed memfds and copies one-shot segments) or ``"named"`` (files in
    /dev/shm, for hand-offs that outlive their sender or cross pid namespaces; as a receiver, also
    maps named slots and, with ``borrow``, one-shot segments). ``cache_fraction`` /
    ``max_cached_bytes``: the most the pool keeps (a fraction of available host memory for memfds,
    of /dev/shm's free space for named slots, or a fixed number of bytes); past it a buffer gets a
    one-shot segment. ``idle_seconds``: free slots unused this
    long are given back. ``claim_timeout``: a buffer nobody claims this long comes back (a later
    claim is an "expired" ``DecodeError``). Thread-safe.
    """

    name: ClassVar[str] = "shm"
    handle_types: ClassVar[tuple[type[Handle], ...]] = (ShmHandle, SlotHandle)

    def __init__(
        self,
        directory: str | os.PathLike[str] = SHM_DIR,
        *,
        pool: bool = True,
        backing: Backing = "memfd",
        cache_fraction: float = 0.25,
        max_cached_bytes: int | None = None,
        idle_seconds: float = 30.0,
        claim_timeout: float = 60.0,
    ) -> None:
        if backing not in ("memfd", "named"):
            raise ValueError(f"backing must be 'memfd' or 'named', got {backing!r}")
        check_options(
            cache_fraction=cache_fraction,
            max_cached_bytes=max_cached_bytes,
            idle_seconds=idle_seconds,
            claim_timeout=claim_timeout,
        )
        if not 0 < claim_timeout <= MAX_CLAIM_TIMEOUT:  # (NaN is neither)
            raise ValueError(f"claim_timeout must be > 0 and at most 2**32 seconds, got {claim_timeout}")
        if idle_seconds != idle_seconds:
            raise ValueError(f"idle_seconds must be a number of seconds, got {idle_seconds}")
        self.directory = Path(directory)
        self.backing: Backing = backing
        self.claim_timeout = claim_timeout
        self._one_shots = _OneShots(self.directory)
        self.pool: Pool | None = None
        if pool:
            memfd = backing == "memfd"
            self.pool = Pool(
                self.directory,
                next_name,
                memfd=memfd,
                retention=_retention(memfd, cache_fraction, max_cached_bytes),
                idle_seconds=idle_seconds,
                claim_timeout=claim_timeout,
            )
        self._reader = SlotReader(self.directory)

    # -- zero-copy allocation -----------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A tensor living in a pool slot: encoding it sends only the slot reference (no copy).

        Ownership: write it, encode it, then stop writing; the slot returns to the pool when the
        receiver's last view of it dies (or when this tensor dies unsent). Reusing the tensor after
        that sees whatever the slot holds next. Its memory stays mapped while the tensor lives,
        even after ``close()`` or ``trim()``.
        """
        if not isinstance(dtype, torch.dtype):
            raise TransportError(errno.EINVAL, f"empty: dtype is {dtype!r}; expected a torch.dtype")
        dims = _dims("empty", shape)
        nbytes = math.prod(dims) * dtype.itemsize
        raw = self._pool_array(nbytes)
        if raw is None:
            return torch.empty(dims, dtype=dtype)
        flat = torch.frombuffer(raw, dtype=dtype)
        return flat if len(dims) == 1 else flat.view(dims)

    def empty_like(self, tensor: torch.Tensor) -> torch.Tensor:
        """``empty`` with the shape and dtype of ``tensor``."""
        return self.empty(tuple(tensor.shape), tensor.dtype)

    def empty_numpy(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """``empty`` for a numpy array."""
        dt = np.dtype(dtype)
        if dt.hasobject or not dt.itemsize:
            what = "holds Python object references" if dt.hasobject else "has no size"
            raise TransportError(errno.EINVAL, f"empty_numpy: dtype {dt} {what}; it cannot live in shared memory")
        dims = _dims("empty_numpy", shape)
        nbytes = math.prod(dims) * dt.itemsize
        raw = self._pool_array(nbytes)
        if raw is None:
            return np.empty(dims, dtype=dt)
        array: np.ndarray = np.frombuffer(raw, dtype=dt, count=nbytes // dt.itemsize).reshape(dims)
        return array

    def _pool_array(self, nbytes: int) -> Any:
        """``nbytes`` in a slot of the pool; None for 0 bytes (nothing to hold: no slot is taken)."""
        if self.pool is None:
            raise TransportError(errno.EINVAL, "empty() needs the pool (ShmTransport(pool=True))")
        if nbytes == 0:
            return None
        raw = self.pool.empty_array(nbytes)
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

    def fan_out(self, readers: int) -> FanOut:
        """A transport for an encoder whose messages ``readers`` receivers each decode (a broadcast):
        every buffer goes to one pool slot that each of them claims, freed when the last lets go."""
        return FanOut(self, readers)

    def _export_pooled(self, data: memoryview, readers: int = 1) -> Handle | None:
        pool = self.pool
        assert pool is not None
        nbytes = data.nbytes
        address = _address(data)
        allocated = pool.hand_over_allocated(address, nbytes, readers)
        if allocated is not None:  # allocated by empty(): handed over as it is
            slot, generation, capability = allocated
            offset = address - slot.address
        else:
            found: Slot | None = None
            try:  # (an interrupt up to the handle's making leaves no slot taken: no receiver can know it)
                found = pool.acquire(nbytes, SENDER)
                if found is None:
                    return None
                try:
                    with memoryview(found.mapping) as area:
                        copy_into(area[CONTROL_BYTES : CONTROL_BYTES + nbytes], data)
                except ValueError:  # its mapping closed under this thread: the pool was closed meanwhile
                    raise TransportError(errno.EBADF, "the shared-memory pool was closed during a copy") from None
                generation, capability = pool.hand_over(found, readers)
            except BaseException:
                if found is not None:
                    pool.give_back(found)
                raise
            slot, offset = found, 0
        number = slot.fd if pool.memfd else None
        return SlotHandle(name=slot.name, offset=offset, generation=generation, capability=capability, fd=number)

    def _export_segment(self, data: memoryview) -> Handle:
        self._one_shots.sweep()
        name = next_name()
        path = self.directory / name
        deadline = time.monotonic_ns() + int(self.claim_timeout * 1e9)
        fd, made = -1, None
        try:  # (an interrupt up to the handle's making leaves no segment: no receiver can know it)
            fd = create_file(path, CONTROL_BYTES + data.nbytes)  # never mapped: written with pwrite
            made = identity(os.fstat(fd))
            try:
                write_at(fd, CONTROL_BYTES, data)
            except OSError as exc:
                raise TransportError(exc.errno, f"cannot write segment {name}: {exc.strerror}") from None
            capability = init_file(fd, data.nbytes, deadline, f"segment {name}")
            self._one_shots.add(name, capability, deadline, made)
            opened, fd = fd, -1  # (no call between: an interrupt as it is closed finds it closed)
            os.close(opened)
            return ShmHandle(name=name, capability=capability)
        except BaseException:
            self._one_shots.forget(name)
            if made is not None:
                remove_named(path, made)
            elif fd >= 0:  # (made, but not known yet)
                remove_own(path, fd)
            if fd >= 0:
                os.close(fd)
            raise

    def release(self, handle: Handle) -> None:
        """Undo one of this transport's exports, or give back a received buffer that will not be
        read; either way only once the handle's capability proves it (a forged handle is ignored)."""
        if isinstance(handle, SlotHandle):
            if _creator(handle.name) is None:
                return
            if self.pool is not None and self.pool.release(handle.name, handle.generation, handle.capability):
                return
            if handle.fd is not None or self.backing == "named":  # a memfd receiver maps no named segment
                self._reader.discard(handle.name, handle.fd, handle.generation, handle.capability)
        elif isinstance(handle, ShmHandle) and _creator(handle.name) is not None:
            path = self.directory / handle.name
            made = self._one_shots.take(handle.name, handle.capability)
            if made is not None:
                remove_named(path, made)  # (a name a neighbour gave to another file meanwhile stays)
            else:
                _void_one_shot(path, handle.capability)

    def claimed(self, handle: Handle) -> bool | None:
        """What became of one of this transport's exports (``Transport.claimed``): read from a pool
        slot's control page, or from whether a one-shot segment is still there (its receiver
        unlinks it as it claims it). One look, no lock."""
        if isinstance(handle, SlotHandle):
            pool = self.pool
            return False if pool is None else pool.claimed(handle.name, handle.generation, handle.capability)
        if isinstance(handle, ShmHandle):
            return self._one_shots.claimed(handle.name, handle.capability)
        return False

    def release_all(self, handles: Sequence[Handle]) -> None:
        """``release`` each of ``handles``, their waits for control pages another process keeps
        locked lasting no longer together than one does (a peer that keeps its pages locked holds a
        failed decode up once, not once per buffer it named; a page not given back goes at its
        claim deadline)."""
        with one_wait():
            super().release_all(handles)

    def importing(self) -> AbstractContextManager[object]:
        """One message's claims wait, all together, no longer than one does for control pages another
        process keeps locked (a peer that releases its pages one after another cannot hold a decode
        up once per buffer it names)."""
        return one_wait()

    def trim(self, idle_seconds: float | None = None) -> int:
        """Give back pool slots idle for ``idle_seconds`` (and what is past its claim timeout);
        return the bytes freed."""
        self._one_shots.sweep()
        return 0 if self.pool is None else self.pool.trim(idle_seconds)

    # -- receiving ----------------------------------------------------------------------------
    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        owner: tuple[str, str] | None = None
        seen: set[str] = set()
        for handle in handles:
            if not isinstance(handle, ShmHandle | SlotHandle):
                raise not_read_by(self, handle)
            sender = _creator(handle.name)
            if sender is None:
                raise DecodeError(
                    f"shm segment name {quoted(handle.name)} is not a tensorwire name (tw-<pid>-<token>-<seq>)"
                )
            if owner is None:
                owner = sender
            elif sender != owner:
                raise DecodeError(
                    f"shm segment {quoted(handle.name)} names a different creator than the message's others"
                )
            if handle.name in seen:
                raise DecodeError(f"shm segment {quoted(handle.name)} is named twice in one message")
            seen.add(handle.name)
            if isinstance(handle, SlotHandle):
                if handle.offset < 0 or handle.generation < 1:
                    raise DecodeError(f"pool slot {quoted(handle.name)}: offset and generation must be positive")
                if handle.fd is not None and not 0 <= handle.fd < 2**31:
                    raise DecodeError(f"pool slot {quoted(handle.name)}: fd {handle.fd} is out of range")

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        named = self.backing == "named"
        if isinstance(handle, SlotHandle):
            if handle.fd is None and not named:
                raise DecodeError(
                    f"pool slot {handle.name} is a named segment, which a same-uid process can truncate under a "
                    "mapping; this receiver maps only sealed memfds (ShmTransport(backing='named') maps both)"
                )
            return self._reader.open(
                handle.name,
                handle.fd,
                handle.offset,
                nbytes,
                handle.generation,
                handle.capability,
                borrow=borrow is not False,
            )
        if not isinstance(handle, ShmHandle):
            raise not_read_by(self, handle)
        borrowed = bool(borrow) and named  # a memfd receiver never maps a file that can be truncated: it copies
        return _receive_one_shot(self.directory / handle.name, handle.capability, nbytes, borrow=borrowed)

    def close(self) -> None:
        """Let go of the pool's slots and of mapped ones; one-shot segments belong to their messages
        (those past their claim timeout are unlinked, now or by the janitor once they are)."""
        if self.pool is not None:
            self.pool.close()
        self._reader.close()
        self._one_shots.sweep()


MAX_CLAIM_TIMEOUT = 2.0**32
"""The longest ``claim_timeout`` (136 years): a claim deadline is a u64 of nanoseconds on the page."""


def check_options(**options: float | None) -> None:
    """``TypeError`` naming the first option that is not a number (a bool is not one; None is a
    ``max_*_bytes``'s "no limit"), ``ValueError`` the first that is out of range: a ``*_fraction``
    must be in [0, 1], a ``max_*_bytes`` None or >= 0 (the names are the caller's)."""
    for name, value in options.items():
        if not (value is None and name.endswith("_bytes")):
            check_number(name, value)
        if name.endswith("_fraction") and not (value is not None and 0 <= value <= 1):
            raise ValueError(f"{name} must be in [0, 1], got {value}")
        if name.endswith("_bytes") and value is not None and not value >= 0:
            raise ValueError(f"{name} must be None or >= 0, got {value}")


def _retention(memfd: bool, fraction: float, max_bytes: int | None) -> Retention:
    if memfd:
        return Retention(shm_fraction=None, host_fraction=fraction, max_bytes=max_bytes)
    return Retention(shm_fraction=fraction, max_bytes=max_bytes)
