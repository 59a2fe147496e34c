"""One background thread per process that lets receivers forget segments nobody will use again.

A receiver keeps each segment it mapped (and so its memory) until it prunes, which happens here
every ``PERIOD`` seconds, off the decode path: a busy or an idle receiver alike lets go of a dead
or departed sender's memory within a few seconds. The thread holds only weak references, starts with the first receiver
and again in a forked child.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Protocol

__all__ = ["PERIOD", "watch"]

PERIOD = 2.0


class _Prunable(Protocol):
    def prune(self) -> None: ...


_watched: weakref.WeakSet[_Prunable] = weakref.WeakSet()
_lock = threading.Lock()
_started_in = 0  # the pid whose thread runs


def _new_lock_after_fork() -> None:
    """A forked child has none of its parent's threads: a lock one of them held stays held."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_after_fork)


def watch(reader: _Prunable) -> None:
    """Prune ``reader`` every ``PERIOD`` seconds while it lives."""
    global _started_in
    with _lock:
        _watched.add(reader)
        if _started_in != os.getpid():
            _started_in = os.getpid()
            threading.Thread(target=_loop, name="tensorwire-janitor", daemon=True).start()


def _loop() -> None:
    pid = os.getpid()
    pause = threading.Event()  # never set: a sleep that does not hold the GIL
    while not pause.wait(PERIOD) and os.getpid() == pid:
        for reader in list(_watched):
            try:
                reader.prune()
            except Exception:  # a reader being torn down; the next round sees it again or not at all
                pass
