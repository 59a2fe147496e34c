"""tensorwire.zmq.Channel in one process: frames, lifetimes, locality, timeouts, hostile peers."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import select
import sys
import threading
import time
import types
import warnings
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import torch

zmq = pytest.importorskip("zmq")

import tensorwire as tw  # noqa: E402
from tensorwire.builtins import REGISTRY, rpc  # noqa: E402
from tensorwire.transports._page_layout import FREE, IN_FLIGHT  # noqa: E402
from tensorwire.zmq import HELLO, AbortedWhileHeldError, Channel, StillHeldError, host_token  # noqa: E402
from tensorwire.zmq._outgoing import unsend, withdraw  # noqa: E402
from tensorwire.zmq._peers import _INLINE, _SHARED, _TRIAL, route_for  # noqa: E402
from tests.wire_helpers import held_elsewhere  # noqa: E402

MiB = 1024 * 1024


@pytest.fixture
def ctx() -> Iterator[Any]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def _tcp_pair(ctx: Any, a_type: int, b_type: int) -> tuple[Any, Any]:
    a, b = ctx.socket(a_type), ctx.socket(b_type)
    port = b.bind_to_random_port("tcp://127.0.0.1")
    a.connect(f"tcp://127.0.0.1:{port}")
    return a, b


def _ipc_pair(ctx: Any, tmp_path: Any, a_type: int, b_type: int) -> tuple[Any, Any]:
    a, b = ctx.socket(a_type), ctx.socket(b_type)
    endpoint = f"ipc://{tmp_path}/sock"
    b.bind(endpoint)
    a.connect(endpoint)
    return a, b


def _request(**kwargs: Any) -> Any:
    return rpc.Request(method="load", kwargs=kwargs)


def _raw_parts(socket: Any, timeout: float = 5.0) -> list[bytes]:
    assert socket.poll(int(timeout * 1000), zmq.POLLIN), "nothing arrived"
    return list(socket.recv_multipart())


def _valid(message: Any) -> list[bytes]:
    """The parts of a channel message, written by hand (hello of this host, frames of the encoder)."""
    return [HELLO + host_token(), *(bytes(f) for f in tw.Encoder().encode(message))]


# -- round trips -------------------------------------------------------------------------------
def test_tensors_arrive_bit_exact_over_tcp_inline(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    big, small = torch.randn(512, 1024), torch.arange(7)
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
        sent = sender.send(_request(big=big, small=small), timeout=5)
        got = receiver.recv(timeout=5)
        assert sent.done and sent.held == 0
    assert torch.equal(got.kwargs["big"], big) and torch.equal(got.kwargs["small"], small)
    assert got.rpc_id is None and got.method == "load"


class _Seen:
    """A decoder that remembers the frames it was given (to find where a tensor was built)."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.frames: list[Any] = []

    def decode(self, frames: Any) -> Any:
        self.frames = list(frames)
        return self.decoder.decode(frames)


