"""Log lines about what peers sent, rate-limited and made safe to print, and how they name a peer."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["Notes", "loggable", "peer_name"]


class Notes:
    """Lines on a logger at ``level``, at most ``burst`` a second: a peer flooding garbage cannot
    flood the log. Those held back are counted in the next line that is written. A line carries
    what a peer sent (its strings, in a decode error): it is cut to ``_LINE`` characters and its
    control characters escaped (a peer cannot write lines of its own)."""

    __slots__ = ("_burst", "_clock", "_held", "_level", "_log", "_second", "_written")

    def __init__(
        self,
        log: logging.Logger,
        level: int = logging.WARNING,
        burst: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self._level, self._burst, self._clock = log, level, burst, clock
        self._second, self._written, self._held = -1, 0, 0

    def note(self, text: str) -> None:
        second = int(self._clock())
        if second != self._second:
            self._second, self._written = second, 0
        if self._written >= self._burst:
            self._held += 1
            return
        self._written += 1
        text = loggable(text)
        if self._held:
            text = f"{text} ({self._held} more held back from the log since the last line)"
            self._held = 0
        self._log.log(self._level, "%s", text)


_LINE = 500  # characters of a log line's text (what a peer sent in it, mostly)


def loggable(text: str) -> str:
    """``text`` cut to ``_LINE`` characters, with what is not printable (newlines, escapes) escaped."""
    shown = text[:_LINE]
    if not shown.isprintable():
        shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in shown)
    if len(text) > _LINE or len(shown) > _LINE:
        return f"{shown[:_LINE]}... (cut at {_LINE} characters)"
    return shown


_SHOWN_ID = 32  # bytes of a routing id a line shows (ZeroMQ's own ids are 5)


def peer_name(peer: bytes | None) -> str:
    """How a line (or an error) names the peer whose routing id is ``peer`` (None: a socket's one
    peer): its id in hex, a long one cut to its first ``_SHOWN_ID`` bytes and its length. A peer
    picks its id, up to 255 bytes: whole, it would push the rest of the line past the cut."""
    if peer is None:
        return "the peer"
    if len(peer) <= _SHOWN_ID:
        return f"peer {peer.hex()}"
    return f"peer {peer[:_SHOWN_ID].hex()}... ({len(peer)} bytes)"
