"""RPC over DEALER/ROUTER with the built-in envelopes: ``Client.call`` and ``Server.serve``.

A call is an ``rpc.Request`` whose ``rpc_id`` the client sets (the client's random prefix, a count
and 64 random bits: ``"3f9a...-17-c04e..."``, so that no server can tell the id of a call sent to
another; the caller's request is not modified); the server answers with the ``rpc.Result`` its
handler returns, under the same id. A reply whose id no call is waiting for
(it came after its call timed out, or was never asked for) is dropped and counted in
``Client.late``, so every call gets its own reply.
An exception in the handler is answered as ``Result(ok=False, error=..., error_type=...)``; the
server keeps serving. Calls may be made from several threads at once over one client.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import zmq

from tensorwire import CodecError, DecodeOptions, EncodeOptions, Registry, TransportError
from tensorwire._timeouts import LONGEST_WAIT, deadline_after, take_within
from tensorwire.builtins import REGISTRY, rpc
from tensorwire.transports.base import Transport
from tensorwire.zmq._channel import Channel
from tensorwire.zmq._notes import Notes, peer_name
from tensorwire.zmq._sent import AbortedWhileHeldError
from tensorwire.zmq._sockets import checked_type

__all__ = ["Client", "Handler", "Server"]

Handler = Callable[[rpc.Request], rpc.Result]
"""What a server runs for each request."""

_LOG = logging.getLogger("tensorwire.zmq")
_WAITING = object()  # the slot of a call whose reply has not come
_MAX_STALLED = 4096  # peers a server remembers as not reading their replies
_SLICE = 0.01  # seconds a reading call holds the socket before it lets a sending call in
_SERVER_SLICE = 0.05  # seconds a waiting serve_one goes before it looks whether close() wants the socket


def _channel(
    role: str,
    kind: int,
    socket: zmq.Socket[Any],
    registry: Registry | None,
    transport: Transport | None,
    options: DecodeOptions | None,
    encode_options: EncodeOptions | None,
    same_host: bool | None,
) -> Channel:
    """The channel of a ``role`` (Client, Server), whose socket must be of ``kind``."""
    checked_type(socket, f"a {role}", (kind,))
    registry = REGISTRY if registry is None else registry
    return Channel(
        socket, registry, transport=transport, options=options, encode_options=encode_options, same_host=same_host
    )


_Envelope = TypeVar("_Envelope", rpc.Request, rpc.Result)


def _with_id(message: _Envelope, rpc_id: str | None) -> _Envelope:
    """A shallow copy of ``message`` (an ``rpc.Request`` or ``rpc.Result``) with ``rpc_id`` set: the
    caller's message is not changed. Its rules are not run here: the encoder checks the copy."""
    copied: _Envelope = message.__copy__()  # type: ignore[attr-defined]  # msgspec's stubs leave it out
    copied.rpc_id = rpc_id
    return copied


