"""A hostile ZeroMQ peer against a receiving ``tensorwire.zmq`` channel, by generated input.

A raw pyzmq socket plays the peer of a real ``Channel`` (PULL, PAIR, ROUTER), ``Server`` (ROUTER) or
``Client`` (DEALER), over ``inproc://`` and ``tcp://127.0.0.1``. Each example sends one to three
multipart messages built from the pieces of a real channel message, mutated: the hello (right,
another token, truncated, extended, another magic, left out), a handshake's one frame (question,
answer, other last byte, other magic, a byte short or long), frame 0 of real encoded messages
(``diffusion.Output`` and ``rpc.Request``, small and large tensors, inline buffers or shared memory
of a sender alive or closed) with bytes flipped, set, inserted, deleted or cut, handles forged
(names, capabilities, fds, generations, offsets, sizes, transports, another message's live handle),
buffer frames (right, one short, extra, emptied, one of 3 MiB past the message bound), no frame 0,
and messages of more parts than a channel message can have (up to 5,000). A ROUTER's routing id is
the peer socket's: the peer is one of several DEALERs, one with the longest id ZeroMQ allows.

After them a well-behaved ``Channel`` sends a message from the same socket (the same pipe: it comes
after), and it must arrive equal to what was sent. Before it the receive may give a hostile message
that decoded, raise the error the channel documents for one whose shared memory it cannot open
(``TransportError``, naming the peer) or, with a timeout of 0, ``TimeoutError``; every other
message was a handshake or was dropped, and ``dropped`` grew by one for each (a server's and a
client's own counts likewise). Nothing else is raised, no part is left unread, no message kept
back, and each log line says why. Descriptors stay bounded per example; at the end, everything
closed, no file descriptor, memfd or named segment is left that was not there before.

``TW_ZMQ_HOSTILE_EXAMPLES`` sets how many examples each case tries (the same ones on every run; set
``TW_ZMQ_HOSTILE_SEED`` to try others).
"""

from __future__ import annotations

import gc
import logging
import os
import re
import secrets
import shutil
import tempfile
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

zmq = pytest.importorskip("zmq")

import tensorwire as tw  # noqa: E402
from tensorwire.builtins import REGISTRY, diffusion, rpc  # noqa: E402
from tensorwire.zmq import HELLO, Channel, Client, Server, host_token  # noqa: E402
from tests.wire_helpers import damage, frame_of, head_of, same, segments_of  # noqa: E402

EXAMPLES = int(os.environ.get("TW_ZMQ_HOSTILE_EXAMPLES", "150"))  # per case: the file runs in ~20 s on two cores
SEED = os.environ.get("TW_ZMQ_HOSTILE_SEED", "")  # other examples than those of every run
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # with the seed each case sets (``_seeded``): the same examples on every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MiB = 1 << 20
MAX_BUFFERS = 4
LIMITS = tw.DecodeOptions(limits=tw.Limits(max_buffers=MAX_BUFFERS, max_header_bytes=MiB, max_message_bytes=4 * MiB))
HUGE = 3 * MiB  # a buffer frame under ZeroMQ's frame bound (4 MiB, the channel's) that breaks the message bound
BUFFERS = tw.EncodeOptions(embed_threshold=64)  # tensors past 64 bytes in buffer frames of their own
OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through shared memory
TOKEN = host_token()
HANDSHAKE = len(HELLO) + len(TOKEN) + 1
FD_SLACK = 64  # descriptors examples may leave open: the slots a pool keeps (idle ones go after 30 s) and a
# reader's mappings of them, a few each; a descriptor lost per message would pass it within 64 examples
LONG_ID = b"\x01" * 255  # the longest routing id a peer can pick
_PEER = r"(the peer|peer [0-9a-f]{1,64}(\.\.\. \(\d+ bytes\))?)"
_LOGGED = re.compile(  # a channel's lines, and a server's: each says why
    rf"(dropped a message from {_PEER}|ignored a \w+ from {_PEER}|could not answer a handshake from {_PEER}): \S"
)
_UNOPENED = re.compile(rf"a message from {_PEER}: \S")

