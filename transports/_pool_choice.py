"""Which slot of its size class a send takes: the first free one at a glance, before the parked
ones (``first_free``: a slot found busy by ``PASSED`` sends in a row moves out of their way,
parked at the back if a receiver or an unsent ``empty`` tensor holds it, else at the back of those
still looked at), or, when none is, a close look at every slot of the class, parked ones too
(``walk``): one in flight past its claim timeout expired, one whose receivers died reclaimed
(``reusable``), one whose page holds garbage dropped; and the slot moved to the state its send
asked for (``take``), last, when nothing is left to fail. When a send walks is the pool's
(``Pool.acquire``); the pool keeps the state (``_parked``, ``_walked``) these functions read and
update, under its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tensorwire.transports._page_layout import CLAIMED, FREE, IN_FLIGHT, SENDER, STATES
from tensorwire.transports._page_lock import one_wait
from tensorwire.transports._pool_growth import drop
from tensorwire.transports._pool_slot import Slot
from tensorwire.transports._segment import alive

if TYPE_CHECKING:
    from tensorwire.transports._pool import Pool

__all__ = ["PASSED", "first_free", "reusable", "take", "walk"]

PASSED = 64  # a slot found busy by this many sends in a row is parked at the back of its class
_HELD = frozenset({CLAIMED, SENDER})  # states a slot may keep for long: parked once PASSED


def first_free(pool: Pool, group: list[Slot], capacity: int, state: int) -> Slot | None:
    """The first free slot before the parked ones, each looked at once: the slots in use stay
    a compact warm set and the others idle out. One found busy by PASSED sends in a row moves
    out of their way: parked if a receiver (or an unsent ``empty`` tensor) holds it, so that
    sends stop looking at it; if in flight, to the back of those they look at."""
    found: Slot | None = None
    passed: list[Slot] = []
    for slot in group:
        if slot.parked:
            break
        if slot.page.is_free and not slot.sending:
            found = slot
            break
        slot.passed += 1
        if slot.passed >= PASSED:
            passed.append(slot)
    if passed:
        for slot in passed:  # (each moved by one store, its count kept with it: an interrupt lands before or after)
            slot.passed = 0
            held = slot.page.state in _HELD
            parked = pool._parked.get(capacity, 0)
            at, end = group.index(slot), len(group) - parked
            if held:  # held by a receiver (or by this process, unsent): parked
                group[at:] = [*group[at + 1 :], slot]
                slot.parked = True
                pool._parked[capacity] = parked + 1
            else:  # in flight (a pipeline, or lost): at the back of those still looked at
                group[at:end] = [*group[at + 1 : end], slot]
    return None if found is None else take(found, state)


def walk(pool: Pool, group: list[Slot], capacity: int, state: int, now_ns: int) -> Slot | None:
    """The first slot of the class that is free or can be made free (expired, or its receivers
    dead: each receiver's liveness checked once), parked ones too; slots whose page holds
    garbage are dropped. A parked slot taken moves back among those in use."""
    living: dict[int, bool] = {}

    def alive_once(pid: int) -> bool:
        known = living.get(pid)
        if known is None:
            known = living[pid] = alive(pid)
        return known

    garbage: list[Slot] = []
    found: Slot | None = None
    try:
        with one_wait(0):  # a page another process keeps locked is not free now: never waited for
            for slot in group:
                if slot.sending:
                    continue
                usable = reusable(slot, now_ns, alive_once)
                if usable:
                    if slot.parked:  # (moved by one store, its count kept with it: an interrupt lands before or after)
                        at, end = group.index(slot), len(group) - pool._parked[capacity]
                        group[end : at + 1] = [slot, *group[end:at]]
                        slot.parked = False
                        pool._parked[capacity] -= 1
                    found = slot
                    break
                if usable is None:
                    garbage.append(slot)
    finally:
        for slot in garbage:
            drop(pool, slot)
    if found is not None:
        return take(found, state)
    pool._walked[capacity] = now_ns
    return None


def take(slot: Slot, state: int) -> Slot:
    """Move ``slot`` to ``state``, the page last: from there to its caller's hands nothing is called,
    so no interrupt (a signal handler's, an asynchronous exception) lands before the caller holds
    the slot (``Pool.acquire`` gives it back if one lands after)."""
    page = slot.page
    slot.settled = (page.generation, page.claimed_elsewhere())
    slot.allocated = False
    slot.last_used = time.monotonic()
    slot.passed = 0
    generation = page.take(state)
    slot.sending = generation if state == SENDER else 0
    return slot


def reusable(slot: Slot, now_ns: int, alive: Callable[[int], bool] = alive) -> bool | None:
    """Whether ``slot``, which this process does not hold, is free, or can be made free (expired,
    or its receiver died: ``alive``); None for a slot whose page holds no valid state (to be
    dropped), the sender's own state included: only this process writes it, for a slot it holds."""
    page = slot.page
    current = page.state
    if current not in STATES or current == SENDER or not page.valid:
        return None
    if current == IN_FLIGHT:
        return page.expire(now_ns)
    if current == CLAIMED:
        return page.reclaim(alive)
    return current == FREE
