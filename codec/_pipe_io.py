"""How ``tensorwire.pipe`` reads and writes a ``Connection``'s file descriptor, below its framing:
a message's pieces written in order with ``os.writev``, a short write resumed where it stopped and
the bytes that went counted (``write_all``, ``Written``), whether an exception that stopped a send
left nothing written (``wrote_nothing``), a view filled from the descriptor by a deadline
(``read_into``, ``readv``), a non-blocking descriptor waited on as a blocking one is (``wait_for``),
and the bytes of a message over ``max_bytes`` read off and dropped a chunk at a time (``drain``,
``DRAIN``). A read that ends part of the way is ``Ended``, one that does not come in time
``Stalled``. ``send`` and ``Receiver`` keep the framing and the state of a stream.
"""

from __future__ import annotations

import math
import os
import select
from collections.abc import Sequence

from tensorwire._timeouts import next_wait
from tensorwire._wire import Buffer

__all__ = [
    "DRAIN",
    "Ended",
    "Stalled",
    "Written",
    "drain",
    "read_into",
    "readv",
    "wait_for",
    "write_all",
    "writev",
    "wrote_nothing",
]

_IOV_MAX = 1024  # the most pieces one writev takes (POSIX guarantees at least 16; Linux takes 1024)
DRAIN = 64 * 1024  # the chunk an oversized message is read off in, and a large one into a fresh buffer


class Written:
    """The bytes of a message written so far (``write_all``)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


def write_all(fd: int, parts: list[Buffer], total: int, done: Written, deadline: float | None = None) -> None:
    """Write ``parts`` (``total`` bytes in all) to ``fd`` in order, all of them, counting them in
    ``done``; ``Stalled`` if a non-blocking ``fd`` has had no room for the rest by ``deadline``
    (None: wait however long it takes)."""
    written = writev(fd, parts, deadline, done, total) if len(parts) <= _IOV_MAX else 0
    done.bytes += written
    if written == total:
        return  # the common case: one call
    views = [view for view in (memoryview(part).cast("B") for part in parts) if view.nbytes]
    first = 0  # the first view not yet written in full
    while True:
        while first < len(views) and written >= views[first].nbytes:
            written -= views[first].nbytes
            first += 1
        if first == len(views):
            return
        if written:
            views[first] = views[first][written:]
        written = writev(fd, views[first : first + _IOV_MAX], deadline, done, total)
        done.bytes += written


def wrote_nothing(exc: BaseException, parts: list[Buffer]) -> bool:
    """Whether ``exc``, which stopped a send before a write of it was counted, says that nothing was
    written: a write's own failure (an ``OSError`` raised by ``os.writev`` itself, not one a signal
    handler raised as a write returned), or a piece ``writev`` cannot take (not C-contiguous)."""
    if isinstance(exc, OSError):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and tb.tb_frame.f_code is writev.__code__  # (a handler's frame is below)
    return not all(memoryview(part).c_contiguous for part in parts)


def writev(
    fd: int, parts: Sequence[Buffer], deadline: float | None = None, done: Written | None = None, total: int = 0
) -> int:
    """``os.writev(fd, parts)``, waiting while a non-blocking ``fd`` has no room for any of it, by
    ``deadline`` (``Stalled``, saying how many of the message's ``total`` bytes are ``done``)."""
    while True:
        try:
            return os.writev(fd, parts)
        except BlockingIOError:
            wait_for(fd, select.POLLOUT, deadline, f"{0 if done is None else done.bytes} of {total} bytes written")


class Stalled(Exception):
    """A message stopped arriving part of the way, past the caller's deadline."""


class Ended(Exception):
    """The connection ended in the middle of a message (``recv`` raises it as ``Connection`` does:
    an ``OSError``)."""


def read_into(
    fd: int, view: memoryview, deadline: float | None, got: int = 0, *, before: int = 0, whole: int = 0
) -> None:
    """Fill ``view`` (its first ``got`` bytes are there) from ``fd``; ``Ended`` if it ends part of
    the way, ``Stalled`` if the bytes still missing have not come by ``deadline`` (None: wait for
    them however long it takes). Each read waits for its bytes first: a sender that stops between a
    message's size and its bytes holds no read past ``deadline``. Errors count the bytes of a
    ``whole`` of which ``before`` came ahead of ``view`` (by default, of ``view`` alone)."""
    whole = whole or view.nbytes
    while got < view.nbytes:
        progress = f"{before + got} of {whole} bytes read"
        if deadline is not None:
            wait_for(fd, select.POLLIN, deadline, progress)
        more = readv(fd, view[got:], deadline, progress)
        if not more:
            raise Ended(f"got end of file during message ({before + got} of {whole} bytes)")
        got += more


def readv(fd: int, view: memoryview, deadline: float | None, progress: str) -> int:
    """``os.readv(fd, [view])``, waiting (as ``wait_for`` does) while a non-blocking ``fd`` has
    nothing to read."""
    while True:
        try:
            return os.readv(fd, [view])
        except BlockingIOError:
            wait_for(fd, select.POLLIN, deadline, progress)


def wait_for(fd: int, event: int, deadline: float | None, progress: str) -> None:
    """Return once ``fd`` is ready for ``event`` (``POLLIN``: bytes to read or its end; ``POLLOUT``:
    room to write), or has failed; ``Stalled`` naming ``progress`` if it is not by ``deadline``
    (None: wait however long it takes). What is already there counts however early the deadline was."""
    poller = select.poll()
    poller.register(fd, event)
    while True:
        left = next_wait(deadline)  # (at most ``LONGEST_WAIT``: poll overflows on a very long timeout)
        if poller.poll(math.ceil(left * 1000)):  # (0 once the deadline is past: bytes already there still count)
            return
        if left <= 0:
            raise Stalled(progress)


def drain(fd: int, size: int, deadline: float | None) -> None:
    """Read ``size`` bytes off ``fd`` and drop them, a chunk at a time, by ``deadline`` (None: no limit)."""
    chunk = memoryview(bytearray(min(size, DRAIN)))
    left = size
    while left:
        view = chunk[: min(left, chunk.nbytes)]
        read_into(fd, view, deadline, before=size - left, whole=size)
        left -= view.nbytes
