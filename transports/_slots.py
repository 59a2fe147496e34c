"""The receiver's side of pool slots: each segment opened and mapped once, every hand-over proven.

A segment is opened only after the checks of ``transports._segment`` (a memfd through its creator's
``/proc/<pid>/fd`` and sealed, or a regular file of ours in /dev/shm) and mapped only if its
control page is valid for its size. A claim proves the handle's capability before anything
changes (``transports._page``); the claimed bytes come back as a lease-backed view (the slot is
freed when the last view dies) or a private copy (freed at once). Mapped segments are bounded in
number; those their creator dropped, or whose creator died, are forgotten within a few seconds
(``transports._janitor``). A forgotten segment's fd and mapping go with the last reference to it
(the reader's, a lease's, a claim in progress): nothing is closed under a claim or a view.
A device placement may page-lock a whole mapping once (``pin``, through a lease) instead of each
slot's bytes for each copy; it stays registered until the mapping goes, and is unregistered just
before (a mapping that cannot be unregistered is never unmapped). Thread-safe; a forked child
starts with nothing mapped: at the fork it closes its copies of the parent's fds and unmaps its
segments (one a view of the child still uses goes with that view).
"""

from __future__ import annotations

import mmap
import os
import resource
import threading
import weakref
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from tensorwire import _memory as memory
from tensorwire.errors import CodecError, DecodeError
from tensorwire.transports import _janitor as janitor
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CONTROL_BYTES, CREATOR_BYTE, DROPPED, ONE_SHOT, RECEIVER_BYTE
from tensorwire.transports._reaper import creator_pid
from tensorwire.transports._segment import alive, identity, open_memfd, open_named, remove_named, started_as_said
from tensorwire.transports.cuda_runtime import CudaCallError, CudaRuntime, keep_forever

__all__ = ["SlotReader"]

# The types of borrowed slot views, by size. A peer chooses the sizes: one that sends many sizes
# fills it, and later sizes are viewed through numpy (slower, never wrong).
_VIEWS = memory.Chars()
_REFUSED = "refused"  # a mapping whose registration failed: not tried again


class _Pins:
    """The host bytes a reader's mappings keep registered with a device runtime, and the most they may."""

    __slots__ = ("limit", "lock", "total")

    def __init__(self, limit: int) -> None:
        # reentrant: a mapping collected while this thread holds it (a cycle freed by the GC inside
        # ``pin``) unpins under it
        self.limit, self.total, self.lock = limit, 0, threading.RLock()


