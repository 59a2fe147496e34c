"""tensorwire.zmq between processes: real sockets, shared memory only on this host, nothing leaked.

Each peer runs in a spawned process (``child``), or, for the remote peer, in network, IPC and
mount namespaces of its own with a private /dev/shm. Every wait is bounded (``WAIT``), so a bug
fails a test instead of hanging the suite; every child is killed and joined in a ``finally``.
A child reports on a pipe; an exception in it comes back as its traceback (``expect``).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import multiprocessing as mp
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
import torch

zmq = pytest.importorskip("zmq")

import tensorwire as tw  # noqa: E402
from tensorwire.builtins import REGISTRY, rpc  # noqa: E402
from tensorwire.inspection import describe  # noqa: E402
from tensorwire.transports._page_layout import FREE  # noqa: E402
from tensorwire.transports._reaper import held_memfds, our_segments  # noqa: E402
from tensorwire.transports.shm import Backing  # noqa: E402
from tensorwire.zmq import HELLO, Channel, Sent, host_token  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
WAIT = 20.0  # seconds any one step may take: a bound for a hung peer, never a speed requirement
CTX = mp.get_context("spawn")
HERE = Path(__file__).resolve().parent


# -- helpers (parent and children) -------------------------------------------------------------
def digest(tensor: torch.Tensor) -> str:
    """dtype, shape and a SHA-256 of the bytes in logical order: equal exactly when bit-exact."""
    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    return f"{tensor.dtype}{tuple(tensor.shape)}:{hashlib.sha256(flat.numpy().tobytes()).hexdigest()}"


def tensors_for(seed: int, big: int = 4 * MiB) -> dict[str, torch.Tensor]:
    """The tensors of message ``seed``: one of ``big`` bytes, a mid-size bf16 one, int64 with
    extreme values, a tiny one (inside frame 0) and a transposed (non-contiguous) one."""
    generator = torch.Generator().manual_seed(seed)
    return {
        "big": torch.randn(big // 4, generator=generator),
        "bf16": torch.randn(300, 700, generator=generator).to(torch.bfloat16),
        "ints": torch.randint(-(2**62), 2**62, (5000,), generator=generator, dtype=torch.int64),
        "tiny": torch.arange(7, dtype=torch.int16) * seed,
        "strided": torch.randn(64, 128, generator=generator).t(),
    }


def digests(tensors: dict[str, Any]) -> dict[str, str]:
    return {name: digest(t) for name, t in tensors.items()}


def own_segments(pid: int, before: frozenset[str] = frozenset()) -> list[str]:
    """Segments created by ``pid`` that still exist: named ones in /dev/shm, and memfds that this
    process or ``pid`` still holds (open or mapped); ``before``: those of an earlier test, not counted."""
    prefix = f"tw-{pid}-"
    names = {n for n in our_segments() if n.startswith(prefix)}
    for holder in {"self", str(pid)}:
        names.update(n for n in held_memfds(holder) if n.startswith(prefix))
    return sorted(names - before)


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KiB
    raise AssertionError("no VmRSS in /proc/self/status")


def open_fds() -> dict[int, str]:
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory's own fd is gone by now
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return fds


def pool_states(transport: tw.transports.ShmTransport) -> list[int]:
    assert transport.pool is not None
    return [slot.state for slot in transport.pool.slots()]


def in_use(transport: tw.transports.ShmTransport) -> int:
    return sum(state != FREE for state in pool_states(transport))


# -- children ----------------------------------------------------------------------------------
def child_main(conn: Connection, name: str, args: tuple[Any, ...]) -> None:
    """A spawned child: run ``name(conn, *args)``; an exception goes back as ``("error", traceback)``."""
    try:
        globals()[name](conn, *args)
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
        raise
    finally:
        conn.close()


def expect(conn: Connection, timeout: float = WAIT) -> Any:
    """The child's next report (AssertionError with its traceback if it failed, or if it said nothing)."""
    if not conn.poll(timeout):
        raise AssertionError(f"the child reported nothing within {timeout} s")
    try:
        report = conn.recv()
    except EOFError:
        raise AssertionError("the child exited without reporting") from None
    if isinstance(report, tuple) and report and report[0] == "error":
        raise AssertionError(f"the child failed:\n{report[1]}")
    return report


@contextlib.contextmanager
def child(target: Callable[..., None], *args: Any) -> Iterator[tuple[Any, Connection]]:
    """``target(conn, *args)`` in a spawned process; killed (if still alive) and joined on the way out."""
    parent_end, child_end = CTX.Pipe()
    process = CTX.Process(target=child_main, args=(child_end, target.__name__, args), daemon=True)
    process.start()
    child_end.close()
    try:
        yield process, parent_end
    finally:
        if process.is_alive():
            process.join(0.5)
        if process.is_alive():
            process.kill()
        process.join(WAIT)
        parent_end.close()
        if not process.is_alive():
            process.close()  # its sentinel fd too


