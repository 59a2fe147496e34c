"""tensorwire.zmq.Client / Server: ids, timeouts, late replies, handler errors, threads, CURVE."""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

zmq = pytest.importorskip("zmq")

import tensorwire as tw  # noqa: E402
from tensorwire import EncodeError  # noqa: E402
from tensorwire.builtins import REGISTRY, rpc  # noqa: E402
from tensorwire.zmq import Client, Server  # noqa: E402


def _handler(request: rpc.Request) -> rpc.Result:
    if request.method == "boom":
        raise KeyError("no adapter named 'x'")
    if request.method == "slow":
        time.sleep(float(request.kwargs.get("seconds", 0.5)))
    if request.method == "not a result":
        return "ok"  # type: ignore[return-value]
    if request.method == "breaks a rule":
        return rpc.Result(method=request.method, ok=True, error="both ok and an error")
    if request.method == "breaks its schema":
        return rpc.Result(method="m" * 300, ok=True)  # checked when it is encoded
    return rpc.Result(method=request.method, ok=True, payload=rpc.Value(value=request.kwargs.get("x")))


def _value(result: rpc.Result) -> Any:
    """The value a result carries: an ``rpc.Value``'s, as ``_handler`` answers."""
    payload = result.payload
    assert isinstance(payload, rpc.Value)
    return payload.value


class _Running:
    def __init__(self, server: Server, thread: threading.Thread, endpoint: str) -> None:
        self.server, self.thread, self.endpoint = server, thread, endpoint


@pytest.fixture
def ctx() -> Iterator[Any]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def _serve(ctx: Any, handler: Callable[[rpc.Request], rpc.Result] = _handler, **kwargs: Any) -> _Running:
    socket = ctx.socket(zmq.ROUTER)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    server = Server(socket, **kwargs)
    thread = threading.Thread(target=server.serve, args=(handler,), kwargs={"poll": 0.02}, daemon=True)
    thread.start()
    return _Running(server, thread, f"tcp://127.0.0.1:{port}")


@pytest.fixture
def running(ctx: Any) -> Iterator[_Running]:
    run = _serve(ctx)
    yield run
    run.server.close()
    run.thread.join(5)
    assert not run.thread.is_alive()


def _client(ctx: Any, endpoint: str) -> Client:
    socket = ctx.socket(zmq.DEALER)
    socket.connect(endpoint)
    return Client(socket)


def test_a_call_returns_its_result_with_tensors(ctx: Any, running: _Running) -> None:
    x = torch.randn(16, 16)
    request = rpc.Request(method="echo", kwargs={"x": x})
    with _client(ctx, running.endpoint) as client:
        result = client.call(request, timeout=5)
    assert result.ok and result.method == "echo" and torch.equal(_value(result), x)
    assert isinstance(result.rpc_id, str) and re.fullmatch(r"[0-9a-f]{16}-1-[0-9a-f]{16}", result.rpc_id)
    assert request.rpc_id is None  # the caller's request is not changed
    assert running.server.handled == 1


def test_a_handler_error_comes_back_as_an_error_result(ctx: Any, running: _Running) -> None:
    with _client(ctx, running.endpoint) as client:
        result = client.call(rpc.Request(method="boom"), timeout=5)
        assert (result.ok, result.error, result.error_type, result.traceback) == (
            False,
            "\"no adapter named 'x'\"",
            "KeyError",
            None,
        )
        again = client.call(rpc.Request(method="echo", kwargs={"x": 1}), timeout=5)  # still serving
        assert again.ok and _value(again) == 1
    assert running.server.failed == 1 and running.server.handled == 2


def test_tracebacks_are_sent_only_when_asked_for(ctx: Any) -> None:
    run = _serve(ctx, tracebacks=True)
    try:
        with _client(ctx, run.endpoint) as client:
            result = client.call(rpc.Request(method="boom"), timeout=5)
        assert result.traceback is not None and "KeyError" in result.traceback and "_handler" in result.traceback
    finally:
        run.server.close()
        run.thread.join(5)


@pytest.mark.parametrize(
    ("method", "error_type", "error"),
    [
        ("not a result", "TypeError", "the handler returned str, not an rpc.Result"),
        ("breaks a rule", "ValidationError", "rpc.Result: rule RPC_OK_XOR_ERROR: ok is true but an error is set"),
        ("breaks its schema", "EncodeError", "256"),
    ],
)
def test_a_bad_result_is_answered_with_why(
    ctx: Any, running: _Running, method: str, error_type: str, error: str
) -> None:
    with _client(ctx, running.endpoint) as client:
        result = client.call(rpc.Request(method=method), timeout=5)
    assert not result.ok and result.error_type == error_type and error in (result.error or "")


def test_a_request_that_breaks_its_schema_is_refused_before_sending_and_the_client_goes_on(
    ctx: Any, running: _Running
) -> None:
    bad = rpc.Request(method="m" * 300)  # msgspec checks the length when the request is encoded
    with _client(ctx, running.endpoint) as client:
        with pytest.raises(EncodeError, match="256") as caught:
            client.call(bad, timeout=5)
        assert caught.value.path == "$.method" and caught.value.type_id == "rpc.Request"
        assert bad.rpc_id is None and not client._pending and not client._reading
        result = client.call(rpc.Request(method="echo", kwargs={"x": "next"}), timeout=5)
        assert _value(result) == "next"
    assert running.server.handled == 1  # the refused request never reached it


