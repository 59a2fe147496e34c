"""A warm pool of shared-memory slots: segments created and mapped once, then reused.

Each slot is one segment: a 4 KiB control page, then the data area of one size class (quarter
octaves from 64 KiB, so at most 25% is wasted). The control page holds a magic, the slot's state
(free, held by the sender, in flight, claimed by a receiver), a generation counter bumped on
every hand-over, and the receiver's pid. The sender copies into a free slot (or hands over a
slot it allocated with ``empty``: no copy at all) and marks it in flight; the receiver maps the
segment once, checks state and generation, claims the slot (a replayed handle finds it claimed),
and gives back a view whose lease marks the slot free when the last view dies. A slot is never
reused while a receiver holds a view of it; a slot claimed by a receiver that died is reclaimed.
Growth is the only place that faults pages (pre-faulted with MAP_POPULATE); cached bytes are
bounded by a retention policy (``transports.retention``), and slots idle for a while are given
back. An owner may ``prepare`` each new slot (e.g. register it with a device) and ``retire`` it
before it is unmapped (returning False keeps the mapping alive: the owner holds on to it).
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codec.errors import DecodeError, TransportError
from transports.retention import Retention

__all__ = [
    "CLAIMED",
    "CONTROL_BYTES",
    "FREE",
    "IN_FLIGHT",
    "POPULATE",
    "SENDER",
    "Pool",
    "Slot",
    "SlotReader",
    "alive",
    "create_segment",
    "map_segment",
    "size_class",
]

CONTROL_BYTES = 4096
MAGIC = b"TWSLOT01"
FREE, SENDER, IN_FLIGHT, CLAIMED = 0, 1, 2, 3
MIN_CLASS = 64 * 1024
_U64 = struct.Struct("<Q")
_STATE, _GENERATION, _RECEIVER, _CAPACITY = 8, 16, 24, 32
POPULATE = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


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


def create_segment(path: Path, size: int) -> mmap.mmap:
    """A new segment of ``size`` bytes, reserved with ``posix_fallocate`` and mapped pre-faulted.

    A full file system is a ``TransportError`` (ENOSPC) here, before anything is written, never a
    SIGBUS on a later write. Nothing is left behind on failure.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot create shared memory segment {path.name}: {exc.strerror}") from None
    try:
        os.posix_fallocate(fd, 0, size)
        return mmap.mmap(fd, size, flags=POPULATE)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise TransportError(
            exc.errno, f"cannot reserve {size} bytes in {path.parent} for {path.name}: {exc.strerror}"
        ) from None
    finally:
        os.close(fd)