def finish(process: Any, conn: Connection) -> None:
    """Tell the child to exit and check that it did, cleanly."""
    conn.send("exit")
    process.join(WAIT)
    assert process.exitcode == 0, f"the child exited with {process.exitcode}"


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for ipc:// endpoints (a socket path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="twz-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _request(**kwargs: Any) -> Any:
    return rpc.Request(method="load", kwargs=kwargs)


def _raw(socket: Any, timeout: float = WAIT) -> list[Any]:
    assert socket.poll(int(timeout * 1000), zmq.POLLIN), f"nothing arrived within {timeout} s"
    return list(socket.recv_multipart(copy=False))


# -- 1. ipc between processes: 16 MiB through shared memory --------------------------------------
def shm_sender(conn: Connection, endpoint: str, seed: int, backing: Backing) -> None:
    """Send one 16 MiB tensor over ``endpoint`` with ShmTransport; report the pool as it goes."""
    context = zmq.Context()
    try:
        with tw.transports.ShmTransport(backing=backing) as shm:
            socket = context.socket(zmq.PUSH)
            socket.connect(endpoint)
            with Channel(socket, REGISTRY, transport=shm) as channel:
                channel.send(_request(x=tensors_for(seed, 16 * MiB)["big"]), timeout=WAIT)
                conn.send(pool_states(shm))
                assert conn.poll(WAIT) and conn.recv() == "read"  # memfd slots are opened through this process
                conn.send(pool_states(shm))
        conn.send(own_segments(os.getpid()))  # the transport closed: nothing of this process is left
    finally:
        context.destroy(linger=0)
    assert conn.poll(WAIT) and conn.recv() == "exit"


@pytest.mark.parametrize("backing", ["memfd", "named"])
@pytest.mark.parametrize("reader", ["channel", "raw"])
def test_16_mib_over_ipc_goes_through_shared_memory_bit_exact(sock_dir: Path, backing: Backing, reader: str) -> None:
    endpoint = f"ipc://{sock_dir}/s"
    expected = digest(tensors_for(11, 16 * MiB)["big"])
    earlier = frozenset(own_segments(os.getpid()))  # the test process's own, from other tests
    context = zmq.Context()
    try:
        pull = context.socket(zmq.PULL)
        pull.bind(endpoint)
        with child(shm_sender, endpoint, 11, backing) as (process, conn):
            with tw.transports.ShmTransport(backing=backing) as shm:
                if reader == "raw":
                    parts = _raw(pull)
                    assert parts[0].bytes == HELLO + host_token()  # same host, same token
                    assert len(parts) == 2  # hello and frame 0: no buffer frame
                    buffers = describe(parts[1].bytes)["buffers"]
                    assert [(b["transport"], b["nbytes"]) for b in buffers] == [("shm-slot", 16 * MiB)]
                    assert buffers[0]["handle"]["name"].startswith(f"tw-{process.pid}-")
                    got = tw.Decoder(REGISTRY, [shm]).decode([parts[1].bytes])
                    pull.close(0)
                else:
                    with Channel(pull, REGISTRY, transport=shm) as receiver:
                        got = receiver.recv(timeout=WAIT)
                        assert receiver.dropped == 0 and receiver.buffer_frames == 0  # hello and frame 0 only
                assert digest(got.kwargs["x"]) == expected
                sent_states = expect(conn)
                assert len(sent_states) == 1 and sent_states[0] != FREE  # handed over, the receiver holds it
                del got
                gc.collect()
                conn.send("read")
                assert expect(conn) == [FREE]  # the receiver's last view died: the slot is back
                assert expect(conn) == []  # the sender closed its transport: none of its segments is left
            finish(process, conn)
            pid = process.pid
        assert own_segments(pid) == [] and own_segments(os.getpid(), earlier) == []
    finally:
        context.destroy(linger=0)