def test_a_call_with_no_time_left_after_sending_times_out_and_frees_the_reader_role(
    ctx: Any, running: _Running
) -> None:
    with _client(ctx, running.endpoint) as client:
        with pytest.raises(TimeoutError, match=r"no reply to 'echo' within 0 s"):
            client.call(rpc.Request(method="echo", kwargs={"x": "first"}), timeout=0)
        assert not client._reading and not client._pending
        result = client.call(rpc.Request(method="echo", kwargs={"x": "second"}), timeout=5)
        assert _value(result) == "second"  # the first call's reply came late and was dropped
        assert client.late == 1


def test_a_late_reply_is_dropped_by_its_id_so_the_next_call_gets_its_own(ctx: Any, running: _Running) -> None:
    with _client(ctx, running.endpoint) as client:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"no reply to 'slow' within 0.1 s"):
            client.call(rpc.Request(method="slow", kwargs={"seconds": 0.4}), timeout=0.1)
        assert time.monotonic() - start < 0.4
        result = client.call(rpc.Request(method="echo", kwargs={"x": "mine"}), timeout=5)
        assert _value(result) == "mine"
        assert client.late == 1


def test_a_flood_of_stray_replies_is_counted_whole_but_logged_at_ten_lines_a_second(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    def flooding_server() -> None:  # answers one call with 200 replies no call waits for, then its own
        with Channel(router, REGISTRY) as channel:
            peer, request = channel.recv_from(timeout=5)
            for i in range(200):
                channel.send(rpc.Result(method="x", ok=True, rpc_id=f"stray-{i}"), peer=peer, timeout=5)
            channel.send(rpc.Result(method=request.method, ok=True, rpc_id=request.rpc_id), peer=peer, timeout=5)

    thread = threading.Thread(target=flooding_server, daemon=True)
    thread.start()
    with _client(ctx, f"tcp://127.0.0.1:{port}") as client, caplog.at_level(logging.INFO, logger="tensorwire.zmq"):
        start = time.monotonic()
        assert client.call(rpc.Request(method="echo"), timeout=5).ok
        seconds = int(time.monotonic()) - int(start) + 1
        assert client.late == 200
    thread.join(5)
    lines = [r.getMessage() for r in caplog.records if "dropped a reply" in r.getMessage()]
    assert 10 <= len(lines) <= 10 * seconds
    assert lines[0] == "dropped a reply no call waits for (rpc_id 'stray-0', Result)"


def test_a_call_takes_an_infinite_timeout_and_refuses_nan(ctx: Any, running: _Running) -> None:
    with _client(ctx, running.endpoint) as client:
        result = client.call(rpc.Request(method="slow", kwargs={"seconds": 0.1, "x": 5}), timeout=math.inf)
        assert _value(result) == 5
        with pytest.raises(ValueError, match=r"timeout must be a number of seconds \(or None: no limit\), got nan"):
            client.call(rpc.Request(method="echo"), timeout=float("nan"))
        assert running.server.handled == 1  # the refused call sent nothing
        assert _value(client.call(rpc.Request(method="echo", kwargs={"x": 6}), timeout=5)) == 6


def test_a_reply_whose_shared_memory_cannot_be_opened_is_dropped_and_the_call_gets_its_own(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Such a reply raised TransportError out of whichever call was reading the socket, though it
    may have answered another call (or one that had timed out): its id is in what cannot be read."""
    import logging

    import tensorwire as tw
    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import HELLO, Channel, host_token
    from tests.wire_helpers import frame_of, head_of

    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    sender = tw.transports.ShmTransport()
    unreadable: list[Any] = []

    def server() -> None:  # answers with a reply naming a memfd no process holds, then the real one
        with Channel(router, REGISTRY) as channel:
            peer, request = channel.recv_from(timeout=5)
            value = rpc.Value(value=torch.ones(4096))
            forged = rpc.Result(method="x", ok=True, payload=value, rpc_id=request.rpc_id)
            frames = tw.Encoder(sender, tw.EncodeOptions(inline_threshold=0, embed_threshold=0)).encode(forged)
            unreadable.append(frames)
            head = head_of(frames[0])
            head[3][0][1]["fd"] = 2**31 - 1
            router.send_multipart([peer, HELLO + host_token(), frame_of(head)])
            channel.send(rpc.Result(method=request.method, ok=True, rpc_id=request.rpc_id), peer=peer, timeout=5)

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    with (
        tw.transports.ShmTransport() as shm,
        Client(ctx.socket(zmq.DEALER), transport=shm) as client,
        caplog.at_level(logging.WARNING, logger="tensorwire.zmq"),
    ):
        client.channel.socket.connect(f"tcp://127.0.0.1:{port}")
        result = client.call(rpc.Request(method="echo"), timeout=5)
        assert (result.ok, result.method) == (True, "echo")
        assert client.unreadable == 1 and client.late == 0
        dropped = r"dropped a message from the peer: cannot open pool segment tw-\S+ through /proc/\d+/fd/2147483647"
        assert re.search(dropped, caplog.text)
    thread.join(5)
    tw.Decoder(REGISTRY, [sender]).decode(unreadable[0])  # the real slot back
    sender.close()


def test_calls_from_many_threads_each_get_their_own_reply(ctx: Any, running: _Running) -> None:
    got: dict[int, Any] = {}
    errors: list[BaseException] = []
    with _client(ctx, running.endpoint) as client:

        def call(i: int) -> None:
            try:
                for j in range(10):
                    value = torch.full((4,), float(i * 100 + j))
                    result = client.call(rpc.Request(method="echo", kwargs={"x": value}), timeout=10)
                    assert torch.equal(_value(result), value)
                got[i] = True
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert not errors and sorted(got) == list(range(8))
    assert client.late == 0 and running.server.handled == 80


def test_closing_the_client_cancels_a_waiting_call(ctx: Any, running: _Running) -> None:
    client = _client(ctx, running.endpoint)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            client.call(rpc.Request(method="slow", kwargs={"seconds": 2}), timeout=10)
        except BaseException as exc:  # checked below
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.2)
    client.close()
    thread.join(5)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionAbortedError)
    assert "the client was closed while 'slow' waited for its reply" in str(outcome[0])
    with pytest.raises(ConnectionAbortedError, match="the client is closed"):
        client.call(rpc.Request(method="echo"), timeout=1)


def test_the_server_ignores_what_is_not_a_request(ctx: Any, running: _Running) -> None:
    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    socket = ctx.socket(zmq.DEALER)
    socket.connect(running.endpoint)
    with Channel(socket, REGISTRY) as channel:
        channel.send(rpc.Result(method="x", ok=True), timeout=5)
        deadline = time.monotonic() + 5
        while running.server.ignored == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running.server.ignored == 1 and running.server.handled == 0


def test_a_peer_with_a_long_routing_id_cannot_cut_why_it_was_ignored_out_of_the_log(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A peer's routing id was logged whole in hex (510 characters for 255 bytes): the line saying
    what the server ignored was cut, at 500 characters, before it said why."""
    import logging

    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    run = _serve(ctx)
    socket = ctx.socket(zmq.DEALER)
    socket.setsockopt(zmq.ROUTING_ID, b"\x01" * 255)
    socket.connect(run.endpoint)
    try:
        with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"), Channel(socket, REGISTRY) as channel:
            channel.send(rpc.Result(method="x", ok=True), timeout=5)
            deadline = time.monotonic() + 5
            while run.server.ignored == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        run.server.close()
        run.thread.join(5)
    assert caplog.messages == [f"ignored a Result from peer {'01' * 32}... (255 bytes): a server takes rpc.Request"]


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_reply_timeout_out_of_range_is_refused_when_the_server_is_made(ctx: Any, bad: float) -> None:
    """A NaN reply_timeout was taken, and the first reply raised ValueError out of ``serve``."""
    router = ctx.socket(zmq.ROUTER)
    with pytest.raises(ValueError) as info:
        Server(router, reply_timeout=bad)
    assert str(info.value) == f"reply_timeout must be a number of seconds >= 0, got {bad!r}"
    router.close(0)


@pytest.mark.parametrize("role", [Client, Server])
def test_a_client_or_server_over_what_is_no_open_socket_is_refused(ctx: Any, role: Any) -> None:
    """Anything but a socket was an AttributeError, a closed socket a ZMQError (ENOTSOCK)."""
    with pytest.raises(TypeError) as info:
        role("tcp://127.0.0.1:5555")
    assert str(info.value) == f"a {role.__name__} needs a zmq.Socket, got str"
    socket = ctx.socket(zmq.DEALER if role is Client else zmq.ROUTER)
    socket.close()
    with pytest.raises(ValueError) as closed:
        role(socket)
    assert str(closed.value) == f"a {role.__name__} needs an open socket, got a closed one"


@pytest.mark.parametrize("role", [Client, Server])
def test_a_client_or_server_over_an_asyncio_socket_is_refused(role: Any) -> None:
    """It was taken: a request ZeroMQ refused was lost unseen (the send's future held the error),
    and a message arriving made the channel's receive raise AttributeError."""
    import zmq.asyncio

    context = zmq.asyncio.Context()
    try:
        with pytest.raises(TypeError) as info:
            role(context.socket(zmq.DEALER if role is Client else zmq.ROUTER))
    finally:
        context.destroy(linger=0)
    assert str(info.value) == (
        f"a {role.__name__} needs a synchronous zmq.Socket, got a zmq.asyncio.Socket, whose send and"
        ' recv return futures: see "From asyncio" in the README'
    )


def test_a_coroutine_calls_through_a_client_in_a_thread_while_its_loop_runs_on(ctx: Any) -> None:
    """The handler answers only once a coroutine of the caller's loop opens its gate: the loop
    runs while the call waits for its reply."""
    gate = threading.Event()

    def gated(request: rpc.Request) -> rpc.Result:
        assert gate.wait(10)
        return _handler(request)

    run = _serve(ctx, gated)

    async def main(client: Client) -> None:
        x = torch.rand(64, 64)
        request = rpc.Request(method="echo", kwargs={"x": x})
        call = asyncio.create_task(asyncio.to_thread(client.call, request, timeout=10))
        await asyncio.sleep(0.01)
        assert not call.done()
        gate.set()
        result = await call
        assert result.ok and torch.equal(_value(result), x)

    with _client(ctx, run.endpoint) as client:
        asyncio.run(main(client))
    run.server.close()
    run.thread.join(5)


def test_sockets_of_the_wrong_kind_and_non_requests_are_refused(ctx: Any) -> None:
    with pytest.raises(ValueError, match="a Client needs a DEALER socket, got PUSH"):
        Client(ctx.socket(zmq.PUSH))
    with pytest.raises(ValueError, match="a Server needs a ROUTER socket, got DEALER"):
        Server(ctx.socket(zmq.DEALER))
    client = Client(ctx.socket(zmq.DEALER))
    with pytest.raises(TypeError, match=r"call\(\) takes an rpc\.Request, got Result"):
        client.call(rpc.Result(method="x", ok=True), timeout=1)  # type: ignore[arg-type]
    client.close()


@pytest.mark.skipif(not zmq.has("curve"), reason="this libzmq has no CURVE support")
def test_curve_lets_in_an_authorised_client_and_refuses_another(ctx: Any, tmp_path: Any) -> None:
    from zmq.auth.thread import ThreadAuthenticator

    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    stranger_public, stranger_secret = zmq.curve_keypair()
    auth = ThreadAuthenticator(ctx)
    auth.start()
    try:
        keys = tmp_path / "authorized"
        keys.mkdir()
        (keys / "client.key").write_text(
            f'metadata\ncurve\n    public-key = "{client_public.decode()}"\n', encoding="ascii"
        )
        auth.configure_curve(domain="*", location=str(keys))
        socket = ctx.socket(zmq.ROUTER)
        socket.curve_secretkey, socket.curve_publickey, socket.curve_server = server_secret, server_public, True
        port = socket.bind_to_random_port("tcp://127.0.0.1")
        server = Server(socket)
        thread = threading.Thread(target=server.serve, args=(_handler,), kwargs={"poll": 0.02}, daemon=True)
        thread.start()

        def client(public: bytes, secret: bytes) -> Client:
            dealer = ctx.socket(zmq.DEALER)
            dealer.curve_secretkey, dealer.curve_publickey, dealer.curve_serverkey = secret, public, server_public
            dealer.connect(f"tcp://127.0.0.1:{port}")
            return Client(dealer)

        with client(client_public, client_secret) as allowed:
            assert _value(allowed.call(rpc.Request(method="echo", kwargs={"x": 5}), timeout=5)) == 5
        with client(stranger_public, stranger_secret) as refused:
            with pytest.raises(TimeoutError):
                refused.call(rpc.Request(method="echo"), timeout=0.5)
        assert server.handled == 1
        server.close()
        thread.join(5)
    finally:
        auth.stop()


def test_the_rpc_demo_sends_engine_results_through_shared_memory() -> None:
    import io
    import re

    from tensorwire.builtins.rpc_demo import run

    out = io.StringIO()
    assert run(out, calls=20) == 0
    text = out.getvalue()
    assert ": 20 requests answered" in text and "3.0 MiB each, through shared memory" in text
    assert re.search(r"latency per call: p50 [\d.]+ ms, p99 [\d.]+ ms", text)
    assert "bit-exact: all; segments of ours left (in /dev/shm or memfds): 0" in text


def test_a_reply_that_cannot_be_sent_is_logged_and_the_server_serves_on(
    ctx: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    server = Server(router)
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    attempts: list[str] = []

    def failing(message: Any, **kwargs: Any) -> Any:  # the result, then the error result: neither goes
        attempts.append(type(message).__name__ + ("/ok" if message.ok else "/error"))
        if len(attempts) == 1:
            raise __import__("tensorwire").TransportError(28, "no space left for the reply")
        raise TimeoutError("no peer ready")

    with Channel(dealer, REGISTRY) as client, caplog.at_level(logging.WARNING, logger="tensorwire.zmq"):
        client.send(rpc.Request(method="echo", kwargs={"x": 1}, rpc_id="a"), timeout=5)
        monkeypatch.setattr(server.channel, "send", failing)
        assert server.serve_one(_handler, timeout=5) is True
        assert attempts == ["Result/ok", "Result/error"]
        assert "the reply to 'echo' for peer" in caplog.text and "was not sent: no peer ready" in caplog.text
        monkeypatch.undo()  # the real send again
        client.send(rpc.Request(method="echo", kwargs={"x": 2}, rpc_id="b"), timeout=5)
        assert server.serve_one(_handler, timeout=5) is True
        reply = client.recv(timeout=5)
        assert (reply.rpc_id, reply.payload.value) == ("b", 2)
    server.close()


def test_a_request_whose_shared_memory_cannot_be_opened_is_dropped_and_the_server_serves_on(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """One peer's message naming a memfd no process holds (its sender died, or it forged the handle)
    used to raise out of ``serve`` and stop the server for every client."""
    import logging

    import tensorwire as tw
    from tensorwire.zmq import HELLO, host_token
    from tests.wire_helpers import frame_of, head_of

    shm, sender = tw.transports.ShmTransport(), tw.transports.ShmTransport()
    run = _serve(ctx, transport=shm)
    frames = tw.Encoder(sender, tw.EncodeOptions(inline_threshold=0, embed_threshold=0)).encode(
        rpc.Request(method="echo", kwargs={"x": torch.ones(4096)})
    )
    head = head_of(frames[0])
    assert head[3][0][1]["fd"] is not None  # a memfd slot of this process
    head[3][0][1]["fd"] = 2**31 - 1  # an fd number no process holds
    raw = ctx.socket(zmq.DEALER)
    raw.connect(run.endpoint)
    client = _client(ctx, run.endpoint)
    try:
        with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"):
            raw.send_multipart([HELLO + host_token(), frame_of(head)])
            deadline = time.monotonic() + 5
            while run.server.unreadable == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert run.server.unreadable == 1 and run.server.handled == 0
            assert run.thread.is_alive()
            assert re.search(
                r"dropped a message from peer [0-9a-f]+: cannot open pool segment tw-\S+ through "
                r"/proc/\d+/fd/2147483647: No such file or directory",
                caplog.text,
            )
            assert _value(client.call(rpc.Request(method="echo", kwargs={"x": 3}), timeout=5)) == 3
            assert run.server.handled == 1
    finally:
        client.close()
        raw.close(0)
        run.server.close()
        run.thread.join(5)
        tw.Decoder(tw.builtins.REGISTRY, [sender]).decode(frames)  # the real message's slot back
        sender.close()
        shm.close()
    assert not run.thread.is_alive()


def test_a_client_that_left_before_its_reply_does_not_stop_a_mandatory_router_server(
    ctx: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With ROUTER_MANDATORY, ZeroMQ refuses a reply to a peer it no longer knows (EHOSTUNREACH):
    that error used to raise out of ``serve``."""
    import errno
    import logging

    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    server = Server(router)
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.ROUTING_ID, b"gone")
    with Channel(dealer, REGISTRY) as leaving:
        leaving.socket.connect(f"tcp://127.0.0.1:{port}")
        leaving.send(rpc.Request(method="echo", kwargs={"x": 1}, rpc_id="a"), timeout=5)
        assert router.poll(5000)  # the request has arrived: its client may go

    def after_its_client_left(request: rpc.Request) -> rpc.Result:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until ZeroMQ no longer routes to the peer
            try:
                router.send(b"gone", zmq.SNDMORE | zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                assert exc.errno == errno.EHOSTUNREACH
                break
            router.send(b"")  # the end of the probe, to a socket that has closed
            time.sleep(0.01)
        return _handler(request)

    with caplog.at_level(logging.WARNING, logger="tensorwire.zmq"):
        assert server.serve_one(after_its_client_left, timeout=5) is True
    assert server.handled == 1 and server.failed == 0
    assert f"the reply to 'echo' for peer {b'gone'.hex()} was not sent: Host unreachable" in caplog.text
    client = _client(ctx, f"tcp://127.0.0.1:{port}")
    thread = threading.Thread(target=server.serve_one, args=(_handler,), kwargs={"timeout": 5}, daemon=True)
    thread.start()
    assert _value(client.call(rpc.Request(method="echo", kwargs={"x": 2}), timeout=5)) == 2
    thread.join(5)
    assert server.handled == 2
    client.close()
    server.close()


def test_demo_rpc_without_pyzmq_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from tensorwire.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "zmq" else real(name, *a))
    assert main(["demo", "--rpc"]) == 2
    assert capsys.readouterr().err == "tensorwire: demo --rpc needs pyzmq: pip install 'tensorwire[zmq]'\n"


def test_a_handshake_question_from_a_client_that_left_does_not_stop_a_mandatory_router_server(
    ctx: Any,
) -> None:
    """The answer to a question whose asker left is EHOSTUNREACH with ROUTER_MANDATORY: it raised
    out of ``serve_one`` and ended ``serve``."""
    from tensorwire.zmq import HELLO
    from tests.test_zmq_channel import _departed

    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    server = Server(router)
    _departed(ctx, router, b"gone", HELLO + bytes(16) + b"?")
    assert server.serve_one(_handler, timeout=0.2) is False
    assert server.channel.unanswered == 1
    client = _client(ctx, f"tcp://127.0.0.1:{port}")
    thread = threading.Thread(target=server.serve_one, args=(_handler,), kwargs={"timeout": 5}, daemon=True)
    thread.start()
    assert _value(client.call(rpc.Request(method="echo", kwargs={"x": 2}), timeout=5)) == 2
    thread.join(5)
    client.close()
    server.close()


_Socket: Any = zmq.Socket


class _Counting(_Socket):  # type: ignore[misc]
    """A socket that counts the sends ZeroMQ refused (``zmq.Again``)."""

    refused = 0

    def send(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().send(*args, **kwargs)
        except zmq.Again:
            self.refused += 1
            raise


def test_a_client_that_reads_no_replies_holds_a_mandatory_router_server_up_once_without_spinning(
    ctx: Any,
) -> None:
    """A ROUTER is writable when any peer has room: a reply to a full peer spun on the poll for
    ``reply_timeout``, and did so again for each of that peer's requests."""
    import tensorwire as tw
    from tensorwire.zmq import HELLO

    router = ctx.socket(zmq.ROUTER, socket_class=_Counting)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.setsockopt(zmq.SNDHWM, 1)
    router.bind("inproc://stalled")
    server = Server(router, reply_timeout=0.3)
    idle = ctx.socket(zmq.DEALER)  # a peer with room: the router is writable all along
    idle.connect("inproc://stalled")
    mute = ctx.socket(zmq.DEALER)  # sends requests, never reads
    mute.setsockopt(zmq.RCVHWM, 1)
    mute.setsockopt(zmq.ROUTING_ID, b"mute")
    mute.connect("inproc://stalled")
    request = [HELLO + bytes(16), *tw.Encoder().encode(rpc.Request(method="echo"))]
    for _ in range(6):
        mute.send_multipart(request)
    refused = []
    for _ in range(6):
        before = router.refused
        assert server.serve_one(_handler, timeout=5) is True
        refused.append(router.refused - before)
        if b"mute" in server.stalled:
            break
    assert b"mute" in server.stalled and 0 < refused[-1] < 60  # paused between tries, for 0.3 s
    before = router.refused
    assert server.serve_one(_handler, timeout=5) is True
    assert router.refused - before == 1  # tried once: the peer does not read
    while mute.poll(0):
        mute.recv_multipart()
    assert server.serve_one(_handler, timeout=5) is True  # it read: its reply is taken again
    assert b"mute" not in server.stalled and mute.poll(5000)
    for socket in (idle, mute):
        socket.close(0)
    server.close()


def test_a_call_waiting_for_another_calls_send_keeps_its_timeout_and_close_cuts_the_send_short(
    ctx: Any, tmp_path: Any
) -> None:
    """A call that could not be queued held the socket lock for all its timeout (forever with
    ``math.inf``): other calls overran theirs, and ``close`` waited as long."""
    socket = ctx.socket(zmq.DEALER)
    socket.setsockopt(zmq.SNDHWM, 1)
    socket.setsockopt(zmq.IMMEDIATE, 1)  # no server: nothing can be queued
    socket.connect(f"ipc://{tmp_path}/nobody")
    client = Client(socket)
    outcomes: dict[str, BaseException] = {}

    def call(name: str, timeout: float) -> None:
        try:
            client.call(rpc.Request(method=name), timeout=timeout)
        except BaseException as exc:  # checked below
            outcomes[name] = exc

    blocked = threading.Thread(target=call, args=("blocked", math.inf), daemon=True)
    blocked.start()
    time.sleep(0.2)  # it holds the socket, waiting for ZeroMQ
    start = time.monotonic()
    short = threading.Thread(target=call, args=("short", 0.3), daemon=True)
    short.start()
    short.join(5)
    assert not short.is_alive() and time.monotonic() - start < 3 * 0.3 + 1
    assert isinstance(outcomes["short"], TimeoutError)
    closer = threading.Thread(target=client.close, daemon=True)
    closer.start()
    closer.join(5)
    blocked.join(5)
    assert not closer.is_alive() and not blocked.is_alive()
    assert isinstance(outcomes["blocked"], ConnectionAbortedError)
    assert str(outcomes["blocked"]) == "the client was closed before 'blocked' was sent"


def test_close_cuts_short_a_call_whose_large_request_a_server_does_not_read(ctx: Any) -> None:
    """A call whose request was queued waited for ZeroMQ to let go of its large frames, holding the
    socket, as long as its timeout: with ``math.inf``, a server that stopped reading made the call
    and ``close`` wait forever."""
    server = ctx.socket(zmq.ROUTER)
    server.setsockopt(zmq.RCVHWM, 1)  # before the connection is made: its pipe takes the options then
    server.setsockopt(zmq.RCVBUF, 64 * 1024)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    socket = ctx.socket(zmq.DEALER)
    socket.connect(f"tcp://127.0.0.1:{port}")
    client = Client(socket, same_host=False)
    outcomes: dict[str, BaseException] = {}

    def call(name: str) -> None:
        try:
            client.call(rpc.Request(method=name, kwargs={"x": torch.zeros(16 * 2**20)}), timeout=math.inf)
        except BaseException as exc:  # checked below
            outcomes[name] = exc

    calls = [threading.Thread(target=call, args=(f"big{i}",), daemon=True) for i in range(3)]
    for thread in calls:
        thread.start()
        time.sleep(0.3)  # the first requests fill what the server's side takes; the last one is held
    closer = threading.Thread(target=client.close, daemon=True)
    closer.start()
    closer.join(5)
    for thread in calls:
        thread.join(5)
    assert not closer.is_alive(), "close() waited for a call whose request ZeroMQ still held"
    assert not any(thread.is_alive() for thread in calls)
    held = [name for name, exc in outcomes.items() if "was queued" in str(exc)]
    assert held, outcomes
    for name in held:
        assert type(outcomes[name]) is ConnectionAbortedError
        assert (
            str(outcomes[name]) == f"the client was closed while {name!r} was queued, ZeroMQ still holding its frames"
        )
    server.close(0)


class _TimingOut(dict[str, Any]):
    """A client's pending calls that hold the ``victim`` thread's call between its timeout and its
    removal until another thread has looked its id up (a thread switch there, made certain)."""

    def __init__(self, victim: threading.Thread) -> None:
        super().__init__()
        self.victim, self.key = victim, ""
        self.removing, self.looked_up, self.removed = threading.Event(), threading.Event(), threading.Event()

    def __setitem__(self, key: str, value: Any) -> None:
        if threading.current_thread() is self.victim and not self.key:
            self.key = key
        super().__setitem__(key, value)

    def get(self, key: str, default: Any = None) -> Any:
        value = super().get(key, default)
        if key == self.key and threading.current_thread() is not self.victim and not self.removed.is_set():
            self.looked_up.set()
            self.removed.wait(1)  # (the victim's removal, if it can come meanwhile)
        return value

    def pop(self, key: str, default: Any = None) -> Any:
        if key == self.key:
            self.removing.set()
            self.looked_up.wait(1)
        value = super().pop(key, default)
        if key == self.key:
            self.removed.set()
        return value


def test_a_reply_handed_over_as_its_call_times_out_is_not_kept(ctx: Any) -> None:
    """A reply another call's read handed over in the instant its own call timed out (the lookup
    before its removal, the store after) stayed in the client's pending calls for good, tensors
    and all: a server answering each call just as it times out grew the client without bound."""
    server = ctx.socket(zmq.ROUTER)
    server.bind("inproc://timing-out")
    socket = ctx.socket(zmq.DEALER)
    socket.connect("inproc://timing-out")
    client = Client(socket)
    outcomes: dict[str, Any] = {}

    def call(name: str, timeout: float) -> None:
        try:
            outcomes[name] = client.call(rpc.Request(method=name), timeout=timeout)
        except BaseException as exc:  # checked below
            outcomes[name] = exc

    victim = threading.Thread(target=call, args=("victim", 0.3), daemon=True)
    client._pending = pending = _TimingOut(victim)
    victim.start()
    time.sleep(0.1)
    reader = threading.Thread(target=call, args=("reader", 10), daemon=True)
    reader.start()
    requests = {}
    for _ in range(2):
        peer, hello, *frames = server.recv_multipart()
        request = tw.Decoder(REGISTRY).decode(frames)
        requests[request.method] = (peer, hello, request)
    assert pending.removing.wait(5)  # timed out; its removal waits for the reader's lookup
    for method in ("victim", "reader"):  # the victim's reply first: the reader hands it over
        peer, hello, request = requests[method]
        result = rpc.Result(method=method, ok=True, rpc_id=request.rpc_id)
        server.send_multipart([peer, hello, *tw.Encoder().encode(result)])
    reader.join(10)
    victim.join(5)
    assert not victim.is_alive() and not reader.is_alive()
    assert isinstance(outcomes["victim"], TimeoutError)
    assert outcomes["reader"].method == "reader"
    assert dict(pending) == {}, "a reply stayed among the pending calls"
    assert client.late == 1
    client.close()
    server.close(0)


def test_a_call_that_waited_for_the_socket_while_the_client_closed_is_aborted(ctx: Any, running: _Running) -> None:
    """A call that took the socket after ``close`` had closed the channel raised ValueError."""
    client = _client(ctx, running.endpoint)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            client.call(rpc.Request(method="echo"), timeout=5)
        except BaseException as exc:  # checked below
            outcome.append(exc)

    with client._socket_lock:  # as close() does when it takes the socket first
        thread = threading.Thread(target=call)
        thread.start()
        time.sleep(0.1)  # the call waits for the socket
        with client._state:
            client._closed = True
        client.channel.close(linger=0)
    thread.join(5)
    assert not thread.is_alive() and len(outcome) == 1
    assert isinstance(outcome[0], ConnectionAbortedError), outcome


def test_a_client_that_reads_no_large_replies_holds_a_server_up_once(ctx: Any) -> None:
    """A mute peer's large reply is queued but ZeroMQ still holds its frames when ``reply_timeout``
    is up (``StillHeldError``): that peer is stalled as one whose reply was not queued is, so its
    next replies are not waited for (each held the server ``reply_timeout`` before)."""
    import tensorwire as tw
    from tensorwire.zmq import HELLO

    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    server = Server(router, reply_timeout=0.3)
    mute = ctx.socket(zmq.DEALER)
    mute.setsockopt(zmq.ROUTING_ID, b"mute")
    mute.setsockopt(zmq.RCVHWM, 1)
    mute.setsockopt(zmq.RCVBUF, 4096)
    mute.connect(f"tcp://127.0.0.1:{port}")
    big = torch.ones(16 << 20, dtype=torch.uint8)  # more than the kernel's socket buffers hold

    def handler(request: rpc.Request) -> rpc.Result:
        return rpc.Result(method=request.method, ok=True, payload=rpc.Value(value=big))

    request = [HELLO + bytes(16), *tw.Encoder().encode(rpc.Request(method="big"))]
    for _ in range(5):
        mute.send_multipart(request)
    served = 0
    while b"mute" not in server.stalled and served < 3:  # the first reply fills the peer's queue
        assert server.serve_one(handler, timeout=5) is True
        served += 1
    assert b"mute" in server.stalled and served <= 2
    for _ in range(2):
        assert server.serve_one(handler, timeout=5) is True
        assert b"mute" in server.stalled
    # the server first: a peer that leaves while ZeroMQ writes a zero-copy frame to it can keep a
    # socket from ever finishing its close, and the context's term() then waits forever (libzmq)
    server.close()
    mute.close(0)


def test_a_client_that_echoes_this_hosts_token_but_never_reads_pins_one_reply_not_each(ctx: Any) -> None:
    """Every large reply to a remote peer that echoed this host's token stayed pinned in shared
    memory for the claim timeout; now one does, and the others go inline."""
    import tensorwire as tw
    from tensorwire.transports._page_layout import IN_FLIGHT
    from tensorwire.zmq import HELLO, host_token

    socket = ctx.socket(zmq.ROUTER)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    liar = ctx.socket(zmq.DEALER)
    liar.connect(f"tcp://127.0.0.1:{port}")
    with tw.transports.ShmTransport() as shm:
        server = Server(socket, transport=shm)
        for _ in range(4):
            request = rpc.Request(method="load", kwargs={"x": torch.randn(1 << 20)})
            liar.send_multipart([HELLO + host_token(), *(bytes(f) for f in tw.Encoder().encode(request))])
            assert server.serve_one(_handler, timeout=5)
        replies = [liar.recv_multipart() for _ in range(4)]
        assert [len(parts) for parts in replies] == [2, 3, 3, 3]  # one through shared memory, then inline
        assert shm.pool is not None and sum(slot.state == IN_FLIGHT for slot in shm.pool.slots()) == 1
        assert server.channel.withheld == 3 and server.handled == 4
        server.close()


def test_a_server_cannot_answer_a_call_another_server_was_sent(ctx: Any) -> None:
    """A client's ids were its prefix and a count: a server that saw one id could tell the next, and
    answer a call sent to another server of the client's before that server did."""
    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    routers = [ctx.socket(zmq.ROUTER) for _ in range(2)]
    dealer = ctx.socket(zmq.DEALER)
    for i, router in enumerate(routers):
        router.bind(f"inproc://two-servers-{i}")
        dealer.connect(f"inproc://two-servers-{i}")
    channels = [Channel(router, REGISTRY) for router in routers]

    def served(channel: Channel) -> tuple[bytes, rpc.Request]:
        peer, request = channel.recv_from(timeout=5)
        assert peer is not None and isinstance(request, rpc.Request) and request.rpc_id is not None
        return peer, request

    def reply(channel: Channel, peer: bytes, method: str, rpc_id: str | None) -> None:
        channel.send(rpc.Result(method=method, ok=True, rpc_id=rpc_id), peer=peer, timeout=5)

    results: list[rpc.Result] = []

    def call(client: Client) -> threading.Thread:
        thread = threading.Thread(target=lambda: results.append(client.call(rpc.Request(method="m"), timeout=5)))
        thread.start()
        return thread

    with Client(dealer) as client:
        first = call(client)
        poller = zmq.Poller()
        for router in routers:
            poller.register(router, zmq.POLLIN)
        ready = dict(poller.poll(5000))
        hostile, honest = channels if routers[0] in ready else channels[::-1]  # the one the first call went to
        peer, seen = served(hostile)
        reply(hostile, peer, "m", seen.rpc_id)  # the first call's own reply
        first.join(5)
        second = call(client)
        honest_peer, request = served(honest)  # round robin: the second call went to the other server
        assert seen.rpc_id is not None
        prefix, count, *rest = seen.rpc_id.split("-")
        reply(hostile, peer, "forged", "-".join([prefix, str(int(count) + 1), *rest]))  # the next count's id
        time.sleep(0.2)  # the forged reply read (and dropped) before the right one comes
        reply(honest, honest_peer, "m", request.rpc_id)
        second.join(5)
        assert [r.method for r in results] == ["m", "m"] and client.late == 1
    for channel in channels:
        channel.close(0)


@pytest.mark.parametrize("timeout", [5.0, None])
def test_close_from_another_thread_ends_a_waiting_serve_one_without_closing_the_socket_under_it(
    ctx: Any, timeout: float | None
) -> None:
    """``close()`` closed the socket while ``serve_one`` polled it in another thread: with a timeout,
    ZeroMQ's own error came out of ``serve_one`` (``ENOTSOCK``); with none, it never returned.
    It now returns False within a slice of its wait, and the socket is closed after it has."""
    socket = ctx.socket(zmq.ROUTER)
    socket.bind_to_random_port("tcp://127.0.0.1")
    server = Server(socket)
    outcome: dict[str, Any] = {}

    def wait() -> None:
        try:
            outcome["returned"] = server.serve_one(_handler, timeout=timeout)
        except BaseException as exc:  # what the old code let out
            outcome["raised"] = exc

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    time.sleep(0.3)  # serve_one is waiting for a request
    started = time.monotonic()
    server.close()
    thread.join(5)
    assert not thread.is_alive()
    assert outcome == {"returned": False}
    assert time.monotonic() - started < 2.0 and server.channel.closed and socket.closed
    with pytest.raises(ValueError, match=r"^the channel is closed$"):
        server.serve_one(_handler, timeout=0)


def test_serve_one_called_from_two_threads_answers_each_request_once(ctx: Any) -> None:
    """The socket is used by one thread at a time: two threads in ``serve_one`` take turns, and
    each request is answered once."""
    socket = ctx.socket(zmq.ROUTER)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    server = Server(socket)
    returned: list[bool] = []
    threads = [
        threading.Thread(target=lambda: returned.append(server.serve_one(_handler, timeout=10)), daemon=True)
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    client = _client(ctx, f"tcp://127.0.0.1:{port}")
    try:
        got = [_value(client.call(rpc.Request(method="echo", kwargs={"x": i}), timeout=10)) for i in range(2)]
        for thread in threads:
            thread.join(10)
        assert got == [0, 1] and returned == [True, True] and server.handled == 2
    finally:
        client.close()
        server.close()