def map_segment(
    path: Path,
    what: str,
    min_size: int,
    *,
    exact: int | None = None,
    flags: int = mmap.MAP_SHARED,
    unlink: bool = False,
) -> mmap.mmap:
    """Map an existing segment someone else created (no symlinks), after checking its real size:
    at least ``min_size`` bytes, or exactly ``exact`` (the size its handle names). ``unlink``: remove
    the name once the file is open (whatever the checks find: a one-shot segment is read once)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot open {what} {path.name}: {exc.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if exact is not None and size != exact:
            raise DecodeError(f"{what} {path.name} holds {size} bytes, its handle names {exact}")
        if size < min_size:
            raise DecodeError(f"{what} {path.name} holds {size} bytes, less than its {min_size}-byte header")
        return mmap.mmap(fd, size, flags=flags)
    finally:
        os.close(fd)
        if unlink:
            path.unlink(missing_ok=True)


def _get(view: Any, offset: int) -> int:
    value: int = _U64.unpack_from(view, offset)[0]
    return value


def _put(view: Any, offset: int, value: int) -> None:
    _U64.pack_into(view, offset, value)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(eq=False)
class Slot:
    """One pooled segment as its creator sees it."""

    name: str
    path: Path
    capacity: int
    mapping: mmap.mmap
    address: int  # of the data area
    last_used: float = field(default_factory=time.monotonic)

    @property
    def state(self) -> int:
        return _get(self.mapping, _STATE)

    @property
    def generation(self) -> int:
        return _get(self.mapping, _GENERATION)


class _SenderLease:
    """Backs a tensor from ``Pool.empty``; frees the slot if the tensor dies without being sent."""

    def __init__(self, pool: Pool, slot: Slot, nbytes: int) -> None:
        self._pool, self._slot, self._generation = pool, slot, slot.generation
        array = np.frombuffer(slot.mapping, dtype=np.uint8, count=nbytes, offset=CONTROL_BYTES)
        self.__array_interface__ = array.__array_interface__

    def __del__(self) -> None:
        slot = self._slot
        try:
            if slot.state == SENDER and slot.generation == self._generation:
                self._pool.give_back(slot)
        except (ValueError, OSError):  # the pool was closed: its mapping is gone
            pass


class Pool:
    """The sender's slots, by size class; thread-safe."""

    def __init__(
        self,
        directory: Path,
        make_name: Callable[[], str],
        *,
        retention: Retention | None = None,
        idle_seconds: float = 30.0,
        prepare: Callable[[Slot], None] | None = None,
        retire: Callable[[Slot], bool] | None = None,
    ) -> None:
        self.directory = directory
        self._make_name = make_name
        self.retention = retention if retention is not None else Retention()
        self.idle_seconds = idle_seconds
        self._prepare = prepare
        self._retire = retire
        self._slots: dict[int, list[Slot]] = {}
        # at exit, or when the pool is dropped without close(), its segments are unlinked
        self._wake = threading.Event()
        self._finalizer = weakref.finalize(self, _finalize, self._slots, self._wake)
        self._lock = threading.Lock()
        self._closed = False
        self._trimmer: threading.Thread | None = None

    # -- accounting ---------------------------------------------------------------------------
    @property
    def cached_bytes(self) -> int:
        return sum(s.capacity + CONTROL_BYTES for slots in self._slots.values() for s in slots)

    def slots(self) -> list[Slot]:
        with self._lock:
            return [s for slots in self._slots.values() for s in slots]

    def _budget(self) -> int:
        return self.retention.budget(self.directory, self.cached_bytes)

    # -- taking and giving back ---------------------------------------------------------------
    def acquire(self, nbytes: int, state: int) -> Slot | None:
        """A slot of at least ``nbytes`` moved to ``state``; None when the budget forbids growth."""
        capacity = size_class(nbytes)
        with self._lock:
            if self._closed:
                raise TransportError(errno.EBADF, "the shared-memory pool is closed")
            for slot in self._slots.get(capacity, ()):
                current = slot.state
                if current == CLAIMED:
                    receiver = _get(slot.mapping, _RECEIVER)
                    if receiver and not alive(receiver):
                        current = FREE  # its receiver died holding it
                if current == FREE:
                    self._take(slot, state)
                    return slot
            grown = self._grow(capacity)
            if grown is not None:
                self._take(grown, state)
            return grown

    def _take(self, slot: Slot, state: int) -> None:
        _put(slot.mapping, _RECEIVER, 0)
        _put(slot.mapping, _GENERATION, slot.generation + 1)
        _put(slot.mapping, _STATE, state)
        slot.last_used = time.monotonic()

    def hand_over(self, slot: Slot) -> int:
        """Mark ``slot`` in flight; return its generation (which the receiver must see)."""
        _put(slot.mapping, _STATE, IN_FLIGHT)
        return slot.generation

    def release(self, name: str, generation: int) -> bool:
        """Undo the hand-over of one of our slots (a failed encode); False if the slot is not ours.

        A slot a receiver has already claimed is left alone: its lease frees it.
        """
        for slot in self.slots():
            if slot.name == name:
                if slot.generation == generation and slot.state == IN_FLIGHT:
                    self.give_back(slot)
                return True
        return False

    def forget(self, slot: Slot) -> None:
        """Take ``slot`` out of the pool for good, unlinked but still mapped (its owner keeps the mapping)."""
        with self._lock:
            group = self._slots.get(slot.capacity, [])
            if slot in group:
                group.remove(slot)
        slot.path.unlink(missing_ok=True)

    def give_back(self, slot: Slot) -> None:
        _put(slot.mapping, _STATE, FREE)
        slot.last_used = time.monotonic()

    def find(self, address: int, nbytes: int) -> Slot | None:
        """The slot whose data area holds ``[address, address + nbytes)`` and that the sender holds."""
        with self._lock:
            for slots in self._slots.values():
                for slot in slots:
                    if slot.address <= address and address + nbytes <= slot.address + slot.capacity:
                        return slot if slot.state == SENDER else None
        return None

    def empty_array(self, nbytes: int) -> np.ndarray | None:
        """A uint8 array of ``nbytes`` living in a slot the sender holds; None if the pool cannot grow."""
        slot = self.acquire(nbytes, SENDER)
        if slot is None:
            return None
        return np.asarray(_SenderLease(self, slot, nbytes))

    # -- growth and retention -------------------------------------------------------------------
    def _grow(self, capacity: int) -> Slot | None:
        size = CONTROL_BYTES + capacity
        if self.cached_bytes + size > self._budget():
            self._evict(size)
            if self.cached_bytes + size > self._budget():
                return None
        name = self._make_name()
        path = self.directory / name
        mapping = create_segment(path, size)
        mapping[:8] = MAGIC
        _put(mapping, _CAPACITY, capacity)
        address = np.frombuffer(mapping, dtype=np.uint8, count=1, offset=CONTROL_BYTES).ctypes.data
        slot = Slot(name, path, capacity, mapping, address)
        if self._prepare is not None:
            try:
                self._prepare(slot)
            except BaseException:
                path.unlink(missing_ok=True)
                mapping.close()
                raise
        self._slots.setdefault(capacity, []).append(slot)
        self._start_trimmer()
        return slot

    def _evict(self, wanted: int) -> None:
        """Drop free slots, least recently used first, until ``wanted`` more bytes fit the budget."""
        free = sorted(
            (s for slots in self._slots.values() for s in slots if s.state == FREE), key=lambda s: s.last_used
        )
        for slot in free:
            if self.cached_bytes + wanted <= self._budget():
                return
            self._drop(slot)

    def _drop(self, slot: Slot) -> None:
        self._slots[slot.capacity].remove(slot)
        try:
            os.unlink(slot.path)
        except FileNotFoundError:
            pass
        if self._retire is not None and not self._retire(slot):
            return  # the owner keeps the mapping (e.g. a device may still use it)
        try:
            slot.mapping.close()
        except BufferError:
            pass  # a view of it is still alive in this process; the mapping goes with it

    def trim(self, idle_seconds: float | None = None) -> int:
        """Give back free slots unused for ``idle_seconds`` (default: the pool's); return the bytes freed."""
        limit = self.idle_seconds if idle_seconds is None else idle_seconds
        now = time.monotonic()
        freed = 0
        with self._lock:
            for slots in list(self._slots.values()):
                for slot in list(slots):
                    if slot.state == FREE and now - slot.last_used >= limit:
                        freed += slot.capacity + CONTROL_BYTES
                        self._drop(slot)
        return freed

    def _start_trimmer(self) -> None:
        if self._trimmer is None and self.idle_seconds > 0:
            args = (weakref.ref(self), self._wake, max(self.idle_seconds / 2, 0.05))
            self._trimmer = threading.Thread(target=_trim_loop, args=args, name="tensorwire-pool-trim", daemon=True)
            self._trimmer.start()

    def close(self) -> None:
        """Unlink every slot; receivers keep what they have mapped until they let go."""
        self._wake.set()
        with self._lock:
            self._closed = True
            for slots in list(self._slots.values()):
                for slot in list(slots):
                    self._drop(slot)


