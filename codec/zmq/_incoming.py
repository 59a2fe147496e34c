"""How a ``Channel`` reads a ZeroMQ message: its parts received without a copy and bounded (at most
as many as a channel message can have, the rest of a longer one dropped, those left at the
deadline dropped by the next read first: ``next_message``), a handshake's question or answer told
from a message, learned from and a question answered (``answer``), the hello checked and the
frames handed to the decoder (``decode``), and a message that does not decode counted and logged
(``drop``). The channel keeps the state (``socket``, ``_unread``, ``dropped``, ``buffer_frames``);
these functions read and update it, once per message received.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import zmq

from tensorwire import DecodeError, TransportError
from tensorwire.zmq._locality import TOKEN_BYTES
from tensorwire.zmq._notes import peer_name
from tensorwire.zmq._outgoing import send_control
from tensorwire.zmq._peers import learn
from tensorwire.zmq._sockets import drop_rest, poll_ms, recv_parts

if TYPE_CHECKING:
    from tensorwire.zmq._channel import Channel

__all__ = ["HELLO", "answer", "decode", "drop", "next_message"]

HELLO = b"TWC1"
"""The first four bytes of a channel message's first frame (the sender's host token follows)."""

_SMALL_HEAD = 64 * 1024  # frame 0 up to this size is taken as bytes (the decoder's quickest input)
_ASK, _ANSWER = b"?", b"!"  # the last byte of a handshake's one frame: a question, an answer
_ANSWERING = frozenset({zmq.PAIR, zmq.DEALER, zmq.ROUTER})  # sockets that can reply to their peer
_NOTHING = object()
# ZeroMQ's flags as plain ints: combining pyzmq's enum members costs more than the send itself
_NOW, _POLLIN = int(zmq.NOBLOCK), int(zmq.POLLIN)


def next_message(channel: Channel, deadline: float | None) -> Any:
    """Read one ZeroMQ message: ``(peer, message)``, None for one that was not a message (a
    control message, or one dropped), ``_NOTHING`` if none came before ``deadline``. The parts
    of a message of too many that are left at the deadline are dropped first by the next call."""
    socket = channel.socket
    if channel._unread:
        channel._unread = drop_rest(socket, deadline)
        if channel._unread:
            return _NOTHING
    flags = 0
    if deadline is not None:
        while not zmq.zmq_poll([(socket, _POLLIN)], poll_ms(deadline)):
            if time.monotonic() >= deadline:
                return _NOTHING
        flags = _NOW
    parts, count, channel._unread = recv_parts(socket, flags, channel._most_parts, deadline)
    peer = parts[0].bytes if channel._router and parts else None
    body = parts[1:] if channel._router else parts
    if count > len(parts):
        routed = "a routing id, " if channel._router else ""
        drop(
            channel,
            peer,
            f"it has {'at least ' if channel._unread else ''}{count} parts, over the limit of {len(parts)}"
            f" ({routed}the hello, frame 0 and max_buffers={channel._decoder.options.limits.max_buffers}"
            " buffer frames)",
        )
        return None
    if len(body) == 1 and answer(channel, peer, body[0]):
        return None
    try:
        return peer, decode(channel, peer, body)
    except DecodeError as exc:
        drop(channel, peer, str(exc))
        return None
    except TransportError as exc:
        raise TransportError(exc.errno, f"a message from {peer_name(peer)}: {exc.strerror or exc}") from None


def drop(channel: Channel, peer: bytes | None, why: str) -> None:
    """Count a message of ``peer``'s that is dropped, and log ``why`` (ten lines a second at most)."""
    channel.dropped += 1
    channel._drops.note(f"dropped a message from {peer_name(peer)}: {why}")


def answer(channel: Channel, peer: bytes | None, part: zmq.Frame) -> bool:
    """Whether ``part`` is a handshake's question or answer; learn from it, answer a question."""
    if len(part) != len(channel._hello) + 1:  # (looked at before the part is copied: a peer sets its size)
        return False
    frame = part.bytes
    if not frame.startswith(HELLO) or frame[-1:] not in (_ASK, _ANSWER):
        return False
    local = frame[:-1] == channel._hello
    # a question (or an answer nobody asked for) takes shared memory away, never gives it: its
    # sender has not shown a message that decodes; the answer to this channel's question does
    if not local or (frame[-1:] == _ANSWER and (peer if channel._router else None) in channel._asked):
        learn(channel, peer, local, part)
    if frame[-1:] == _ASK and channel._type in _ANSWERING:
        try:
            send_control(channel, peer, _ANSWER, time.monotonic(), 0)
        except (TimeoutError, ConnectionAbortedError, zmq.ZMQError) as exc:  # (ROUTER_MANDATORY: the
            # asker may have left; after abort(): no send waits)
            channel.unanswered += 1
            why = "its socket is not ready" if isinstance(exc, TimeoutError) else str(exc)
            channel._unanswered.note(f"could not answer a handshake from {peer_name(peer)}: {why}")
    return True


def decode(channel: Channel, peer: bytes | None, parts: list[zmq.Frame]) -> Any:
    if len(parts) < 2:
        raise DecodeError(f"a channel message has a hello frame and frame 0 at least; this one has {len(parts)} frames")
    first = parts[0]  # its size looked at before it is copied: a peer sets it
    hello = first.bytes if len(first) == len(HELLO) + TOKEN_BYTES else b""
    if not hello.startswith(HELLO):
        shown = bytes(first.buffer[:24])
        raise DecodeError(f"not a tensorwire channel message: its first frame is {shown!r}")
    head = parts[1]
    frames: list[Any] = [head.bytes if len(head) <= _SMALL_HEAD else head.buffer]
    if len(parts) > 2:
        frames.extend(p.buffer for p in parts[2:])
        channel.buffer_frames += len(parts) - 2
    message = channel._decoder.decode(frames)
    if channel._router or channel._type == zmq.PAIR or hello != channel._hello:
        learn(channel, peer, hello == channel._hello, parts[0])
    return message