# -- 2. tcp between processes: inline frames, bit-exact ----------------------------------------
def tcp_receiver(conn: Connection, count: int, raw: bool) -> None:
    """Bind a PULL on tcp://127.0.0.1, report its port, receive ``count`` messages and report
    each one's part count, buffer transports and tensor digests."""
    context = zmq.Context()
    try:
        socket = context.socket(zmq.PULL)
        port = socket.bind_to_random_port("tcp://127.0.0.1")
        conn.send(port)
        reports = []
        with tw.transports.ShmTransport() as shm:
            channel = Channel(socket, REGISTRY, transport=shm)
            for _ in range(count):
                if raw:
                    parts = _raw(socket)
                    head = describe(parts[1].bytes)
                    message = tw.Decoder(REGISTRY).decode([parts[1].bytes, *(p.buffer for p in parts[2:])])
                    reports.append(
                        {
                            "parts": len(parts),
                            "hello": parts[0].bytes == HELLO + host_token(),
                            "transports": sorted({b["transport"] for b in head["buffers"]}),
                            "seed": message.kwargs["seed"],
                            "digests": digests({k: v for k, v in message.kwargs.items() if k != "seed"}),
                        }
                    )
                else:
                    message = channel.recv(timeout=WAIT)
                    reports.append(
                        {
                            "seed": message.kwargs["seed"],
                            "digests": digests({k: v for k, v in message.kwargs.items() if k != "seed"}),
                        }
                    )
                del message
            reports.append({"dropped": channel.dropped, "buffer_frames": channel.buffer_frames})
            channel.close(0)
        conn.send(reports)
    finally:
        context.destroy(linger=0)
    assert conn.poll(WAIT) and conn.recv() == "exit"


@pytest.mark.parametrize("raw", [True, False], ids=["raw-receiver", "channel-receiver"])
def test_tcp_between_processes_is_bit_exact_and_inline(raw: bool) -> None:
    count = 3
    context = zmq.Context()
    try:
        with child(tcp_receiver, count, raw) as (process, conn):
            port = expect(conn)
            push = context.socket(zmq.PUSH)
            push.connect(f"tcp://127.0.0.1:{port}")
            expected = []
            with tw.transports.ShmTransport() as shm, Channel(push, REGISTRY, transport=shm) as sender:
                for seed in range(count):
                    tensors = tensors_for(seed)
                    sender.send(_request(seed=seed, **tensors), timeout=WAIT)
                    expected.append(digests(tensors))
                reports = expect(conn)
                assert in_use(shm) == 0 and pool_states(shm) == []  # the pool was never used
            frames = 0 if raw else 4 * count  # 4 buffer frames a message: the tiny tensor is in frame 0
            assert reports[-1] == {"dropped": 0, "buffer_frames": frames}
            assert [r["seed"] for r in reports[:-1]] == list(range(count))
            assert [r["digests"] for r in reports[:-1]] == expected
            if raw:  # no same_host, no hello heard, a tcp endpoint: every buffer is a frame of its own
                assert all(r["parts"] == 2 + 4 and r["hello"] for r in reports[:-1])
                assert all(r["parts"] > 2 and r["transports"] == ["inline"] for r in reports[:-1])
            finish(process, conn)
    finally:
        context.destroy(linger=0)


# -- 3. a remote peer: other network, IPC and mount namespaces, a private /dev/shm ---------------
def remote_peer(tcp_bind: str, ipc_bind: str) -> None:
    """Run in the namespaced process: on a PAIR per endpoint, say hello first (send a message),
    then receive one message raw and report its layout and digests as one JSON line."""
    context = zmq.Context()
    out: dict[str, Any] = {"token": host_token().hex(), "shm": sorted(os.listdir("/dev/shm")), "got": {}}
    try:
        with tw.transports.ShmTransport() as shm:
            channels = {}
            for name, endpoint in (("tcp", tcp_bind), ("ipc", ipc_bind)):
                socket = context.socket(zmq.PAIR)
                socket.bind(endpoint)
                channels[name] = Channel(socket, REGISTRY, transport=shm)
            for channel in channels.values():
                channel.send(rpc.Request(method="hello", kwargs={"x": torch.arange(4)}), timeout=WAIT)
            for name, channel in channels.items():
                parts = _raw(channel.socket)
                head = describe(parts[1].bytes)
                entry: dict[str, Any] = {
                    "parts": len(parts),
                    "transports": [b["transport"] for b in head["buffers"]],
                }
                try:
                    message = tw.Decoder(REGISTRY, [shm]).decode([parts[1].bytes, *(p.buffer for p in parts[2:])])
                    entry["digest"] = digest(message.kwargs["x"])
                    del message
                except tw.CodecError as exc:
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                out["got"][name] = entry
            for channel in channels.values():
                channel.close(0)
    finally:
        context.destroy(linger=0)
    print(json.dumps(out), flush=True)


def _sh(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)