def _trim_loop(pool_ref: weakref.ref[Pool], wake: threading.Event, period: float) -> None:
    """Trim idle slots every ``period`` until the pool is closed or dropped (holds no strong reference)."""
    while not wake.wait(period):
        pool = pool_ref()
        if pool is None:
            return
        pool.trim()
        del pool


def _finalize(slots: dict[int, list[Slot]], wake: threading.Event) -> None:
    wake.set()
    _unlink_all(slots)


def _unlink_all(slots: dict[int, list[Slot]]) -> None:
    """Unlink every slot not in flight; those a receiver may still open are left to it (or the reaper)."""
    for group in slots.values():
        for slot in group:
            try:
                if slot.state in (IN_FLIGHT, CLAIMED):
                    continue
            except ValueError:  # mapping closed: the slot was dropped
                continue
            try:
                os.unlink(slot.path)
            except FileNotFoundError:
                pass


def _free(mapping: mmap.mmap, path: str, generation: int, states: tuple[int, ...] = (CLAIMED,)) -> None:
    """Hand a slot in one of ``states`` back; if its creator has exited, nobody will reuse it: unlink it."""
    if _get(mapping, _GENERATION) != generation or _get(mapping, _STATE) not in states:
        return
    _put(mapping, _STATE, FREE)
    try:
        creator = int(os.path.basename(path).split("-")[1])
    except (IndexError, ValueError):
        return
    if not alive(creator):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class _Mapped:
    """A segment the receiver mapped: the mapping, an array over all of it (while any lease holds
    that array the mapping cannot be closed), the address of its first byte and its path."""

    __slots__ = ("address", "anchor", "mapping", "path")

    def __init__(self, mapping: mmap.mmap, path: str) -> None:
        self.mapping = mapping
        self.anchor = np.frombuffer(mapping, dtype=np.uint8)
        self.address: int = self.anchor.__array_interface__["data"][0]
        self.path = path