def _pin_limit() -> int:
    """A quarter of the host's memory: the most a reader keeps page-locked for device copies."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (OSError, ValueError):
        return 0


class _Mapped:
    """A segment the receiver mapped: its page, an array over all of it (while a lease holds that
    array the mapping cannot be closed), the address of its first byte."""

    __slots__ = (
        "address",
        "anchor",
        "capacity",
        "creator",
        "gone",
        "made",
        "mapping",
        "name",
        "page",
        "path",
        "pid",
        "pinned",
        "pins",
        "started",
    )

    def __init__(
        self, name: str, page: Page, mapping: mmap.mmap, path: Path | None, pins: _Pins, made: tuple[int, int]
    ) -> None:
        self.pinned: tuple[CudaRuntime, int] | str | None = None  # (runtime, pid) once registered
        self.page = page  # (first: from here this object closes its fd, also one an interrupt left half made)
        self.name, self.mapping, self.path, self.pins = name, mapping, path, pins
        self.made = made  # the file mapped (``identity``): its name is removed only while it names it
        self.pid = os.getpid()  # the process that mapped it: a forked child's copy is its parent's
        self.anchor = np.frombuffer(mapping, dtype=np.uint8)
        self.address: int = self.anchor.__array_interface__["data"][0]
        self.capacity = len(mapping) - CONTROL_BYTES
        self.creator = creator_pid(name)
        self.started = self.page.creator_started  # (read once: its creator wrote it as it made the page)
        self.gone = False  # its creator found dead by a look that told a reused pid (``creator_alive``)

    def forget(self) -> None:
        """Close the fd (the mapping lives on while a lease holds it)."""
        self.page.close_fd()

    def pin(self, runtime: CudaRuntime, nbytes: int) -> bool:
        """Whether the whole mapping is page-locked, for a device copy of ``nbytes`` of it: registered
        with ``runtime`` here, once, if the reader's budget allows and the copy covers half of it at
        least (registration faults in every page: a sender's sparse giant segment is never made
        resident for a small message). A copy from a pinned mapping needs no registration."""
        pins = self.pins
        with pins.lock:
            if self.pinned is None:
                size = len(self.mapping)
                if pins.total + size > pins.limit or 2 * nbytes < size:
                    return False  # may fit later, or suit a larger copy
                try:
                    runtime.register(self.address, size)
                except CudaCallError:  # the runtime cleared its error; copies read pageable memory
                    self.pinned = _REFUSED
                    return False
                self.pinned = (runtime, os.getpid())
                pins.total += size
            pinned = self.pinned
            return isinstance(pinned, tuple) and pinned[1] == os.getpid()  # (a forked child's is not)

    def _unpin(self) -> None:
        """Unregister a pinned mapping, before it is unmapped; one that stays registered stays mapped."""
        pinned = self.pinned
        if not isinstance(pinned, tuple):
            return
        self.pinned = None
        runtime, pid = pinned
        if pid != os.getpid():  # a forked child's copy: the registration is its parent's
            return
        try:
            runtime.unregister(self.address)
        except Exception:  # CudaCallError, or a runtime already torn down at exit
            keep_forever(self.mapping)  # never unmapped under the device
            return
        with self.pins.lock:
            self.pins.total -= len(self.mapping)

    def __del__(self) -> None:  # the reader and every lease let go: no claim can be using the fd
        try:
            if hasattr(self, "mapping"):  # (one an interrupt left half made has nothing registered)
                self._unpin()
        finally:
            self.forget()

    def creator_seen(self) -> bool:
        """Whether the process that made this segment may live (one look, no file read): its pid
        names a process (its creator, or one that reused the pid), or (a named one, made in another
        pid namespace maybe) its mark on the file holds; not once ``creator_alive`` found it dead."""
        if self.gone:
            return False
        return alive(self.creator) or (self.path is not None and self.page.marked_elsewhere(CREATOR_BYTE))

    def creator_alive(self) -> bool:
        """Whether the process that made this segment lives: its pid names a process started when
        the page says its creator did (where it says: a pid reused since names another process), or
        (a named one) its mark on the file holds. Found dead once, it stays dead (``gone``)."""
        if not self.gone:
            living = alive(self.creator) and started_as_said(self.creator, self.started)
            self.gone = not living and not (self.path is not None and self.page.marked_elsewhere(CREATOR_BYTE))
        return not self.gone

    def freed(self, generation: int) -> None:
        """The claim of ``generation`` is over: free the slot; a named segment whose creator died goes."""
        free = self.page.free(generation)
        if self.path is None:
            return
        self.page.mark(RECEIVER_BYTE, False)  # (after the page is free: never a claim without it)
        if free and not self.creator_seen():  # (a name a neighbour gave to another file meanwhile stays)
            remove_named(self.path, self.made)


class _ReceiverLease:
    """Backs a borrowed view of a slot; frees the slot when the last view dies."""

    __slots__ = ("_generation", "_nbytes", "_segment", "address")

    def __init__(self, segment: _Mapped, nbytes: int, offset: int, generation: int) -> None:
        self._segment, self._generation, self._nbytes = segment, generation, nbytes
        self.address = segment.address + CONTROL_BYTES + offset

    @property
    def __array_interface__(self) -> dict[str, Any]:
        """The slot's bytes to numpy (where no ctypes type of their size is kept)."""
        return memory.byte_interface(self.address, self._nbytes)

    def pin_host(self, runtime: CudaRuntime) -> bool:
        """Whether these bytes are page-locked for a device copy by ``runtime`` (their whole mapping
        registered, once, for as long as it is mapped)."""
        return self._segment.pin(runtime, self._nbytes)

    def __del__(self) -> None:
        segment = self._segment
        if segment.pid != os.getpid():  # a forked child's copy: the claim (and its mark) is the parent's
            return
        if segment.page.held_here():  # collected inside this thread's own transition of the page
            segment.page.defer(partial(segment.freed, self._generation))  # (given back as it ends)
            return
        try:
            segment.freed(self._generation)
        except ValueError:  # the page views were let go (a forked child's copy)
            pass