@contextlib.contextmanager
def veth_namespace() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair: ``(name, our address, its address)``
    on 10.213.<n>.0/30; removed on the way out, whatever happened. Skips where not permitted."""
    if os.geteuid() != 0:
        pytest.skip("needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) for a network namespace, a veth pair and a mount")
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}(8) on PATH")
    tag = os.getpid() % 100_000
    name, ours, theirs = f"twz{tag}", f"twh{tag}", f"twp{tag}"
    net = f"10.213.{tag % 250 + 1}"
    added = _sh("ip", "netns", "add", name)
    if added.returncode != 0:
        pytest.skip(f"`ip netns add` is not permitted here: {added.stderr.strip()}")
    try:
        steps = [
            ("ip", "link", "add", ours, "type", "veth", "peer", "name", theirs),
            ("ip", "link", "set", theirs, "netns", name),
            ("ip", "addr", "add", f"{net}.1/30", "dev", ours),
            ("ip", "link", "set", ours, "up"),
            ("ip", "netns", "exec", name, "ip", "addr", "add", f"{net}.2/30", "dev", theirs),
            ("ip", "netns", "exec", name, "ip", "link", "set", theirs, "up"),
            ("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = _sh(*step)
            if done.returncode != 0:
                pytest.skip(f"`{' '.join(step)}` is not permitted here: {done.stderr.strip()}")
        probe = _sh(*_isolated(name, "true"))
        if probe.returncode != 0:
            pytest.skip(f"cannot unshare IPC and mount namespaces with a private /dev/shm: {probe.stderr.strip()}")
        yield name, f"{net}.1", f"{net}.2"
    finally:
        _sh("ip", "link", "del", ours)  # gone already when its peer went with the namespace
        _sh("ip", "netns", "del", name)


def _isolated(netns: str, command: str) -> list[str]:
    """``command`` (a shell line) in ``netns``, in IPC and mount namespaces of its own, with a fresh
    tmpfs on /dev/shm."""
    mount = "mount -t tmpfs -o size=64m tmpfs /dev/shm"
    inner = ["unshare", "--ipc", "--mount", "--propagation", "private", "sh", "-c", f"{mount} && {command}"]
    return ["ip", "netns", "exec", netns, *inner]


def _start_isolated(netns: str, call: str) -> subprocess.Popen[str]:
    """A Python process running ``call`` (a call of a function of this module) isolated in ``netns``."""
    code = f"from tests.test_zmq_processes import *; {call}"
    return subprocess.Popen(
        _isolated(netns, f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},  # the suite imports itself as tests.<module>
        cwd=HERE.parent,
    )


def _end(peer: subprocess.Popen[str], context: Any) -> None:
    """Kill the isolated peer if it is still running, and let go of this side's sockets."""
    if peer.poll() is None:
        peer.kill()
        peer.communicate(timeout=WAIT)
    context.destroy(linger=0)


def test_a_peer_in_other_namespaces_gets_inline_frames_after_its_hello(sock_dir: Path) -> None:
    with veth_namespace() as (netns, _, theirs):
        port = 5701
        ipc = f"ipc://{sock_dir}/remote"  # a socket file: reachable from other network namespaces
        peer = _start_isolated(netns, f"remote_peer({f'tcp://{theirs}:{port}'!r}, {ipc!r})")
        context = zmq.Context()
        try:
            tensor = torch.randn(MiB, generator=torch.Generator().manual_seed(3))  # 4 MiB: past the inline threshold
            with tw.transports.ShmTransport() as shm:
                channels = {}
                for name, endpoint in (("tcp", f"tcp://{theirs}:{port}"), ("ipc", ipc)):
                    socket = context.socket(zmq.PAIR)
                    socket.connect(endpoint)  # ZeroMQ retries until the peer has bound
                    channels[name] = Channel(socket, REGISTRY, transport=shm)
                for name, channel in channels.items():
                    deadline = time.monotonic() + WAIT
                    while True:
                        try:
                            hello = channel.recv(timeout=0.2)
                            break
                        except TimeoutError:
                            if peer.poll() is not None or time.monotonic() > deadline:
                                _, err = peer.communicate(timeout=WAIT)
                                raise AssertionError(f"no hello from the peer on {name}; it said:\n{err}") from None
                    assert hello.method == "hello" and torch.equal(hello.kwargs["x"], torch.arange(4))
                for channel in channels.values():
                    channel.send(_request(x=tensor), timeout=WAIT)
                out, err = peer.communicate(timeout=WAIT)
                assert peer.returncode == 0, err
                assert pool_states(shm) == []  # nothing ever went to shared memory
                for channel in channels.values():
                    channel.close(0)
        finally:
            _end(peer, context)
    report = json.loads(out.strip().splitlines()[-1])
    assert report["token"] != host_token().hex()  # the peer really is elsewhere, as far as shared memory goes
    assert report["shm"] == []  # its /dev/shm is a fresh one
    for name in ("tcp", "ipc"):  # an ipc:// endpoint counts as local, but the peer's hello says otherwise
        assert report["got"][name] == {"parts": 3, "transports": ["inline"], "digest": digest(tensor)}, name