def test_received_tensors_are_writable_and_not_copied_from_the_frame(ctx: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    big = torch.randn(256, 1024)  # 1 MiB: a frame of its own
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
        seen = _Seen(receiver._decoder)
        monkeypatch.setattr(receiver, "_decoder", seen)
        sender.send(_request(x=big), timeout=5)
        x = receiver.recv(timeout=5).kwargs["x"]
    frame = seen.frames[1]
    assert isinstance(frame, memoryview) and not frame.readonly
    start = np.frombuffer(frame, dtype=np.uint8).ctypes.data
    assert start <= x.data_ptr() < start + frame.nbytes  # built on the received frame, not a copy
    x.add_(1)  # a writable tensor over the received frame (pyzmq frames are writable memory)
    assert torch.allclose(x, big + 1)


def test_the_caller_message_is_not_changed(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    message = _request(x=torch.ones(4))
    before = msgspec.msgpack.encode(msgspec.structs.asdict(message) | {"kwargs": {}})
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
        sender.send(message, timeout=5)
        receiver.recv(timeout=5)
    assert msgspec.msgpack.encode(msgspec.structs.asdict(message) | {"kwargs": {}}) == before
    assert list(message.kwargs) == ["x"] and torch.equal(message.kwargs["x"], torch.ones(4))


def test_a_router_channel_names_its_peer_both_ways(ctx: Any) -> None:
    dealer, router = _tcp_pair(ctx, zmq.DEALER, zmq.ROUTER)
    with Channel(dealer, REGISTRY) as client, Channel(router, REGISTRY) as server:
        client.send(_request(x=torch.ones(2)), timeout=5)
        peer, got = server.recv_from(timeout=5)
        assert isinstance(peer, bytes) and torch.equal(got.kwargs["x"], torch.ones(2))
        with pytest.raises(ValueError, match=r"a ROUTER channel sends to one peer: send\(message, peer=routing_id\)"):
            server.send(got)
        server.send(rpc.Result(method="load", ok=True), peer=peer, timeout=5)
        assert client.recv_from(timeout=5) == (None, rpc.Result(method="load", ok=True))
        with pytest.raises(ValueError, match="peer= is for ROUTER sockets"):
            client.send(got, peer=peer)


def test_a_message_that_breaks_its_schema_sends_nothing(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    with Channel(a, REGISTRY) as sender:
        with pytest.raises(tw.EncodeError, match="256") as caught:
            sender.send(rpc.Request(method="m" * 300), timeout=5)
        assert caught.value.type_id == "rpc.Request"
        assert b.poll(300, zmq.POLLIN) == 0
    b.close(0)


# -- lifetimes ---------------------------------------------------------------------------------
def _stalled(ctx: Any) -> tuple[Any, Channel]:
    """A tcp PUSH channel to a PULL that holds one message at most and has not read: after a few
    small messages, ZeroMQ on the receiving side stops reading, so the sender's frames stay held."""
    a, b = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    b.setsockopt(zmq.RCVHWM, 1)  # before the connection is made: its pipe takes the options then
    b.setsockopt(zmq.RCVBUF, 64 * 1024)
    port = b.bind_to_random_port("tcp://127.0.0.1")
    a.connect(f"tcp://127.0.0.1:{port}")
    time.sleep(0.2)  # connected
    sender = Channel(a, REGISTRY)
    for _ in range(4):
        sender.send(_request(), wait=False)
    return b, sender


def _drain(b: Any, count: int) -> list[Any]:
    with Channel(b, REGISTRY) as receiver:
        return [receiver.recv(timeout=10) for _ in range(count)]


def test_every_zero_copy_frame_is_tracked_until_zeromq_lets_go(ctx: Any) -> None:
    b, sender = _stalled(ctx)
    tensors = [torch.full((8 * MiB,), float(i)) for i in range(2)]  # 32 MiB each: past the kernel buffers
    with sender:
        sent = sender.send(_request(t0=tensors[0], t1=tensors[1], small=torch.ones(4)), wait=False)
        time.sleep(0.3)
        assert not sent.done and sent.held == 2  # both large frames, not only the last one
        assert sent.wait(0.05) is False
        got = _drain(b, 5)[-1]
        assert sent.wait(10) is True and sent.done and sent.held == 0
        assert torch.equal(got.kwargs["t0"], tensors[0]) and torch.equal(got.kwargs["t1"], tensors[1])


def test_wait_mode_out_of_time_says_the_frames_are_still_held(ctx: Any) -> None:
    b, sender = _stalled(ctx)
    with sender:
        with pytest.raises(
            StillHeldError, match=r"queued, but ZeroMQ still holds 1 of its frames after 0\.3 s"
        ) as caught:
            sender.send(_request(x=torch.zeros(16 * MiB)), timeout=0.3)
        assert isinstance(caught.value, TimeoutError) and caught.value.sent.held == 1
        assert _drain(b, 5)[-1].kwargs["x"].shape == (16 * MiB,)
        assert caught.value.sent.wait(10)


def _send_on_a_thread(channel: Channel, message: Any) -> tuple[threading.Thread, list[BaseException]]:
    """``channel.send(message)`` started on a daemon thread: the thread, and the list that gets what
    the send raised."""
    raised: list[BaseException] = []

    def send() -> None:
        try:
            channel.send(message)
        except BaseException as exc:  # the caller checks it
            raised.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, raised


def test_a_send_without_a_timeout_waits_for_its_frames_within_the_sockets_sndtimeo(ctx: Any) -> None:
    """``timeout=None`` bounds a send by the socket's ``SNDTIMEO``: a message that was queued but
    whose frames a peer that stopped reading keeps held is a ``StillHeldError`` once it is up (it
    waited forever)."""
    b, sender = _stalled(ctx)
    sender.socket.setsockopt(zmq.SNDTIMEO, 300)
    thread, raised = _send_on_a_thread(sender, _request(x=torch.zeros(16 * MiB)))
    thread.join(10)
    alive = thread.is_alive()
    sender.abort()  # (a send still waiting gives up)
    thread.join(5)
    assert not alive, "send() waited for its frames past the socket's SNDTIMEO"
    [error] = raised
    assert type(error) is StillHeldError
    assert str(error) == (
        "the message was queued, but ZeroMQ still holds 1 of its frames after the socket's SNDTIMEO of 300 ms:"
        " its tensors must not change until .sent.wait() is True"
    )
    assert _drain(b, 5)[-1].kwargs["x"].shape == (16 * MiB,)
    assert error.sent.wait(10)
    sender.close(0)


def test_abort_cuts_short_a_send_waiting_for_zeromq_to_let_go_of_its_frames(ctx: Any) -> None:
    """A ``send(wait=True)`` to a peer that stopped reading waited for its frames as long as its
    timeout (forever with None), whatever ``abort()`` said: a ``Client.close`` waited as long."""
    b, sender = _stalled(ctx)
    thread, raised = _send_on_a_thread(sender, _request(x=torch.zeros(16 * MiB)))
    time.sleep(0.5)  # queued, its frame held
    sender.abort()
    thread.join(5)
    alive = thread.is_alive()
    sender.close(0)  # (ZeroMQ lets go of the frame: a send still waiting returns)
    thread.join(5)
    assert not alive, "abort() did not cut short a send waiting for its frames"
    [error] = raised
    assert type(error) is AbortedWhileHeldError and isinstance(error, ConnectionAbortedError)
    assert str(error) == (
        "the channel was closed while ZeroMQ still held 1 frames of the queued message:"
        " its tensors must not change until .sent.wait() is True"
    )
    assert error.sent.wait(10)
    b.close(0)


def test_frames_under_copy_below_are_copied_and_larger_ones_tracked(ctx: Any) -> None:
    tensor = torch.zeros(MiB)  # a 4 MiB frame
    b, sender = _stalled(ctx)
    with sender:
        assert sender.copy_below == 512 * 1024
        assert sender.send(_request(x=torch.zeros(MiB // 16)), wait=False).done  # 256 KiB: copied
        held = sender.send(_request(x=tensor), wait=False)
        assert held.held == 1
        _drain(b, 6)
        assert held.wait(10)
    with pytest.raises(ValueError, match="copy_below must be >= 0 bytes, got -1"):
        Channel(ctx.socket(zmq.PUSH), REGISTRY, copy_below=-1)


def test_a_small_frame_is_copied_at_once(ctx: Any) -> None:
    b, sender = _stalled(ctx)
    with sender:
        small = torch.ones(1024)  # 4 KiB: under pyzmq's copy threshold
        sent = sender.send(_request(x=small), wait=False)
        assert sent.done and sent.held == 0
        small.fill_(5)
        assert torch.equal(_drain(b, 5)[-1].kwargs["x"], torch.ones(1024))


def test_inproc_frames_are_copied_so_the_receiver_never_sees_later_writes(ctx: Any) -> None:
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    b.bind("inproc://tw-test")
    a.connect("inproc://tw-test")
    big = torch.zeros(MiB)
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
        sent = sender.send(_request(x=big), wait=False)
        assert sent.done  # nothing handed over: inproc frames are copied
        big.fill_(7)
        got = receiver.recv(timeout=5).kwargs["x"]
        assert torch.count_nonzero(got) == 0
        got.fill_(3)
        assert torch.all(big == 7)


# -- locality ----------------------------------------------------------------------------------
def test_ipc_sends_large_tensors_through_shared_memory(ctx: Any, tmp_path: Any) -> None:
    a, b = _ipc_pair(ctx, tmp_path, zmq.PUSH, zmq.PULL)
    big = torch.randn(MiB)
    with tw.transports.ShmTransport() as shm, tw.transports.ShmTransport() as reader:
        with Channel(a, REGISTRY, transport=shm) as sender, Channel(b, REGISTRY, transport=reader) as receiver:
            sender.send(_request(x=big), timeout=5)
            got = receiver.recv(timeout=5)
            assert torch.equal(got.kwargs["x"], big)
            assert shm.pool is not None
            assert [slot.state for slot in shm.pool.slots()] != [FREE]  # the receiver holds it
            del got
            assert [slot.state for slot in shm.pool.slots()] == [FREE]  # its last view died


def _parts_of(ctx: Any, tmp_path: Any, *, ipc: bool, same_host: bool | None) -> list[bytes]:
    a, b = _ipc_pair(ctx, tmp_path, zmq.PUSH, zmq.PULL) if ipc else _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    with tw.transports.ShmTransport() as shm, Channel(a, REGISTRY, transport=shm, same_host=same_host) as sender:
        sender.send(_request(x=torch.randn(MiB)), timeout=5)
        parts = _raw_parts(b)
        b.close(0)
        if len(parts) == 2:  # through shared memory: give the slot back as a receiver would
            with tw.transports.ShmTransport() as reader:
                tw.Decoder(REGISTRY, [reader]).decode(parts[1:])
    return parts


@pytest.mark.parametrize(
    ("ipc", "same_host", "through_shm"),
    [(True, None, True), (False, None, False), (False, True, True), (True, False, False)],
    ids=["ipc-local", "tcp-remote", "tcp-said-same-host", "ipc-said-other-host"],
)
def test_where_large_tensors_go_follows_the_peer(
    ctx: Any, tmp_path: Any, ipc: bool, same_host: bool | None, through_shm: bool
) -> None:
    parts = _parts_of(ctx, tmp_path, ipc=ipc, same_host=same_host)
    assert parts[0] == HELLO + (bytes(16) if same_host is False else host_token())  # False: it opens none
    assert (len(parts) == 2) is through_shm  # hello, frame 0 [, the tensor's own frame]
    assert b'"shm"' not in parts[1] or through_shm


def _parts_sent(channel: Channel, b: Any) -> int:
    """How many parts a message with a 4 MiB tensor has when ``channel`` sends it to ``b``; a slot
    it was sent through is given back as a receiver would."""
    channel.send(_request(x=torch.randn(MiB)), timeout=5)
    parts = _raw_parts(b)
    if len(parts) == 2:
        with tw.transports.ShmTransport() as reader:
            tw.Decoder(REGISTRY, [reader]).decode(parts[1:])
    return len(parts)


def test_a_peer_that_says_hello_from_this_host_gets_shared_memory_over_tcp(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    with tw.transports.ShmTransport() as shm, Channel(a, REGISTRY, transport=shm) as channel:
        channel.send(_request(x=torch.randn(MiB)), timeout=5)
        assert len(_raw_parts(b)) == 3  # nothing heard from the peer yet: inline
        b.send_multipart(_valid(_request()))
        channel.recv(timeout=5)
        assert _parts_sent(channel, b) == 2
        b.send_multipart([HELLO + bytes(16), *_valid(_request())[1:]])  # another host's hello
        channel.recv(timeout=5)
        assert _parts_sent(channel, b) == 3
        b.send_multipart(_valid(_request()))  # a PAIR's one peer: what it says last holds
        channel.recv(timeout=5)
        assert _parts_sent(channel, b) == 2
    b.close(0)


def test_on_a_socket_of_many_peers_a_hello_only_takes_shared_memory_away(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.DEALER, zmq.ROUTER)
    with tw.transports.ShmTransport() as shm, Channel(a, REGISTRY, transport=shm) as channel:
        channel.send(_request(), timeout=5)
        peer = _raw_parts(b)[0]
        b.send_multipart([peer, *_valid(_request())])  # this host: a DEALER may have other peers
        channel.recv(timeout=5)
        channel.send(_request(x=torch.randn(MiB)), timeout=5)
        assert len(_raw_parts(b)) == 4  # routing id, hello, frame 0, the tensor: inline
    b.close(0)


def test_a_channel_without_a_transport_says_it_cannot_open_shared_memory(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    with tw.transports.ShmTransport() as shm, Channel(a, REGISTRY, transport=shm) as sender:
        with Channel(b, REGISTRY) as bare:  # no transport
            bare.send(_request(), timeout=5)
            assert _raw_parts(a)[0] == HELLO + bytes(16)
            bare.send(_request(), timeout=5)
            sender.recv(timeout=5)
            sender.send(_request(x=torch.randn(MiB)), timeout=5)
            got = bare.recv(timeout=5)
            assert got.kwargs["x"].shape == (MiB,) and bare.buffer_frames == 1 and bare.dropped == 0


def test_a_garbage_message_teaches_nothing_about_locality(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    with tw.transports.ShmTransport() as shm, Channel(a, REGISTRY, transport=shm) as channel:
        b.send_multipart([HELLO + host_token(), b"\x95junk"])
        with pytest.raises(TimeoutError):
            channel.recv(timeout=0.3)
        assert channel.dropped == 1
        assert _parts_sent(channel, b) == 3
    b.close(0)


def test_pub_never_sends_through_shared_memory(ctx: Any) -> None:
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub.connect(f"tcp://127.0.0.1:{port}")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    time.sleep(0.3)  # the subscription reaches the publisher
    big = torch.randn(MiB)
    with tw.transports.ShmTransport() as shm, Channel(pub, REGISTRY, transport=shm, same_host=True) as channel:
        channel.send(_request(x=big), timeout=5)
        with Channel(sub, REGISTRY) as receiver:  # no transport: a shared-memory handle would not open
            assert torch.equal(receiver.recv(timeout=5).kwargs["x"], big)
        assert "inline" in repr(channel)


# -- timeouts ----------------------------------------------------------------------------------
def test_a_message_no_peer_takes_is_not_sent_and_its_slots_go_back(ctx: Any) -> None:
    push = ctx.socket(zmq.PUSH)
    push.bind("tcp://127.0.0.1:*")  # nobody connects
    with tw.transports.ShmTransport() as shm, Channel(push, REGISTRY, transport=shm, same_host=True) as channel:
        with pytest.raises(TimeoutError, match=r"could not be queued within 0.2 s \(no peer ready\)"):
            channel.send(_request(x=torch.randn(MiB), y=torch.randn(2 * MiB)), timeout=0.2)
        assert shm.pool is not None
        states = [slot.state for slot in shm.pool.slots()]
        assert len(states) == 2 and set(states) == {FREE}


def test_recv_times_out_with_the_time_it_waited(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    with Channel(b, REGISTRY) as receiver:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"no message arrived within 0.2 s"):
            receiver.recv(timeout=0.2)
        assert time.monotonic() - start >= 0.19
    a.close(0)


@pytest.mark.parametrize("no_limit", [None, math.inf, 1e300])
def test_a_timeout_of_infinity_or_past_one_poll_waits_as_none_does(ctx: Any, no_limit: float | None) -> None:
    """ZeroMQ's poll takes a C int of milliseconds: an infinite timeout raised OverflowError there.
    Waits are sliced (at most ``LONGEST_WAIT`` each) and the deadline looked at between them."""
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
        later = threading.Timer(0.2, lambda: sender.send(_request(x=1), timeout=no_limit))
        later.start()
        assert receiver.recv(timeout=no_limit).kwargs == {"x": 1}
        later.join()
        assert sender.send(_request(x=2), timeout=no_limit).wait(no_limit)
        assert receiver.recv(timeout=no_limit).kwargs == {"x": 2}
    from tensorwire._timeouts import LONGEST_WAIT
    from tensorwire.zmq._sockets import poll_ms

    assert poll_ms(time.monotonic() + 1e300) == LONGEST_WAIT * 1000 < 2**31  # within a C int
    assert poll_ms(time.monotonic() + 0.0004) == 1  # rounded up: no spin through the last millisecond
    assert poll_ms(time.monotonic() - 5) == 0 and poll_ms(time.monotonic() - 5, 1) == 1


def test_a_timeout_of_nan_is_refused_before_anything_is_sent(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    nan = float("nan")
    message = "timeout must be a number of seconds (or None: no limit), got nan"
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
        for call in (
            lambda: receiver.recv(timeout=nan),
            lambda: sender.send(_request(x=1), timeout=nan),
            lambda: sender.handshake(timeout=nan),
            lambda: sender.send(_request(x=torch.zeros(MiB)), timeout=5, wait=False).wait(nan),
        ):
            with pytest.raises(ValueError, match=re.escape(message)):
                call()
        assert receiver.recv(timeout=5).kwargs["x"].shape == (MiB,)  # only the last message was sent
        with pytest.raises(TimeoutError):
            receiver.recv(timeout=0.1)


def test_a_closed_channel_refuses_and_closes_once(ctx: Any) -> None:
    a = ctx.socket(zmq.PUSH)
    channel = Channel(a, REGISTRY)
    channel.close()
    channel.close()
    assert a.closed
    with pytest.raises(ValueError, match="the channel is closed"):
        channel.send(_request())
    with pytest.raises(ValueError, match="the channel is closed"):
        channel.recv(timeout=0)


_CHANNEL_KINDS = "PUSH, PULL, PAIR, DEALER, ROUTER, PUB, SUB, XPUB or XSUB"


@pytest.mark.parametrize(("value", "name"), [(None, "NoneType"), ("tcp://127.0.0.1:5555", "str"), (3, "int")])
def test_a_channel_over_what_is_no_socket_is_a_type_error_naming_it(value: Any, name: str) -> None:
    """Anything but a socket was an AttributeError from the first option the channel read."""
    with pytest.raises(TypeError) as info:
        Channel(value, REGISTRY)
    assert str(info.value) == f"a Channel needs a zmq.Socket, got {name}"


def test_a_channel_over_a_closed_socket_is_refused(ctx: Any) -> None:
    """A closed socket was a ZMQError (ENOTSOCK) from deep inside the channel."""
    socket = ctx.socket(zmq.PUSH)
    socket.close()
    with pytest.raises(ValueError) as info:
        Channel(socket, REGISTRY)
    assert str(info.value) == "a Channel needs an open socket, got a closed one"


@pytest.mark.parametrize("kind", ["REQ", "REP", "STREAM", "SERVER", "CLIENT", "RADIO", "DISH", "SCATTER", "PEER"])
def test_a_channel_over_a_socket_of_a_type_it_cannot_drive_is_refused_before_it_sets_an_option(
    ctx: Any, kind: str
) -> None:
    """Every type was taken, its MAXMSGSIZE set: a REQ's second send before a reply is a ZMQError, a
    REP that drops a message never receives again, STREAM and the draft types carry no multipart message."""
    socket = ctx.socket(getattr(zmq, kind))
    with pytest.raises(ValueError) as info:
        Channel(socket, REGISTRY)
    assert str(info.value) == f"a Channel needs a {_CHANNEL_KINDS} socket, got {kind}"
    assert socket.getsockopt(zmq.MAXMSGSIZE) == -1
    socket.close(0)


@pytest.mark.parametrize(("first", "second"), [(zmq.XPUB, zmq.SUB), (zmq.PUB, zmq.XSUB)])
def test_xpub_and_xsub_carry_messages_as_pub_and_sub_do(ctx: Any, first: int, second: int) -> None:
    sender, receiver = _tcp_pair(ctx, second, first)
    if second == zmq.SUB:
        sender.subscribe(b"")
    else:
        sender.send(b"\x01")  # an XSUB subscribes by sending the subscription
    publisher, subscriber = Channel(receiver, REGISTRY), Channel(sender, REGISTRY)
    assert any(_delivered(publisher, subscriber) for _ in range(100))
    publisher.close(0)
    subscriber.close(0)


def _delivered(publisher: Channel, subscriber: Channel) -> bool:
    """Whether a message published now arrives (one sent before the subscription is lost)."""
    publisher.send(_request(x=torch.arange(3)), timeout=5)
    try:
        got = subscriber.recv(timeout=0.05)
    except TimeoutError:
        return False
    return torch.equal(got.kwargs["x"], torch.arange(3))


def test_a_channel_over_an_asyncio_socket_is_refused_before_it_sets_an_option() -> None:
    """It was taken: its sends returned futures the channel took for sends done (a refused one
    was lost), and ``recv`` raised AttributeError ('_asyncio.Future' object has no attribute 'more')."""
    import zmq.asyncio

    context = zmq.asyncio.Context()
    try:
        socket = context.socket(zmq.PULL)
        with pytest.raises(TypeError) as info:
            Channel(socket, REGISTRY)
        assert socket.getsockopt(zmq.MAXMSGSIZE) == -1
    finally:
        context.destroy(linger=0)
    assert str(info.value) == (
        "a Channel needs a synchronous zmq.Socket, got a zmq.asyncio.Socket, whose send and recv"
        ' return futures: see "From asyncio" in the README'
    )


@pytest.mark.parametrize(
    ("module", "why"),
    [
        ("zmq.green", ": the channel waits in ZeroMQ, which would hold up every greenlet"),
        ("zmq.eventloop.future", ', whose send and recv return futures: see "From asyncio" in the README'),
    ],
)
def test_a_channel_over_a_gevent_or_tornado_socket_is_refused(
    ctx: Any, monkeypatch: pytest.MonkeyPatch, module: str, why: str
) -> None:
    """(Stand-ins of their socket classes: neither gevent nor tornado is installed here.)"""
    Socket = type("Socket", (zmq.Socket,), {})
    monkeypatch.setitem(sys.modules, module, types.SimpleNamespace(Socket=Socket))
    socket = Socket(ctx, zmq.PUSH)  # (made so, the context does not close it: this test does)
    try:
        with pytest.raises(TypeError) as info:
            Channel(socket, REGISTRY)
    finally:
        socket.close(0)
    assert str(info.value) == f"a Channel needs a synchronous zmq.Socket, got a {module}.Socket{why}"


# -- from asyncio (README, "From asyncio") ----------------------------------------------------
async def _aio_recv(channel: Channel, socket: Any) -> Any:
    while True:
        try:
            return channel.recv(timeout=0)
        except TimeoutError:
            await asyncio.sleep(0)
        finally:
            socket.get(zmq.EVENTS)
        await socket.poll(flags=zmq.POLLIN)


async def _aio_send(channel: Channel, socket: Any, message: Any) -> None:
    while True:
        try:
            sent = channel.send(message, timeout=0, wait=False)
            break
        except TimeoutError:
            await socket.poll(flags=zmq.POLLOUT)
            await asyncio.sleep(0.001)
        finally:
            socket.get(zmq.EVENTS)
    if not sent.done:
        await asyncio.to_thread(sent.wait)


def test_an_asyncio_program_exchanges_tensors_over_shadows_while_its_loop_runs_on(tmp_path: Any) -> None:
    import zmq.asyncio

    context = zmq.asyncio.Context()

    async def main() -> None:
        pull_socket, push_socket = context.socket(zmq.PULL), context.socket(zmq.PUSH)
        pull = Channel(zmq.Socket.shadow(pull_socket.underlying), REGISTRY)
        push = Channel(zmq.Socket.shadow(push_socket.underlying), REGISTRY, copy_below=0)
        port = pull_socket.bind_to_random_port("tcp://127.0.0.1")
        push_socket.connect(f"tcp://127.0.0.1:{port}")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        clock = asyncio.create_task(ticker())
        for i in range(3):
            waiting = asyncio.create_task(_aio_recv(pull, pull_socket))
            seen = ticks
            while ticks < seen + 5:  # the ticker runs on while the receive waits
                await asyncio.sleep(0.001)
            assert not waiting.done()
            x = torch.arange(300_000) + i  # 2.3 MiB: a frame ZeroMQ takes without a copy, tracked
            await _aio_send(push, push_socket, _request(x=x, i=i))
            got = await asyncio.wait_for(waiting, 10)
            assert got.kwargs["i"] == i and torch.equal(got.kwargs["x"], x)
        clock.cancel()
        assert push.dropped == pull.dropped == 0
        pull_socket.close(0)
        push_socket.close(0)

    try:
        asyncio.run(main())
    finally:
        context.destroy(linger=0)


def test_a_send_of_the_shadow_while_a_receive_waits_wakes_it_through_the_asyncio_socket(tmp_path: Any) -> None:
    """A call of the shadow can take the signal of the socket's file descriptor that the loop
    waits on: without ``get(zmq.EVENTS)`` after it, the receive below waits on with its message there."""
    import zmq.asyncio

    context = zmq.asyncio.Context()

    async def main() -> None:
        mine, theirs = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
        channel = Channel(zmq.Socket.shadow(mine.underlying), REGISTRY)
        peer = Channel(zmq.Socket.shadow(theirs.underlying), REGISTRY)
        mine.bind(f"ipc://{tmp_path}/pair")
        theirs.connect(f"ipc://{tmp_path}/pair")
        # a message each way first: on a connection this new, the send below is followed by
        # commands of ZeroMQ's own that signal the descriptor again
        await _aio_send(channel, mine, _request(n=0))
        assert (await _aio_recv(peer, theirs)).kwargs["n"] == 0
        await _aio_send(peer, theirs, _request(n=0))
        assert (await _aio_recv(channel, mine)).kwargs["n"] == 0
        waiting = asyncio.create_task(_aio_recv(channel, mine))
        await asyncio.sleep(0.01)  # the receive waits: the loop watches the descriptor
        assert not waiting.done()
        peer.send(_request(n=1), timeout=5)
        select.select([mine.FD], [], [], 5)  # it arrived: the descriptor is signalled
        time.sleep(0.01)  # (ZeroMQ looks at its commands at most every millisecond or so on a send)
        await _aio_send(channel, mine, _request(n=2))  # takes the signal
        got = await asyncio.wait_for(waiting, 10)
        assert got.kwargs["n"] == 1
        mine.close(0)
        theirs.close(0)

    try:
        asyncio.run(main())
    finally:
        context.destroy(linger=0)


# -- hostile peers -----------------------------------------------------------------------------
JUNK = [
    [b"x"],  # one frame
    [b"hello?", b"\x95"],  # not the hello
    [HELLO + b"short", b"\x95"],  # a hello of the wrong length
    [HELLO + host_token(), b"\x95junk"],  # frame 0 that does not read
    [HELLO + host_token(), b"\xc1" * 100],
    [HELLO + host_token(), b"\x91" * 100_000],  # nesting far past the limit
    [HELLO + host_token(), *_valid(_request())[1:], b"extra frame"],
]


def test_garbage_is_dropped_counted_and_logged_and_the_channel_serves_on(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    for parts in JUNK:
        a.send_multipart(parts)
    a.send_multipart(_valid(_request(x=torch.ones(3))))
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(b, REGISTRY) as receiver:
        got = receiver.recv(timeout=5)
        assert torch.equal(got.kwargs["x"], torch.ones(3))
        assert receiver.dropped == len(JUNK)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == len(JUNK) and all(line.startswith("dropped a message from the peer: ") for line in lines)
    assert "a channel message has a hello frame and frame 0 at least; this one has 1 frames" in lines[0]
    assert "not a tensorwire channel message: its first frame is b'hello?'" in lines[1]
    assert "nesting" in lines[5] or "deep" in lines[5]
    assert "frames but its header names" in lines[6]
    a.close(0)


def test_a_message_over_the_receivers_limits_is_dropped(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    options = tw.DecodeOptions(limits=tw.Limits(max_tensor_bytes=1024))
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY, options=options) as receiver:
        sender.send(_request(x=torch.zeros(1024)), timeout=5)
        sender.send(_request(x=torch.zeros(16)), timeout=5)
        assert receiver.recv(timeout=5).kwargs["x"].shape == (16,)
        assert receiver.dropped == 1


def test_a_forged_shared_memory_handle_is_dropped_and_touches_nothing(ctx: Any, tmp_path: Any) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    with tw.transports.ShmTransport() as shm, tw.transports.ShmTransport() as reader:
        frames = tw.Encoder(shm).encode(_request(x=torch.randn(MiB)))
        head = bytes(frames[0]).replace(b"tw-", b"../")  # a name out of the segment pattern
        a.send_multipart([HELLO + host_token(), head])
        a.send_multipart(_valid(_request()))
        with Channel(b, REGISTRY, transport=reader) as receiver:
            assert receiver.recv(timeout=5).kwargs == {}
            assert receiver.dropped == 1
        tw.Decoder(REGISTRY, [reader]).decode(frames)  # the real message's slot back
    assert victim.read_bytes() == b"keep me"
    a.close(0)


_TOKEN = "from tensorwire.zmq import host_token; print(host_token().hex())"


def test_the_host_token_is_shared_on_this_host_and_differs_in_another_ipc_namespace() -> None:
    import shutil
    import subprocess
    import sys

    same = subprocess.run([sys.executable, "-c", _TOKEN], capture_output=True, text=True, timeout=60, check=True)
    assert len(host_token()) == 16 and same.stdout.strip() == host_token().hex()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to start a process in an IPC namespace of its own")
    other = subprocess.run(
        ["unshare", "--ipc", sys.executable, "-c", _TOKEN], capture_output=True, text=True, timeout=60, check=False
    )
    if other.returncode != 0:
        pytest.skip(f"unshare --ipc is not permitted here: {other.stderr.strip()[-200:]}")
    assert len(other.stdout.strip()) == 32 and other.stdout.strip() != host_token().hex()


# -- handshake ---------------------------------------------------------------------------------
def _answering(channel: Channel, stop: Any, got: list[Any]) -> None:
    while not stop.is_set():
        try:
            got.append(channel.recv(timeout=0.05))
        except TimeoutError:
            pass


def test_a_handshake_over_tcp_finds_a_peer_on_this_host(ctx: Any) -> None:
    import threading

    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    big = torch.randn(MiB)
    with tw.transports.ShmTransport() as shm, tw.transports.ShmTransport() as reader:
        with Channel(a, REGISTRY, transport=shm) as asker, Channel(b, REGISTRY, transport=reader) as peer:
            got: list[Any] = []
            stop = threading.Event()
            thread = threading.Thread(target=_answering, args=(peer, stop, got))
            thread.start()
            try:
                assert asker.handshake(timeout=5) is True
                asker.send(_request(x=big), timeout=5)
                deadline = time.monotonic() + 5
                while not got and time.monotonic() < deadline:
                    time.sleep(0.01)
            finally:
                stop.set()
                thread.join(5)
            assert len(got) == 1 and torch.equal(got[0].kwargs["x"], big)
            assert peer.buffer_frames == 0 and peer.dropped == 0  # it came through shared memory
            del got


def test_a_peer_of_another_host_answers_so_and_gets_inline_frames(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    with tw.transports.ShmTransport() as shm, Channel(a, REGISTRY, transport=shm, same_host=None) as asker:
        # a message before the answer (it teaches as much, and is kept for recv), then the answer
        b.send_multipart([HELLO + bytes(16), *_valid(_request(early=torch.ones(2)))[1:]])
        b.send_multipart([HELLO + bytes(16) + b"!"])
        assert asker.handshake(timeout=5) is False
        assert _raw_parts(b) == [HELLO + host_token() + b"?"]
        assert torch.equal(asker.recv(timeout=0).kwargs["early"], torch.ones(2))
        asker.send(_request(x=torch.randn(MiB)), timeout=5)
        assert len(_raw_parts(b)) == 3
        assert asker.dropped == 0
    b.close(0)


def test_a_receiving_channel_answers_a_handshake_and_takes_it_as_no_message(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.DEALER, zmq.ROUTER)
    with tw.transports.ShmTransport() as shm, Channel(b, REGISTRY, transport=shm) as server:
        a.send_multipart([HELLO + bytes(16) + b"?"])
        a.send_multipart(_valid(_request(n=torch.zeros(1))))
        peer, got = server.recv_from(timeout=5)
        assert got.kwargs["n"].shape == (1,) and server.dropped == 0
        assert _raw_parts(a) == [HELLO + host_token() + b"!"]
        assert route_for(server, peer) == _TRIAL  # learned from its message, which came after the question
    a.close(0)


def test_a_handshake_needs_a_socket_that_can_hear_an_answer(ctx: Any) -> None:
    with Channel(ctx.socket(zmq.PUSH), REGISTRY) as push:
        with pytest.raises(ValueError, match="a PUSH socket cannot tell which peer answers: say same_host= instead"):
            push.handshake(timeout=1)
    with Channel(ctx.socket(zmq.ROUTER), REGISTRY) as router:
        with pytest.raises(ValueError, match=r"a ROUTER channel asks one peer: handshake\(peer=routing_id\)"):
            router.handshake(timeout=1)


def test_a_handshake_with_no_answer_times_out(ctx: Any) -> None:
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    with Channel(a, REGISTRY) as asker:
        with pytest.raises(TimeoutError, match=r"no answer to the handshake within 0\.2 s"):
            asker.handshake(timeout=0.2)
    b.close(0)


def test_a_handshake_keeps_no_more_messages_than_the_high_water_mark(ctx: Any) -> None:
    router, asked, other = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    router.setsockopt(zmq.RCVHWM, 3)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    for dealer, name in ((asked, b"asked"), (other, b"other")):
        dealer.setsockopt(zmq.ROUTING_ID, name)
        dealer.connect(f"tcp://127.0.0.1:{port}")
    for i in range(5):  # the other peer talks; the one asked never answers
        other.send_multipart(_valid(_request(i=torch.tensor([i]))))
    time.sleep(0.2)
    with Channel(router, REGISTRY) as channel:
        with pytest.raises(TimeoutError, match="no answer to the handshake among the 3 messages that came first"):
            channel.handshake(timeout=5, peer=b"asked")
        got = [channel.recv_from(timeout=5) for _ in range(5)]
        assert [(peer, int(m.kwargs["i"])) for peer, m in got] == [(b"other", i) for i in range(5)]
    asked.close(0)
    other.close(0)


_OUTLIVES = """
import gc, sys, torch, zmq
from tensorwire.builtins import REGISTRY, rpc
from tensorwire.zmq import Channel
ctx = zmq.Context()
a, b = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
port = b.bind_to_random_port("tcp://127.0.0.1")
a.connect(f"tcp://127.0.0.1:{port}")
big = torch.arange(1 << 20, dtype=torch.float32)
with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
    sender.send(rpc.Request(method="m", kwargs={"x": big}), timeout=5)
    x = receiver.recv(timeout=5).kwargs["x"]
ctx.destroy(linger=0)
gc.collect()
junk = [bytearray(1 << 20) for _ in range(64)]  # reuse freed memory, if the frame's was freed
print(bool(torch.equal(x, big)), receiver.buffer_frames)
"""


def test_a_received_tensor_keeps_its_frame_alive_past_the_socket_and_context() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _OUTLIVES], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "1"]  # the tensor came in a frame of its own, still intact


# -- broadcast ---------------------------------------------------------------------------------
def _workers(ctx: Any, endpoint: str, count: int) -> list[Any]:
    dealers = []
    for i in range(count):
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, f"worker-{i}".encode())
        dealer.connect(endpoint)
        dealers.append(dealer)
    return dealers


def _greeted(router: Channel, dealers: list[Any]) -> list[bytes]:
    """Each worker says hello (so the ROUTER knows its routing id); the ids, in order."""
    for dealer in dealers:
        Channel(dealer, REGISTRY, transport=tw.transports.ShmTransport()).send(_request(), timeout=5)
    return sorted(router.recv_from(timeout=5)[0] or b"" for _ in dealers)


def test_a_broadcast_on_this_host_is_one_shared_buffer_every_worker_reads(ctx: Any, tmp_path: Any) -> None:
    router_socket = ctx.socket(zmq.ROUTER)
    endpoint = f"ipc://{tmp_path}/router"
    router_socket.bind(endpoint)
    dealers = _workers(ctx, endpoint, 3)
    big = torch.randn(MiB)
    with tw.transports.ShmTransport() as shm, Channel(router_socket, REGISTRY, transport=shm) as router:
        peers = _greeted(router, dealers)
        assert peers == [b"worker-0", b"worker-1", b"worker-2"]
        router.broadcast(_request(x=big), peers, timeout=5)
        assert shm.pool is not None and len(shm.pool.slots()) == 1  # one buffer for the three
        readers = [tw.transports.ShmTransport() for _ in dealers]
        got = [
            Channel(d, REGISTRY, transport=r).recv(timeout=5).kwargs["x"] for d, r in zip(dealers, readers, strict=True)
        ]
        assert all(torch.equal(x, big) for x in got)
        del got[:2]
        assert [slot.state for slot in shm.pool.slots()] != [FREE]  # one worker still reads it
        got.clear()
        assert [slot.state for slot in shm.pool.slots()] == [FREE]
        for reader in readers:
            reader.close()


def test_a_broadcast_to_remote_peers_sends_each_the_same_inline_frames(ctx: Any) -> None:
    router_socket = ctx.socket(zmq.ROUTER)
    port = router_socket.bind_to_random_port("tcp://127.0.0.1")
    dealers = _workers(ctx, f"tcp://127.0.0.1:{port}", 2)
    big = torch.randn(MiB)
    with tw.transports.ShmTransport() as shm, Channel(router_socket, REGISTRY, transport=shm) as router:
        for dealer in dealers:  # workers without a transport: they say they cannot open shared memory
            Channel(dealer, REGISTRY).send(_request(), timeout=5)
        peers = sorted(router.recv_from(timeout=5)[0] or b"" for _ in dealers)
        router.broadcast(_request(x=big), peers, timeout=5)
        assert shm.pool is not None and shm.pool.slots() == []
        for dealer in dealers:
            parts = _raw_parts(dealer)
            assert len(parts) == 3 and torch.equal(tw.Decoder(REGISTRY).decode(parts[1:]).kwargs["x"], big)


def test_a_broadcast_needs_a_router_and_distinct_peers(ctx: Any) -> None:
    with Channel(ctx.socket(zmq.DEALER), REGISTRY) as dealer:
        with pytest.raises(ValueError, match=r"broadcast\(\) is for ROUTER sockets"):
            dealer.broadcast(_request(), [b"a"])
    with Channel(ctx.socket(zmq.ROUTER), REGISTRY) as router:
        with pytest.raises(ValueError, match=r"broadcast\(\) needs distinct routing ids, got 2 with repeats or none"):
            router.broadcast(_request(), [b"a", b"a"])
        with pytest.raises(ValueError, match=r"got 0 with repeats or none"):
            router.broadcast(_request(), [])


def test_a_broadcast_peer_zeromq_does_not_know_gives_its_share_back_after_the_claim_timeout(
    ctx: Any, tmp_path: Any
) -> None:
    router_socket = ctx.socket(zmq.ROUTER)
    endpoint = f"ipc://{tmp_path}/router"
    router_socket.bind(endpoint)
    dealers = _workers(ctx, endpoint, 1)
    with (
        tw.transports.ShmTransport(claim_timeout=0.5) as shm,
        Channel(router_socket, REGISTRY, transport=shm) as router,
    ):
        peers = _greeted(router, dealers)
        router.broadcast(_request(x=torch.randn(MiB)), [*peers, b"nobody"], timeout=5)
        with tw.transports.ShmTransport() as reader:
            x = Channel(dealers[0], REGISTRY, transport=reader).recv(timeout=5).kwargs["x"]
            del x
            assert shm.pool is not None and [slot.state for slot in shm.pool.slots()] == [IN_FLIGHT]
            time.sleep(0.6)
            shm.pool.expire()
            assert [slot.state for slot in shm.pool.slots()] == [FREE]


def test_a_garbage_flood_is_counted_whole_but_logged_at_ten_lines_a_second(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    for _ in range(200):
        a.send_multipart([b"junk"])
    a.send_multipart(_valid(_request()))
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(b, REGISTRY) as receiver:
        start = time.monotonic()
        receiver.recv(timeout=5)
        seconds = int(time.monotonic()) - int(start) + 1
        assert receiver.dropped == 200
    lines = [r.getMessage() for r in caplog.records]
    assert 10 <= len(lines) <= 10 * seconds
    if len(lines) > 10:  # the flood spanned a second boundary: the next line counts what was held back
        assert "more held back from the log since the last line" in lines[10]
    a.close(0)


def test_held_back_warnings_are_counted_in_the_next_line(caplog: pytest.LogCaptureFixture) -> None:
    from tensorwire.zmq._notes import Notes

    now = [100.0]
    notes = Notes(logging.getLogger("tensorwire.zmq"), burst=2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"):
        for i in range(5):
            notes.note(f"drop {i}")
        now[0] = 101.2
        notes.note("drop 5")
        notes.note("drop 6")
    assert [r.getMessage() for r in caplog.records] == [
        "drop 0",
        "drop 1",
        "drop 5 (3 more held back from the log since the last line)",
        "drop 6",
    ]


def test_a_shared_memory_broadcast_reaches_64_peers_at_most(ctx: Any, tmp_path: Any) -> None:
    with tw.transports.ShmTransport() as shm, Channel(ctx.socket(zmq.ROUTER), REGISTRY, transport=shm) as router:
        router.socket.bind(f"ipc://{tmp_path}/router")
        peers = [f"p{i}".encode() for i in range(65)]
        with pytest.raises(ValueError, match="a shared-memory broadcast reaches 64 peers at most, not 65"):
            router.broadcast(_request(x=torch.randn(MiB)), peers, timeout=1)
        assert shm.pool is not None and shm.pool.slots() == []  # refused before anything was encoded


def _departed(ctx: Any, router: Any, routing_id: bytes, frame: bytes) -> None:
    """A DEALER named ``routing_id`` sends ``frame`` to ``router`` and closes before it is read;
    returns once a ``ROUTER_MANDATORY`` ``router`` no longer routes to it."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.ROUTING_ID, routing_id)
    dealer.connect(router.getsockopt(zmq.LAST_ENDPOINT).decode())
    dealer.send(frame)
    assert router.poll(5000)  # it has arrived, unread
    dealer.close(0)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            router.send(routing_id, zmq.SNDMORE | zmq.NOBLOCK)
        except zmq.ZMQError:  # EHOSTUNREACH: gone
            return
        router.send(b"")  # the end of the probe, to a socket that has closed
        time.sleep(0.01)
    raise AssertionError("the router still routes to a closed peer")


def test_a_handshake_question_from_a_peer_that_left_is_counted_not_raised(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With ROUTER_MANDATORY, the answer to a peer that left is EHOSTUNREACH: it raised out of recv."""
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.bind("tcp://127.0.0.1:*")
    with caplog.at_level(logging.INFO, logger="tensorwire.zmq"), Channel(router, REGISTRY) as channel:
        _departed(ctx, router, b"gone", HELLO + bytes(16) + b"?")
        with pytest.raises(TimeoutError):
            channel.recv(timeout=0.2)
        assert channel.unanswered == 1 and channel.dropped == 0
    assert f"could not answer a handshake from peer {b'gone'.hex()}: Host unreachable" in caplog.text


def _queued_junk(ctx: Any, a_type: int, b_type: int, count: int) -> tuple[Any, Any]:
    """An inproc pair whose ``b`` has ``count`` undecodable messages queued, then a valid one."""
    a, b = ctx.socket(a_type), ctx.socket(b_type)
    for socket in (a, b):
        socket.setsockopt(zmq.SNDHWM, 0)
        socket.setsockopt(zmq.RCVHWM, 0)
    endpoint = f"inproc://junk-{id(a)}"
    b.bind(endpoint)
    a.connect(endpoint)
    for _ in range(count):
        a.send_multipart([HELLO + bytes(16), b"\xc1"])
    a.send_multipart(_valid(_request(x=torch.ones(2))))
    return a, b


def test_a_flood_of_dropped_messages_does_not_outlast_the_receive_timeout(ctx: Any) -> None:
    """The deadline was looked at only when no message was waiting: recv read every queued one."""
    a, b = _queued_junk(ctx, zmq.PUSH, zmq.PULL, 2000)
    with Channel(b, REGISTRY) as receiver:
        with pytest.raises(TimeoutError):
            receiver.recv(timeout=0)  # one message read, dropped, and the time is up
        assert receiver.dropped == 1
        with pytest.raises(TimeoutError):
            receiver.recv(timeout=0.001)
        assert receiver.dropped < 2000
        assert torch.equal(receiver.recv(timeout=5).kwargs["x"], torch.ones(2))  # the rest, then the message
        assert receiver.dropped == 2000
    a.close(0)


def test_a_flood_of_dropped_messages_does_not_outlast_a_handshake(ctx: Any) -> None:
    a, b = _queued_junk(ctx, zmq.PAIR, zmq.PAIR, 2000)
    with Channel(b, REGISTRY) as asking:
        with pytest.raises(TimeoutError, match="no answer to the handshake within 0 s"):
            asking.handshake(timeout=0)
        assert asking.dropped == 1
    a.close(0)


@pytest.mark.parametrize("tail", ["A" * 5000, "\x1b" * 200], ids=["long", "short, but long once escaped"])
def test_a_peers_text_reaches_the_log_escaped_and_cut(ctx: Any, caplog: pytest.LogCaptureFixture, tail: str) -> None:
    """A string of the peer's (here a transport name, quoted in msgspec's error) was logged raw:
    a newline in it wrote a log line of the peer's making. The cut applies to the escaped text: a
    line of fewer characters than the cut that escaping makes longer is cut as well."""
    from tests.wire_helpers import frame_of, head_of

    frames = tw.Encoder().encode(_request(x=torch.arange(100_000)))
    head = head_of(frames[0])
    forged = "'\n2024-01-01 00:00:00,000 INFO tensorwire.zmq: admin login accepted\x1b[0m " + tail
    head[3] = [[head[3][0][0], {"transport": forged, "frame": 1}]]
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    a.send_multipart([HELLO + bytes(16), frame_of(head), bytes(frames[1])])
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(b, REGISTRY) as receiver:
        with pytest.raises(TimeoutError):
            receiver.recv(timeout=1)
        assert receiver.dropped == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("dropped a message from the peer: ") and "admin login accepted\\x1b[0m" in line
    assert "\n" not in line and "\x1b" not in line and "'\\n2024" in line
    assert len(line) < 600 and line.endswith("... (cut at 500 characters)")
    a.close(0)


LONG_ID = b"\x01" * 255  # the longest routing id ZeroMQ lets a peer pick
LONG_NAME = f"peer {'01' * 32}... (255 bytes)"


def test_a_peer_with_a_long_routing_id_cannot_cut_why_its_message_was_dropped_out_of_the_log(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The routing id a peer picks was written whole in hex (510 characters for 255 bytes), past the
    500 characters a line keeps: the line about its message was cut before it said why, and so
    was the error of a message whose shared memory could not be opened."""
    from tests.wire_helpers import frame_of, head_of

    router = ctx.socket(zmq.ROUTER)
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), tw.transports.ShmTransport() as shm:
        oob = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)
        head = head_of(tw.Encoder(shm, oob).encode(_request(x=torch.ones(64)))[0])
        with Channel(router, REGISTRY, transport=shm) as server:
            router.bind("inproc://long-routing-id")
            peer = ctx.socket(zmq.DEALER)
            peer.setsockopt(zmq.ROUTING_ID, LONG_ID)
            peer.connect("inproc://long-routing-id")
            peer.send_multipart([b"x"])
            with pytest.raises(TimeoutError):
                server.recv(timeout=0.5)
            head[3][0][1]["fd"] = 2**31 - 1  # a memfd no process holds (the real slot comes back at the close)
            peer.send_multipart([HELLO + host_token(), frame_of(head)])
            with pytest.raises(tw.TransportError) as caught:
                server.recv(timeout=5)
    assert caplog.messages == [
        f"dropped a message from {LONG_NAME}: a channel message has a hello frame and frame 0 at least;"
        " this one has 1 frames"
    ]
    assert str(caught.value.strerror).startswith(f"a message from {LONG_NAME}: cannot open pool segment tw-")
    peer.close(0)


def test_zeromq_disconnects_a_peer_whose_frame_is_over_the_receivers_limits(ctx: Any) -> None:
    """ZeroMQ read a whole message of any size before the channel could drop it."""
    limits = tw.Limits(max_header_bytes=64 * 1024, max_message_bytes=MiB)
    b = ctx.socket(zmq.PULL)
    with Channel(b, REGISTRY, options=tw.DecodeOptions(limits=limits)) as receiver:
        assert b.getsockopt(zmq.MAXMSGSIZE) == MiB
        port = b.bind_to_random_port("tcp://127.0.0.1")
        big = ctx.socket(zmq.PUSH)
        big.connect(f"tcp://127.0.0.1:{port}")
        big.send_multipart([HELLO + bytes(16), _valid(_request())[1], bytes(MiB + 1)])
        with pytest.raises(TimeoutError):
            receiver.recv(timeout=0.5)
        assert receiver.dropped == 0  # ZeroMQ refused it: the channel never saw it
        honest = ctx.socket(zmq.PUSH)
        honest.connect(f"tcp://127.0.0.1:{port}")
        honest.send_multipart(_valid(_request(x=torch.ones(MiB // 8))))  # 512 KiB of buffer: within
        assert receiver.recv(timeout=5).kwargs["x"].shape == (MiB // 8,)
        big.close(0)
        honest.close(0)
    own = ctx.socket(zmq.PULL)
    own.setsockopt(zmq.MAXMSGSIZE, 123)
    with Channel(own, REGISTRY, options=tw.DecodeOptions(limits=limits)):
        assert own.getsockopt(zmq.MAXMSGSIZE) == 123  # the caller's own bound stays


@pytest.mark.parametrize("way", ["bind", "connect"])
def test_a_channel_made_on_a_socket_bound_or_connected_already_warns_that_its_frame_bound_does_not_hold_there(
    ctx: Any, way: str
) -> None:
    """ZeroMQ takes MAXMSGSIZE at bind and connect: set later, it bounds no frame of an endpoint the
    socket has, though the socket reports it."""
    limits = tw.Limits(max_header_bytes=64 * 1024, max_message_bytes=MiB)
    b, peer = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    if way == "bind":
        port = b.bind_to_random_port("tcp://127.0.0.1")
        peer.connect(f"tcp://127.0.0.1:{port}")
    else:
        port = peer.bind_to_random_port("tcp://127.0.0.1")
        b.connect(f"tcp://127.0.0.1:{port}")
    with pytest.warns(
        UserWarning,
        match=rf"^the socket is bound or connected already \(tcp://127\.0\.0\.1:{port}\): ZeroMQ takes the"
        rf" MAXMSGSIZE of {MiB} bytes the channel sets only at a later bind or connect",
    ):
        receiver = Channel(b, REGISTRY, options=tw.DecodeOptions(limits=limits))
    with receiver:
        assert b.getsockopt(zmq.MAXMSGSIZE) == MiB
        peer.send_multipart([HELLO + bytes(16), _valid(_request())[1], bytes(MiB + 1)])
        with pytest.raises(TimeoutError):
            receiver.recv(timeout=0.5)
        assert receiver.dropped == 1  # ZeroMQ took the whole frame: the channel dropped it
    peer.close(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh, own, inproc = ctx.socket(zmq.PULL), ctx.socket(zmq.PULL), ctx.socket(zmq.PULL)
        own.setsockopt(zmq.MAXMSGSIZE, MiB)
        own.bind("tcp://127.0.0.1:*")
        inproc.bind("inproc://bounded-by-nothing")
        for socket in (fresh, own, inproc):
            Channel(socket, REGISTRY).close(0)


def test_a_bare_handshake_frame_with_this_hosts_token_gives_no_shared_memory(ctx: Any) -> None:
    """A question (or an answer nobody asked for) carrying this host's token made a ROUTER send
    that peer shared memory, before any message of its had decoded."""
    a, b = _tcp_pair(ctx, zmq.DEALER, zmq.ROUTER)
    a.setsockopt(zmq.ROUTING_ID, b"claims")
    a.disconnect(a.getsockopt(zmq.LAST_ENDPOINT).decode())
    a.connect(b.getsockopt(zmq.LAST_ENDPOINT).decode())
    with tw.transports.ShmTransport() as shm, Channel(b, REGISTRY, transport=shm) as server:
        for kind in (b"?", b"!"):
            a.send_multipart([HELLO + host_token() + kind])
            with pytest.raises(TimeoutError):
                server.recv(timeout=0.2)
            assert route_for(server, b"claims") == _INLINE
        a.send_multipart(_valid(_request()))  # a message that decodes, with the same hello
        assert server.recv_from(timeout=5)[0] == b"claims" and route_for(server, b"claims") == _TRIAL
    a.close(0)


def test_a_handshake_sized_frame_without_the_hello_is_garbage_and_an_answer_is_never_answered(ctx: Any) -> None:
    """Only a one-frame message that opens with the hello is a handshake, and only its question
    is answered: a frame of a handshake's size that opens with other bytes (and ends in ``?``) is
    garbage, dropped and counted, never answered; an answer nobody asked for gets no answer back
    (two channels would answer each other's answers without end). The message after them reads."""
    a, b = _tcp_pair(ctx, zmq.PAIR, zmq.PAIR)
    with Channel(b, REGISTRY) as channel:
        a.send_multipart([b"XXXX" + host_token() + b"?"])
        a.send_multipart([HELLO + host_token() + b"!"])
        a.send_multipart(_valid(_request(n=1)))
        assert channel.recv(timeout=5).kwargs == {"n": 1}
        assert channel.dropped == 1
        assert not a.poll(300, zmq.POLLIN), "the channel answered a frame that was no question"
    a.close(0)


def test_a_send_without_a_timeout_keeps_to_the_sockets_sndtimeo(ctx: Any) -> None:
    """``timeout=None`` leaves the bound to the socket's ``SNDTIMEO``, as a blocking send did: a
    message nothing can take is a ``TimeoutError`` once it is up, nothing sent."""
    socket = ctx.socket(zmq.PUSH)
    socket.setsockopt(zmq.SNDTIMEO, 200)
    socket.setsockopt(zmq.IMMEDIATE, 1)
    socket.connect("tcp://127.0.0.1:1")  # nobody there: nothing can be queued
    channel = Channel(socket, REGISTRY)
    thread, raised = _send_on_a_thread(channel, rpc.Request(method="x"))
    thread.join(30)
    alive = thread.is_alive()
    channel.abort()  # (a send still waiting gives up)
    thread.join(5)
    assert not alive, "send() waits past the socket's SNDTIMEO"
    [error] = raised
    assert type(error) is TimeoutError
    assert str(error) == "the message could not be queued within the socket's SNDTIMEO (no peer ready)"
    channel.close(0)


def test_a_handshake_question_after_abort_is_counted_not_raised(ctx: Any) -> None:
    """After ``abort()`` no send waits: a peer's handshake question whose answer cannot be queued at
    once is counted in ``unanswered``, and ``recv`` returns the peer's next message."""
    ours, theirs = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    ours.setsockopt(zmq.SNDHWM, 1)
    theirs.setsockopt(zmq.RCVHWM, 1)
    ours.bind("inproc://aborted")
    theirs.connect("inproc://aborted")
    channel = Channel(ours, REGISTRY, same_host=False)
    while True:  # the peer reads nothing: fill this side's outgoing pipe
        try:
            ours.send(b"x" * 1024, zmq.NOBLOCK)
        except zmq.Again:
            break
    channel.abort()
    theirs.send(HELLO + host_token() + b"?")
    theirs.send_multipart([HELLO + bytes(16), *tw.Encoder().encode(rpc.Request(method="after"))])
    message = channel.recv(timeout=5)
    assert isinstance(message, rpc.Request) and message.method == "after"
    assert channel.unanswered == 1
    channel.close(0)
    theirs.close(0)


# -- a hello that says "this host" is taken at its word once at a time -------------------------------
def _liars(ctx: Any, server: Channel, count: int) -> tuple[list[Any], list[bytes]]:
    """``count`` raw DEALER peers over TCP whose messages carry this host's token (a remote peer can
    echo it) and that never open what they are sent; their routing ids, in order."""
    endpoint = server._last_endpoint()
    dealers = _workers(ctx, endpoint, count)
    for dealer in dealers:
        dealer.send_multipart(_valid(_request()))
    peers = sorted(server.recv_from(timeout=5)[0] or b"" for _ in dealers)
    return dealers, peers


def _in_flight(shm: tw.transports.ShmTransport) -> int:
    assert shm.pool is not None
    return sum(slot.state == IN_FLIGHT for slot in shm.pool.slots())


def test_a_peer_only_its_hello_calls_local_has_one_message_in_shared_memory_until_it_claims_one(ctx: Any) -> None:
    """A remote peer that echoes this host's token pinned every large reply in shared memory until
    the claim timeout; now a peer known only by its hello has one message at a time there, until it
    claims one (which only a process that can open this host's shared memory can do)."""
    router = ctx.socket(zmq.ROUTER)
    router.bind_to_random_port("tcp://127.0.0.1")
    with tw.transports.ShmTransport() as shm, Channel(router, REGISTRY, transport=shm) as server:
        (dealer,), (peer,) = _liars(ctx, server, 1)
        sent = [_request(x=torch.full((MiB,), float(i))) for i in range(3)]
        for message in sent:
            server.send(message, peer=peer, timeout=5)
        parts = [_raw_parts(dealer) for _ in sent]
        assert [len(p) for p in parts] == [2, 3, 3]  # the first through shared memory, then inline
        assert server.withheld == 2 and _in_flight(shm) == 1
        with held_elsewhere(lambda: _read_elsewhere(parts, [0.0, 1.0, 2.0])):  # another process claims the first
            for _ in range(2):  # proven: shared memory, even with the last still unclaimed
                server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
                assert len(_raw_parts(dealer)) == 2
            assert server.withheld == 2 and _in_flight(shm) == 2
        shm.close()


def _read_elsewhere(parts: list[list[bytes]], firsts: list[float] | None = None) -> Any:
    """Decode each message's frames (after its hello) with a transport of this process (a forked
    child's): what a receiver of this host does; ``firsts``: their tensors' first values."""
    reader = tw.transports.ShmTransport()
    got = [tw.Decoder(REGISTRY, [reader]).decode(p[1:]).kwargs["x"] for p in parts]
    assert firsts is None or [float(x[0]) for x in got] == firsts
    return got


def _claim_elsewhere(parts: list[list[bytes]]) -> None:
    """Another process of this host decodes each message, then lets go of them."""
    with held_elsewhere(lambda: _read_elsewhere(parts)):
        pass


def test_a_peer_that_sends_back_its_message_on_trial_proves_nothing(ctx: Any) -> None:
    """A remote peer that echoed the frame 0 of its message on trial had the sender's own decoder
    claim it, which proved the peer: then every message went to shared memory."""
    router = ctx.socket(zmq.ROUTER)
    router.bind_to_random_port("tcp://127.0.0.1")
    for pooled in (True, False):
        with tw.transports.ShmTransport(pool=pooled) as shm, Channel(router, REGISTRY, transport=shm) as server:
            (dealer,), (peer,) = _liars(ctx, server, 1)
            server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
            trial = _raw_parts(dealer)
            dealer.send_multipart([HELLO + host_token(), trial[1]])  # its handle, back to its sender
            assert server.recv_from(timeout=5)[0] == peer  # its sender claimed it: that ends the trial
            for _ in range(3):
                server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
            later = [_raw_parts(dealer) for _ in range(3)]
            assert [len(parts) for parts in later] == [2, 3, 3]  # a new trial, nothing proven
            assert peer not in server._proven
            _claim_elsewhere(later[:1])  # (its buffer gone: none left behind in /dev/shm)
        router = ctx.socket(zmq.ROUTER)
        router.bind_to_random_port("tcp://127.0.0.1")
    router.close(0)


def test_a_message_on_trial_that_expires_unclaimed_ends_the_trial_and_proves_nothing(ctx: Any) -> None:
    router = ctx.socket(zmq.ROUTER)
    router.bind_to_random_port("tcp://127.0.0.1")
    with tw.transports.ShmTransport(claim_timeout=0.3) as shm, Channel(router, REGISTRY, transport=shm) as server:
        (dealer,), (peer,) = _liars(ctx, server, 1)
        for _ in range(2):
            server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
            server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
            assert [len(_raw_parts(dealer)) for _ in range(2)] == [2, 3] and _in_flight(shm) == 1
            deadline = time.monotonic() + 5  # the one in shared memory is brought back unclaimed (the
            while _in_flight(shm) and time.monotonic() < deadline:  # pool's trimmer): a new trial, no proof
                time.sleep(0.05)
        assert server.withheld == 2 and peer not in server._proven


def test_at_most_max_trials_peers_have_a_message_on_trial_at_once(ctx: Any) -> None:
    router = ctx.socket(zmq.ROUTER)
    router.bind_to_random_port("tcp://127.0.0.1")
    with pytest.raises(ValueError, match=r"max_trials must be >= 0 peers, got -1"):
        Channel(router, REGISTRY, max_trials=-1)
    with tw.transports.ShmTransport() as shm, Channel(router, REGISTRY, transport=shm, max_trials=2) as server:
        dealers, peers = _liars(ctx, server, 3)
        for peer in peers:
            server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
        assert [len(_raw_parts(d)) for d in dealers] == [2, 2, 3]  # the third peer waits its turn
        assert server.withheld == 1 and _in_flight(shm) == 2


def test_a_broadcast_goes_through_shared_memory_only_to_peers_that_claimed_a_message(ctx: Any) -> None:
    router = ctx.socket(zmq.ROUTER)
    router.bind_to_random_port("tcp://127.0.0.1")
    with tw.transports.ShmTransport() as shm, Channel(router, REGISTRY, transport=shm) as server:
        dealers, peers = _liars(ctx, server, 2)
        server.broadcast(_request(x=torch.randn(MiB)), peers, timeout=5)
        assert [len(_raw_parts(d)) for d in dealers] == [3, 3] and _in_flight(shm) == 0  # inline to each
        for dealer, peer in zip(dealers, peers, strict=True):  # each claims one message of its own
            server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
            _claim_elsewhere([_raw_parts(dealer)])
        server.broadcast(_request(x=torch.randn(MiB)), peers, timeout=5)
        assert [len(_raw_parts(d)) for d in dealers] == [2, 2] and _in_flight(shm) == 1  # one shared buffer


# -- an interrupt between the parts of a message ------------------------------------------------
class _Interrupted:
    """``socket``, raising KeyboardInterrupt as the ``at``-th send (or recv) returns: a signal
    handler's exception, raised once that part is in (or out of) ZeroMQ."""

    def __init__(self, socket: Any, at: int) -> None:
        self._socket, self._at, self._calls = socket, at, 0

    def _count(self, result: Any) -> Any:
        self._calls += 1
        if self._calls == self._at:
            raise KeyboardInterrupt
        return result

    def send(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self._socket.send(*args, **kwargs))

    def recv(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self._socket.recv(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._socket, name)


def _interrupted(socket: Any, at: int) -> Any:
    """``_Interrupted(socket, at)``, to stand in for a channel's socket."""
    return _Interrupted(socket, at)


def test_a_send_interrupted_between_its_parts_never_glues_the_next_message_on(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """ZeroMQ cannot take back the parts of a message already queued: the next message's parts
    followed them as one message, and the peer dropped both."""
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    b.bind("inproc://interrupted-send")
    a.connect("inproc://interrupted-send")
    with Channel(a, REGISTRY) as sender, Channel(b, REGISTRY) as receiver:
        sender.socket = _interrupted(a, 2)  # the hello and frame 0 queued, not the tensor's frame
        with pytest.raises(KeyboardInterrupt):
            sender.send(_request(big=torch.ones(300_000)), timeout=5)
        sender.socket = a
        sender.send(_request(x=torch.arange(3)), timeout=5)
        with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"):
            got = receiver.recv(timeout=5)
        assert torch.equal(got.kwargs["x"], torch.arange(3))
        assert receiver.dropped == 1
    assert "frame 1 holds 0 bytes, its buffer entry says 1200000" in caplog.text


def _inproc_router(ctx: Any, endpoint: str, names: tuple[bytes, bytes]) -> tuple[Any, Any, Any]:
    """A ROUTER bound to ``endpoint`` and two DEALERs connected to it under routing ids ``names``."""
    router = ctx.socket(zmq.ROUTER)
    router.bind(endpoint)
    dealers = [ctx.socket(zmq.DEALER) for _ in names]
    for socket, name in zip(dealers, names, strict=True):
        socket.setsockopt(zmq.ROUTING_ID, name)
        socket.connect(endpoint)
    return router, dealers[0], dealers[1]


def test_a_router_send_interrupted_between_its_parts_never_sends_the_next_to_its_peer(ctx: Any) -> None:
    """The next message's routing id went to the interrupted message's peer as a part of it, and
    the rest of that message (meant for another peer) with it."""
    router, first, second = _inproc_router(ctx, "inproc://interrupted-router", (b"first", b"second"))
    with Channel(router, REGISTRY) as server:
        server.socket = _interrupted(router, 1)  # the routing id queued, nothing else
        with pytest.raises(KeyboardInterrupt):
            server.send(_request(x=torch.ones(2)), peer=b"first", timeout=5)
        server.socket = router
        server.send(rpc.Request(method="for the second only"), peer=b"second", timeout=5)
        hello, *frames = _raw_parts(second)
        assert hello.startswith(HELLO) and tw.Decoder(REGISTRY).decode(frames).method == "for the second only"
        assert _raw_parts(first) == [b""]  # the interrupted message, ended there (a channel drops it)
        assert first.poll(200) == 0
    second.close(0)
    first.close(0)


def test_a_recv_interrupted_between_the_parts_drops_the_rest_of_that_message(ctx: Any) -> None:
    """The next recv took the rest for a message: on a ROUTER, its first part for a routing id, so
    a peer's last parts made the channel answer a handshake to another peer and learn it remote."""
    router, peer, other = _inproc_router(ctx, "inproc://interrupted-recv", (b"peer", b"other"))
    peer.send_multipart([b"junk", b"other", HELLO + bytes(16) + b"?"])  # its last parts: a routing id, a question
    peer.send_multipart(_valid(_request(x=torch.arange(2))))
    with Channel(router, REGISTRY, transport=tw.transports.ShmTransport()) as server:
        server.socket = _interrupted(router, 2)  # the routing id and the first frame received
        with pytest.raises(KeyboardInterrupt):
            server.recv(timeout=5)
        server.socket = router
        who, message = server.recv_from(timeout=5)
        assert who == b"peer" and torch.equal(message.kwargs["x"], torch.arange(2))
        assert server.dropped == 0 and server.unanswered == 0
        assert other.poll(200) == 0  # no answer to a question it never asked
        assert route_for(server, b"other") == _SHARED  # (inproc: local) not taught otherwise by another peer's frames
    peer.close(0)
    other.close(0)


def test_a_hello_over_tcp_is_on_trial_though_the_socket_has_an_ipc_endpoint_too(ctx: Any, tmp_path: Any) -> None:
    """A ROUTER bound to tcp:// and then ipc:// took its last endpoint for every peer's: a remote
    peer echoing this host's token had every message in shared memory. Now a peer's own connection
    tells: one over TCP is on trial, one over ipc:// is not."""
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    router.bind(f"ipc://{tmp_path}/router")
    far, near = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    for socket, name, endpoint in (
        (far, b"far", f"tcp://127.0.0.1:{port}"),
        (near, b"near", f"ipc://{tmp_path}/router"),
    ):
        socket.setsockopt(zmq.ROUTING_ID, name)
        socket.connect(endpoint)
        socket.send_multipart(_valid(_request()))
    with tw.transports.ShmTransport() as shm, Channel(router, REGISTRY, transport=shm) as server:
        assert sorted(server.recv_from(timeout=5)[0] or b"" for _ in range(2)) == [b"far", b"near"]
        for peer in (b"far", b"far", b"near", b"near"):
            server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
        assert [len(_raw_parts(far)) for _ in range(2)] == [2, 3]  # on trial: one at a time
        assert [len(_raw_parts(near)) for _ in range(2)] == [2, 2]
        assert server.withheld == 1 and _in_flight(shm) == 3


def test_a_channel_that_says_same_host_false_opens_no_shared_memory_a_peer_names(ctx: Any, caplog: Any) -> None:
    """``same_host=False`` only kept this side's tensors inline: the channel still claimed the
    shared memory a received message named, and its hello said it could open it. A peer on trial
    (a remote peer echoing the host token is handed a real message in shared memory) could pass
    that message on to such a receiver of this host over TCP, which claimed the buffer its own peer
    never made and so ended the trial as if that peer had. Now a message naming shared memory is
    dropped before anything is opened, and the hello says the channel opens none."""
    pull, push = _tcp_pair(ctx, zmq.PULL, zmq.PUSH)
    with tw.transports.ShmTransport() as theirs, tw.transports.ShmTransport() as ours:
        receiver = Channel(pull, REGISTRY, transport=ours, same_host=False)
        sender = Channel(push, REGISTRY, transport=theirs, same_host=True)
        with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"):
            sender.send(_request(x=torch.randn(MiB)), timeout=5)
            with pytest.raises(TimeoutError):
                receiver.recv(timeout=1)
        assert receiver.dropped == 1 and _in_flight(theirs) == 1  # its buffer not claimed, not freed
        assert "buffer 0 travels by shm-slot, a transport this decoder does not have" in caplog.text
        sender.same_host = False
        sent = torch.randn(MiB)
        sender.send(_request(x=sent), timeout=5)
        got = receiver.recv(timeout=5)
        assert torch.equal(got.kwargs["x"], sent) and receiver.buffer_frames == 1  # inline, read
        # its hello: a token no process has, so a ROUTER of this host sends it inline
        router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
        router.bind("inproc://says-far")
        dealer.connect("inproc://says-far")
        server = Channel(router, REGISTRY, transport=theirs)
        client = Channel(dealer, REGISTRY, transport=ours, same_host=False)
        client.send(_request(), timeout=5)
        peer, _ = server.recv_from(timeout=5)
        assert route_for(server, peer) == _INLINE
        server.send(_request(x=torch.randn(MiB)), peer=peer, timeout=5)
        assert isinstance(client.recv(timeout=5), rpc.Request) and client.buffer_frames == 1
        for channel in (server, client, receiver, sender):
            channel.close(0)


def test_a_peer_that_takes_over_over_tcp_the_routing_id_of_one_gone_from_ipc_is_on_trial(
    ctx: Any, tmp_path: Any
) -> None:
    """A ROUTER looked at a peer's connection once per routing id: a remote peer that connected over
    TCP under the routing id of a worker that had said hello over ipc:// (and left) kept that
    worker's word, and every large message to it went through shared memory, each pinned until
    the claim timeout. Each hello's own connection now tells: the newcomer is on trial."""
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{tmp_path}/router")
    port = router.bind_to_random_port("tcp://127.0.0.1")
    with tw.transports.ShmTransport() as shm, Channel(router, REGISTRY, transport=shm) as server:
        worker = ctx.socket(zmq.DEALER)
        worker.setsockopt(zmq.ROUTING_ID, b"worker-1")
        worker.connect(f"ipc://{tmp_path}/router")
        worker.send_multipart(_valid(_request()))
        assert server.recv_from(timeout=5)[0] == b"worker-1" and route_for(server, b"worker-1") == _SHARED
        worker.close(0)
        for _ in range(10):  # the ROUTER lets the worker's connection go as it processes its commands
            router.poll(50)
        newcomer = ctx.socket(zmq.DEALER)
        newcomer.setsockopt(zmq.ROUTING_ID, b"worker-1")  # taken once ZeroMQ has let the worker go
        newcomer.connect(f"tcp://127.0.0.1:{port}")
        deadline = time.monotonic() + 10
        while True:
            newcomer.send_multipart(_valid(_request()))
            try:
                assert server.recv_from(timeout=0.5)[0] == b"worker-1"
                break
            except TimeoutError:  # the old connection was still the id's: ZeroMQ dropped the message
                assert time.monotonic() < deadline, "the routing id was never handed to the newcomer"
        assert route_for(server, b"worker-1") == _TRIAL
        for _ in range(3):
            server.send(_request(x=torch.randn(MiB)), peer=b"worker-1", timeout=5)
        assert [len(_raw_parts(newcomer)) for _ in range(3)] == [2, 3, 3]  # one on trial, then inline
        assert server.withheld == 2 and _in_flight(shm) == 1
        newcomer.close(0)


def test_a_peer_on_trial_pushed_out_of_the_peers_a_router_remembers_gets_inline_frames(
    ctx: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ROUTER remembers what the hellos of its last peers said (4,096; 4 here): past that, the
    oldest is forgotten, and a peer it had not heard from went by its last endpoint, so on a socket
    bound to tcp:// and then ipc:// a remote liar that other routing ids pushed out (handshake
    questions saying "another host" are enough) had every message in shared memory, off trial.
    Once a peer has been forgotten, one not heard from gets inline frames."""
    monkeypatch.setattr("tensorwire.zmq._peers._MAX_PEERS", 4)
    router = ctx.socket(zmq.ROUTER)
    endpoint = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    router.bind(f"ipc://{tmp_path}/router")
    liar = ctx.socket(zmq.DEALER)
    liar.setsockopt(zmq.ROUTING_ID, b"liar")
    liar.connect(endpoint)
    liar.send_multipart(_valid(_request()))
    with tw.transports.ShmTransport() as shm, Channel(router, REGISTRY, transport=shm) as server:
        assert server.recv_from(timeout=5)[0] == b"liar"
        assert route_for(server, b"liar") == _TRIAL
        for other in _workers(ctx, endpoint, 4):
            other.send(HELLO + bytes(16) + b"?")
        with pytest.raises(TimeoutError):
            server.recv(timeout=1)  # the four questions, answered
        assert b"liar" not in server._peers
        for _ in range(3):
            server.send(_request(x=torch.randn(MiB)), peer=b"liar", timeout=5)
        assert [len(_raw_parts(liar)) for _ in range(3)] == [3, 3, 3]  # inline: the tensor in a frame
        assert _in_flight(shm) == 0


def _peak_of_one_drop(channel: Channel) -> int:
    """Read the one message waiting on ``channel``'s socket, which the channel drops; the peak of the
    memory traced meanwhile."""
    import tracemalloc

    assert channel.socket.poll(5000)
    tracemalloc.start()
    try:
        with pytest.raises(TimeoutError):
            channel.recv(timeout=0)  # the one message read, and dropped
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- a message of more parts than a channel message can have ---------------------------------------
def test_a_message_of_more_parts_than_a_channel_message_has_is_dropped_without_keeping_them(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Every part was kept in a list (a pyzmq frame each, several times ZeroMQ's own cost per part)
    before the message was refused: 100,000 empty parts took ~20 MiB, two million ~400 MiB."""
    router, peer, _ = _inproc_router(ctx, "inproc://many-parts", (b"peer", b"other"))
    peer.setsockopt(zmq.SNDHWM, 0)
    router.setsockopt(zmq.RCVHWM, 0)
    peer.send_multipart([b""] * 100_000)
    peer.send_multipart(_valid(_request(x=torch.arange(2))))
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(router, REGISTRY) as server:
        assert server.dropped == 0 and _peak_of_one_drop(server) < 4 * MiB  # (4,099 frames kept at most)
        assert server.dropped == 1
        who, message = server.recv_from(timeout=5)
        assert who == b"peer" and torch.equal(message.kwargs["x"], torch.arange(2))
    assert caplog.messages == [
        f"dropped a message from peer {b'peer'.hex()}: it has at least 8192 parts, over the limit of 4099"
        " (a routing id, the hello, frame 0 and max_buffers=4096 buffer frames)"
    ]


def test_a_message_of_many_parts_holds_recv_no_longer_than_its_timeout(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The parts past the limit were all dropped before the timeout was looked at again: two million
    empty parts held a recv with a timeout of 0.1 s for ~7 s. Those left when the time is up are
    dropped by the next receive, before anything else is read."""
    b, a = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    b.setsockopt(zmq.RCVHWM, 0)
    a.setsockopt(zmq.SNDHWM, 0)
    options = tw.DecodeOptions(limits=tw.Limits(max_buffers=2))
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(b, REGISTRY, options=options) as receiver:
        b.bind("inproc://many-parts-in-time")
        a.connect("inproc://many-parts-in-time")
        a.send_multipart([b""] * 3 * 4096)
        a.send_multipart(_valid(_request(x=torch.arange(2))))
        assert b.poll(5000)
        with pytest.raises(TimeoutError):
            receiver.recv(timeout=0)  # past its deadline at the first look at the clock
        assert b.getsockopt(zmq.RCVMORE) == 1  # the rest of that message is left
        got = receiver.recv(timeout=5)
        assert torch.equal(got.kwargs["x"], torch.arange(2)) and receiver.dropped == 1
    assert caplog.messages == [
        "dropped a message from the peer: it has at least 4096 parts, over the limit of 4"
        " (the hello, frame 0 and max_buffers=2 buffer frames)"
    ]
    a.close(0)


def test_a_message_of_as_many_parts_as_max_buffers_allows_arrives_and_one_more_is_dropped(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _tcp_pair(ctx, zmq.PUSH, zmq.PULL)
    two = _valid(_request(x=torch.ones(10_000), y=torch.zeros(10_000)))  # hello, frame 0, two buffer frames
    assert len(two) == 4
    a.send_multipart([*two, b"extra"])
    a.send_multipart(two)
    options = tw.DecodeOptions(limits=tw.Limits(max_buffers=2))
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(b, REGISTRY, options=options) as receiver:
        got = receiver.recv(timeout=5)
        assert torch.equal(got.kwargs["y"], torch.zeros(10_000)) and receiver.dropped == 1
    assert caplog.messages == [
        "dropped a message from the peer: it has 5 parts, over the limit of 4"
        " (the hello, frame 0 and max_buffers=2 buffer frames)"
    ]
    a.close(0)


def test_a_recv_interrupted_among_the_parts_past_the_limit_drops_the_rest_of_that_message(ctx: Any) -> None:
    router, peer, _ = _inproc_router(ctx, "inproc://many-parts-interrupted", (b"peer", b"other"))
    peer.send_multipart([b"junk"] * 10)
    peer.send_multipart(_valid(_request(x=torch.arange(2))))
    options = tw.DecodeOptions(limits=tw.Limits(max_buffers=2))
    with Channel(router, REGISTRY, options=options) as server:
        server.socket = _interrupted(router, 7)  # the 5 parts kept, and 2 past them received
        with pytest.raises(KeyboardInterrupt):
            server.recv(timeout=5)
        server.socket = router
        who, message = server.recv_from(timeout=5)
        assert who == b"peer" and torch.equal(message.kwargs["x"], torch.arange(2))
        assert server.dropped == 0
    peer.close(0)


@pytest.mark.parametrize("at", [3, 6])  # as the last part to the first (or second) of three workers returns
def test_a_broadcast_interrupted_once_a_peers_message_is_whole_leaves_that_peer_its_claim(
    ctx: Any, tmp_path: Any, at: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The peer whose message was queued whole when the interrupt came was counted among those not
    reached: its share was withdrawn (or, for the first, the buffer released), so the claim it made
    was refused as the buffer's last (or a void one) and its message dropped."""
    router_socket = ctx.socket(zmq.ROUTER)
    endpoint = f"ipc://{tmp_path}/router"
    router_socket.bind(endpoint)
    dealers = _workers(ctx, endpoint, 3)
    big = torch.randn(MiB)
    reached = at // 3  # (a routing id, the hello and frame 0 to each)
    with tw.transports.ShmTransport() as shm, Channel(router_socket, REGISTRY, transport=shm) as router:
        peers = _greeted(router, dealers)
        router.socket = _interrupted(router_socket, at)
        with pytest.raises(KeyboardInterrupt):
            router.broadcast(_request(x=big), peers, timeout=5)
        router.socket = router_socket
        readers = [tw.transports.ShmTransport() for _ in dealers]
        workers = [Channel(d, REGISTRY, transport=r) for d, r in zip(dealers, readers, strict=True)]
        with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"):
            got = [w.recv(timeout=5).kwargs["x"] for w in workers[:reached]]
        assert all(torch.equal(x, big) for x in got) and [w.dropped for w in workers] == [0, 0, 0]
        assert dealers[2].poll(200) == 0  # never sent to
        assert shm.pool is not None and [slot.state for slot in shm.pool.slots()] != [FREE]
        got.clear()
        assert [slot.state for slot in shm.pool.slots()] == [FREE]  # freed by the last that got it
        for reader in readers:
            reader.close()


@pytest.mark.parametrize("parts", [1, 2])  # a handshake's place, a hello's place
def test_a_large_part_where_a_hello_goes_is_never_copied(
    ctx: Any, parts: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The part was copied whole (``Frame.bytes``) before its length was looked at: a peer's 64 MiB
    there made the receiver hold twice that."""
    a, b = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    b.bind(f"inproc://large-hello-{parts}")
    a.connect(f"inproc://large-hello-{parts}")
    a.send_multipart([b"TWC1" + bytes(64 * MiB), b"x"][:parts], copy=False)
    a.send_multipart(_valid(_request(x=torch.arange(2))))
    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(b, REGISTRY) as receiver:
        assert _peak_of_one_drop(receiver) < MiB and receiver.dropped == 1
        assert torch.equal(receiver.recv(timeout=5).kwargs["x"], torch.arange(2))
    expected = (
        "a channel message has a hello frame and frame 0 at least; this one has 1 frames"
        if parts == 1
        else "not a tensorwire channel message: its first frame is b'TWC1" + "\\x00" * 20 + "'"
    )
    assert caplog.messages == [f"dropped a message from the peer: {expected}"]
    a.close(0)


def test_a_broadcast_withdrawn_or_unsent_from_pages_a_receiver_keeps_locked_waits_once(
    ctx: Any, slept: list[float]
) -> None:
    """A receiver keeps locked the page of every slot it has mapped: a broadcast of twenty tensors
    that reached some of its peers withdraws the others' shares, and one that reached none undoes
    its exports, each with one wait for those pages, not one per buffer (5 s each before)."""
    import fcntl
    import struct

    lock = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    with tw.transports.ShmTransport() as shm, Channel(ctx.socket(zmq.ROUTER), REGISTRY, transport=shm) as router:
        fan = shm.fan_out(3)
        message = _request(**{f"t{i}": torch.full((1024,), float(i)) for i in range(20)})
        frames = tw.Encoder(fan, tw.EncodeOptions(embed_threshold=0, inline_threshold=1)).encode(message)
        assert shm.pool is not None and len(shm.pool.slots()) == 20
        held = [os.open(f"/proc/self/fd/{slot.fd}", os.O_RDWR) for slot in shm.pool.slots()]
        slept.clear()
        try:
            for fd in held:  # another description's lock, as a receiver's process holds it
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, lock)
            withdraw(router, fan, frames, 2, everyone=False)
            unsend(router, frames)  # (a message reaching nobody: its exports undone)
            waited = sum(slept)
        finally:
            for fd in held:
                os.close(fd)
        assert waited <= 2 * 0.25 + 0.01, waited
