"""How a ``Channel``'s message goes to ZeroMQ: its parts queued one by one (hello, frame 0, buffer
frames; a ROUTER's routing id first), small frames copied and large ones handed over tracked
(``put_parts``, which ``Channel._put`` runs inside ``whole``), the first part tried without ever
blocking in ZeroMQ until the deadline or ``abort()`` (``send_first``), a message an exception
broke off between two parts ended with an empty part (``whole``, ``cut``), a handshake's
one-frame question or answer (``send_control``), and what the shared-memory transport exported
for a message that did not go, or for the peers a broadcast did not reach, given back
(``unsend``, ``withdraw``). The channel keeps the state (``socket``, ``_open``, ``_ended``,
``_aborted``); these functions read and update it, once per message sent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import zmq

from tensorwire.transports.inline import InlineHandle
from tensorwire.transports.shm import FanOut
from tensorwire.zmq._sent import DONE, Sent

if TYPE_CHECKING:
    from tensorwire.zmq._channel import Channel

__all__ = ["cut", "put_parts", "send_control", "send_first", "unsend", "whole", "withdraw"]

# ZeroMQ's flags as plain ints: combining pyzmq's enum members costs more than the send itself
_MORE, _NOW, _POLLOUT = int(zmq.SNDMORE), int(zmq.NOBLOCK), int(zmq.POLLOUT)
_SEND_SLICE = 0.05  # seconds a refused send waits before it looks at abort() again
_FIRST_PAUSE, _LONGEST_PAUSE = 0.001, 0.05  # a ROUTER's pauses between tries to queue for a full peer


def withdraw(channel: Channel, fan: FanOut, frames: list[Any], missing: int, *, everyone: bool) -> None:
    """The peers a broadcast did not reach: all of them (its exports undone) or ``missing``."""
    if everyone:
        unsend(channel, frames)
        return
    buffers = channel._decoder.table.decode(frames[0]).buffers
    fan.withdraw_all([handle for _, handle in buffers if not isinstance(handle, InlineHandle)], missing)


def put_parts(
    channel: Channel, peer: bytes | None, frames: list[Any], deadline: float | None, timeout: float | None
) -> Sent:
    """``Channel._put``'s sends, part by part; ``_ended`` counts the message just before its last part
    (ZeroMQ takes the rest of a message whose first part it took)."""
    socket = channel.socket
    first = peer if peer is not None else channel._hello
    if not send_first(channel, first, deadline):
        within = f"{timeout} s" if timeout is not None else "the socket's SNDTIMEO"
        raise TimeoutError(f"the message could not be queued within {within} (no peer ready)")
    if peer is not None:
        socket.send(channel._hello, _MORE)
    head = frames[0]  # the encoder's own bytes, never changed: handed over untracked when large
    last = len(frames) - 1
    inproc = channel._inproc()
    if not last:
        channel._ended += 1
    socket.send(head, _MORE if last else 0, copy=inproc or len(head) < socket.copy_threshold)
    if not last:
        return DONE
    threshold = 1 << 62 if inproc else max(channel.copy_below, socket.copy_threshold)
    trackers: list[zmq.MessageTracker] = []
    for i in range(1, last + 1):
        frame = frames[i]
        flags = _MORE
        if i == last:
            flags = 0
            channel._ended += 1
        if memoryview(frame).nbytes < threshold:
            socket.send(frame, flags, copy=True)
        else:
            trackers.append(socket.send(frame, flags, copy=False, track=True))
    return Sent(trackers) if trackers else DONE


@contextmanager
def whole(channel: Channel) -> Iterator[None]:
    """Around the sends of one message: if an exception breaks it off after a part others were
    to follow was queued (an interrupt between two sends), it is ended there (``cut``), as is
    one that an exception broke off inside ``cut`` itself, before the next."""
    if channel._open:
        cut(channel)
    try:
        yield
    except BaseException:
        if channel._open:
            cut(channel)
        raise
    channel._open = False


def cut(channel: Channel) -> None:
    """End a message broken off after some of its parts were queued (an interrupt between two
    sends): ZeroMQ cannot take them back, and the next message's parts would follow them, glued
    on (from a ROUTER, sent to this message's peer). An empty last part ends it; its peer
    drops a message that does not decode. Where nothing was queued after all, a ROUTER routes
    the empty part nowhere; another socket sends it as a message of its own, dropped as well."""
    try:
        channel.socket.send(b"", _NOW)
    except zmq.ZMQError:
        pass
    channel._open = False


def unsend(channel: Channel, frames: list[Any]) -> None:
    """Release what the shared-memory transport exported for a message that was not sent."""
    assert channel.transport is not None
    try:
        table = channel._decoder.table.decode(frames[0])
    except Exception:  # our own frame 0: it reads; the guard keeps the original error in sight
        return
    channel.transport.release_all([handle for _, handle in table.buffers if not isinstance(handle, InlineHandle)])


def send_control(
    channel: Channel, peer: bytes | None, kind: bytes, deadline: float | None, timeout: float | None
) -> None:
    """Send a one-frame control message (a handshake's question or answer)."""
    frame = channel._hello + kind
    with whole(channel):
        if peer is None:
            sent = send_first(channel, frame, deadline, more=False)
        else:
            sent = send_first(channel, peer, deadline)
            if sent:
                channel.socket.send(frame)
    if not sent:
        raise TimeoutError(f"the handshake could not be sent within {timeout} s (no peer ready)")


def send_first(channel: Channel, data: bytes, deadline: float | None, *, more: bool = True) -> bool:
    """Send the first part of a message (``more``: others follow) by ``deadline`` (None: within
    the socket's ``SNDTIMEO``, as a blocking send would, however long it takes if that is -1);
    False if the socket took none by then, ``ConnectionAbortedError`` after ``abort()``. It
    never blocks in ZeroMQ: a refused try waits at most ``_SEND_SLICE`` for the next. A ROUTER
    (``ROUTER_MANDATORY``) is writable when any of its peers has room, not the one this is for:
    it pauses between tries (1 ms doubling to 50 ms) rather than spin on a poll."""
    socket, flags = channel.socket, (_MORE if more else 0) | _NOW
    pause = _FIRST_PAUSE
    tried = False
    while True:
        channel._open = more  # from here a part others follow may be queued: ``cut`` ends it
        try:
            socket.send(data, flags)
            return True
        except zmq.ZMQError as exc:
            channel._open = False  # refused: nothing was queued
            if not isinstance(exc, zmq.Again):
                raise
        if deadline is None and not tried:  # refused once: the socket's own bound, if it has one
            tried = True
            limit = int(socket.getsockopt(zmq.SNDTIMEO))
            if limit >= 0:
                deadline = time.monotonic() + limit / 1000
        if channel._aborted.is_set():
            raise ConnectionAbortedError("the channel was closed while a message waited to be queued")
        wait = _SEND_SLICE
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                return False
        if channel._router:
            time.sleep(min(pause, wait))
            pause = min(2 * pause, _LONGEST_PAUSE)
        else:
            zmq.zmq_poll([(socket, _POLLOUT)], max(1, math.ceil(wait * 1000)))
