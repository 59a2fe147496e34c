"""``Channel``: typed messages over a ZeroMQ socket the caller made, with zero-copy frame lifetimes kept.

A channel message is one ZeroMQ multipart message: ``[hello, frame 0, buffer frames...]`` (a
ROUTER socket adds the peer's routing id in front, as ZeroMQ does). ``hello`` is ``b"TWC1"`` and
the sender's host token (``tensorwire.zmq._locality``): a receiver learns from it whether that
peer shares its shared memory. A handshake is a one-frame message, the hello and ``b"?"`` (a
question) or ``b"!"`` (the answer a receiving channel sends back).

Sending. The encoder writes the message (a schema violation is an ``EncodeError`` before anything
is exported); large tensors go to the channel's shared-memory transport only when the peer shares
this host's ``/dev/shm`` (``same_host``; else what the peer's hello or handshake said; else
``ipc://`` and ``inproc://`` endpoints count as local, anything else as remote), otherwise
inline. The host token is no secret: a peer that only its hello calls local, the hello having
come over TCP (``Peer-Address``), is on trial, with one message at a time in shared memory until
a receiver of another process claims one, and at most ``max_trials`` peers of a channel have one
waiting (the others' messages go inline: ``withheld``).
A frame under ``copy_below`` (512 KiB by default, pyzmq's own copy threshold at least) is
copied into ZeroMQ at once; a larger one is handed over without a copy and tracked (every one of
them, not just the last). ``send`` returns when ZeroMQ has let go of every frame it did not copy
(``wait=True``, the default: the caller may then modify the message's tensors), or at once with a
``Sent`` whose ``wait()``/``done`` tell when that is (``wait=False``: until then the tensors must
not change). On ``inproc://`` every frame is copied: a frame handed over there would be the
receiving thread's memory too. If the message cannot be queued before the timeout, nothing is
sent and what was exported is released. An exception between two of its parts (an interrupt)
ends the message there with an empty part, which its peer drops: the next message never follows
its parts (nor, from a ROUTER, goes to its peer).

Receiving. ZeroMQ reads a whole multipart message before the channel sees it: a channel sets the
socket's ``MAXMSGSIZE`` (unless the caller did) to the largest frame its ``DecodeOptions`` let
through (``max_header_bytes`` or ``max_message_bytes``, the larger), so ZeroMQ disconnects a peer
that sends a larger one. That bounds each frame, and holds only over ``tcp://`` and ``ipc://``
endpoints bound or connected after the channel is made (ZeroMQ takes a socket's options at ``bind``
and ``connect``: a channel made on a socket bound or connected already warns); ZeroMQ bounds no
message's number of parts. The channel keeps at most as many as a message can have (a ROUTER's
routing id, the hello, frame 0 and ``max_buffers`` buffer frames): a message of more is received to
its end, the rest of its parts dropped as they come (those left when ``recv``'s timeout is up
dropped by the next receive first), and dropped whole. Frames are received without a copy (pyzmq
frames are writable memory the decoder builds tensors on; a decoded tensor keeps its frame alive). A
message that does not decode (garbage, a forged handle, a limit of ``DecodeOptions`` exceeded) is
dropped with a log line and counted in ``dropped``; ``recv`` goes on waiting for the next one,
within its timeout however many are dropped. A message whose handles this process cannot open is a
``TransportError`` naming the peer. A receive interrupted part of the way drops the rest of that
message.

A channel is not thread-safe (nor is a ZeroMQ socket), except ``abort()``: it makes a send that
waits in another thread give up; ``tensorwire.zmq.Client`` is thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

import zmq

from tensorwire import DecodeOptions, EncodeOptions, Registry
from tensorwire._decoder import Decoder
from tensorwire._encoder import Encoder
from tensorwire._timeouts import deadline_after
from tensorwire.transports.base import Handle, Transport
from tensorwire.transports.shm import MAX_READERS, FanOut, ShmTransport
from tensorwire.zmq._incoming import _ASK, _NOTHING, HELLO, next_message
from tensorwire.zmq._locality import TOKEN_BYTES, host_token
from tensorwire.zmq._notes import Notes
from tensorwire.zmq._outgoing import _SEND_SLICE, put_parts, send_control, unsend, whole, withdraw
from tensorwire.zmq._peers import _FAR, _INLINE, _SHARED, _TRIAL, route_for, start_trial
from tensorwire.zmq._sent import DONE, AbortedWhileHeldError, Sent, StillHeldError
from tensorwire.zmq._sockets import checked_type, kind_of

__all__ = ["COPY_BELOW", "MAX_TRIALS", "Channel"]

COPY_BELOW = 512 * 1024
"""Frames smaller than this are copied into ZeroMQ rather than handed over and tracked: below it,
waiting for ZeroMQ to let go of a frame costs more than copying it (``tools.bench.copy_below``)."""

_LOG = logging.getLogger("tensorwire.zmq")
_KINDS = (zmq.PUSH, zmq.PULL, zmq.PAIR, zmq.DEALER, zmq.ROUTER, zmq.PUB, zmq.SUB, zmq.XPUB, zmq.XSUB)
_FAN_OUT = frozenset({zmq.PUB, zmq.XPUB})  # one message, many receivers: never through shared memory
_ASKING = frozenset({zmq.PAIR, zmq.ROUTER})  # sockets that know which peer an answer is from
_BACKLOG = 1000  # messages a handshake keeps for recv when the socket's receive high-water mark is 0
MAX_TRIALS = 16
"""``Channel``'s default ``max_trials``."""