# -- the pieces of a hostile message ----------------------------------------------------------------
HELLOS = st.one_of(
    st.just(HELLO + TOKEN),
    st.just(HELLO + bytes(16)),  # a channel that opens no shared memory
    st.binary(min_size=16, max_size=16).map(lambda token: HELLO + token),  # another host's
    st.integers(0, 19).map(lambda n: (HELLO + TOKEN)[:n]),  # truncated
    st.binary(min_size=1, max_size=8).map(lambda tail: HELLO + TOKEN + tail),  # extended
    st.binary(min_size=4, max_size=4).map(lambda magic: magic + TOKEN),  # another magic
)
HANDSHAKE_TOKENS = st.sampled_from([TOKEN, bytes(16), b"\xff" * 16])  # this host's, no shared memory, elsewhere
HANDSHAKES = st.one_of(  # a handshake's one frame, or one of its size or a byte off with a piece wrong
    st.builds(lambda token, kind: HELLO + token + kind, HANDSHAKE_TOKENS, st.sampled_from([b"?", b"!"])),
    st.builds(
        lambda magic, token, kind, size: (magic + token + kind + b"?")[:size],
        st.sampled_from([HELLO, b"TWC0", b"XXXX"]),
        HANDSHAKE_TOKENS,
        st.sampled_from([b"?", b"!", b"\x00", b"."]),
        st.sampled_from([HANDSHAKE, HANDSHAKE - 1, HANDSHAKE + 1]),
    ),
)
EDITS = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]), st.integers(0, 1 << 16), st.integers(0, 255)),
    min_size=1,
    max_size=4,
)
TEMPLATES = ("request", "small output", "buffers", "large buffer", "pool", "one-shot", "closed pool", "closed one-shot")
FORGERIES = ("name", "capability", "fd", "generation", "offset", "transport", "nbytes", "swap", "drop entry")
ASPECTS = ("hello", "edits", "cut", "forge", "buffers")


@dataclass
class Plan:
    """One hostile message: its kind, and how it is built from a template's parts."""

    kind: str  # "message", "handshake", "junk", "many parts"
    hello: bytes = b""
    template: str = "request"
    edits: list[tuple[str, int, int]] = field(default_factory=list)
    cut: int | None = None
    forge: str | None = None  # how a handle of the buffer table is forged
    pick: int = 0  # the forged value, of those ``_forged`` tries
    buffers: str = "right"
    junk: list[bytes] = field(default_factory=list)
    extra: int = MAX_BUFFERS + 1  # parts past the buffer frames of a message of too many


@st.composite
def messages(draw: st.DrawFn, kind: str = "message", templates: tuple[str, ...] = TEMPLATES) -> Plan:
    """A message of ``templates`` with none, one or a few of its aspects (``ASPECTS``) wrong."""
    wrong = draw(st.sets(st.sampled_from(ASPECTS), max_size=3))
    plan = Plan(kind=kind, hello=HELLO + TOKEN, template=draw(st.sampled_from(templates)))
    if "hello" in wrong:
        plan.hello = draw(HELLOS)
    if "edits" in wrong:
        plan.edits = draw(EDITS)
    if "cut" in wrong:
        plan.cut = draw(st.integers(0, 300))
    if "forge" in wrong:
        plan.forge, plan.pick = draw(st.sampled_from(FORGERIES)), draw(st.integers(0, 1 << 16))
    if "buffers" in wrong:
        plan.buffers = draw(st.sampled_from(["one short", "extra", "emptied", "huge", "none"]))
    return plan


PLANS = st.one_of(
    messages(),
    messages(),
    messages(),
    HANDSHAKES.map(lambda frame: Plan(kind="handshake", junk=[frame])),
    st.lists(st.binary(max_size=64), min_size=1, max_size=MAX_BUFFERS + 4).map(lambda parts: Plan("junk", junk=parts)),
    st.builds(
        lambda plan, extra: Plan(**{**plan.__dict__, "extra": extra}),
        messages("many parts", TEMPLATES[:4]),
        st.sampled_from([MAX_BUFFERS + 1, 50, 5000]),  # 5000: past the parts dropped between looks at the clock
    ),
)


