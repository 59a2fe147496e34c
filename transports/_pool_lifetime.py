"""How a sender's pools live with their process: the thread that trims each pool
(``_trim_loop``), what a pool lets go of at exit or when it is dropped (``_finalize``; at exit
through ``_exit_pools``, closed first to the threads still sending), and a
forked child's leaving of every pool's slots to its parent (``_POOLS``, ``_leave_parents_slots``).
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from tensorwire.transports._page_layout import IN_FLIGHT
from tensorwire.transports._pool_slot import Slot, _let_go
from tensorwire.transports._segment import alive

if TYPE_CHECKING:
    from tensorwire.transports._pool import Pool

_POOLS: weakref.WeakSet[Pool] = weakref.WeakSet()  # every live pool, for a forked child to leave


def _leave_parents_slots() -> None:
    """In a forked child: every pool lets go of its parent's slots (``Pool._forsake``)."""
    for pool in list(_POOLS):
        pool._forsake()


os.register_at_fork(after_in_child=_leave_parents_slots)


def _exit_pools() -> None:
    """At exit: every live pool closed and its slots let go (``Pool._exit``); threads of the
    process may still be sending through it (daemon threads run until the interpreter ends)."""
    for pool in list(_POOLS):
        pool._exit()


atexit.register(_exit_pools)


def _trim_loop(pool_ref: weakref.ref[Pool], wake: threading.Event, period: float, idle: bool) -> None:
    """Expire (and with ``idle``, trim) every ``period`` until the pool is closed or dropped (holds no
    strong reference)."""
    while not wake.wait(period):
        pool = pool_ref()
        if pool is None:
            return
        try:
            if idle:
                pool.trim()
            else:
                pool.expire()
        except Exception:  # (a pool closed meanwhile, say): tried again next period, or the loop ends
            pass
        del pool


def _finalize(
    slots: dict[int, list[Slot]], wake: threading.Event, pid: int, retire: Callable[[Slot], bool] | None
) -> None:
    """At exit (or when the pool is dropped): let go of every slot, leaving the names of those a
    receiver may still want (in flight, or claimed by another live process); never in a forked child.
    A slot is unmapped only once the owner's ``retire`` (if any) undid its ``prepare``."""
    wake.set()
    if os.getpid() != pid:
        return
    for group in slots.values():
        for slot in group:
            try:
                keep = slot.state == IN_FLIGHT or slot.page.held_by_another(alive)
            except ValueError:  # already let go
                continue
            _let_go(slot, unmap=_retired(retire, slot), unlink=not keep)


def _retired(retire: Callable[[Slot], bool] | None, slot: Slot) -> bool:
    """Whether ``slot`` may be unmapped: its owner's ``retire`` (if any) succeeded."""
    if retire is None:
        return True
    try:
        return retire(slot)
    except Exception:  # e.g. a device runtime already torn down at exit: kept mapped
        return False
