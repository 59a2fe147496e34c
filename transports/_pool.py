"""A warm pool of shared-memory slots, as their sender sees them: created and mapped once, then reused.

Each slot is one segment (a sealed memfd by default, or a named file in /dev/shm): a control
page (``transports._page_layout``) then the data area of one size class (quarter octaves from 64 KiB,
so at most 25% is wasted). The sender copies into a free slot (or hands over a slot it allocated
with ``empty``: no copy at all) and hands it over under a fresh capability; a receiver claims it
and frees it when its last view dies. A slot nobody claims within ``claim_timeout`` comes back
(its capability void); a slot claimed by a receiver that died is reclaimed; a slot whose control
page holds garbage is dropped. A send takes the first free slot of its class, so the slots in use
stay few and warm; one that sends keep finding busy moves to the back, out of their way: if a
receiver (or an unsent ``empty`` tensor) holds it, it is parked there and sends no longer look at
it; if it is in flight (a deep pipeline, or lost), at the back of those they look at. When none
they look at is free, a send looks closely at every slot of the class (can one be made free? is
a parked one free again?), or, in a class of more than ``WALK_ALWAYS`` slots, at most every
``WALK_EVERY`` seconds, growing the pool between such walks (it walks at once if the budget
forbids growth): a receiver that keeps a thousand tensors does not make every send walk a
thousand slots. Growth is the only place that faults pages (pre-faulted); cached bytes are
bounded by a retention policy (``transports._retention``) and idle slots are given back.
No mapping is closed while a tensor of this process still points into it: ``close``, ``trim``
and the idle trimmer unlink and forget such a slot, and its memory goes with the last view.

An owner may ``prepare`` each new slot (e.g. register it with a device) and ``retire`` it before
it is unmapped (returning False keeps the mapping alive: the owner holds on to it); a slot whose
growth failed (or was interrupted) is retired too, whatever of its ``prepare`` was done.

Thread-safe. A forked child starts with an empty pool (the parent's slots stay the parent's): at
the fork it closes its copies of their fds and unmaps them (one a view of the child still uses goes
with that view), so the child holds none of the parent's memory and no mark of it.

A slot, its size classes and letting go of one are ``_pool_slot``'s; which slot of its class a
send takes (a glance at those in use, a close walk) is ``_pool_choice``'s; growing by a slot and
dropping one (the pool's indexes, the budget's evictions) is ``_pool_growth``'s; how pools live
with their process (the trimming thread, exit, a fork) is ``_pool_lifetime``'s.
"""

from __future__ import annotations

import bisect
import errno
import os
import resource
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from tensorwire import _memory as memory
from tensorwire.errors import TransportError
from tensorwire.transports._page_layout import CONTROL_BYTES, FREE, SENDER
from tensorwire.transports._page_lock import one_wait
from tensorwire.transports._pool_choice import first_free, take, walk
from tensorwire.transports._pool_growth import drop, grow
from tensorwire.transports._pool_lifetime import _POOLS, _finalize, _trim_loop
from tensorwire.transports._pool_slot import MIN_CLASS, Slot, _let_go_copy, _SenderLease, size_class
from tensorwire.transports._retention import Retention

__all__ = [
    "MIN_CLASS",
    "WALK_ALWAYS",
    "WALK_EVERY",
    "Pool",
    "Slot",
    "default_max_slots",
    "size_class",
]

WALK_EVERY = 0.05  # seconds between two close walks of a class that found nothing to reuse
WALK_ALWAYS = 16  # a class of at most this many slots is walked closely whenever none is free
# The types of the views of slots allocated with ``Pool.empty_array``, by size.
_VIEWS = memory.Chars()