class Channel:
    """Messages of ``registry``'s types over ``socket`` (PUSH/PULL, PAIR, DEALER/ROUTER, PUB/SUB,
    XPUB/XSUB): an open, synchronous pyzmq socket (``TypeError`` or ``ValueError`` for another,
    before anything is set on it).

    ``transport``: where large tensors go when the peer is on this host (e.g. ``ShmTransport()``;
    None: always inline frames); ``options``: the limits every received message is held to;
    ``encode_options``: the encoder's; ``same_host``: True or False overrides what the channel
    works out about its peers (False: every tensor inline both ways: a message naming shared memory
    is dropped, and the hello says this channel opens none); ``copy_below``: frames under this
    many bytes are copied into ZeroMQ (``COPY_BELOW``), larger ones handed over and tracked;
    ``max_trials``: peers at once whose message on trial (see the module) may wait for its claim
    in shared memory. The socket stays the caller's until ``close()``, which closes it (never its
    context).
    """

    def __init__(
        self,
        socket: zmq.Socket[Any],
        registry: Registry,
        *,
        transport: Transport | None = None,
        options: DecodeOptions | None = None,
        encode_options: EncodeOptions | None = None,
        same_host: bool | None = None,
        copy_below: int = COPY_BELOW,
        max_trials: int = MAX_TRIALS,
    ) -> None:
        kind = checked_type(socket, "a Channel", _KINDS)
        if copy_below < 0:
            raise ValueError(f"copy_below must be >= 0 bytes, got {copy_below}")
        if max_trials < 0:
            raise ValueError(f"max_trials must be >= 0 peers, got {max_trials}")
        self.max_trials = max_trials
        self.socket = socket
        self.copy_below = copy_below
        self.registry = registry
        self.transport = transport
        self.same_host = same_host
        self._type = kind
        self._router = self._type == zmq.ROUTER
        self._encode_options = encode_options
        self._inline = Encoder(None, encode_options)
        shares = transport is not None and same_host is not False  # shared memory both ways (else inline)
        self._shared = Encoder(transport, encode_options) if shares and self._type not in _FAN_OUT else None
        self._decoder = Decoder(registry, [transport] if shares and transport is not None else [], options)
        limits = self._decoder.options.limits
        self._most_parts = int(self._router) + 2 + limits.max_buffers  # routing id, hello, frame 0, buffers
        if int(socket.getsockopt(zmq.MAXMSGSIZE)) == -1:  # the caller's own bound stays
            most = max(limits.max_header_bytes, limits.max_message_bytes)
            socket.setsockopt(zmq.MAXMSGSIZE, most)
            endpoint = self._last_endpoint()
            if endpoint and not endpoint.startswith("inproc://"):  # (ZeroMQ bounds no inproc:// frame)
                warnings.warn(
                    f"the socket is bound or connected already ({endpoint}): ZeroMQ takes the MAXMSGSIZE of"
                    f" {most} bytes the channel sets only at a later bind or connect, so a peer of an"
                    " endpoint it has now can send frames of any size; make the channel first, or set"
                    " zmq.MAXMSGSIZE before bind and connect",
                    UserWarning,
                    stacklevel=2,
                )
        # a channel that cannot (or, with same_host=False, will not) open shared memory says so with
        # a token no process has
        self._hello = HELLO + (host_token() if shares else bytes(TOKEN_BYTES))
        self._peers: OrderedDict[bytes | None, int] = OrderedDict()  # what each peer's hello says
        self._forgot = False  # whether a peer was ever pushed out of ``_peers`` (past ``_peers._MAX_PEERS``)
        self._proven: OrderedDict[bytes | None, None] = OrderedDict()  # peers that claimed a message
        self._trials: dict[bytes | None, Handle] = {}  # a message's first buffer each, waiting for its claim
        self._backlog: deque[tuple[bytes | None, Any]] = deque()  # messages read by a handshake
        self._asked: set[bytes | None] = set()  # peers whose answer a handshake waits for
        self._endpoint = ""
        self.dropped = 0
        """Messages received and dropped because they did not decode."""
        self._drops = Notes(_LOG)
        self.unanswered = 0
        """Handshake questions that could not be answered (the asker's queue was full, or it had left)."""
        self._unanswered = Notes(_LOG, logging.INFO)
        self._aborted = threading.Event()
        self._open = False  # whether a part of a message may be queued without its last part (``cut``)
        self._unread = False  # whether parts of a message of too many are left to drop (``next_message``)
        self._ended = 0  # messages whose last part was handed to ZeroMQ (``put_parts``, ``broadcast``)
        self.buffer_frames = 0
        """Buffer frames received: tensors that came inline, each in a frame of its own."""
        self.withheld = 0
        """Messages sent inline to a peer whose hello says it shares this host, because it has not
        yet claimed one sent through shared memory (its message on trial still waits)."""
        self.closed = False

    # -- sending --------------------------------------------------------------------------------
    def send(self, message: Any, *, timeout: float | None = None, wait: bool = True, peer: bytes | None = None) -> Sent:
        """Send ``message`` (to ``peer``, the routing id, on a ROUTER socket); see the module for
        ``wait``. ``TimeoutError`` if it cannot be queued within ``timeout`` seconds (nothing sent;
        None: the socket's ``SNDTIMEO``, by default -1, no limit); ``StillHeldError`` if it was
        queued but ZeroMQ still holds frames when the time is up (with None, ``SNDTIMEO`` once it
        was queued)."""
        if self.closed:
            raise ValueError("the channel is closed")
        if (peer is None) is self._router:
            if peer is None:
                raise ValueError("a ROUTER channel sends to one peer: send(message, peer=routing_id)")
            raise ValueError("peer= is for ROUTER sockets; this socket routes messages itself")
        deadline = deadline_after(timeout)
        route = route_for(self, peer)
        frames = (self._inline if route == _INLINE else self._shared_encoder()).encode(message)
        try:
            sent = self._put(peer, frames, deadline, timeout)
        except BaseException:
            if route != _INLINE:
                unsend(self, frames)
            raise
        if route == _TRIAL:
            start_trial(self, peer, frames)
        return self._settled(sent, wait, deadline, timeout)

    def broadcast(
        self, message: Any, peers: Sequence[bytes], *, timeout: float | None = None, wait: bool = True
    ) -> Sent:
        """Send ``message`` to each routing id of ``peers`` (a ROUTER channel), encoded once. When
        every peer is on this host (none on trial: see the module) and the transport is a pooled
        ``ShmTransport``, each large tensor goes to one shared-memory buffer that all of them read,
        freed when the last has let go (``ShmTransport.fan_out``); otherwise the same inline frames
        go to each. A peer ZeroMQ does not know gets nothing (its share of the buffer comes back
        after the claim timeout); if the time runs out (or an exception comes) part way, the peers
        not sent to are withdrawn. ``wait``, ``timeout`` and the errors are ``send``'s."""
        if self.closed:
            raise ValueError("the channel is closed")
        if not self._router:
            raise ValueError("broadcast() is for ROUTER sockets (a PUB socket's send reaches every subscriber)")
        peers = list(peers)
        if not peers or len(set(peers)) != len(peers):
            raise ValueError(f"broadcast() needs distinct routing ids, got {len(peers)} with repeats or none")
        deadline = deadline_after(timeout)
        shm = self.transport
        fan: FanOut | None = None
        if isinstance(shm, ShmTransport) and shm.pool is not None and all(route_for(self, p) == _SHARED for p in peers):
            if len(peers) > MAX_READERS:
                raise ValueError(f"a shared-memory broadcast reaches {MAX_READERS} peers at most, not {len(peers)}")
            fan = shm.fan_out(len(peers))
        frames = (self._inline if fan is None else Encoder(fan, self._encode_options)).encode(message)
        trackers: list[zmq.MessageTracker] = []
        before = self._ended
        try:
            for peer in peers:
                trackers.extend(self._put(peer, frames, deadline, timeout)._trackers)
        except BaseException:
            if fan is not None:  # a peer is reached once its last part goes to ZeroMQ: an interrupt as
                # that send returns leaves its message whole, its claim to make
                done = self._ended - before
                withdraw(self, fan, frames, len(peers) - done, everyone=done == 0)
            raise
        return self._settled(Sent(trackers) if trackers else DONE, wait, deadline, timeout)

    def _settled(self, sent: Sent, wait: bool, deadline: float | None, timeout: float | None) -> Sent:
        """``sent``, once ZeroMQ has let go of its frames if ``wait``: ``StillHeldError`` past
        ``deadline`` (None: the socket's ``SNDTIMEO`` from now, if it has one), ``AbortedWhileHeldError``
        after ``abort()`` (looked at every ``_SEND_SLICE``)."""
        if sent is DONE or not wait:
            return sent
        within = f"{timeout} s"
        if deadline is None:
            limit = int(self.socket.getsockopt(zmq.SNDTIMEO))
            if limit >= 0:
                deadline, within = time.monotonic() + limit / 1000, f"the socket's SNDTIMEO of {limit} ms"
        while not sent.wait(
            _SEND_SLICE if deadline is None else max(0.0, min(_SEND_SLICE, deadline - time.monotonic()))
        ):
            if self._aborted.is_set():
                raise AbortedWhileHeldError(
                    f"the channel was closed while ZeroMQ still held {sent.held} frames of the queued message:"
                    " its tensors must not change until .sent.wait() is True",
                    sent,
                )
            if _past(deadline):
                raise StillHeldError(
                    f"the message was queued, but ZeroMQ still holds {sent.held} of its frames after {within}:"
                    " its tensors must not change until .sent.wait() is True",
                    sent,
                )
        return sent

    def _put(self, peer: bytes | None, frames: list[Any], deadline: float | None, timeout: float | None) -> Sent:
        """Queue the multipart message: only its first part can be refused (ZeroMQ takes a
        multipart message whole or not at all), so a timeout there sends nothing; an exception
        once a part is queued (an interrupt) ends the message there (``whole``)."""
        with whole(self):
            return put_parts(self, peer, frames, deadline, timeout)

    def _inproc(self) -> bool:
        if not self._endpoint:
            self._endpoint = self._last_endpoint()
        return self._endpoint.startswith("inproc://")

    def _last_endpoint(self) -> str:
        raw = self.socket.getsockopt(zmq.LAST_ENDPOINT)
        return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)

    def _shared_encoder(self) -> Encoder:
        assert self._shared is not None
        return self._shared

    # -- receiving ------------------------------------------------------------------------------
    def recv(self, *, timeout: float | None = None) -> Any:
        """The next message that decodes (``TimeoutError`` if none within ``timeout`` seconds)."""
        return self.recv_from(timeout=timeout)[1]

    def recv_from(self, *, timeout: float | None = None) -> tuple[bytes | None, Any]:
        """``(peer, message)``: the next message and its sender's routing id (None unless ROUTER)."""
        self._check_open()
        if self._backlog:
            return self._backlog.popleft()
        deadline = deadline_after(timeout)
        while True:
            got = next_message(self, deadline)
            if got is not None and got is not _NOTHING:
                message: tuple[bytes | None, Any] = got
                return message
            if got is _NOTHING or _past(deadline):  # a flood of dropped messages does not outlast it
                raise TimeoutError(f"no message arrived within {timeout} s")

    def handshake(self, *, timeout: float, peer: bytes | None = None) -> bool:
        """Ask the peer of a PAIR socket (``peer`` of a ROUTER) whether it shares this host, and wait for its
        answer (a channel answers while it receives); whether it does. Messages that arrive
        meanwhile are kept for ``recv`` (up to the socket's receive high-water mark). ``TimeoutError``
        if no answer comes within ``timeout`` seconds. Over TCP, until a peer has been heard from, it
        gets inline frames; one that answers it shares this host is then on trial (see the module)."""
        self._check_open()
        if self._type not in _ASKING:
            raise ValueError(f"a {kind_of(self.socket)} socket cannot tell which peer answers: say same_host= instead")
        if self._router and peer is None:
            raise ValueError("a ROUTER channel asks one peer: handshake(peer=routing_id)")
        key = peer if self._router else None
        self._peers.pop(key, None)
        deadline = deadline_after(timeout)
        send_control(self, peer, _ASK, deadline, timeout)
        self._asked.add(key)
        try:
            return self._answered(key, deadline, timeout)
        finally:
            self._asked.discard(key)

    def _answered(self, key: bytes | None, deadline: float | None, timeout: float) -> bool:
        """What the answer to this channel's handshake question to ``key`` says (see ``handshake``)."""
        hwm = int(self.socket.getsockopt(zmq.RCVHWM))
        limit = hwm if hwm > 0 else _BACKLOG  # 0: ZeroMQ keeps as many as come
        while key not in self._peers:
            if len(self._backlog) >= limit:
                raise TimeoutError(f"no answer to the handshake among the {limit} messages that came first")
            got = next_message(self, deadline)
            if got is not None and got is not _NOTHING:
                self._backlog.append(got)
            elif key in self._peers:
                break
            elif got is _NOTHING or _past(deadline):
                raise TimeoutError(f"no answer to the handshake within {timeout} s")
        return self._peers[key] != _FAR

    # -- life -----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("the channel is closed")

    def abort(self) -> None:
        """Make a send waiting in another thread for ZeroMQ to queue its message give up (within
        ~50 ms) with ``ConnectionAbortedError``, nothing sent, and every later one that has to wait;
        one waiting for ZeroMQ to let go of the frames of a message it queued (``wait=True``) gives
        up as soon with ``AbortedWhileHeldError``: the one method another thread may call while the
        channel is in use (before ``close``)."""
        self._aborted.set()

    def close(self, linger: int | None = None) -> None:
        """Close the socket (``linger``: milliseconds ZeroMQ may go on sending what is queued;
        None: the socket's own ``LINGER``)."""
        if not self.closed:
            self.closed = True
            self.socket.close(linger)

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = zmq.SocketType(self._type).name
        where = "shared memory on this host" if self._shared is not None else "inline"
        return f"Channel({kind}, {where}, dropped={self.dropped})"


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline
