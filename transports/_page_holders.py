"""Who holds a claimed control page: whether a receiver whose claim names its pid and start is
still alive, and a broadcast's bookkeeping of its receivers (each claim or discard counted, the
claims closed after the last, its holders and when each started, a holder let go), each made with
the page held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tensorwire.transports._page_layout import (
    _DIGEST,
    _NO_DIGEST,
    _W_CLAIMS,
    _W_GENERATION,
    _W_HOLDER_STARTS,
    _W_HOLDERS,
    _W_PIDS,
    _W_STATE,
    CAPABILITY_BYTES,
    CLAIMED,
    IN_FLIGHT,
)
from tensorwire.transports._segment import started_as_said

if TYPE_CHECKING:
    from tensorwire.transports._page import Page
    from tensorwire.transports._page_view import PageView

__all__ = ["close_claims", "count_claim", "drop_holder", "holders_started", "lives", "unhold"]


def lives(pid: int, said: int, alive: Callable[[int], bool]) -> bool:
    """Whether receiver ``pid``, which its claim says started at ``said``, is alive (``alive``):
    a pid another process took since names that process, not the receiver."""
    return alive(pid) and started_as_said(pid, said)


def count_claim(page: Page) -> None:
    """One more of a broadcast's receivers claimed or discarded it; after the last, no more can."""
    claims = int(page.words[_W_CLAIMS]) + 1
    page.words[_W_CLAIMS] = claims
    if claims >= page._readers():
        close_claims(page)


def close_claims(page: Page) -> None:
    page._raw[_DIGEST : _DIGEST + CAPABILITY_BYTES] = _NO_DIGEST
    page.words[_W_CLAIMS] = page._readers()
    page.words[_W_STATE] = CLAIMED


def holders_started(page: PageView) -> list[tuple[int, int]]:
    """A broadcast's holders: (pid, when it started) for each."""
    words = page.words
    count = min(int(words[_W_HOLDERS]), page._readers())
    return [(int(words[_W_PIDS + i]), int(words[_W_HOLDER_STARTS + i])) for i in range(count)]


def drop_holder(page: Page, pid: int) -> bool:
    """Take one entry of ``pid`` off the holders; False if it holds none."""
    holders = holders_started(page)
    pids = [held for held, _ in holders]
    if pid not in pids:
        return False
    del holders[pids.index(pid)]
    words = page.words
    for i, (held, said) in enumerate(holders):
        words[_W_PIDS + i], words[_W_HOLDER_STARTS + i] = held, said
    words[_W_PIDS + len(holders)], words[_W_HOLDER_STARTS + len(holders)] = 0, 0
    words[_W_HOLDERS] = len(holders)
    return True


def unhold(page: Page, generation: int, pid: int) -> bool:
    """Take back a broadcast's claim of ``generation`` by ``pid`` that no view will hold (the page
    held): one holder entry of ``pid`` off and, while the broadcast is still open to claims, its
    claim uncounted (the receiver's discard of the message it did not read counts it once, never
    another receiver's share); True if the page is to be freed (claimed, and no holder left)."""
    words = page.words
    if words[_W_GENERATION] != generation or not drop_holder(page, pid):
        return False
    if words[_W_STATE] == IN_FLIGHT:
        words[_W_CLAIMS] = max(int(words[_W_CLAIMS]), 1) - 1
        return False
    return bool(words[_W_STATE] == CLAIMED and words[_W_HOLDERS] == 0)