class Client:
    """Calls ``rpc.Request`` -> ``rpc.Result`` over a DEALER ``socket``; safe to share between threads.

    The channel's arguments (``transport``, ``options``, ``encode_options``, ``same_host``) are
    ``Channel``'s; ``registry`` defaults to the built-in types."""

    def __init__(
        self,
        socket: zmq.Socket[Any],
        registry: Registry | None = None,
        *,
        transport: Transport | None = None,
        options: DecodeOptions | None = None,
        encode_options: EncodeOptions | None = None,
        same_host: bool | None = None,
    ) -> None:
        self.channel = _channel("Client", zmq.DEALER, socket, registry, transport, options, encode_options, same_host)
        self._socket_lock = threading.RLock()  # (an RLock: see ``take_within``)
        self._lock = threading.Lock()  # guards the state below; ``_state`` waits on it
        self._state = threading.Condition(self._lock)
        self._pending: dict[str, Any] = {}  # rpc_id -> _WAITING or its Result
        self._reading = False
        self._closed = False
        self._prefix = os.urandom(8).hex()  # this client's ids: its random prefix, a count and random bits
        self._ids = itertools.count(1)
        self.late = 0
        """Replies dropped because no call was waiting for their id (logged at INFO, ten lines a second at most)."""
        self._late_notes = Notes(_LOG, logging.INFO)
        self.unreadable = 0
        """Replies whose shared memory this process could not open (dropped with a warning: no call
        can be told which one it was, so the call it answered times out)."""
        self._notes = Notes(_LOG)

    def call(self, request: rpc.Request, *, timeout: float) -> rpc.Result:
        """Send ``request`` and return its ``rpc.Result``; ``TimeoutError`` if none within ``timeout``
        seconds (``math.inf``: no limit), ``ConnectionAbortedError`` if the client is closed meanwhile."""
        if not isinstance(request, rpc.Request):
            raise TypeError(f"call() takes an rpc.Request, got {type(request).__name__}")
        found = deadline_after(timeout)  # ValueError for NaN
        deadline = math.inf if found is None else found
        rpc_id = f"{self._prefix}-{next(self._ids)}-{os.urandom(8).hex()}"
        outgoing = _with_id(request, rpc_id)
        lock, pending = self._lock, self._pending
        with lock:
            if self._closed:
                raise ConnectionAbortedError("the client is closed")
            pending[rpc_id] = _WAITING
            first = not self._reading  # no call reads the socket: this one reads right after sending
            if first:
                self._reading = True
        try:
            reply: Any = None
            try:
                if not self._take_socket(deadline):
                    raise TimeoutError(
                        f"{request.method!r} could not be sent within {timeout} s: other calls held the socket"
                    )
                try:
                    if self._closed:  # closed while this call waited for the socket
                        raise ConnectionAbortedError(f"the client was closed before {request.method!r} was sent")
                    self.channel.send(outgoing, timeout=max(0.0, deadline - time.monotonic()))
                    if first:
                        reply = self._recv(min(deadline - time.monotonic(), _SLICE))
                except AbortedWhileHeldError:  # (queued, its frames not yet let go of by ZeroMQ)
                    raise ConnectionAbortedError(
                        f"the client was closed while {request.method!r} was queued, ZeroMQ still holding its frames"
                    ) from None
                except ConnectionAbortedError:  # (the channel's, when close() cut a waiting send short)
                    raise ConnectionAbortedError(f"the client was closed before {request.method!r} was sent") from None
                finally:
                    self._socket_lock.release()
            except BaseException:
                if first:
                    self._handed(None, rpc_id)
                raise
            if first and self._handed(reply, rpc_id):
                return reply  # type: ignore[no-any-return]
            return self._await(rpc_id, request.method, deadline, timeout)
        finally:
            with lock:  # (a reader hands a reply over under it: it must not store one after this)
                pending.pop(rpc_id, None)

    def _await(self, rpc_id: str, method: str, deadline: float, timeout: float) -> rpc.Result:
        """The reply to ``rpc_id``: one waiting call at a time reads the socket and hands each
        reply to the call it answers (its own it returns at once)."""
        state, lock, pending = self._state, self._lock, self._pending
        while True:
            with lock:
                while True:
                    if self._closed:
                        raise ConnectionAbortedError(f"the client was closed while {method!r} waited for its reply")
                    got = pending.get(rpc_id, _WAITING)
                    if got is not _WAITING:
                        result: rpc.Result = got
                        return result
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no reply to {method!r} within {timeout} s")
                    if not self._reading:
                        self._reading = True
                        break
                    state.wait(min(left, LONGEST_WAIT))
            reply: Any = None
            try:
                if self._take_socket(time.monotonic() + left):  # else the deadline is checked above
                    try:
                        reply = self._recv(min(left, _SLICE))
                    finally:
                        self._socket_lock.release()
            finally:
                mine = self._handed(reply, rpc_id)
            if mine:
                return reply  # type: ignore[no-any-return]
            if len(pending) > 1:
                time.sleep(0)  # let a call that waits to send take the socket

    def _take_socket(self, deadline: float) -> bool:
        """Take the socket lock by ``deadline`` (``math.inf``: however long it takes); whether it was
        taken (an interrupt as it is taken lets go of it: ``take_within``)."""
        return take_within(self._socket_lock, deadline - time.monotonic())

    def _recv(self, timeout: float) -> Any:
        """The next message within ``timeout`` seconds (the socket lock held), None if none came."""
        if self._closed or timeout <= 0:
            return None
        try:
            return self.channel.recv(timeout=timeout)
        except TimeoutError:
            return None
        except TransportError as exc:  # (its id is in the part that could not be read)
            self.unreadable += 1
            self._notes.note(f"dropped {exc.strerror or exc}")
            return None

    def _handed(self, reply: Any, rpc_id: str) -> bool:
        """After a read: let another call read, hand ``reply`` (None: nothing came) to the call it
        answers and wake the waiting calls; whether it answers ``rpc_id`` (the reader's own)."""
        with self._lock:
            self._reading = False
            mine = reply is not None and self._deliver(reply, rpc_id)
            if len(self._pending) > 1:
                self._state.notify_all()
        return mine

    def _deliver(self, reply: Any, reader: str) -> bool:
        """Hand ``reply`` to the call it answers; whether that is ``reader``'s (which takes it itself)."""
        rpc_id = reply.rpc_id if isinstance(reply, rpc.Result) else None
        if rpc_id is not None and self._pending.get(rpc_id) is _WAITING:
            if rpc_id == reader:
                return True
            self._pending[rpc_id] = reply
            return False
        self.late += 1
        self._late_notes.note(f"dropped a reply no call waits for (rpc_id {rpc_id!r}, {type(reply).__name__})")
        return False

    def close(self) -> None:
        """Close the client: calls still waiting (to be sent or for their reply) raise
        ``ConnectionAbortedError``; the socket is closed."""
        with self._state:
            self._closed = True
            self._state.notify_all()
        self.channel.abort()  # a call waiting for ZeroMQ to queue its request lets go of the socket
        with self._socket_lock:
            self.channel.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Server:
    """Answers ``rpc.Request`` messages on a ROUTER ``socket`` with what a handler returns.

    ``tracebacks``: send the handler's traceback in ``Result.traceback`` (off by default: it shows
    the server's code paths to every client); ``reply_timeout``: seconds a reply may wait to be
    queued. The channel's arguments are ``Channel``'s.

    A reply waits when ZeroMQ refuses it (with ``ROUTER_MANDATORY``, when its peer's queue is full:
    the peer does not read) or still holds its large frames. The server answers one request at a
    time, so such a peer would hold every other peer up ``reply_timeout`` per request: after one of
    its replies has waited that long, the next ones to that peer are not waited for (dropped at once
    unless ZeroMQ takes them then) until one goes through (those peers are kept in ``stalled``,
    4,096 at most)."""

    def __init__(
        self,
        socket: zmq.Socket[Any],
        registry: Registry | None = None,
        *,
        transport: Transport | None = None,
        options: DecodeOptions | None = None,
        encode_options: EncodeOptions | None = None,
        same_host: bool | None = None,
        tracebacks: bool = False,
        reply_timeout: float = 10.0,
    ) -> None:
        if not reply_timeout >= 0:  # (NaN raised at the first reply)
            raise ValueError(f"reply_timeout must be a number of seconds >= 0, got {reply_timeout!r}")
        self.channel = _channel("Server", zmq.ROUTER, socket, registry, transport, options, encode_options, same_host)
        self.tracebacks = tracebacks
        self.reply_timeout = reply_timeout
        self.handled = 0
        """Requests handled (counted before the reply is sent)."""
        self.failed = 0
        """Requests whose handler raised (each answered with an error result)."""
        self.ignored = 0
        """Messages that decoded but were not an ``rpc.Request`` (dropped with a log line)."""
        self.unreadable = 0
        """Messages whose shared memory this process could not open (dropped with a log line: their
        sender died, or named memory it never had)."""
        self.stalled: OrderedDict[bytes, None] = OrderedDict()
        """Peers whose last reply waited ``reply_timeout`` in vain: not queued, or queued with its
        frames still held by ZeroMQ (the latest last)."""
        self._stop = threading.Event()
        self._closing = threading.Event()  # close() waits for the socket: a waiting serve_one gives it up
        self._serving = threading.RLock()  # held by the thread that uses the socket (serve, serve_one)
        self._notes = Notes(_LOG)

    def serve(self, handler: Handler, *, poll: float = 0.1) -> None:
        """Answer requests until ``stop()`` or ``close()`` (checked every ``poll`` seconds)."""
        with self._serving:
            while not self._stop.is_set() and not self.channel.closed:
                self.serve_one(handler, timeout=poll)

    def serve_one(self, handler: Handler, *, timeout: float | None = None) -> bool:
        """Answer one request; False if none came within ``timeout`` seconds, or ``close()`` was
        called from another thread meanwhile (calls from several threads take turns). A message
        whose shared memory cannot be opened is dropped and counted in ``unreadable``: one peer's
        message never stops the server."""
        with self._serving:
            try:
                got = self._next_request(timeout)
            except TransportError as exc:  # names the peer; its request has no id to answer
                self.unreadable += 1
                self._notes.note(f"dropped {exc.strerror or exc}")
                return True
            if got is None:
                return False
            self._answer(handler, *got)
            return True

    def _next_request(self, timeout: float | None) -> tuple[bytes | None, Any] | None:
        """The next message and its peer, or None if none came within ``timeout`` seconds or
        ``close()`` is waiting for the socket (looked at every ``_SERVER_SLICE`` seconds)."""
        if self.channel.closed:
            raise ValueError("the channel is closed")
        deadline = deadline_after(timeout)
        while not self._closing.is_set():
            left = _SERVER_SLICE if deadline is None else min(_SERVER_SLICE, deadline - time.monotonic())
            try:
                return self.channel.recv_from(timeout=max(left, 0.0))
            except TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
        return None

    def _answer(self, handler: Handler, peer: bytes | None, request: Any) -> None:
        """Run ``handler`` on ``request`` and send the reply to ``peer`` (see the class)."""
        assert peer is not None
        if not isinstance(request, rpc.Request):
            self.ignored += 1
            self._notes.note(f"ignored a {type(request).__name__} from {peer_name(peer)}: a server takes rpc.Request")
            return
        result = self._run(handler, request)
        self.handled += 1
        wait = 0.0 if peer in self.stalled else self.reply_timeout
        try:
            try:
                self.channel.send(result, peer=peer, timeout=wait)
            except CodecError as exc:  # the result breaks its schema or cannot be exported: say why
                self.channel.send(self._error(request, exc), peer=peer, timeout=wait)
        except (CodecError, TimeoutError, zmq.ZMQError) as exc:  # the server goes on serving the others
            # (ZeroMQ's error: with ROUTER_MANDATORY, a peer that left before its reply is unreachable)
            self._notes.note(f"the reply to {request.method!r} for {peer_name(peer)} was not sent: {exc}")
            if isinstance(exc, TimeoutError):  # not queued, or queued with its frames still held: a peer
                # that does not read (its next replies are not waited for, however large)
                self.stalled[peer] = None
                self.stalled.move_to_end(peer)
                if len(self.stalled) > _MAX_STALLED:
                    self.stalled.popitem(last=False)
                return
        self.stalled.pop(peer, None)

    def _run(self, handler: Handler, request: rpc.Request) -> rpc.Result:
        try:
            result = handler(request)
            if not isinstance(result, rpc.Result):
                raise TypeError(f"the handler returned {type(result).__name__}, not an rpc.Result")
        except Exception as exc:
            self.failed += 1
            return self._error(request, exc)
        return _with_id(result, request.rpc_id)

    def _error(self, request: rpc.Request, exc: BaseException) -> rpc.Result:
        return rpc.Result(
            method=request.method,
            ok=False,
            error=str(exc) or type(exc).__name__,
            error_type=type(exc).__qualname__,
            traceback="".join(traceback.format_exception(exc)) if self.tracebacks else None,
            rpc_id=request.rpc_id,
        )

    def stop(self) -> None:
        """Make ``serve`` return after its current request."""
        self._stop.set()

    def close(self) -> None:
        """Stop serving and close the socket (after the request being answered, if any; a
        ``serve_one`` waiting in another thread returns False within ~50 ms)."""
        self._stop.set()
        self._closing.set()
        with self._serving:
            self.channel.close(linger=0)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