# -- the peer's materials ------------------------------------------------------------------------
class Kit:
    """What a test's examples build their messages from: shared memory of a sender alive (the
    well-behaved peer's) and of senders closed, each in a private directory on /dev/shm."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.shm = tw.transports.ShmTransport(directory)  # the peer's: alive
        self.one_shots = tw.transports.ShmTransport(directory, pool=False)
        self.pending: list[tuple[tw.transports.ShmTransport, list[Any]]] = []  # messages to claim back
        closed_pool, closed_one_shot = (
            tw.transports.ShmTransport(directory),
            tw.transports.ShmTransport(directory, pool=False),
        )
        self.closed = {
            "closed pool": _oob(closed_pool, 1),
            "closed one-shot": _oob(closed_one_shot, 2),
        }
        closed_pool.close()
        self.pending.append((closed_one_shot, self.closed["closed one-shot"]))  # its file outlives the close
        closed_one_shot.close()

    def frames(self, template: str, n: int) -> list[Any]:
        """A template message's frames (frame 0 first); shared memory exported now is claimed back later."""
        if template == "request":
            return tw.Encoder().encode(rpc.Request(method=f"hostile-{n}", kwargs={"x": torch.arange(3)}))
        if template == "small output":
            return tw.Encoder().encode(diffusion.Output(output=torch.full((4,), float(n)), error="e"))
        if template == "buffers":
            return tw.Encoder(options=BUFFERS).encode(diffusion.Output(output=(torch.ones(40), {"k": torch.zeros(50)})))
        if template == "large buffer":
            return tw.Encoder(options=BUFFERS).encode(rpc.Request(method="m", kwargs={"x": torch.ones(1 << 16)}))
        if template in self.closed:
            return self.closed[template]
        transport = self.shm if template == "pool" else self.one_shots
        frames = _oob(transport, n)
        self.pending.append((transport, frames))
        return frames

    def claim_back(self) -> None:
        """Claim what the examples exported and the hostile peer did not (a receiver of this process)."""
        for transport, frames in self.pending:
            try:
                tw.Decoder(REGISTRY, [transport]).decode(frames)
            except tw.CodecError:
                pass  # claimed already, or given back by a decode that failed
        self.pending.clear()

    def close(self) -> None:
        self.claim_back()
        self.shm.close()
        self.one_shots.close()


def _oob(transport: tw.transports.ShmTransport, n: int) -> list[Any]:
    return tw.Encoder(transport, OOB).encode(diffusion.Output(output=torch.full((1024,), float(n))))


def _forged(head: list[Any], how: str, pick: int, kit: Kit, n: int) -> None:
    """Forge the first entry of ``head``'s buffer table ``how`` (``pick`` picks the value); a table
    without one gets a one-shot handle."""
    table = head[3]
    if not table:
        table.append([16, {"transport": "shm", "name": f"tw-{os.getpid()}-{'a' * 32}-1", "capability": bytes(16)}])
    entry = table[0]
    handle = entry[1]

    def one(*values: Any) -> Any:
        return values[pick % len(values)]

    if how == "name":
        handle["name"] = one(
            f"tw-{os.getpid()}-{pick:032x}-{n}", f"tw-{os.getpid()}-{'0' * 32}-0", "../x", "", "tw-1-2-3"
        )
    elif how == "capability":
        handle["capability"] = bytes([pick % 256]) * one(16, 0, 15, 17)
    elif how == "fd":
        handle["fd"] = one(0, 1, 2, -1, 2**31 - 1, 2**63, 3 + pick % 64)
    elif how == "generation":
        handle["generation"] = one(0, -1, 2**64 - 1, int(handle.get("generation", 0)) + 1)
    elif how == "offset":
        handle["offset"] = one(-1, 1, 4096, 2**40)
    elif how == "transport":
        handle["transport"] = one("shm-slot", "shm", "inline", "queue", "cuda_shm", "x")
    elif how == "nbytes":
        entry[0] = one(0, -1, entry[0] + 1, 2**62)
    elif how == "swap":  # another live message's handle, with its capability
        entry[1] = head_of(kit.frames("pool", n)[0])[3][0][1]
    else:
        del table[0]