def _max_mapped_bytes() -> int:
    """This host's memory: the most bytes of segments a reader keeps mapped (a sender's slots are
    backed by memory as they are made, so every sender's together fit in it)."""
    try:
        return max(1 << 30, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError):
        return 1 << 40


def _max_segments() -> int:
    """How many segments a reader keeps mapped (each holds two fds): at most an eighth of the fd limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(1024, soft // 8)) if soft > 0 else 1024


_READERS: weakref.WeakSet[SlotReader] = weakref.WeakSet()  # every live reader, for a forked child to leave


def _leave_parents_segments() -> None:
    """In a forked child: every reader lets go of its parent's segments (``SlotReader._forsake``)."""
    for reader in list(_READERS):
        reader._forsake()


os.register_at_fork(after_in_child=_leave_parents_segments)


class SlotReader:
    """Opens, maps and claims the slots handles name."""

    def __init__(
        self,
        directory: Path,
        max_segments: int | None = None,
        max_pinned_bytes: int | None = None,
        max_mapped_bytes: int | None = None,
    ) -> None:
        self.directory = directory
        self.max_segments = max_segments if max_segments is not None else _max_segments()
        self.max_mapped_bytes = max_mapped_bytes if max_mapped_bytes is not None else _max_mapped_bytes()
        self._max_pinned = max_pinned_bytes if max_pinned_bytes is not None else _pin_limit()
        self._reset()
        janitor.watch(self)
        _READERS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pins = _Pins(self._max_pinned)
        self._maps: dict[tuple[str, int | None], _Mapped] = {}

    def _own(self) -> None:
        """In a forked child: start with nothing mapped and fresh locks (a thread of the parent may
        have held one at the fork); the parent's segments' fds close as their copies go."""
        if self._pid != os.getpid():
            self._reset()

    def _forsake(self) -> None:
        """In a forked child, at the fork: close the fds of the parent's segments and forget them
        (each is unmapped once no view of it is left here)."""
        for segment in self._maps.values():
            segment.forget()
        self._reset()

    @property
    def mapped(self) -> int:
        """Segments mapped now."""
        return len(self._maps)

    @property
    def pinned_bytes(self) -> int:
        """Bytes of this reader's mappings registered with a device runtime now (``pin``)."""
        return self._pins.total

    def _segment(self, name: str, number: int | None) -> tuple[_Mapped, bool]:
        """The segment ``name`` names, and whether this reader keeps it mapped already (then it is
        the most recently used from now). Another is mapped here and kept only once a claim of it
        proved a handle's capability (``_keep``): a forged handle leaves no mapping behind."""
        key = (name, number)
        self._own()
        with self._lock:
            found = self._maps.pop(key, None)
            if found is not None:
                self._maps[key] = found
                return found, True
            return self._map(name, number), False

    def _keep(self, name: str, number: int | None, segment: _Mapped) -> None:
        """Keep ``segment`` mapped, letting go of the least recently used first while more than
        ``max_segments`` or ``max_mapped_bytes`` would be kept (their memory goes with their last view)."""
        key = (name, number)
        with self._lock:
            if key in self._maps:  # (another thread mapped and kept it meanwhile)
                return
            size = len(segment.mapping)
            kept = sum(len(other.mapping) for other in self._maps.values())
            while self._maps and (len(self._maps) >= self.max_segments or kept + size > self.max_mapped_bytes):
                oldest = next(iter(self._maps))
                kept -= len(self._maps.pop(oldest).mapping)
            self._maps[key] = segment

    def _map(self, name: str, number: int | None) -> _Mapped:
        what = "pool segment"
        path = None if number is not None else self.directory / name
        if number is not None:
            fd = open_memfd(creator_pid(name), number, name, what, min_size=CONTROL_BYTES)
        else:
            fd = open_named(self.directory / name, what, min_size=CONTROL_BYTES)
        try:
            info = os.fstat(fd)
            size = info.st_size  # again: a named file can be cut short since it was checked
            if size < CONTROL_BYTES:
                raise ValueError(f"it holds {size} bytes, less than its {CONTROL_BYTES}-byte header")
            if size > self.max_mapped_bytes:  # (a sparse file costs its maker nothing)
                raise ValueError(f"it holds {size} bytes, more than this receiver maps ({self.max_mapped_bytes})")
            mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        except (OSError, ValueError) as exc:
            os.close(fd)
            raise DecodeError(f"{what} {name} cannot be mapped: {exc}") from None
        page: Page | None = None
        try:  # an interrupt as they are made leaves the fd to be closed here, or by the half-made segment
            page = Page(fd, mapping, f"pool slot {name}")
            segment = _Mapped(name, page, mapping, path, self._pins, identity(info))
        except BaseException:
            if page is None:
                os.close(fd)  # (a page made but not yet named here holds the fd without closing it)
            else:
                page.close_fd()
            raise
        page.marks_claims = path is not None  # across pid namespaces too, the sender sees it held
        if not page.valid or page.capacity != segment.capacity or page.flags & ONE_SHOT:
            segment.forget()
            del segment
            page.release()
            raise DecodeError(f"{what} {name} has no valid control page")
        return segment

    def open(
        self,
        name: str,
        number: int | None,
        offset: int,
        nbytes: int,
        generation: int,
        capability: bytes,
        *,
        borrow: bool,
    ) -> Any:
        """Claim the slot and return its bytes: a writable view whose ``base`` is its lease (``borrow``),
        or a private copy."""
        segment, kept = self._segment(name, number)
        if offset + nbytes > segment.capacity:
            raise DecodeError(
                f"pool slot {name}: bytes [{offset}, {offset + nbytes}) outside its {segment.capacity}-byte area"
            )
        segment.page.claim(generation, capability)  # (errors name the page: "pool slot <name>")
        if not kept:
            self._keep(name, number, segment)
        if borrow:
            try:
                lease = _ReceiverLease(segment, nbytes, offset, generation)
            except BaseException:  # (an interrupt): no view holds the claim to free it
                segment.page.unclaim(generation)
                raise
            buffer = _VIEWS.view(lease.address, nbytes, lease)  # (from here the lease frees it)
            return np.asarray(lease) if buffer is None else buffer
        start = CONTROL_BYTES + offset
        try:
            data = bytearray(segment.anchor[start : start + nbytes])
        except BaseException:  # (an interrupt, a MemoryError): not read, given back
            segment.page.unclaim(generation)
            raise
        segment.freed(generation)
        return data

    def discard(self, name: str, number: int | None, generation: int, capability: bytes) -> bool:
        """Free a slot whose message will not be read, if the handle proves its capability."""
        try:
            segment, _ = self._segment(name, number)
        except CodecError:
            return False
        return segment.page.discard(generation, capability)

    def prune(self) -> None:
        """Forget segments their creator dropped or died holding (their memory goes with the last view);
        the janitor runs this every few seconds."""
        self._own()
        with self._lock:  # (held throughout: a close() meanwhile would leave the segments' fds open here)
            for key, segment in list(self._maps.items()):
                if segment.page.flags & DROPPED or not segment.creator_alive():
                    del self._maps[key]

    def close(self) -> None:
        self._own()
        with self._lock:
            self._maps.clear()
