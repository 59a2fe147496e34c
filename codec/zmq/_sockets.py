"""Small operations on the caller's pyzmq sockets: receiving a message's parts without a copy,
dropping the rest of one, where a frame came from, a socket's type, poll timeouts."""

from __future__ import annotations

import math
from typing import Any

import zmq

from tensorwire._timeouts import next_wait

__all__ = ["drop_rest", "kind_of", "over_network", "poll_ms", "recv_parts", "type_of"]

_NOW = int(zmq.NOBLOCK)


def poll_ms(deadline: float, least: int = 0) -> int:
    """Milliseconds the next ZeroMQ poll on the way to ``deadline`` may last, at least ``least``
    (rounded up: no spin through the last millisecond)."""
    return max(least, math.ceil(next_wait(deadline) * 1000))


def recv_parts(socket: zmq.Socket[Any], flags: int, most: int) -> tuple[list[zmq.Frame], int]:
    """The first ``most`` parts of the next message, received without a copy, and how many parts it
    has: those past ``most`` are received and dropped one by one, never kept (``recv_multipart``
    asks the socket for ``RCVMORE`` after each part; a received frame already knows whether more
    follow). An exception part of the way (an interrupt) drops the rest: the next receive starts at
    a message, never takes a peer's last parts for one (a ROUTER: its routing id and frames of that
    peer's)."""
    try:
        part = socket.recv(flags, copy=False)
        parts = [part]
        while part.more and len(parts) < most:
            part = socket.recv(flags, copy=False)
            parts.append(part)
        count = len(parts)
        while part.more:  # ZeroMQ delivers a message whole: its parts are all there
            part = socket.recv(_NOW, copy=False)
            count += 1
    except BaseException:
        drop_rest(socket)
        raise
    return parts, count


def drop_rest(socket: zmq.Socket[Any]) -> None:
    """Receive and drop what is left of a message read part of the way (ZeroMQ delivers a message
    whole: its parts are all there)."""
    try:
        while socket.getsockopt(zmq.RCVMORE):
            socket.recv(_NOW, copy=False)
    except zmq.ZMQError:
        pass


def over_network(frame: zmq.Frame) -> bool:
    """Whether ``frame`` came over a network connection: ZeroMQ gives the address of a TCP peer,
    ``localhost:<uid>:<gid>:<pid>`` for an ipc:// one and nothing for an inproc:// one."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:
        return False
    return not str(address).startswith("localhost")


def type_of(socket: zmq.Socket[Any]) -> int:
    kind = socket.getsockopt(zmq.TYPE)
    assert isinstance(kind, int)
    return kind


def kind_of(socket: zmq.Socket[Any]) -> str:
    """The socket's type by name (``"ROUTER"``)."""
    return zmq.SocketType(type_of(socket)).name