def build(plan: Plan, kit: Kit, n: int) -> list[bytes]:
    """The parts of ``plan``'s hostile message."""
    if plan.kind in ("handshake", "junk"):
        return list(plan.junk)
    frames = kit.frames(plan.template, n)
    head = bytes(frames[0])
    if plan.forge is not None:
        forged = head_of(head)
        _forged(forged, plan.forge, plan.pick, kit, n)
        head = frame_of(forged)
    head = damage(head, plan.edits, plan.cut)
    buffers = [bytes(f) for f in frames[1:]]
    if plan.kind == "many parts":
        return [plan.hello, head, *buffers, *[b""] * plan.extra]
    if plan.buffers == "one short":
        buffers = buffers[:-1]
    elif plan.buffers == "extra":
        buffers.append(b"\x00" * 7)
    elif plan.buffers == "emptied":
        buffers = [b"" for _ in buffers] or [b""]
    elif plan.buffers == "huge":
        buffers.append(bytes(HUGE))
    elif plan.buffers == "none":
        return [plan.hello]
    return [plan.hello, head, *buffers]


# -- the rig ---------------------------------------------------------------------------------
def _fds() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


@contextmanager
def _clean() -> Iterator[str]:
    """A private directory on /dev/shm; afterwards no file descriptor, memfd or named segment of
    this process's is left that was not there before."""
    zmq.Frame(bytearray(MiB), copy=False, track=True)  # pyzmq's collector of zero-copy frames (a
    # thread and a context of its own, once a process) started before the count
    fds, held = _fds(), set(segments_of(os.getpid()))
    directory = tempfile.mkdtemp(dir="/dev/shm", prefix="twtest-zmq-hostile-")
    try:
        yield directory
        gc.collect()
        assert os.listdir(directory) == []
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert set(segments_of(os.getpid())) <= held
    assert _fds() <= fds


