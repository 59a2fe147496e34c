"""A control page's hold: the fd its lock is taken on and the mutex that keeps this process's
threads apart (one transition at a time, here and in other processes: the mutex held in a
``with``, the page locked by ``_enter`` and unlocked by the transition itself), the give-backs of
views that died inside this thread's own transition, made once it is over (``held_here``,
``defer``), the marks a process keeps on other bytes of the page's file to say it holds the page
or made it (``mark``, ``marked_elsewhere``), and closing the fd once no transition uses it
(``close_fd``). ``Page`` is one; its transitions take the hold.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable

from tensorwire.errors import TransportError
from tensorwire.transports._page_lock import _FLOCK, _let_go_lock, _lock, marked

__all__ = ["Hold"]


class Hold:
    """What holding a page takes: ``fd`` (for the lock), its ``name`` (for errors), this process's
    mutex and the pid that made it (a forked child's is not its own)."""

    __slots__ = ("_later", "_mutex", "_pid", "fd", "name")

    fd: int
    name: str
    _mutex: threading.RLock  # (reentrant only so that ``held_here`` can tell: no transition re-enters)
    _later: list[Callable[[], None]]  # give-backs kept until this thread's transition is over (``defer``)
    _pid: int

    def _enter(self) -> None:
        """Hold the page against other processes (the transition unlocks it by the call into C
        itself: an interrupt landing at a Python function's entry would keep the lock), this
        process's threads kept out by the caller, which holds the mutex in a ``with`` (not
        ``acquire()``: an interrupt can land as that call returns, before a ``try`` is entered, and
        keep the mutex held for good; between a ``with``'s taking and its block it cannot, in
        CPython before 3.14)."""
        try:
            if self.fd < 0:
                raise TransportError(errno.EBADF, f"{self.name} was let go")
            _lock(self.fd, self.name)
        except BaseException:  # (an interrupt as the lock was taken, maybe: let go of it too)
            if self.fd >= 0:
                _let_go_lock(self.fd)
            raise

    def held_here(self) -> bool:
        """Whether this thread is inside a transition of the page (it holds the mutex): a view of the
        page that dies now dies inside it (the garbage collector, run by an allocation of the
        transition, collected it), and its give-back must wait (``defer``): taking the mutex again
        would wait for itself forever."""
        return bool(self._mutex._is_owned())  # type: ignore[attr-defined]

    def defer(self, give_back: Callable[[], None]) -> None:
        """Make ``give_back`` once this thread's transition of the page is over (see ``held_here``)."""
        self._later.append(give_back)

    def _give_back_later(self) -> None:
        """Make the give-backs ``defer`` kept (each transition's last step, when there are any); one
        whose page was let go of meanwhile has nothing to give back."""
        later = self._later
        while later:
            give_back = later.pop()
            try:
                give_back()
            except ValueError:  # the page's views let go of (a forked child's copy, or closed)
                pass

    def mark(self, byte: int, held: bool) -> None:
        """Take (``held``) or drop this description's shared lock on ``byte`` of the page's file
        (``RECEIVER_BYTE``, ``CREATOR_BYTE``); an fd let go of, or a lock refused, leaves the pid
        written in the page as the only word on who is alive, as for a peer that does not mark."""
        try:
            with self._mutex:
                self._mark(byte, held)
        finally:
            if self._later:
                self._give_back_later()

    def _mark(self, byte: int, held: bool) -> None:
        """``mark``, the page's mutex held by the caller."""
        if self.fd >= 0:
            kind = fcntl.F_RDLCK if held else fcntl.F_UNLCK
            try:
                fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, byte, 1, 0))
            except OSError:
                pass

    def marked_elsewhere(self, byte: int) -> bool:
        """Whether another open description of the page's file (another process, or another reader
        of this one) holds ``byte`` marked (see ``mark``)."""
        try:
            with self._mutex:
                return self._marked(byte)
        finally:
            if self._later:
                self._give_back_later()

    def _marked(self, byte: int) -> bool:
        """``marked_elsewhere``, the page's mutex held by the caller."""
        return self.fd >= 0 and marked(self.fd, byte)

    def close_fd(self) -> None:
        """Close the fd the lock is taken on, once no transition is using it (in a forked child, at
        once: the parent's threads, one of which may have held the mutex at the fork, are not here)."""
        if self._pid != os.getpid():
            self._close_fd()
            return
        try:
            with self._mutex:
                self._close_fd()
        finally:
            if self._later:
                self._give_back_later()

    def _close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