class _ReceiverLease:
    """Backs a borrowed view of a slot; marks the slot free when the last view dies."""

    __slots__ = ("__array_interface__", "_generation", "_segment")

    def __init__(self, segment: _Mapped, nbytes: int, offset: int, generation: int) -> None:
        self._segment, self._generation = segment, generation
        start = segment.address + CONTROL_BYTES + offset
        self.__array_interface__ = {"data": (start, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}

    def __del__(self) -> None:
        try:
            _free(self._segment.mapping, self._segment.path, self._generation)
        except ValueError:  # mapping already closed
            pass


class SlotReader:
    """The receiver's side: each segment mapped once, every slot checked before use."""

    PRUNE_EVERY = 64

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._maps: dict[str, _Mapped] = {}
        self._lock = threading.Lock()
        self._imports = 0

    def _mapping(self, name: str) -> _Mapped:
        with self._lock:
            segment = self._maps.get(name)
            if segment is not None:
                return segment
            mapping = map_segment(self.directory / name, "pool segment", CONTROL_BYTES)
            if mapping[:8] != MAGIC or _get(mapping, _CAPACITY) != len(mapping) - CONTROL_BYTES:
                mapping.close()
                raise DecodeError(f"pool segment {name} has no valid control page")
            segment = self._maps[name] = _Mapped(mapping, os.path.join(self.directory, name))
            return segment

    def open(self, name: str, offset: int, nbytes: int, generation: int, *, borrow: bool) -> Any:
        """The slot's bytes: a lease-backed array (``borrow``) or a private copy (the slot is freed)."""
        self._prune()
        segment = self._mapping(name)
        mapping = segment.mapping
        capacity = len(mapping) - CONTROL_BYTES
        if offset + nbytes > capacity:
            raise DecodeError(f"pool slot {name}: bytes [{offset}, {offset + nbytes}) outside its {capacity}-byte area")
        if _get(mapping, _STATE) != IN_FLIGHT or _get(mapping, _GENERATION) != generation:
            raise DecodeError(
                f"pool slot {name} generation {generation} is no longer in flight (stale or replayed handle)"
            )
        _put(mapping, _RECEIVER, os.getpid())
        _put(mapping, _STATE, CLAIMED)
        if borrow:
            return np.asarray(_ReceiverLease(segment, nbytes, offset, generation))
        start = CONTROL_BYTES + offset
        data = bytearray(segment.anchor[start : start + nbytes])
        _free(mapping, segment.path, generation)
        return data

    def discard(self, name: str, generation: int) -> None:
        """Free a slot whose message will not be read (a failed decode), unless someone claimed it."""
        try:
            segment = self._mapping(name)
        except (TransportError, DecodeError):
            return
        _free(segment.mapping, segment.path, generation, states=(IN_FLIGHT,))

    def _prune(self) -> None:
        """Forget mappings of segments their creator has unlinked (checked every few imports)."""
        self._imports += 1
        if self._imports % self.PRUNE_EVERY:
            return
        with self._lock:
            for name in [n for n in self._maps if not (self.directory / n).exists()]:
                del self._maps[name]

    def close(self) -> None:
        with self._lock:
            self._maps.clear()
