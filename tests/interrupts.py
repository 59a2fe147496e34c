"""Stand-ins for where CPython delivers an asynchronous exception (a signal handler's
``KeyboardInterrupt``) around a lock, a pool slot's control page to land them on, and a look at
its locks after one landed."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CONTROL_BYTES
from tensorwire.transports._page_lock import _LOCK, _UNLOCK
from tensorwire.transports._segment import create_memfd

__all__ = ["InterruptedAcquire", "free_elsewhere", "locks_are_free", "make_transition", "memfd_page"]


class InterruptedAcquire:
    """A lock (``lock``, a new ``threading.RLock`` by default, as a page's mutex is) whose first
    ``acquire()`` that takes it raises ``KeyboardInterrupt`` as it returns, the lock held (as
    CPython raises one once a call into C returns); ``__enter__`` takes it without raising
    (CPython before 3.14 delivers nothing between a ``with``'s taking and its block)."""

    def __init__(self, lock: Any = None) -> None:
        self.lock = threading.RLock() if lock is None else lock
        self.landed = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        taken: bool = self.lock.acquire(blocking, timeout)
        if taken and not self.landed:
            self.landed = True
            raise KeyboardInterrupt
        return taken

    def release(self) -> None:
        self.lock.release()

    def _is_owned(self) -> bool:  # (``Hold.held_here``)
        return bool(self.lock._is_owned())  # type: ignore[union-attr]

    def __enter__(self) -> bool:
        return bool(self.lock.acquire())

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def locks_are_free(page: Page) -> bool:
    """Whether another open file description can lock the page now, and another thread can take its
    mutex (which this thread does not hold: a reentrant mutex this thread kept, it could take again)."""
    other = os.open(f"/proc/self/fd/{page.fd}", os.O_RDWR)
    try:
        fcntl.fcntl(other, fcntl.F_OFD_SETLK, _LOCK)
        fcntl.fcntl(other, fcntl.F_OFD_SETLK, _UNLOCK)
    except OSError:
        return False
    finally:
        os.close(other)
    return not page.held_here() and free_elsewhere(page._mutex)


def free_elsewhere(lock: Any) -> bool:
    """Whether another thread can take ``lock`` now (an RLock this thread holds it cannot)."""
    taken: list[bool] = []

    def take() -> None:
        taken.append(lock.acquire(blocking=False))
        if taken[0]:
            lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    thread.join(5)
    return taken == [True]


@contextmanager
def memfd_page(name: str) -> Iterator[Page]:
    """A free control page of a 4 KiB pool slot ``name`` on a memfd, let go of on exit (its mutex
    first put back to a plain lock, where a test gave it a stand-in: one left held would keep
    ``close_fd`` waiting)."""
    fd, mapping = create_memfd(name, CONTROL_BYTES + 4096)
    made = Page(fd, mapping, f"pool slot {name}")
    made.init(4096)
    try:
        yield made
    finally:
        made._mutex = threading.RLock()
        made.release()
        made.close_fd()
        mapping.close()


def make_transition(page: Page, how: str, generation: int, capability: bytes) -> None:
    """Make the transition ``how`` names of the hand-over of ``generation``: a sender's "undo",
    "expire" (its deadline passed) or "reclaim" (its receiver gone), a receiver's "discard", or
    else a receiver's free."""
    if how == "undo":
        page.undo(generation, capability)
    elif how == "discard":
        page.discard(generation, capability)
    elif how == "expire":
        page.expire(time.monotonic_ns())
    elif how == "reclaim":
        page.reclaim(lambda pid: False)
    else:
        page.free(generation)
