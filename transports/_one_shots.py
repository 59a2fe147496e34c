"""One-shot segments: a file in /dev/shm holding a control page then exactly one buffer, made for a
buffer the pool cannot take (``ShmTransport._export_segment`` writes one). The sender's record of
those it made that may still be unclaimed (``_OneShots``, swept by the janitor once past their
claim deadline, ``_sweep_one_shot``); a receiver's claim, unlink and read of one
(``_receive_one_shot``); and the give-back of one that will not be read (``_void_one_shot``).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from tensorwire.errors import CodecError, DecodeError, TransportError
from tensorwire.transports import _janitor as janitor
from tensorwire.transports._one_shot_page import claim_file, discard_file, expire_file
from tensorwire.transports._page_layout import CONTROL_BYTES, digest
from tensorwire.transports._page_lock import one_wait
from tensorwire.transports._reaper import _creator
from tensorwire.transports._segment import identity, open_named, read_into, remove_named, remove_own

_LEFT: set[_OneShots] = set()  # those with segments pending: swept while the process lives,
# whether their transport is still used, closed or dropped


class _OneShots:
    """One-shot segments this transport made that may still be unclaimed: name -> (digest, deadline,
    (device, inode) of the file made: what its name must still name to be unlinked).
    The janitor sweeps them every few seconds (``prune``) until none is left pending, after the
    transport's close too. A forked child starts with none: its parent's are its parent's."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reset()
        janitor.watch(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[bytes, int, tuple[int, int]]] = {}

    def _own(self) -> None:
        """In a forked child: forget the parent's segments (and a lock a parent's thread held), and
        have this process's janitor sweep the child's own."""
        if self._pid != os.getpid():
            self._reset()
            janitor.watch(self)

    def prune(self) -> None:
        """Sweep (the janitor's call); let go once nothing is pending."""
        self.sweep()
        if not self._pending:
            _LEFT.discard(self)

    def add(self, name: str, capability: bytes, deadline_ns: int, made: tuple[int, int]) -> None:
        """Remember ``name``, made under ``capability`` as file ``made`` (device, inode), unclaimed
        until ``deadline_ns``."""
        self._own()
        with self._lock:
            self._pending[name] = (digest(capability), deadline_ns, made)
        _LEFT.add(self)

    def take(self, name: str, capability: bytes) -> tuple[int, int] | None:
        """Forget ``name`` if this transport made it under ``capability``: the file it made (device,
        inode), or None."""
        self._own()
        with self._lock:
            known = self._pending.get(name)
            if known is None or known[0] != digest(capability):
                return None
            del self._pending[name]
            return known[2]

    def forget(self, name: str) -> None:
        """``name`` was claimed or given back by this process: nothing to sweep, and no claim to tell."""
        self._own()
        with self._lock:
            self._pending.pop(name, None)

    def claimed(self, name: str, capability: bytes) -> bool | None:
        """Whether ``name``, made under ``capability``, was claimed: True once its receiver (another
        process) unlinked it (as it claims it), None while it waits (past its deadline too, until it
        is swept), False once swept, if this process claimed it, or if not ours."""
        self._own()
        with self._lock:
            known = self._pending.get(name)
        if known is None or known[0] != digest(capability):
            return False
        return None if os.path.lexists(self.directory / name) else True

    def sweep(self) -> int:
        """Unlink the segments nobody claimed before their deadline; return how many.

        Deadlines come in the order they were added (one claim timeout per transport), so the walk
        stops at the first that is not due: a sweep costs what it sweeps, not what is pending (every
        segment sent within the timeout, claimed or not: a receiver's claim is not seen here). A
        segment whose page another process holds locked is never waited for: it stays pending, first
        in line for the next sweep.
        """
        self._own()
        now = time.monotonic_ns()
        due: list[tuple[str, tuple[bytes, int, tuple[int, int]]]] = []
        with self._lock:
            for name, known in self._pending.items():
                if known[1] >= now:
                    break
                due.append((name, known))
            for name, _ in due:
                del self._pending[name]
        swept = 0
        locked: list[tuple[str, tuple[bytes, int, tuple[int, int]]]] = []
        with one_wait(0):
            for name, known in due:
                try:
                    swept += _sweep_one_shot(self.directory / name, known[2])
                except TransportError:  # its page held by another process: the next sweep
                    locked.append((name, known))
        if locked:
            with self._lock:
                self._pending = {**dict(locked), **self._pending}
        return swept


def _receive_one_shot(path: Path, capability: bytes, nbytes: int, *, borrow: bool) -> Any:
    """Claim a one-shot segment, unlink it, and return its bytes (a private copy, or mapped)."""
    what = f"shared memory segment {path.name}"
    fd = open_named(path, "shared memory segment", exact=CONTROL_BYTES + nbytes)
    try:
        claim_file(fd, capability, what)
        _unlink(path, fd)  # read once
        if borrow:
            try:
                mapping = mmap.mmap(fd, CONTROL_BYTES + nbytes, flags=mmap.MAP_SHARED)
            except OSError as exc:
                raise TransportError(exc.errno, f"cannot map {what}: {exc.strerror}") from None
            except ValueError as exc:  # cut short since it was opened (mmap checks the file's size)
                raise DecodeError(f"{what} cannot be mapped: {exc}") from None
            return np.frombuffer(mapping, dtype=np.uint8, offset=CONTROL_BYTES)  # lives while a view does
        data = np.empty(nbytes, dtype=np.uint8)
        read_into(fd, memoryview(data), CONTROL_BYTES, what)  # type: ignore[arg-type]
        return data
    finally:
        os.close(fd)


def _void_one_shot(path: Path, capability: bytes) -> bool:
    """Unlink a one-shot segment if a discard that proves ``capability`` takes its page out of
    flight; a segment gone or not ours is left alone."""
    try:
        fd = open_named(path, "shared memory segment", min_size=CONTROL_BYTES)
    except CodecError:
        return False  # claimed and unlinked by its receiver, or not a file of ours
    try:
        if not discard_file(fd, capability, f"shared memory segment {path.name}"):
            return False
        _unlink(path, fd)
        return True
    except CodecError:
        return False
    finally:
        os.close(fd)


def _sweep_one_shot(path: Path, made: tuple[int, int]) -> bool:
    """Unlink one of this process's one-shot segments that nobody claimed before the deadline it set,
    its page voided first (a late claim is refused) whatever the page says now: a peer that rewrote
    its deadline, state or magic does not keep it. A name that no longer names the file ``made``
    (claimed and unlinked by its receiver, or given to another file) is left alone; a page another
    process keeps locked raises its ``TransportError`` (EAGAIN)."""
    try:  # (the name checked before it is opened: another file put there is never opened)
        if identity(os.lstat(path)) != made:
            return False
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if identity(os.fstat(fd)) != made:
            return False
        try:
            expire_file(fd, f"shared memory segment {path.name}")
        except TransportError as exc:
            if exc.errno == errno.EAGAIN:
                raise
        return remove_named(path, made)
    finally:
        os.close(fd)


def _unlink(path: Path, fd: int) -> None:
    """Remove a received segment's name if it still names the file ``fd`` is open on (a name a
    neighbour gave to another file meanwhile stays); one already gone (or that cannot go) is not an
    error. One this process made is forgotten by its transport: a claim of our own proves no peer's."""
    remove_own(path, fd)
    creator = _creator(path.name)
    if creator is not None and creator[0] == str(os.getpid()):
        for shots in list(_LEFT):
            shots.forget(path.name)
