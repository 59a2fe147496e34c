"""The lock a transition takes on a control page: an open-file-description lock on the page's first
byte (``F_OFD_SETLK``, released by the kernel if its holder dies), retried for a while when another
process holds it and then refused (a ``TransportError``, never a hang), within one budget for a
batch of transitions (``one_wait``); and reading a peer's mark on another byte of the file
(``marked``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tensorwire.errors import TransportError

__all__ = ["marked", "one_wait"]

_FLOCK = struct.Struct("hh4xqqi4x")  # struct flock: type, whence, start, length, pid
_LOCK = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
_UNLOCK = _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, 0, 1, 0)
_LOCK_WAIT = 0.25  # seconds a transition waits for a page locked by another process

_WAITS = threading.local()  # ``until``: when every wait of this thread inside ``one_wait`` ends


@contextmanager
def one_wait(seconds: float = _LOCK_WAIT) -> Iterator[None]:
    """Inside: this thread's waits for control pages locked by other processes last, all together,
    no longer than ``seconds`` (one wait, ``_LOCK_WAIT``, by default; 0: a page locked elsewhere is
    refused at once): a batch of give-backs whose pages a peer keeps locked holds its caller up
    once, not once per page. Every page is still tried once. Nested, the earlier end holds."""
    outer = getattr(_WAITS, "until", None)
    until = time.monotonic() + seconds
    _WAITS.until = until if outer is None else min(outer, until)
    try:
        yield
    finally:
        _WAITS.until = outer


def _lock(fd: int, what: str) -> None:
    deadline: float | None = None  # set on the first refusal: a free page is locked with one call
    pause = 0.0
    while True:
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _LOCK)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise TransportError(exc.errno, f"cannot lock the control page of {what}: {exc.strerror}") from None
        now = time.monotonic()
        if deadline is None:
            until = getattr(_WAITS, "until", None)
            deadline = now + _LOCK_WAIT if until is None else min(now + _LOCK_WAIT, until)
        elif now >= deadline:
            raise TransportError(
                errno.EAGAIN, f"the control page of {what} has been locked by another process for over {_LOCK_WAIT}s"
            )
        time.sleep(pause)
        pause = min(max(pause * 2, 1e-5), 1e-3)


def _unlock(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _UNLOCK)


def _let_go_lock(fd: int) -> None:
    """Unlock a page whose locking raised (an interrupt may have landed once the lock was taken):
    this description's lock, if it holds one (another's is never touched); no error."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _UNLOCK)
    except OSError:
        pass


def marked(fd: int, byte: int) -> bool:
    """Whether an open description of ``fd``'s file other than ``fd``'s own holds a lock on ``byte``
    (a peer's mark, see ``Page.mark``); False where that cannot be read."""
    try:
        found = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, byte, 1, 0))
    except OSError:
        return False
    kind: int = _FLOCK.unpack(found)[0]
    return kind != fcntl.F_UNLCK
