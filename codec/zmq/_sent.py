"""What a channel's send returns and raises while ZeroMQ still holds frames it took without a copy."""

from __future__ import annotations

import time

import zmq

from tensorwire._timeouts import deadline_after, next_wait

__all__ = ["DONE", "AbortedWhileHeldError", "Sent", "StillHeldError"]


class StillHeldError(TimeoutError):
    """``send(wait=True)`` ran out of time after the message was queued: ZeroMQ still holds some of
    its frames. The message is on its way; its tensors must not change until ``sent.wait()``."""

    def __init__(self, message: str, sent: Sent) -> None:
        super().__init__(message)
        self.sent = sent


class Sent:
    """The frames of one sent message that ZeroMQ took without a copy, until it lets go of them."""

    __slots__ = ("_trackers",)

    def __init__(self, trackers: list[zmq.MessageTracker]) -> None:
        self._trackers = trackers

    @property
    def done(self) -> bool:
        """Whether ZeroMQ has let go of every frame (the message's tensors may change)."""
        return all(t.done for t in self._trackers)

    @property
    def held(self) -> int:
        """How many frames ZeroMQ still holds."""
        return sum(not t.done for t in self._trackers)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until ``done`` (at most ``timeout`` seconds; None: as long as it takes); whether it is."""
        deadline = deadline_after(timeout)
        for tracker in self._trackers:
            while not tracker.done:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                try:
                    tracker.wait(next_wait(deadline))
                except zmq.NotDone:
                    pass  # that wait is over: look at the deadline again
        return True


DONE = Sent([])  # what a send whose frames were all copied returns: nothing to wait for


class AbortedWhileHeldError(ConnectionAbortedError):
    """``abort()`` cut short a ``send(wait=True)`` whose message was queued while ZeroMQ still held
    some of its frames. The message may be on its way; its tensors must not change until
    ``sent.wait()`` (closing the socket makes ZeroMQ let go of them)."""

    def __init__(self, message: str, sent: Sent) -> None:
        super().__init__(message)
        self.sent = sent
