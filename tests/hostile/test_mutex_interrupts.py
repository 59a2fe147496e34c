"""An interrupt (a signal handler's ``KeyboardInterrupt``) landing as a transition took this
process's mutex of a control page.

CPython raises such an interrupt as a call into C returns: ``mutex.acquire()`` returned, the mutex
held, and the interrupt raised before the ``try`` that lets go of it was entered, kept the mutex
held for good (the page's next transition in this process, a free, ``close_fd`` or the pool's
close, waited forever). A ``with`` cannot be interrupted there (before 3.14): the stand-in mutex's
``acquire`` takes the lock and raises, as CPython's would; its ``__enter__`` takes it and returns.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CLAIMED, FREE, SENDER
from tests.interrupts import InterruptedAcquire, free_elsewhere, make_transition, memfd_page


@pytest.fixture
def page() -> Iterator[Page]:
    """A pool slot's page, in flight, its mutex the stand-in."""
    with memfd_page("tw-mutex-interrupted") as made:
        made._mutex = InterruptedAcquire()  # type: ignore[assignment]
        yield made


def _mutex_is_free(page: Page) -> bool:
    """Whether this thread does not hold the stand-in's mutex and another thread can take it."""
    mutex = page._mutex
    assert isinstance(mutex, InterruptedAcquire)
    return not mutex.lock._is_owned() and free_elsewhere(mutex.lock)


def test_an_interrupt_landing_as_a_claim_took_the_page_mutex_leaves_it_free(page: Page) -> None:
    """The claim left the mutex held: the receiver's free of the page (and any later transition,
    ``close_fd`` included) in this process waited forever."""
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    with contextlib.suppress(KeyboardInterrupt):  # (raised here, it would end the test run)
        page.claim(generation, capability)
    assert _mutex_is_free(page)
    assert page.state == CLAIMED  # (the ``with`` took the mutex uninterrupted)
    assert page.free(generation)  # (as the claim's last view dies)
    assert page.state == FREE
    generation = page.take(SENDER)  # sent and claimed again
    page.claim(generation, page.hand_over(60.0))
    assert page.state == CLAIMED


@pytest.mark.parametrize("how", ["undo", "discard", "expire", "broadcast-free"])
def test_an_interrupt_landing_as_a_transition_took_the_page_mutex_leaves_it_free(page: Page, how: str) -> None:
    """A sender's undo or expiry, a receiver's discard, a broadcast receiver's free (each one
    ``Hold._enter``, which took the mutex with ``acquire()``): the mutex stayed held."""
    generation = page.take(SENDER)
    capability = page.hand_over(0.0 if how == "expire" else 60.0, 2 if how == "broadcast-free" else 1)
    if how == "broadcast-free":
        page._mutex = threading.RLock()  # (the claim's own mutex: the free's is the stand-in's)
        page.claim(generation, capability)
        page.claim(generation, capability)
        page._mutex = InterruptedAcquire()  # type: ignore[assignment]
    elif how == "expire":
        time.sleep(0.001)
    with contextlib.suppress(KeyboardInterrupt):
        make_transition(page, how, generation, capability)
        if how == "broadcast-free":
            page.free(generation)  # (its other holder's)
    assert _mutex_is_free(page)
    assert page.state == FREE  # (the transition made: the ``with`` took the mutex uninterrupted)
    generation = page.take(SENDER)  # sent and discarded again
    assert page.discard(generation, page.hand_over(60.0))
    assert page.state == FREE
