"""How a pool grows by a slot and sheds one: a slot of a class made, mapped, prepared and put in
every index of the pool (``grow``), within the budget and the slot count, room made by dropping
free slots least recently used first (``evict``); a growth that failed or was interrupted undone
whole (``unmake``); a slot taken out of every index (``remove``) and let go (``drop``). An index
holds a slot entirely or not at all, whatever interrupt lands. When a pool grows and which slots
it trims are the pool's (``Pool.acquire``, ``Pool.trim``); these functions change its indexes
(``_slots``, ``_parked``, ``_by_name``, ``_starts``, ``_by_start``, ``_cached``) under its lock.
"""

from __future__ import annotations

import bisect
import mmap
import os
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CONTROL_BYTES, CREATOR_BYTE, FREE
from tensorwire.transports._pool_lifetime import _retired
from tensorwire.transports._pool_slot import Slot, _let_go
from tensorwire.transports._segment import create_memfd, create_named, remove_own

if TYPE_CHECKING:
    from tensorwire.transports._pool import Pool

__all__ = ["drop", "evict", "grow", "remove", "unmake"]


def grow(pool: Pool, capacity: int) -> Slot | None:
    """A new free slot of ``capacity`` in ``pool`` (free slots evicted to make room); None when the
    budget or the slot count forbids it."""
    size = CONTROL_BYTES + capacity
    if pool.cached_bytes + size > pool._budget() or len(pool._by_name) >= pool.max_slots:
        evict(pool, size)
        if pool.cached_bytes + size > pool._budget() or len(pool._by_name) >= pool.max_slots:
            return None
    name = pool._make_name()
    path = None if pool.memfd else pool.directory / name
    made: tuple[int, mmap.mmap] | None = None
    slot: Slot | None = None
    try:  # (an interrupt up to the slot's counting leaves no segment: no send can know it yet)
        made = create_memfd(name, size) if path is None else create_named(path, size)
        fd, mapping = made
        page = Page(fd, mapping, f"pool slot {name}")
        page.init(capacity)
        if path is not None:  # its file's readers tell this process alive by the mark, not its pid
            page.mark(CREATOR_BYTE, True)
        address = np.frombuffer(mapping, dtype=np.uint8, count=1, offset=CONTROL_BYTES).ctypes.data
        slot = Slot(name, fd, mapping, page, capacity, address, path)
        if pool._prepare is not None:
            pool._prepare(slot)
        pool._start_trimmer()
        group = pool._slots.setdefault(capacity, [])
        group.insert(len(group) - pool._parked.get(capacity, 0), slot)  # before the parked ones
        pool._by_name[name] = slot
        bisect.insort(pool._starts, address)
        pool._by_start[address] = slot
        pool._cached += size  # last: counted, the slot is the pool's
    except BaseException:
        unmake(pool, path, made, slot)
        raise
    return slot


def unmake(pool: Pool, path: Path | None, made: tuple[int, mmap.mmap] | None, slot: Slot | None) -> None:
    """Undo a growth that failed (or was interrupted) once its segment was ``made``: take its
    ``slot`` (if made) out of the indexes it reached, undo the owner's ``prepare``, remove the
    named file and close the fd and the mapping (under the lock; the slot was never counted)."""
    if slot is not None:
        group = pool._slots.get(slot.capacity, [])
        if slot in group:
            group.remove(slot)
        if pool._by_name.get(slot.name) is slot:
            del pool._by_name[slot.name]
        if pool._by_start.get(slot.address) is slot:
            del pool._by_start[slot.address]
        at = bisect.bisect_left(pool._starts, slot.address)
        if pool._starts[at : at + 1] == [slot.address]:  # (slots never overlap: the address is its own)
            del pool._starts[at]
        _let_go(slot, unmap=_retired(pool._retire if pool._prepare is not None else None, slot))
    elif made is not None:
        fd, mapping = made
        if path is not None:
            remove_own(path, fd)
        os.close(fd)
        with suppress(BufferError):  # a half-made page's view: the mapping goes with it
            mapping.close()


def evict(pool: Pool, wanted: int) -> None:
    """Drop free slots, least recently used first, until ``wanted`` more bytes fit the budget in
    one slot more."""
    free = sorted(
        (s for slots in pool._slots.values() for s in slots if s.state == FREE and not s.sending),
        key=lambda s: s.last_used,
    )
    for slot in free:
        if pool.cached_bytes + wanted <= pool._budget() and len(pool._by_name) < pool.max_slots:
            return
        drop(pool, slot)


def remove(pool: Pool, slot: Slot) -> None:
    """Take ``slot`` out of every index of the pool (under the lock): all of them or none, as an
    interrupt lands only as a call into C returns (the first changes nothing, the last is last)."""
    at = bisect.bisect_left(pool._starts, slot.address)
    del pool._starts[at]
    del pool._by_start[slot.address]
    if slot.name in pool._by_name:
        del pool._by_name[slot.name]
    if slot.parked:
        pool._parked[slot.capacity] -= 1
    pool._cached -= slot.capacity + CONTROL_BYTES
    pool._slots[slot.capacity].remove(slot)


def drop(pool: Pool, slot: Slot, *, keep: bool = False) -> None:
    """Take ``slot`` out of the pool and let go of it, unmapped once the owner's ``retire`` (if
    any) undid its ``prepare`` (``keep``: the owner keeps the mapping, not retired); one out of
    the indexes is let go whatever lands meanwhile."""
    unmap = not keep
    try:
        remove(pool, slot)
        if unmap and pool._retire is not None:
            unmap = False  # (a retire that does not answer keeps the mapping, as one that fails does)
            unmap = pool._retire(slot)
    finally:
        if pool._by_name.get(slot.name) is not slot:
            _let_go(slot, unmap=unmap)
