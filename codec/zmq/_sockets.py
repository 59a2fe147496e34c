"""Small operations on the caller's pyzmq sockets: whether a channel can drive one, receiving a
message's parts without a copy, dropping the rest of one, where a frame came from, a socket's
type, poll timeouts."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Collection
from typing import Any

import zmq

from tensorwire._timeouts import next_wait

__all__ = ["checked_type", "drop_rest", "kind_of", "over_network", "poll_ms", "recv_parts", "type_of"]

_NOW = int(zmq.NOBLOCK)
# pyzmq's sockets whose send and recv return futures (asyncio, tornado) or wait as greenlets
# (gevent), by module: one is of them only where that module was imported
_FUTURES = ', whose send and recv return futures: see "From asyncio" in the README'
_NOT_BLOCKING = (
    ("zmq.asyncio", _FUTURES),
    ("zmq.eventloop.future", _FUTURES),
    ("zmq.green", ": the channel waits in ZeroMQ, which would hold up every greenlet"),
)
_LOOK = 4096  # parts of a message dropped between two looks at the clock


def poll_ms(deadline: float, least: int = 0) -> int:
    """Milliseconds the next ZeroMQ poll on the way to ``deadline`` may last, at least ``least``
    (rounded up: no spin through the last millisecond)."""
    return max(least, math.ceil(next_wait(deadline) * 1000))


def recv_parts(
    socket: zmq.Socket[Any], flags: int, most: int, deadline: float | None = None
) -> tuple[list[zmq.Frame], int, bool]:
    """The first ``most`` parts of the next message, received without a copy, how many parts of it
    were received, and whether some are left: those past ``most`` are received and dropped one by
    one, never kept (``recv_multipart`` asks the socket for ``RCVMORE`` after each part; a received
    frame already knows whether more follow), until ``deadline`` (None: all of them; the clock is
    looked at every ``_LOOK`` parts), past which ``drop_rest`` drops the others. An exception part
    of the way (an interrupt) drops the rest: the next receive starts at a message, never takes a
    peer's last parts for one (a ROUTER: its routing id and frames of that peer's)."""
    try:
        part = socket.recv(flags, copy=False)
        parts = [part]
        while part.more and len(parts) < most:
            part = socket.recv(flags, copy=False)
            parts.append(part)
        count = len(parts)
        while part.more:  # ZeroMQ delivers a message whole: its parts are all there
            if deadline is not None and not count % _LOOK and time.monotonic() >= deadline:
                return parts, count, True
            part = socket.recv(_NOW, copy=False)
            count += 1
    except BaseException:
        drop_rest(socket)
        raise
    return parts, count, False


def drop_rest(socket: zmq.Socket[Any], deadline: float | None = None) -> bool:
    """Receive and drop what is left of a message read part of the way (ZeroMQ delivers a message
    whole: its parts are all there) until ``deadline`` (None: all of it; ``_LOOK`` parts at least
    however early it is, so that each call gets on); whether some is left."""
    dropped = 0
    try:
        while socket.getsockopt(zmq.RCVMORE):
            if deadline is not None and dropped and not dropped % _LOOK and time.monotonic() >= deadline:
                return True
            socket.recv(_NOW, copy=False)
            dropped += 1
    except zmq.ZMQError:
        pass
    return False


def over_network(frame: zmq.Frame) -> bool:
    """Whether ``frame`` came over a network connection: ZeroMQ gives the address of a TCP peer,
    ``localhost:<uid>:<gid>:<pid>`` for an ipc:// one and nothing for an inproc:// one."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:
        return False
    return not str(address).startswith("localhost")


def checked_type(socket: object, role: str, kinds: Collection[int]) -> int:
    """The type of ``socket`` if ``role`` (``"a Channel"``) can drive it, before anything is set on
    it: ``TypeError`` unless it is a synchronous pyzmq socket (not asyncio's, tornado's or
    gevent's), ``ValueError`` if it is closed or of a type not among ``kinds``."""
    if not isinstance(socket, zmq.Socket):
        raise TypeError(f"{role} needs a zmq.Socket, got {_class_name(socket)}")
    for module, why in _NOT_BLOCKING:
        found = sys.modules.get(module)
        if found is not None and isinstance(socket, found.Socket):
            raise TypeError(f"{role} needs a synchronous zmq.Socket, got a {module}.Socket{why}")
    if socket.closed:
        raise ValueError(f"{role} needs an open socket, got a closed one")
    kind = type_of(socket)
    if kind not in kinds:
        names = [zmq.SocketType(k).name for k in kinds]
        accepted = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise ValueError(f"{role} needs a {accepted} socket, got {_type_name(kind)}")
    return kind


def _class_name(value: object) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _type_name(kind: int) -> str:
    try:
        return zmq.SocketType(kind).name
    except ValueError:  # a type this pyzmq does not name
        return str(kind)


def type_of(socket: zmq.Socket[Any]) -> int:
    kind = socket.getsockopt(zmq.TYPE)
    assert isinstance(kind, int)
    return kind


def kind_of(socket: zmq.Socket[Any]) -> str:
    """The socket's type by name (``"ROUTER"``)."""
    return zmq.SocketType(type_of(socket)).name
