"""Timeouts in seconds, as every call and option of the package takes them.

A call's ``timeout``: None or infinity waits without limit, any other number is how long (at most
zero: do not wait), NaN is no number of seconds (``ValueError``). An option holding a duration
must be a number of seconds above zero (``check_seconds``); one holding any number must be one,
not a bool (``check_number``).
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from typing import Protocol

__all__ = ["LONGEST_WAIT", "check_number", "check_seconds", "deadline_after", "next_wait", "take_within"]

LONGEST_WAIT = 86400.0
"""The longest one blocking wait lasts (then it looks again): OS and library waits overflow on
infinity or on very long timeouts."""


def deadline_after(timeout: float | None) -> float | None:
    """The ``time.monotonic()`` at which ``timeout`` seconds from now are up; None (no deadline) for
    None or infinity. ``ValueError`` for NaN, which is no number of seconds."""
    if timeout is None or timeout == math.inf:
        return None
    if timeout != timeout:
        raise ValueError(f"timeout must be a number of seconds (or None: no limit), got {timeout!r}")
    return time.monotonic() + timeout


def next_wait(deadline: float | None) -> float:
    """Seconds the next blocking wait may last on the way to ``deadline`` (None: none): what is
    left of it, at least 0, at most ``LONGEST_WAIT``."""
    if deadline is None:
        return LONGEST_WAIT
    return max(0.0, min(deadline - time.monotonic(), LONGEST_WAIT))


def check_number(name: str, value: object) -> None:
    """``TypeError`` naming option ``name`` unless ``value`` is a real number (a bool is not one:
    ``True`` would be taken as 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")


def check_seconds(name: str, value: float, *, infinite: bool = False) -> None:
    """``TypeError`` naming option ``name`` unless ``value`` is a number (``check_number``),
    ``ValueError`` unless it is a number of seconds above zero (finite unless ``infinite``)."""
    check_number(name, value)
    if not (0 < value < math.inf or (infinite and value == math.inf)):
        limit = "" if infinite else " and finite"
        raise ValueError(f"{name} must be a number of seconds > 0{limit}, got {value!r}")


class _Reentrant(Protocol):
    """A ``threading.RLock`` as ``take_within`` uses one."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...


def take_within(lock: _Reentrant, seconds: float) -> bool:
    """Take ``lock`` within ``seconds`` (``math.inf``: however long it takes; at most zero: only if
    it is free now); whether it was taken.

    An interrupt can land as ``acquire()`` returns, the lock taken and no ``try`` yet to let go of
    it (a timed taking cannot be a ``with``): it is let go of here before the interrupt goes on.
    ``lock`` must be an RLock, whose ``release`` refuses (``RuntimeError``) a thread that does not
    hold it: an interrupt that landed before the lock was taken lets go of nothing."""
    try:
        if seconds == math.inf:
            return lock.acquire()
        return lock.acquire(timeout=min(max(0.0, seconds), threading.TIMEOUT_MAX))
    except BaseException:
        try:
            lock.release()
        except RuntimeError:
            pass  # (not taken: the interrupt landed before, or as it waited)
        raise