def silent_remote_peer(endpoint: str) -> None:
    """Run in the namespaced process: connect a DEALER, say nothing, receive one message raw and
    report its layout (and whether it opens here) as one JSON line."""
    context = zmq.Context()
    try:
        socket = context.socket(zmq.DEALER)
        socket.connect(endpoint)
        parts = _raw(socket)
        entry: dict[str, Any] = {
            "parts": len(parts),
            "transports": [b["transport"] for b in describe(parts[1].bytes)["buffers"]],
        }
        with tw.transports.ShmTransport(backing="named") as shm:
            try:
                tw.Decoder(REGISTRY, [shm]).decode([parts[1].bytes, *(p.buffer for p in parts[2:])])
                entry["opens"] = "yes"
            except tw.CodecError as exc:
                entry["opens"] = f"{type(exc).__name__}: {exc}"
        socket.close(0)
    finally:
        context.destroy(linger=0)
    print(json.dumps(entry), flush=True)


def _handshakes(monitor: Any, count: int, peer: subprocess.Popen[str]) -> None:
    """Wait until ``count`` peers have completed the ZeroMQ handshake on a monitored socket."""
    from zmq.utils.monitor import recv_monitor_message

    done, deadline = 0, time.monotonic() + WAIT
    while done < count:
        if peer.poll() is not None or time.monotonic() > deadline:
            _, err = peer.communicate(timeout=WAIT)
            raise AssertionError(f"{done} of {count} peers connected; the remote peer said:\n{err}")
        if monitor.poll(200):
            done += recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED


def test_a_silent_remote_peer_gets_inline_frames_though_another_peer_said_it_is_local() -> None:
    """A DEALER with two peers over tcp: one on this host says hello, the other (in other
    namespaces) says nothing. A DEALER cannot tell which peer gets a message, so a hello can only
    take shared memory away there: the silent peer's share of the messages must be inline."""
    with veth_namespace() as (netns, ours, _):
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        port = dealer.bind_to_random_port("tcp://0.0.0.0")
        monitor = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        peer = _start_isolated(netns, f"silent_remote_peer({f'tcp://{ours}:{port}'!r})")
        try:
            local_socket = context.socket(zmq.DEALER)
            local_socket.connect(f"tcp://127.0.0.1:{port}")
            _handshakes(monitor, 2, peer)
            tensor = torch.randn(MiB, generator=torch.Generator().manual_seed(5))  # 4 MiB
            with (
                tw.transports.ShmTransport(backing="named") as shm,
                tw.transports.ShmTransport(backing="named") as reader,
                Channel(dealer, REGISTRY, transport=shm) as channel,
                Channel(local_socket, REGISTRY, transport=reader) as local,
            ):
                local.send(rpc.Request(method="hello"), timeout=WAIT)
                assert channel.recv(timeout=WAIT).method == "hello"
                for _ in range(2):  # round robin: one message to each peer
                    channel.send(_request(x=tensor), timeout=WAIT)
                assert torch.equal(local.recv(timeout=WAIT).kwargs["x"], tensor)
                out, err = peer.communicate(timeout=WAIT)
                assert peer.returncode == 0, err
        finally:
            _end(peer, context)
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"parts": 3, "transports": ["inline"], "opens": "yes"}


# -- 4. a peer killed mid-stream ---------------------------------------------------------------
def endless_sender(conn: Connection, endpoint: str, shared: bool) -> None:
    """Send numbered messages to ``endpoint`` until killed: through shared memory (ipc) or as
    16 MiB inline frames (tcp, so that the kill lands in the middle of one)."""
    context = zmq.Context()
    shm = tw.transports.ShmTransport() if shared else None
    socket = context.socket(zmq.PUSH)
    socket.connect(endpoint)
    channel = Channel(socket, REGISTRY, transport=shm)
    big = torch.empty(MiB if shared else 4 * MiB)
    i = 0
    while True:
        big.fill_(float(i))
        channel.send(_request(i=i, big=big, small=torch.full((8,), i)), timeout=60)
        i += 1
        if i == 5:
            conn.send("streaming")