class _Log(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def _logged() -> Iterator[_Log]:
    log, handler = logging.getLogger("tensorwire.zmq"), _Log()
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
    bad = [line for line in handler.lines if not _LOGGED.match(line)]
    assert not bad, bad


def _sockets(
    ctx: Any, kind: int, endpoint: str, make: Callable[[Any], Any], kit: Kit
) -> tuple[Any, list[Any], list[Channel]]:
    """The receiving socket wrapped by ``make``, its peers' raw sockets and their well-behaved
    channels (which read shared memory: one on this host), each made before its socket connects."""
    peer_kind = {zmq.PULL: zmq.PUSH, zmq.PAIR: zmq.PAIR, zmq.ROUTER: zmq.DEALER}[kind]
    socket = ctx.socket(kind)
    receiver = make(socket)
    if endpoint == "tcp":
        address = f"tcp://127.0.0.1:{socket.bind_to_random_port('tcp://127.0.0.1')}"
    else:
        address = f"inproc://hostile-{secrets.token_hex(8)}"
        socket.bind(address)
    names: list[bytes | None] = [b"peer", None, LONG_ID] if kind == zmq.ROUTER else [None]
    peers, channels = [], []
    for name in names:
        peer = ctx.socket(peer_kind)
        if name is not None:
            peer.setsockopt(zmq.ROUTING_ID, name)
        channels.append(Channel(peer, REGISTRY, transport=kit.shm))
        peer.connect(address)
        peers.append(peer)
    return receiver, peers, channels


def _drain(socket: Any) -> None:
    """Drop what the receiver sent back (handshake answers)."""
    while socket.poll(0, zmq.POLLIN):
        socket.recv_multipart()


def _outcome(came: Any) -> str:
    """What became of a hostile message that a channel's receive gave or raised."""
    return "refused" if isinstance(came, tw.TransportError) else "received"


def _served(grew: list[int]) -> str:
    """What became of a hostile message at a server, from what its counts (handled, unreadable,
    ignored, dropped) grew by, the next request handled too."""
    if grew[0] == 2:
        return "received"
    if sum(grew) == 1:
        return "a handshake"
    return ("refused", "ignored", "dropped")[grew.index(1, 1) - 1]


def _is_handshake(parts: list[bytes]) -> bool:
    """Whether ``parts`` is a handshake's question or answer, which a channel takes for no message."""
    return len(parts) == 1 and len(parts[0]) == HANDSHAKE and parts[0][:4] == HELLO and parts[0][-1:] in (b"?", b"!")


def _seeded(*case: str) -> Callable[[Any], Any]:
    """The same examples on every run, others for each case."""
    return seed(zlib.crc32(" ".join((*case, SEED)).encode()))


SEEN = {"received", "a handshake", "dropped"}  # what every case's examples must have come to, at least


CASES = [(kind, where) for kind in ("PULL", "PAIR", "ROUTER") for where in ("inproc", "tcp")]


@pytest.mark.parametrize(("kind", "where"), CASES)
def test_any_message_from_a_hostile_peer_is_received_dropped_or_refused_and_the_next_arrives(
    kind: str, where: str
) -> None:
    with _clean() as directory, _logged():
        ctx, kit = zmq.Context(), Kit(directory)
        reader = tw.transports.ShmTransport(directory)
        channel, peers, senders = _sockets(
            ctx, getattr(zmq, kind), where, lambda s: Channel(s, REGISTRY, transport=reader, options=LIMITS), kit
        )
        count, seen, fds = iter(range(1 << 30)), Counter[str](), len(os.listdir("/proc/self/fd"))

        @_seeded(kind, where)
        @SETTINGS
        @given(plans=st.lists(PLANS, min_size=1, max_size=3), who=st.integers(0, len(peers) - 1), big=st.booleans())
        def example(plans: list[Plan], who: int, big: bool) -> None:
            n = next(count)
            sent = [build(plan, kit, n) for plan in plans]
            for parts in sent:
                peers[who].send_multipart(parts)
            sentinel = rpc.Request(method=f"sentinel-{n}", kwargs={"x": torch.arange(n % 5 + 1)})
            if big:  # through shared memory over inproc://, in a buffer frame over tcp://
                sentinel.kwargs["big"] = torch.full((1 << 17,), float(n))
            senders[who].send(sentinel, timeout=5)
            before, came = channel.dropped, []  # the hostile messages received, and the errors raised
            timeout = 0.0 if n % 4 == 0 else 5.0  # (0: what a receive leaves at its deadline, the next one reads)
            for _ in range(len(sent) + 2):
                try:
                    got = channel.recv(timeout=timeout)
                except TimeoutError as exc:
                    assert str(exc) == f"no message arrived within {timeout} s" and timeout == 0
                    timeout = 5.0
                    continue
                except tw.TransportError as exc:
                    assert _UNOPENED.match(str(exc.strerror)), exc
                    came.append(exc)
                    continue
                if isinstance(got, rpc.Request) and got.method == sentinel.method:
                    break
                came.append(got)  # a hostile message that decoded
            assert same(got, sentinel)
            controls = sum(map(_is_handshake, sent))
            assert len(came) + controls <= len(sent), plans
            assert channel.dropped - before == len(sent) - controls - len(came), plans
            seen.update(map(_outcome, came))
            seen.update(["a handshake"] * controls + ["dropped"] * (channel.dropped - before))
            assert not channel._unread and not channel._backlog and len(channel._peers) <= len(peers)
            del got, came
            kit.claim_back()
            _drain(peers[who])
            assert len(os.listdir("/proc/self/fd")) <= fds + FD_SLACK

        try:
            example()
            assert SEEN <= set(seen), seen
        finally:
            for sender in senders:
                sender.close(0)
            channel.close(0)
            kit.close()
            reader.close()
            ctx.term()


@pytest.mark.parametrize("where", ["inproc", "tcp"])
def test_a_server_answers_the_next_request_after_any_message_from_a_hostile_peer(where: str) -> None:
    handled: list[str] = []

    def handler(request: rpc.Request) -> rpc.Result:
        handled.append(request.method)
        return rpc.Result(method=request.method, ok=True, payload=rpc.Value(value=request.kwargs.get("x")))

    with _clean() as directory, _logged():
        ctx, kit = zmq.Context(), Kit(directory)
        reader = tw.transports.ShmTransport(directory)
        server, peers, clients = _sockets(
            ctx, zmq.ROUTER, where, lambda s: Server(s, transport=reader, options=LIMITS, reply_timeout=1), kit
        )
        count, seen, fds = iter(range(1 << 30)), Counter[str](), len(os.listdir("/proc/self/fd"))

        @_seeded("server", where)
        @SETTINGS
        @given(plan=PLANS, who=st.integers(0, len(peers) - 1))
        def example(plan: Plan, who: int) -> None:
            n = next(count)
            peers[who].send_multipart(build(plan, kit, n))
            request = rpc.Request(method=f"sentinel-{n}", kwargs={"x": n}, rpc_id=str(n))
            clients[who].send(request, timeout=5)
            counts = (server.handled, server.unreadable, server.ignored, server.channel.dropped)
            for _ in range(2):  # the hostile message (handled, ignored, unreadable, dropped, a handshake), the request
                assert server.serve_one(handler, timeout=5)
                if handled[-1:] == [request.method]:
                    break
            assert handled[-1:] == [request.method], plan
            replies = [clients[who].recv(timeout=5) for _ in range(server.handled - counts[0])]
            assert replies[-1] == rpc.Result(method=request.method, ok=True, payload=rpc.Value(value=n), rpc_id=str(n))
            now = (server.handled, server.unreadable, server.ignored, server.channel.dropped)
            grew = [a - b for a, b in zip(now, counts, strict=True)]
            assert grew[0] in (1, 2) and sum(grew) <= 2, (plan, grew)
            assert not server.channel._unread and not server.channel._backlog and not server.stalled
            assert len(os.listdir("/proc/self/fd")) <= fds + FD_SLACK
            seen[_served(grew)] += 1
            kit.claim_back()

        try:
            example()
            assert SEEN <= set(seen), seen
        finally:
            for client in clients:
                client.close(0)
            server.close()
            kit.close()
            reader.close()
            ctx.term()


@pytest.mark.parametrize("where", ["inproc", "tcp"])
def test_a_call_gets_its_reply_after_any_message_from_a_hostile_server(where: str) -> None:
    """The server's side of the same: a raw ROUTER answers each call first with hostile messages,
    then with the call's result; the call returns that result, each hostile message counted as a
    reply no call waits for (``late``), one whose shared memory was not opened (``unreadable``),
    a handshake, or dropped."""
    with _clean() as directory, _logged():
        ctx, kit = zmq.Context(), Kit(directory)
        reader = tw.transports.ShmTransport(directory)
        router = ctx.socket(zmq.ROUTER)
        server = Channel(router, REGISTRY, transport=kit.shm)
        dealer = ctx.socket(zmq.DEALER)
        client = Client(dealer, transport=reader, options=LIMITS)
        if where == "tcp":
            dealer.connect(f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}")
        else:
            router.bind(address := f"inproc://hostile-{secrets.token_hex(8)}")
            dealer.connect(address)
        count, seen, fds = iter(range(1 << 30)), Counter[str](), len(os.listdir("/proc/self/fd"))

        @_seeded("client", where)
        @SETTINGS
        @given(plans=st.lists(PLANS, min_size=1, max_size=3), big=st.booleans())
        def example(plans: list[Plan], big: bool) -> None:
            n = next(count)
            results: list[Any] = []
            call = threading.Thread(
                target=lambda: results.append(client.call(rpc.Request(method=f"call-{n}"), timeout=10)), daemon=True
            )
            call.start()
            peer, request = server.recv_from(timeout=10)
            assert peer is not None and request.method == f"call-{n}"
            sent = [build(plan, kit, n) for plan in plans]
            counts = (client.late, client.unreadable, client.channel.dropped)  # (the call reads as they come)
            for parts in sent:
                router.send_multipart([peer, *parts])
            payload = rpc.Value(value=torch.full((1 << 17,), float(n)) if big else n)
            result = rpc.Result(method=request.method, ok=True, payload=payload, rpc_id=request.rpc_id)
            server.send(result, peer=peer, timeout=5)
            call.join(10)
            assert not call.is_alive() and same(results, [result])
            grew = [
                a - b for a, b in zip((client.late, client.unreadable, client.channel.dropped), counts, strict=True)
            ]
            controls = sum(map(_is_handshake, sent))
            assert sum(grew) + controls == len(sent), (plans, grew)
            seen.update(["received"] * grew[0] + ["refused"] * grew[1] + ["dropped"] * grew[2])
            seen.update(["a handshake"] * controls)
            assert not client.channel._unread and not client.channel._backlog
            kit.claim_back()
            assert len(os.listdir("/proc/self/fd")) <= fds + FD_SLACK

        try:
            example()
            assert SEEN <= set(seen), seen
        finally:
            client.close()
            server.close(0)
            kit.close()
            reader.close()
            ctx.term()