def default_max_slots() -> int:
    """How many slots a pool keeps at most (each holds two fds: its own and its mapping's): a
    sixteenth of the fd limit, at least 16, so receivers that keep every slot they are sent, or
    never claim, cannot use up the sender's fds; past it, buffers get one-shot segments."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft // 16) if soft > 0 else 65536


class Pool:
    """The sender's slots, by size class; at most ``max_slots`` of them (default: ``default_max_slots()``)."""

    def __init__(
        self,
        directory: Path,
        make_name: Callable[[], str],
        *,
        memfd: bool = True,
        retention: Retention | None = None,
        idle_seconds: float = 30.0,
        claim_timeout: float = 60.0,
        prepare: Callable[[Slot], None] | None = None,
        retire: Callable[[Slot], bool] | None = None,
        max_slots: int | None = None,
    ) -> None:
        self.directory = directory
        self.max_slots = max_slots if max_slots is not None else default_max_slots()
        self.memfd = memfd
        self._make_name = make_name
        self.retention = retention if retention is not None else Retention()
        self.idle_seconds = idle_seconds
        self.claim_timeout = claim_timeout
        self._prepare = prepare
        self._retire = retire
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._slots: dict[int, list[Slot]] = {}  # by class: slots in use first, parked ones last
        self._parked: dict[int, int] = {}  # by class: how many are parked
        self._walked: dict[int, int] = {}  # by class: when a close walk last found nothing (ns)
        self._by_name: dict[str, Slot] = {}
        self._starts: list[int] = []  # the data areas' addresses, sorted (slots never overlap)
        self._by_start: dict[int, Slot] = {}
        self._cached = 0  # the bytes of every slot (control pages included)
        self._lock = threading.Lock()
        self._closed = False
        self._trimmer: threading.Thread | None = None
        self._wake = threading.Event()
        # at exit, or when the pool is dropped without close(), its slots are let go (in a forked
        # child, the parent's finalizer does nothing and this one lets go of the child's slots)
        self._finalizer = weakref.finalize(self, _finalize, self._slots, self._wake, self._pid, self._retire)
        self._finalizer.atexit = False  # (at exit ``_exit`` runs it, closed to other threads first)
        _POOLS.add(self)

    def _exit(self) -> None:
        """At exit (``_exit_pools``): closed to the threads still sending, as ``close`` closes it
        (a send that has not handed its slot over yet is a ``TransportError``, not a slot let go
        under it), then its slots let go as the finalizer lets them go (names in flight kept)."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def _own(self) -> None:
        """In a forked child: forget the parent's slots (they stay the parent's), start empty."""
        if self._pid != os.getpid():
            self._reset()

    def _forsake(self) -> None:
        """In a forked child, at the fork: start empty, and let go of this process's copies of the
        parent's slots (``_let_go_copy``); nothing of theirs is written."""
        inherited = self._slots
        self._finalizer.detach()  # (it lets go of nothing in a child, but would keep the slots)
        self._reset()
        for group in inherited.values():
            for slot in group:
                _let_go_copy(slot)

    # -- accounting ---------------------------------------------------------------------------
    @property
    def cached_bytes(self) -> int:
        return self._cached

    def slots(self) -> list[Slot]:
        self._own()
        with self._lock:
            return [s for slots in self._slots.values() for s in slots]

    def owns(self, name: str) -> bool:
        """Whether ``name`` is one of this pool's live slots."""
        return self._pid == os.getpid() and name in self._by_name

    # -- taking and giving back ---------------------------------------------------------------
    def acquire(self, nbytes: int, state: int) -> Slot | None:
        """A slot of at least ``nbytes`` moved to ``state``; None when the budget forbids growth.

        An interrupt that lands once the slot is taken (as the lock is let go) gives it back: the
        slot is moved last (``take``), and held in ``taken`` from the moment it is.
        """
        capacity = size_class(nbytes)
        self._own()
        taken: Slot | None = None
        try:
            with self._lock:
                if self._closed:
                    raise TransportError(errno.EBADF, "the shared-memory pool is closed")
                group = self._slots.get(capacity)
                walked = False
                if group:
                    taken = first_free(self, group, capacity, state)
                    if taken is not None:
                        return taken
                    now = time.monotonic_ns()
                    if len(group) <= WALK_ALWAYS or now - self._walked.get(capacity, -(1 << 62)) >= WALK_EVERY * 1e9:
                        taken = walk(self, group, capacity, state, now)
                        if taken is not None:
                            return taken
                        walked = True
                grown = grow(self, capacity)
                if grown is None and group and not walked:  # the budget forbids growth: look now
                    taken = walk(self, group, capacity, state, time.monotonic_ns())
                    if taken is not None:
                        return taken
                    grown = grow(self, capacity)  # the walk may have dropped garbage
                if grown is not None:
                    taken = take(grown, state)
                return taken
        except BaseException:
            if taken is not None:
                self.give_back(taken)
            raise

    def hand_over(self, slot: Slot, readers: int = 1) -> tuple[int, bytes]:
        """Put ``slot`` in flight for ``readers`` receivers; return its generation and the capability
        a receiver must prove (``TransportError`` EBADF if another thread closed the pool meanwhile)."""
        page = slot.page
        try:
            capability = page.hand_over(self.claim_timeout, readers)
        except ValueError:
            if not self._closed:
                raise
            raise TransportError(
                errno.EBADF, f"the shared-memory pool was closed before pool slot {slot.name} was handed over"
            ) from None
        slot.sending = 0
        slot.allocated = False
        slot.last_used = time.monotonic()
        return page.generation, capability

    def release(self, name: str, generation: int, capability: bytes) -> bool:
        """Undo the hand-over of one of our slots (a failed encode); False if the slot is not ours.

        Only the capability it was handed over with undoes it; a slot a receiver has already
        claimed is left alone (its lease frees it), and one another thread let go of meanwhile has
        nothing left to undo.
        """
        slot = self._by_name.get(name) if self.owns(name) else None
        if slot is None:
            return False
        lent = slot.lent == generation  # an ``empty`` tensor's slot: its tensor's again, never another send's
        if lent:  # held before the page says so: no send takes it, no walk drops it meanwhile
            slot.sending, slot.allocated = generation, True
        undone = False
        with suppress(ValueError):  # another thread let go of the slot meanwhile (close, trim): nothing to undo
            undone = slot.page.undo(generation, capability, SENDER if lent else FREE)
        if lent and not undone:
            slot.sending, slot.allocated = 0, False
        slot.last_used = time.monotonic()
        return True

    def claimed(self, name: str, generation: int, capability: bytes) -> bool | None:
        """``Page.outcome`` of a hand-over of one of our slots (of the one before, once the slot has
        moved on to the next: whether another process claimed it); False for a slot that is not ours."""
        slot = self._by_name.get(name) if self.owns(name) else None
        if slot is None:
            return False
        try:
            if slot.page.generation != generation:
                return slot.settled == (generation, True)
            return slot.page.outcome(generation, capability)
        except ValueError:  # the pool let go of its page views meanwhile: the slot is gone
            return False

    def withdraw(self, name: str, generation: int, capability: bytes, readers: int) -> None:
        """Count ``readers`` receivers of a broadcast of one of our slots as done without it (the
        message never reached them); the slot is free once those who got it have let go."""
        slot = self._by_name.get(name) if self.owns(name) else None
        if slot is not None:
            with suppress(ValueError):  # another thread let go of the slot meanwhile (close, trim): nothing to count
                slot.page.discard(generation, capability, readers)

    def unused(self, slot: Slot, generation: int) -> None:
        """A tensor allocated in ``slot`` died: free the slot if it was never sent (and is this
        process's: a forked child's copy of its parent's tensor leaves the parent's slot alone)."""
        if slot.lent == generation:  # sent, and gone: an undone hand-over frees the slot
            slot.lent = 0
        if self._pid == os.getpid() and self._by_name.get(slot.name) is slot and slot.sending == generation:
            self.give_back(slot)

    def forget(self, slot: Slot) -> None:
        """Take ``slot`` out of the pool for good; its owner keeps the mapping (and the fd is closed)."""
        with self._lock:
            group = self._slots.get(slot.capacity, [])
            if slot in group:
                drop(self, slot, keep=True)

    def give_back(self, slot: Slot) -> None:
        """Free ``slot``, taken by this process and not handed over (a send that failed)."""
        with suppress(ValueError):  # another thread let go of the slot meanwhile (close, trim): nothing to free
            slot.page.give_back()
        slot.sending = 0
        slot.allocated = False
        slot.last_used = time.monotonic()

    def hand_over_allocated(self, address: int, nbytes: int, readers: int = 1) -> tuple[Slot, int, bytes] | None:
        """Hand over the slot ``empty_array`` allocated that holds ``[address, address + nbytes)``, if
        the sender still holds it: (slot, generation, capability); None otherwise (send a copy)."""
        if self._pid != os.getpid():  # (``_own``, inline: this runs for every buffer sent)
            self._reset()
        with self._lock:  # one hand-over per allocation, even when threads encode the tensor at once
            at = bisect.bisect_right(self._starts, address) - 1  # the slot starting at or below it
            if at < 0:
                return None
            slot = self._by_start[self._starts[at]]
            page = slot.page
            if address + nbytes > slot.address + slot.capacity or not slot.allocated:
                return None  # (a slot taken since for a copy is that copy's)
            capability = page.hand_over(self.claim_timeout, readers)  # (``hand_over``, inline)
            slot.lent = slot.sending
            slot.sending = 0
            slot.allocated = False
            slot.last_used = time.monotonic()
            return slot, page.generation, capability

    def empty_array(self, nbytes: int) -> Any:
        """A writable buffer of ``nbytes`` living in a slot the sender holds, whose ``base`` frees the
        slot when the last view of it dies unsent; None if the pool cannot grow."""
        slot = self.acquire(nbytes, SENDER)
        if slot is None:
            return None
        generation = slot.sending
        try:
            slot.allocated = True
            lease = _SenderLease(self, slot, nbytes)
        except BaseException:  # (an interrupt): no tensor holds the slot to free it
            self.unused(slot, generation)
            raise
        buffer = _VIEWS.view(slot.address, nbytes, lease)
        return np.asarray(lease) if buffer is None else buffer

    # -- retention -------------------------------------------------------------------------------
    def _budget(self) -> int:
        return self.retention.budget(self.directory, self.cached_bytes)

    def trim(self, idle_seconds: float | None = None) -> int:
        """Give back free slots unused for ``idle_seconds`` (default: the pool's); return the bytes freed.
        Slots in flight past their claim timeout come back first."""
        limit = self.idle_seconds if idle_seconds is None else idle_seconds
        self.expire()
        now = time.monotonic()
        freed = 0
        with self._lock:
            for slots in list(self._slots.values()):
                for slot in list(slots):
                    if slot.state == FREE and not slot.sending and now - slot.last_used >= limit:
                        freed += slot.capacity + CONTROL_BYTES
                        drop(self, slot)
        return freed

    def expire(self) -> int:
        """Bring back every slot in flight past its claim timeout; return how many came back."""
        self._own()
        now = time.monotonic_ns()
        count = 0
        with self._lock, one_wait(0):  # a page another process keeps locked: the next time
            for slots in self._slots.values():
                for slot in slots:
                    if slot.page.due(now) and slot.page.expire(now):
                        slot.last_used = time.monotonic()
                        count += 1
        return count

    def _start_trimmer(self) -> None:
        if self._trimmer is None:
            period = min(self.idle_seconds if self.idle_seconds > 0 else self.claim_timeout, self.claim_timeout) / 2
            args = (weakref.ref(self), self._wake, max(period, 0.05), self.idle_seconds > 0)
            self._trimmer = threading.Thread(target=_trim_loop, args=args, name="tensorwire-pool-trim", daemon=True)
            self._trimmer.start()

    def close(self) -> None:
        """Let go of every slot (unlinked, fds closed); receivers keep what they have mapped."""
        self._own()
        self._wake.set()
        with self._lock:
            self._closed = True
            for slots in list(self._slots.values()):
                for slot in list(slots):
                    drop(self, slot)