@pytest.mark.parametrize("shared", [True, False], ids=["ipc-shm", "tcp-inline"])
def test_a_peer_killed_mid_stream_times_out_and_leaks_nothing(sock_dir: Path, shared: bool) -> None:
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # spawning starts it once, with a pipe it keeps: not ours to count
    gc.collect()
    fds_before = open_fds()
    earlier = frozenset(own_segments(os.getpid()))  # the test process's own, from other tests
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    if shared:
        endpoint = f"ipc://{sock_dir}/s"
        pull.bind(endpoint)
    else:
        endpoint = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    reader = tw.transports.ShmTransport()
    receiver = Channel(pull, REGISTRY, transport=reader)
    unreadable = 0
    try:
        with child(endless_sender, endpoint, shared) as (process, conn):
            pid = process.pid
            for expected in range(5):
                message = receiver.recv(timeout=WAIT)
                assert message.kwargs["i"] == expected
                assert bool((message.kwargs["big"] == float(expected)).all())
                assert message.kwargs["small"].tolist() == [expected] * 8
            del message
            assert expect(conn) == "streaming"
            os.kill(pid, signal.SIGKILL)
            process.join(WAIT)
            assert process.exitcode == -signal.SIGKILL
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"no message arrived within 1.0 s"):
            for _ in range(100_000):  # what was queued before the kill, then nothing
                try:
                    message = receiver.recv(timeout=1.0)
                except tw.TransportError as exc:  # its slot went with the dead sender
                    assert shared and f"tw-{pid}-" in str(exc), exc
                    unreadable += 1
                    continue
                assert bool((message.kwargs["big"] == float(message.kwargs["i"])).all())  # never torn
                del message
        assert time.monotonic() - start < WAIT
        assert receiver.dropped == 0
    finally:
        receiver.close(0)
        reader.close()
        context.destroy(linger=0)
    gc.collect()
    fds_after = open_fds()
    assert fds_after == fds_before, f"fds leaked: {sorted(set(fds_after.items()) - set(fds_before.items()))}"
    assert own_segments(pid) == [] and own_segments(os.getpid(), earlier) == []
    assert not any(name.startswith(f"tw-{pid}-") for name in our_segments())


# -- 5. 10,000 small messages: the receiver's memory stays flat ---------------------------------
def counting_receiver(conn: Connection, endpoint: str, count: int, first: int) -> None:
    """Receive ``count`` messages on a bound PULL; report RSS after ``first`` and after all."""
    context = zmq.Context()
    try:
        socket = context.socket(zmq.PULL)
        socket.bind(endpoint)
        with tw.transports.ShmTransport() as shm, Channel(socket, REGISTRY, transport=shm) as channel:
            conn.send("ready")
            wrong, rss = 0, []
            for i in range(count):
                x = channel.recv(timeout=WAIT).kwargs["x"]
                wrong += not (x.shape == (KiB,) and bool((x == i % 256).all()))
                del x
                if i + 1 in (first, count):
                    gc.collect()
                    rss.append(rss_bytes())
            conn.send({"wrong": wrong, "dropped": channel.dropped, "rss": rss})
    finally:
        context.destroy(linger=0)
    assert conn.poll(WAIT) and conn.recv() == "exit"


def test_ten_thousand_small_messages_keep_the_receivers_memory_flat(sock_dir: Path) -> None:
    count, first = 10_000, 1_000
    endpoint = f"ipc://{sock_dir}/s"
    context = zmq.Context()
    try:
        with child(counting_receiver, endpoint, count, first) as (process, conn):
            assert expect(conn) == "ready"
            push = context.socket(zmq.PUSH)
            push.connect(endpoint)
            x = torch.empty(KiB, dtype=torch.uint8)
            start = time.monotonic()
            with tw.transports.ShmTransport() as shm, Channel(push, REGISTRY, transport=shm) as sender:
                for i in range(count):
                    x.fill_(i % 256)
                    sender.send(_request(x=x), timeout=WAIT)
                report = expect(conn)
            elapsed = time.monotonic() - start
            assert report["wrong"] == 0 and report["dropped"] == 0
            at_first, at_end = report["rss"]
            assert at_end - at_first < 20 * MiB, f"RSS {at_first / MiB:.1f} -> {at_end / MiB:.1f} MiB"
            assert elapsed < 60, f"{count} messages took {elapsed:.1f} s"
            finish(process, conn)
    finally:
        context.destroy(linger=0)


