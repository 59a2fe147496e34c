"""``take_within``: a timed taking of an RLock that an interrupt landing as it returns does not keep."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from tensorwire._timeouts import take_within
from tests.interrupts import InterruptedAcquire


def _held_elsewhere(lock: Any) -> threading.Event:
    """Hold ``lock`` in another thread until the returned event is set."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            done.wait(10)

    threading.Thread(target=hold, daemon=True).start()
    assert taken.wait(10)
    return done


@pytest.mark.parametrize("seconds", [math.inf, 1.0, 0.0, -5.0])
def test_a_free_lock_is_taken_whatever_the_wait(seconds: float) -> None:
    lock = threading.RLock()
    assert take_within(lock, seconds) is True
    assert lock._is_owned()  # type: ignore[attr-defined]
    lock.release()


@pytest.mark.parametrize("seconds", [0.0, -1.0, 0.05])
def test_a_lock_held_elsewhere_is_not_taken_once_the_wait_is_up(seconds: float) -> None:
    lock = threading.RLock()
    done = _held_elsewhere(lock)
    try:
        assert take_within(lock, seconds) is False
        assert not lock._is_owned()  # type: ignore[attr-defined]
    finally:
        done.set()


def test_a_wait_past_what_the_os_takes_is_cut_to_its_longest() -> None:
    lock = threading.RLock()
    done = _held_elsewhere(lock)
    threading.Timer(0.05, done.set).start()  # let go of soon: a wait of 1e300 s did not overflow
    assert take_within(lock, 1e300) is True
    lock.release()


@pytest.mark.parametrize("seconds", [math.inf, 1.0])
def test_an_interrupt_landing_as_the_lock_is_taken_lets_go_of_it_and_goes_on(seconds: float) -> None:
    lock = InterruptedAcquire()
    with pytest.raises(KeyboardInterrupt):
        take_within(lock, seconds)
    assert lock.landed
    assert not lock.lock._is_owned()  # type: ignore[union-attr]
    assert take_within(lock, 0.0) is True  # and the next taking finds it free
    lock.release()


def test_an_interrupt_landing_before_the_lock_is_taken_lets_go_of_nothing() -> None:
    class Refused:
        released = False

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            raise KeyboardInterrupt

        def release(self) -> None:
            self.released = True
            raise RuntimeError("cannot release un-acquired lock")

    lock = Refused()
    with pytest.raises(KeyboardInterrupt):
        take_within(lock, 1.0)
    assert lock.released  # it tried, and the RLock's refusal was not what came out