# -- 6. a receiver that does not read: backpressure, and nothing of an unsent message kept -------
def idle_receiver(conn: Connection, endpoint: str, backing: Backing) -> None:
    """Connect a PULL with a small high-water mark and read nothing until told; then receive that
    many messages and report what they held."""
    context = zmq.Context()
    try:
        socket = context.socket(zmq.PULL)
        socket.setsockopt(zmq.RCVHWM, 1)
        socket.setsockopt(zmq.RCVBUF, 4 * KiB)
        socket.connect(endpoint)
        conn.send("connected")
        assert conn.poll(60)
        count = conn.recv()
        with tw.transports.ShmTransport(backing=backing) as shm:
            channel = Channel(socket, REGISTRY, transport=shm)
            seen = []
            for _ in range(count):
                message = channel.recv(timeout=WAIT)
                seen.append(int(message.kwargs["x"][0]) == message.kwargs["i"])
                del message
            try:
                channel.recv(timeout=0.5)
                extra = True
            except TimeoutError:
                extra = False
            conn.send({"ok": sum(seen), "extra": extra, "dropped": channel.dropped})
            channel.close(0)
    finally:
        context.destroy(linger=0)
    assert conn.poll(WAIT) and conn.recv() == "exit"


@pytest.mark.parametrize(
    "kind",
    ["memfd-pool", "named-pool", "one-shot"],
)
def test_a_full_queue_times_out_and_the_unsent_message_keeps_no_segment(sock_dir: Path, kind: str) -> None:
    backing: Backing = "named" if kind == "named-pool" else "memfd"
    endpoint = f"ipc://{sock_dir}/s"
    options = tw.EncodeOptions(inline_threshold=1024, embed_threshold=0)  # an 8 KiB tensor goes to shared memory
    me = os.getpid()
    earlier = frozenset(own_segments(me))  # the test process's own, from other tests
    context = zmq.Context()
    try:
        push = context.socket(zmq.PUSH)
        push.setsockopt(zmq.SNDHWM, 1)
        push.setsockopt(zmq.SNDBUF, 4 * KiB)
        push.bind(endpoint)
        with child(idle_receiver, endpoint, backing) as (process, conn):
            assert expect(conn) == "connected"
            shm = tw.transports.ShmTransport(backing=backing, pool=kind != "one-shot")
            try:
                sender = Channel(push, REGISTRY, transport=shm, encode_options=options)
                queued, limit = 0, 20_000
                with pytest.raises(TimeoutError, match=r"could not be queued within 0.5 s"):
                    while queued < limit:
                        x = torch.full((2 * KiB,), float(queued))
                        first = queued == 0  # the first waits for the connection
                        sender.send(_request(i=queued, x=x), timeout=WAIT if first else 0.5)
                        queued += 1
                assert 0 < queued < limit  # backpressure, not a queue that grows without bound
                if shm.pool is not None:  # each queued message holds its slot; the unsent one's is back
                    assert in_use(shm) == queued, (in_use(shm), queued)
                else:  # each queued message has its one-shot segment; the unsent one's is gone
                    assert len({n for n in our_segments() if n.startswith(f"tw-{me}-")} - earlier) == queued
                conn.send(queued)
                report = expect(conn)
                assert report == {"ok": queued, "extra": False, "dropped": 0}
                if shm.pool is not None:
                    assert in_use(shm) == 0
                sender.close(0)
            finally:
                shm.close()
            finish(process, conn)
            pid = process.pid
        assert own_segments(me, earlier) == [] and own_segments(pid) == []
    finally:
        context.destroy(linger=0)


# -- 7. the first tensor zero-copy, the last copied: wait=True waits for every frame -------------
BIG_NUMEL = 2 * MiB  # float32: an 8 MiB frame, handed to ZeroMQ without a copy
SMALL_NUMEL = 12 * KiB  # float32: a 48 KiB frame of its own (past the embed threshold), copied at once


def filled_receiver(conn: Connection, count: int) -> None:
    """Bind a PULL on tcp, report its port, receive ``count`` messages and report, for each, how
    many elements of ``big`` and ``small`` are not its number."""
    context = zmq.Context()
    try:
        socket = context.socket(zmq.PULL)
        conn.send(socket.bind_to_random_port("tcp://127.0.0.1"))
        with Channel(socket, REGISTRY) as channel:
            wrong = []
            for i in range(count):
                message = channel.recv(timeout=WAIT)
                big, small = message.kwargs["big"], message.kwargs["small"]
                wrong.append((int((big != i).sum()), int((small != i).sum())))
                del message, big, small
        conn.send(wrong)
    finally:
        context.destroy(linger=0)
    assert conn.poll(WAIT) and conn.recv() == "exit"


class LastTrackerChannel(Channel):
    """The pattern of vLLM #50053: ``send_multipart(copy=False, track=True)`` returns the tracker of
    the last frame only, which is a finished one when that frame is small enough to be copied."""

    def _put(self, peer: bytes | None, frames: list[Any], deadline: float | None, timeout: float | None) -> Sent:
        tracker = self.socket.send_multipart([self._hello, *frames], copy=False, track=True)
        assert tracker is not None
        return Sent([tracker])


def _overwrite_after_send(channel_type: type[Channel], count: int) -> list[tuple[int, int]]:
    """Send ``count`` messages with ``channel_type`` (wait=True), overwriting their tensors with -1
    as soon as ``send`` returns; what the receiving process found wrong in each."""
    context = zmq.Context()
    try:
        with child(filled_receiver, count) as (process, conn):
            push = context.socket(zmq.PUSH)
            push.connect(f"tcp://127.0.0.1:{expect(conn)}")
            big, small = torch.empty(BIG_NUMEL), torch.empty(SMALL_NUMEL)
            frames = tw.Encoder().encode(_request(big=big, small=small))
            sizes = [memoryview(f).nbytes for f in frames[1:]]
            assert sizes == [4 * BIG_NUMEL, 4 * SMALL_NUMEL]  # first frame zero-copy, last copied
            assert sizes[0] >= push.copy_threshold > sizes[-1]
            with channel_type(push, REGISTRY) as sender:
                for i in range(count):
                    big.fill_(i)
                    small.fill_(i)
                    sent = sender.send(_request(big=big, small=small), timeout=WAIT)
                    assert sent.done
                    big.fill_(-1)
                    small.fill_(-1)
                wrong: list[tuple[int, int]] = expect(conn)
            finish(process, conn)
        return wrong
    finally:
        context.destroy(linger=0)


def test_send_waits_for_the_zero_copy_first_frame_not_only_the_last() -> None:
    wrong = _overwrite_after_send(Channel, 50)
    assert wrong == [(0, 0)] * 50, [(i, w) for i, w in enumerate(wrong) if w != (0, 0)]


def test_tracking_only_the_last_frame_would_let_the_first_be_corrupted() -> None:
    """The same run with the vLLM #50053 tracking: the receiver sees later writes (which is what
    the test above guards against)."""
    wrong = _overwrite_after_send(LastTrackerChannel, 50)
    corrupted = [i for i, (in_big, _) in enumerate(wrong) if in_big]
    assert len(corrupted) > 0
    assert all(in_small == 0 for _, in_small in wrong)  # the copied frame is never affected


# -- broadcast: one buffer, three worker processes -------------------------------------------------
def broadcast_worker(conn: Connection, endpoint: str, name: str) -> None:
    """A DEALER worker: say hello, receive the broadcast, report its digest and how it came, hold
    the tensor until told, then let go and report that nothing of its own is left."""
    context = zmq.Context()
    try:
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.ROUTING_ID, name.encode())
        socket.connect(endpoint)
        with tw.transports.ShmTransport() as shm, Channel(socket, REGISTRY, transport=shm) as channel:
            channel.send(_request(hello=torch.arange(2)), timeout=WAIT)
            message = channel.recv(timeout=WAIT)
            conn.send((digest(message.kwargs["x"]), channel.buffer_frames))
            assert conn.recv() == "let go"
            del message
            gc.collect()
            conn.send("done")
    finally:
        context.destroy(linger=0)


def test_a_broadcast_reaches_three_worker_processes_through_one_buffer_freed_after_the_last(
    sock_dir: Path,
) -> None:
    endpoint = f"ipc://{sock_dir}/router"
    tensor = torch.randn(4 * MiB, generator=torch.Generator().manual_seed(5))
    context = zmq.Context()
    try:
        router = context.socket(zmq.ROUTER)
        router.bind(endpoint)
        with contextlib.ExitStack() as stack:
            workers = [stack.enter_context(child(broadcast_worker, endpoint, f"w{i}")) for i in range(3)]
            with tw.transports.ShmTransport() as shm, Channel(router, REGISTRY, transport=shm) as channel:
                peers = sorted(channel.recv_from(timeout=WAIT)[0] or b"" for _ in workers)
                assert peers == [b"w0", b"w1", b"w2"]
                channel.broadcast(_request(x=tensor), peers, timeout=WAIT)
                reports = [expect(conn) for _, conn in workers]
                assert reports == [(digest(tensor), 0)] * 3  # bit-exact, no buffer frame: shared memory
                assert len(pool_states(shm)) == 1 and in_use(shm) == 1  # one slot for the three
                for i, (_, conn) in enumerate(workers):
                    conn.send("let go")
                    assert expect(conn) == "done"
                    assert in_use(shm) == (0 if i == 2 else 1)  # free once the last has let go
                for process, _ in workers:
                    process.join(WAIT)
                    assert process.exitcode == 0
                    assert own_segments(process.pid) == []
    finally:
        context.destroy(linger=0)
