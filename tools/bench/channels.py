"""``tensorwire.zmq`` against pickle, the hooks style and raw pyzmq, over ZeroMQ sockets across processes.

    python -m tools.bench.channels [--sizes 4K,64K,1M,16M,64M,256M] [--rounds N] [--transports tcp,ipc]
                                   [--rpc-calls N] [--seed 0] [--quick] [--no-threshold] [--json]

Three parts. In each, every implementation runs once per round, in an order shuffled afresh each
round by a seeded ``random.Random`` (so runs repeat), after warm-up rounds that are not counted;
a row gives the median with the min and max, and ratios against the other rows of the same run.
Each part has one spawned child process (``multiprocessing`` spawn context), stopped (terminated if
it does not stop) when the part ends, however it ends.

1. Transfers, one-way with an ack. Per transport (``tcp://127.0.0.1``, on a port from
   ``bind_to_random_port``, and ``ipc://`` in a fresh temporary folder) this process binds one
   ZeroMQ PAIR socket per implementation and the child connects to all of them. A message carries
   one float32 tensor of the given size (values ``i % 2**24``, made before the clock starts). The
   time of one message (``time.perf_counter``): from the moment the sender holds the tensor,
   through encoding and sending it, to the moment the sender has the child's ack; in between the
   child receives the message, decodes it into a tensor it can use, reads three elements (first,
   middle, last), drops the tensor and sends the element count back (8 bytes) on the same socket.
   So every implementation pays for one transfer and one tiny message back. A sample is the mean
   of 32 messages at 4 KiB, 16 at 64 KiB and 1 from 1 MiB up (``messages_per_sample``); rounds per
   size: ``rounds_for``, both transports in the same rounds; from 64 MiB a pause of 0.1 s follows
   each message (outside the clock), so that its memory is freed before the next one starts. The
   implementations:

   - ``tensorwire``: ``tensorwire.zmq.Channel`` sending ``bench.One`` (a request id and the
     tensor; ``tools/bench/schemas``), ``send(message)`` with its defaults (it returns once ZeroMQ
     has let go of every frame it took without a copy). On tcp inline (no transport): the tensor's
     bytes are one frame of their own (from 32 KiB; a 4 KiB tensor is copied into frame 0),
     copied into ZeroMQ below the channel's ``copy_below`` (512 KiB) and handed over without a copy
     from there. On ipc with ``transport=ShmTransport()`` (the pool, memfd slots): from 256 KiB
     (the default ``inline_threshold``) the sender copies the tensor into a pool slot and sends its
     handle; the child's channel decodes a borrowed view of the slot. The receiver's tensor is the
     received frame's memory (inline) or the slot's (pool): no copy on receive;
   - ``tensorwire, pool-allocated`` (ipc only): the same channel, the tensor made in a pool slot by
     ``ShmTransport.empty_like`` (filled before the clock starts), so only its handle travels;
   - ``pickle-5 out-of-band``: ``pickle.dumps(tensor.numpy(), protocol=5, buffer_callback=...)``,
     the head and the out-of-band buffer sent with ``send_multipart(copy=False)``; the child's
     ``pickle.loads(head, buffers=frames)`` and ``torch.from_numpy``, both without a copy.
     (``pickle.dumps(tensor)`` itself gives no out-of-band buffer: torch pickles a storage's bytes
     in band.) The strong form of pickle;
   - ``pickle in-band``: ``pickle.dumps(tensor, protocol=5)`` as one frame (copy=False) and
     ``pickle.loads`` on the received frame: plain pickling of a tensor, for reference;
   - ``hooks style``: ``tools.bench.hooks_style.HooksCodec`` (msgspec with hooks) sending the same
     fields as ``bench.One``, ``send_multipart(frames, copy=False)``: the tensor's bytes are a side
     frame handed over without a copy; the child's decode builds the tensor on the received frame;
   - ``raw pyzmq``: the tensor's bytes, ``send(copy=False)``, and ``torch.frombuffer`` on the frame
     received with ``recv(copy=False)``: no encoding, no checks; the floor.

   pyzmq copies frames under its ``copy_threshold`` (64 KiB) even when asked not to; the peers
   that send ``copy=False`` do not wait for ZeroMQ to let go of their frames (they never change
   the tensor). A row: median, min and max per message, GB/s (bytes / median), ``x raw`` (median /
   raw pyzmq's median, the time ratio) and ``tw speed-up`` (this row's median / tensorwire's: how
   many times faster tensorwire is). The targets: tcp 64 MiB and 256 MiB, tensorwire at >= 0.8x
   raw pyzmq's speed and >= 3x pickle's over the same sockets (pickle in-band: what pyzmq's
   ``send_pyobj`` sends; the speed-up over pickle-5 out-of-band, which is raw pyzmq's bytes and a
   small head, is shown beside it); ipc 64 MiB, >= 5x raw pyzmq's.

2. pyzmq's copy threshold, tcp, one-way. A burst of messages (16 MiB in all, at least 16 and at
   most 2000 messages) of one size from 4 KiB to 1 MiB, on a PAIR socket of its own per variant
   whose ``copy_threshold`` is 0 (so ``copy=False`` is zero-copy at every size): a count message, the
   burst, and the child's ack once it has received (``recv(copy=False)``) all of them. The time per
   message is the burst's time over its count; 7 rounds. Variants: ``copy=True``; ``copy=False, track=True``
   (the trackers dropped); ``copy=False, track=True, wait each`` (each message's tracker waited for
   before the next send: what ``Channel.send`` does with ``wait=True``). The crossover is the
   smallest size from which a zero-copy variant is faster than ``copy=True`` at every larger size
   swept.

3. RPC, tcp loopback. ``tensorwire.zmq.Client.call`` of ``rpc.Request(method="echo",
   kwargs={"x": 16x16 float32})`` (one call at a time) against ``Server.serve`` in the child's main
   thread, whose handler returns ``rpc.Result(payload=rpc.Value(value=x))``; against it, a raw
   pyzmq DEALER here and a ROUTER echoing on a thread of the same child, carrying the same encoded
   bytes (the request's channel frames out, the result's back, both encoded once beforehand). Each
   call's wall time (``perf_counter_ns``), in 10 interleaved blocks per implementation after a
   warm-up; rows: p50 and p99 over all calls, min-max of the block medians, calls per second (calls
   / the time of the blocks). Interleaved with the blocks, in process: the codec cost of one call
   (encode and decode of the request, encode and decode of the result: the work both ends do; thread
   CPU time per call over 200 calls with the garbage collector off). The target: tensorwire's p50
   <= 1.2x (raw echo p50 + codec cost).

``--quick``: sizes 4K,1M,64M, 3 rounds (1 warm-up), 3 sweep rounds of 4 MiB bursts, 1000 RPC calls
in 5 blocks. ``--rounds`` sets the rounds of parts 1 and 2 at every size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import pickle
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, ClassVar

import numpy as np
import torch
import zmq

from tools.bench.harness import KiB, MiB, fits, parse_size, size_label, template
from tools.bench.hooks_style import HooksCodec
from tools.bench.small import HooksOne, _block_us, bench_registry

__all__ = [
    "HOOKS",
    "IPC",
    "PICKLE",
    "PICKLE_INBAND",
    "RAW",
    "SIZES",
    "SWEEP",
    "TCP",
    "TENSORWIRE",
    "TENSORWIRE_ALLOCATED",
    "VARIANTS",
    "main",
    "measure_copy_threshold",
    "measure_rpc",
    "measure_transfers",
    "messages_per_sample",
    "render",
    "rounds_for",
    "run",
    "targets",
]

_DESCRIPTION = "tensorwire.zmq against pickle, the hooks style and raw pyzmq, over ZeroMQ sockets across processes."

TCP, IPC = "tcp", "ipc"
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]
QUICK_SIZES = [4 * KiB, 1 * MiB, 64 * MiB]
SWEEP = [4 * KiB * 2**i for i in range(9)]  # 4 KiB .. 1 MiB

TENSORWIRE = "tensorwire"
TENSORWIRE_ALLOCATED = "tensorwire, pool-allocated"
PICKLE = "pickle-5 out-of-band"
PICKLE_INBAND = "pickle in-band"
HOOKS = "hooks style"
RAW = "raw pyzmq"

COPY, ZERO_COPY, ZERO_COPY_WAIT = "copy=True", "copy=False, track=True", "copy=False, track=True, wait each"
VARIANTS = (COPY, ZERO_COPY, ZERO_COPY_WAIT)

_TIMEOUT_MS = 60_000  # the most a send or an ack may take before the run is abandoned
_START_S = 120.0  # the most a child may take to start (spawn, imports, sockets)
_ACK_BAD = b"bad"
_PAUSE_FROM, _PAUSE_S = 64 * MiB, 0.1  # from this size, a pause after each message (outside the clock)


def rounds_for(nbytes: int) -> int:
    """Measured rounds per size in part 1 (default): 25 up to 1 MiB, 15 to 16 MiB, 11 to 64 MiB, then 7."""
    return 25 if nbytes <= MiB else 15 if nbytes <= 16 * MiB else 11 if nbytes <= 64 * MiB else 7


def messages_per_sample(nbytes: int) -> int:
    """Messages per sample in part 1: 32 at 4 KiB, 16 at 64 KiB, 1 from 1 MiB (a sample of small
    messages spans more than one wake-up)."""
    return max(1, min(32, MiB // nbytes))


# -- part 1: the implementations, a sending half here and a receiving half in the child ----------


class _Peer:
    """One way of moving a tensor over a PAIR ``socket``; ``kind`` is the transport (tcp or ipc)."""

    name: ClassVar[str] = ""
    kinds: ClassVar[tuple[str, ...]] = (TCP, IPC)

    def __init__(self, socket: zmq.Socket[Any], kind: str) -> None:
        self.socket = socket
        self.kind = kind

    @classmethod
    def label(cls, kind: str) -> str:
        """The row's name on ``kind``."""
        return cls.name

    def prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor to send (before the clock starts)."""
        return tensor

    def send(self, tensor: torch.Tensor) -> None:
        raise NotImplementedError

    def receive(self) -> torch.Tensor:
        raise NotImplementedError

    def take(self) -> bytes | None:
        """The child's step: receive one message, check it, drop it; the ack to send back."""
        tensor = self.receive()
        numel = tensor.numel()
        ok = all(float(tensor[i]) == float(i % (1 << 24)) for i in (0, numel // 2, numel - 1))
        del tensor
        return numel.to_bytes(8, "little") if ok else _ACK_BAD

    def close(self) -> None:
        self.socket.close(linger=0)


class _Tensorwire(_Peer):
    name = TENSORWIRE

    def __init__(self, socket: zmq.Socket[Any], kind: str) -> None:
        super().__init__(socket, kind)
        from tensorwire.transports import ShmTransport
        from tensorwire.zmq import Channel

        self.shm = ShmTransport() if kind == IPC else None
        self.channel = Channel(socket, bench_registry(), transport=self.shm)
        self._one = bench_registry().type("bench.One")

    @classmethod
    def label(cls, kind: str) -> str:
        return f"{cls.name} (ShmTransport pool)" if kind == IPC else f"{cls.name} (inline)"

    def send(self, tensor: torch.Tensor) -> None:
        self.channel.send(self._one(request_id="req-1", tensor=tensor))

    def receive(self) -> torch.Tensor:
        tensor: torch.Tensor = self.channel.recv().tensor
        return tensor

    def close(self) -> None:
        self.channel.close(linger=0)
        if self.shm is not None:
            self.shm.close()


class _TensorwireAllocated(_Tensorwire):
    name = TENSORWIRE_ALLOCATED
    kinds = (IPC,)

    @classmethod
    def label(cls, kind: str) -> str:
        return cls.name

    def prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        assert self.shm is not None
        allocated = self.shm.empty_like(tensor)
        allocated.copy_(tensor)
        return allocated


class _PickleOob(_Peer):
    name = PICKLE

    def send(self, tensor: torch.Tensor) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(tensor.numpy(), protocol=5, buffer_callback=buffers.append)
        self.socket.send_multipart([head, *(buffer.raw() for buffer in buffers)], copy=False)

    def receive(self) -> torch.Tensor:
        head, *rest = self.socket.recv_multipart(copy=False)
        array = pickle.loads(head.buffer, buffers=[frame.buffer for frame in rest])
        return torch.from_numpy(array)


class _PickleInband(_Peer):
    name = PICKLE_INBAND

    def send(self, tensor: torch.Tensor) -> None:
        self.socket.send(pickle.dumps(tensor, protocol=5), copy=False)

    def receive(self) -> torch.Tensor:
        tensor: torch.Tensor = pickle.loads(self.socket.recv(copy=False).buffer)
        return tensor


class _Hooks(_Peer):
    name = HOOKS

    def __init__(self, socket: zmq.Socket[Any], kind: str) -> None:
        super().__init__(socket, kind)
        self.codec = HooksCodec()

    def send(self, tensor: torch.Tensor) -> None:
        self.socket.send_multipart(self.codec.encode(HooksOne(request_id="req-1", tensor=tensor)), copy=False)

    def receive(self) -> torch.Tensor:
        head, *rest = self.socket.recv_multipart(copy=False)
        return self.codec.decode([head.bytes, *(frame.buffer for frame in rest)], HooksOne).tensor


class _Raw(_Peer):
    name = RAW

    def send(self, tensor: torch.Tensor) -> None:
        self.socket.send(tensor.numpy().data.cast("B"), copy=False)

    def receive(self) -> torch.Tensor:
        return torch.frombuffer(self.socket.recv(copy=False).buffer, dtype=torch.float32)


class _Sink(_Peer):
    """Part 2's receiving half: a count message, then that many messages, then one ack."""

    name = "sink"

    def __init__(self, socket: zmq.Socket[Any], kind: str) -> None:
        super().__init__(socket, kind)
        self.left = 0

    def take(self) -> bytes | None:
        frame = self.socket.recv(copy=False)
        if self.left == 0:
            self.left = int.from_bytes(frame.bytes, "little")
            return None
        self.left -= 1
        return b"done" if self.left == 0 else None


_PEERS: list[type[_Peer]] = [_Tensorwire, _TensorwireAllocated, _PickleOob, _PickleInband, _Hooks, _Raw]
_STATIONS: dict[str, type[_Peer]] = {peer.name: peer for peer in _PEERS}
_STATIONS[_Sink.name] = _Sink


def _child(endpoints: list[tuple[str, str, str]], control: Connection) -> None:
    """The receiving process: one PAIR socket per ``(implementation, kind, address)``, connected
    and greeted with ``b"ready"``; then each message is taken and acked until ``control`` speaks
    (or its other end is gone)."""
    context = zmq.Context()
    stations: dict[Any, _Peer] = {}
    try:
        poller = zmq.Poller()
        for name, kind, address in endpoints:
            socket = context.socket(zmq.PAIR)
            stations[socket] = _STATIONS[name](socket, kind)  # before connect: a channel sets MAXMSGSIZE
            socket.connect(address)
            poller.register(socket, zmq.POLLIN)
            socket.send(b"ready")
        stop = control.fileno()
        poller.register(stop, zmq.POLLIN)
        while True:
            for item, _ in poller.poll():
                if item == stop:
                    return
                ack = stations[item].take()
                if ack is not None:
                    item.send(ack)
    finally:
        for station in stations.values():
            station.close()
        context.destroy(linger=0)


class _Child:
    """This process's side of a part: the context, bound sockets, the spawned child and its temp folder."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.folder: str | None = None
        self.endpoints: list[tuple[str, str, str]] = []
        self.sockets: list[zmq.Socket[Any]] = []
        self.process: Any = None
        self._control: Connection | None = None

    def bind(self, name: str, kind: str) -> _Peer:
        """Station ``name``'s peer on a PAIR socket bound on ``kind`` (the child connects at ``start``);
        the peer is made first, so a channel's MAXMSGSIZE holds at the bind."""
        socket = self.context.socket(zmq.PAIR)
        self.sockets.append(socket)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDTIMEO, _TIMEOUT_MS)
        socket.setsockopt(zmq.RCVTIMEO, _TIMEOUT_MS)
        peer = _STATIONS[name](socket, kind)
        if kind == TCP:
            port = socket.bind_to_random_port("tcp://127.0.0.1")
            address = f"tcp://127.0.0.1:{port}"
        else:
            if self.folder is None:
                self.folder = tempfile.mkdtemp(prefix="tw-bench-zmq-")
            address = f"ipc://{self.folder}/{len(self.endpoints)}.sock"
            socket.bind(address)
        self.endpoints.append((name, kind, address))
        return peer

    def start(self) -> None:
        """Spawn the child and wait for every socket's greeting."""
        ctx = mp.get_context("spawn")
        self._control, remote = ctx.Pipe()
        self.process = ctx.Process(target=_child, args=(self.endpoints, remote), daemon=True)
        self.process.start()
        remote.close()
        deadline = time.monotonic() + _START_S
        for socket in self.sockets:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            if not socket.poll(left, zmq.POLLIN) or socket.recv() != b"ready":
                raise RuntimeError(f"the benchmark child did not start (exit code {self.process.exitcode})")

    def died(self) -> RuntimeError:
        code = None if self.process is None else self.process.exitcode
        return RuntimeError(f"no answer from the benchmark child within {_TIMEOUT_MS / 1000} s (exit code {code})")

    def close(self) -> None:
        if self._control is not None:
            with contextlib.suppress(OSError):
                self._control.send(None)
            self._control.close()
        if self.process is not None:
            _stop(self.process)
        self.context.destroy(linger=0)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _stop(process: Any, timeout: float = 10.0) -> None:
    """Join ``process``; terminate it (then kill it) if it does not end in time."""
    process.join(timeout)
    if process.is_alive():
        process.terminate()
        process.join(5)
    if process.is_alive():
        process.kill()
        process.join()


def _summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def measure_transfers(
    sizes: Sequence[int] = SIZES,
    kinds: Sequence[str] = (TCP, IPC),
    rounds: int | None = None,
    seed: int = 0,
    warmup: int = 2,
    log: Any = None,
) -> list[dict[str, Any]]:
    """Part 1 (see the module docstring): one row per transport, size and implementation.

    A row: ``transport``, ``bytes``, ``size``, ``implementation``, ``label``, ``median_s``,
    ``min_s``, ``max_s`` (seconds per message), ``gb_per_s``, ``x_raw`` (median / raw pyzmq's)
    and ``tw_speedup`` (median / tensorwire's). ``rounds``: measured rounds at every size
    (default ``rounds_for``); ``warmup`` rounds first. Sizes that do not fit in free memory are left out.
    """
    child = _Child()
    senders: dict[tuple[str, str], _Peer] = {}
    samples: dict[tuple[str, int, str], list[float]] = {}
    try:
        for kind in kinds:
            for peer in _PEERS:
                if kind in peer.kinds:
                    senders[kind, peer.name] = child.bind(peer.name, kind)
        child.start()
        for nbytes in sizes:
            if not fits(nbytes, 2):
                _say(log, f"skipped {size_label(nbytes)}: not enough free memory")
                continue
            _say(log, f"transfers: {size_label(nbytes)} ...")
            tensor = template(nbytes)
            per, count = messages_per_sample(nbytes), rounds_for(nbytes) if rounds is None else rounds
            keys = list(senders)
            for kind, name in keys:
                samples[kind, nbytes, name] = []
            shuffle = random.Random(seed * 2**40 + nbytes).shuffle
            for index in range(warmup + count):
                order = keys[:]
                shuffle(order)
                for key in order:
                    seconds = _sample(child, senders[key], tensor, per)
                    if index >= warmup:
                        samples[key[0], nbytes, key[1]].append(seconds)
                    if nbytes >= _PAUSE_FROM:
                        time.sleep(_PAUSE_S)  # the last message's memory is freed before the next one
            del tensor
    finally:
        for sender in senders.values():
            sender.close()
        child.close()
    rows: list[dict[str, Any]] = []
    for (kind, nbytes, name), values in samples.items():
        stats = _summary(values)
        raw, ours = statistics.median(samples[kind, nbytes, RAW]), statistics.median(samples[kind, nbytes, TENSORWIRE])
        rows.append(
            {
                "transport": kind,
                "bytes": nbytes,
                "size": size_label(nbytes),
                "implementation": name,
                "label": _STATIONS[name].label(kind),
                "median_s": stats["median"],
                "min_s": stats["min"],
                "max_s": stats["max"],
                "gb_per_s": nbytes / stats["median"] / 1e9,
                "x_raw": stats["median"] / raw,
                "tw_speedup": stats["median"] / ours,
            }
        )
    return rows


def _sample(child: _Child, peer: _Peer, tensor: torch.Tensor, count: int) -> float:
    """Mean seconds per message over ``count`` messages, each from send to ack."""
    total = 0.0
    expected = tensor.numel().to_bytes(8, "little")
    for _ in range(count):
        prepared = peer.prepare(tensor)
        try:
            start = time.perf_counter()
            peer.send(prepared)
            ack = peer.socket.recv()
            total += time.perf_counter() - start
        except zmq.Again:
            raise child.died() from None
        del prepared
        if ack != expected:
            raise RuntimeError(f"{peer.label(peer.kind)} on {peer.kind}: wrong data received ({ack!r})")
    return total / count


_TARGETS: list[tuple[str, int, str, float]] = [  # (transport, size, peer, speed-up at least)
    (TCP, 64 * MiB, RAW, 0.8),
    (TCP, 64 * MiB, PICKLE_INBAND, 3.0),
    (TCP, 256 * MiB, RAW, 0.8),
    (TCP, 256 * MiB, PICKLE_INBAND, 3.0),
    (IPC, 64 * MiB, RAW, 5.0),
]


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets against part 1's rows: ``measured`` (tensorwire's speed-up over the
    peer: the peer's median / tensorwire's) and ``met``; both None where the row was not measured.
    A target against pickle in-band also gives ``out_of_band``: the speed-up over pickle-5 out-of-band."""
    speedups = {(r["transport"], r["bytes"], r["implementation"]): r["tw_speedup"] for r in rows}
    out = []
    for kind, nbytes, peer, at_least in _TARGETS:
        measured = speedups.get((kind, nbytes, peer))
        target: dict[str, Any] = {
            "target": f"{kind} {size_label(nbytes)}: tensorwire >= {at_least:g}x {peer}",
            "transport": kind,
            "bytes": nbytes,
            "peer": peer,
            "at_least": at_least,
            "measured": measured,
            "met": None if measured is None else measured >= at_least,
        }
        if peer == PICKLE_INBAND:
            target["out_of_band"] = speedups.get((kind, nbytes, PICKLE))
        out.append(target)
    return out


# -- part 2: pyzmq's copy threshold --------------------------------------------------------------


def measure_copy_threshold(
    sizes: Sequence[int] = SWEEP,
    rounds: int = 7,
    seed: int = 0,
    warmup: int = 1,
    burst_bytes: int = 16 * MiB,
    log: Any = None,
) -> dict[str, Any]:
    """Part 2: rows (``bytes``, ``size``, ``variant``, ``messages``, ``median_us``, ``min_us``,
    ``max_us`` per message, ``gb_per_s``, ``x_copy``: median / copy=True's) and ``crossover``
    (per zero-copy variant: the size from which it beats copy=True, or None)."""
    child = _Child()
    sockets = {variant: child.bind(_Sink.name, TCP).socket for variant in VARIANTS}
    samples: dict[tuple[int, str], list[float]] = {}
    counts: dict[int, int] = {}
    try:
        for socket in sockets.values():
            socket.copy_threshold = 0  # copy=False is zero-copy at every size
        child.start()
        for nbytes in sizes:
            _say(log, f"copy threshold: {size_label(nbytes)} ...")
            payload = template(nbytes).numpy().data.cast("B")
            counts[nbytes] = count = max(16, min(2000, burst_bytes // nbytes))
            for variant in VARIANTS:
                samples[nbytes, variant] = []
            shuffle = random.Random(seed * 2**40 + nbytes).shuffle
            for index in range(warmup + rounds):
                order = list(VARIANTS)
                shuffle(order)
                for variant in order:
                    seconds = _burst(child, sockets[variant], payload, count, variant)
                    if index >= warmup:
                        samples[nbytes, variant].append(seconds / count)
    finally:
        child.close()
    rows: list[dict[str, Any]] = []
    for (nbytes, variant), values in samples.items():
        stats = _summary(values)
        rows.append(
            {
                "bytes": nbytes,
                "size": size_label(nbytes),
                "variant": variant,
                "messages": counts[nbytes],
                "median_us": stats["median"] * 1e6,
                "min_us": stats["min"] * 1e6,
                "max_us": stats["max"] * 1e6,
                "gb_per_s": nbytes / stats["median"] / 1e9,
                "x_copy": stats["median"] / statistics.median(samples[nbytes, COPY]),
            }
        )
    crossover: dict[str, int | None] = {}
    for variant in (ZERO_COPY, ZERO_COPY_WAIT):
        faster = [row["x_copy"] < 1 for row in rows if row["variant"] == variant]
        first = next((i for i in range(len(faster)) if all(faster[i:])), None)
        crossover[variant] = None if first is None else list(sizes)[first]
    return {"rounds": rounds, "pyzmq_copy_threshold": zmq.COPY_THRESHOLD, "rows": rows, "crossover": crossover}


def _burst(child: _Child, socket: zmq.Socket[Any], payload: memoryview, count: int, variant: str) -> float:
    """Seconds from the count message to the ack of ``count`` messages of ``payload``."""
    copy, wait = variant == COPY, variant == ZERO_COPY_WAIT
    try:
        start = time.perf_counter()
        socket.send(count.to_bytes(8, "little"))
        for _ in range(count):
            tracker = socket.send(payload, 0, copy=copy, track=not copy)
            if wait:
                assert tracker is not None
                tracker.wait()
        ack = socket.recv()
        seconds = time.perf_counter() - start
    except zmq.Again:
        raise child.died() from None
    if ack != b"done":
        raise RuntimeError(f"copy threshold: unexpected ack {ack!r}")
    return seconds


# -- part 3: RPC ---------------------------------------------------------------------------------


def _echo(request: Any) -> Any:
    from tensorwire.builtins import rpc

    return rpc.Result(method=request.method, ok=True, payload=rpc.Value(value=request.kwargs["x"]))


def _rpc_messages(tensor: torch.Tensor) -> tuple[Any, Any]:
    """``(request, result)`` of one echo call, with an rpc id as the client and server set it."""
    from tensorwire.builtins import rpc

    rpc_id = uuid.uuid4().hex
    request = rpc.Request(method="echo", kwargs={"x": tensor}, rpc_id=rpc_id)
    result = rpc.Result(method="echo", ok=True, payload=rpc.Value(value=tensor), rpc_id=rpc_id)
    return request, result


def _wire(message: Any) -> list[bytes]:
    """What a ``Channel`` puts on the wire for ``message`` (its hello frame, then its frames)."""
    import tensorwire as tw
    from tensorwire.zmq import HELLO, host_token

    return [HELLO + host_token(), *(bytes(memoryview(frame)) for frame in tw.Encoder().encode(message))]


def _rpc_child(control: Connection) -> None:
    """The RPC process: a ``Server`` (main thread) and a raw ROUTER echo (a thread), both on
    ``tcp://127.0.0.1``; their ports go to ``control``, whose next message (or end) stops both."""
    from tensorwire.zmq import Server

    context = zmq.Context()
    router, raw = context.socket(zmq.ROUTER), context.socket(zmq.ROUTER)
    server = Server(router)
    stop = threading.Event()
    reply = _wire(_rpc_messages(torch.randn(16, 16))[1])

    def echo_raw() -> None:
        while not stop.is_set():
            if raw.poll(100, zmq.POLLIN):
                peer, *_ = raw.recv_multipart(copy=False)
                raw.send_multipart([peer, *reply])

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            control.recv()
        stop.set()
        server.stop()

    threads = [threading.Thread(target=echo_raw, daemon=True), threading.Thread(target=watch, daemon=True)]
    try:
        ports = router.bind_to_random_port("tcp://127.0.0.1"), raw.bind_to_random_port("tcp://127.0.0.1")
        for thread in threads:
            thread.start()
        control.send(ports)
        server.serve(_echo)
    finally:
        stop.set()
        if threads[0].is_alive():
            threads[0].join(5)
        server.close()
        context.destroy(linger=0)


def measure_rpc(
    calls: int = 5000, blocks: int = 10, seed: int = 0, number: int = 200, log: Any = None
) -> dict[str, Any]:
    """Part 3: rows for tensorwire's ``Client``/``Server`` and the raw echo (``implementation``,
    ``calls``, ``p50_us``, ``p99_us``, ``block_min_us``/``block_max_us`` (of the block medians),
    ``calls_per_s``), the codec cost (``codec_us``: median, min, max over blocks of ``number``)
    and the target (``budget_us`` = raw p50 + codec cost, ``ratio`` = tensorwire p50 / budget, ``met``)."""
    from tensorwire.builtins import rpc
    from tensorwire.zmq import Client

    _say(log, "rpc ...")
    per_block = max(1, calls // blocks)
    x = torch.randn(16, 16)
    request = rpc.Request(method="echo", kwargs={"x": x})
    ctx = mp.get_context("spawn")
    control, remote = ctx.Pipe()
    process = ctx.Process(target=_rpc_child, args=(remote,), daemon=True)
    context = zmq.Context()
    client: Any = None
    raw = context.socket(zmq.DEALER)
    latencies: dict[str, list[int]] = {TENSORWIRE: [], RAW: []}
    block_medians: dict[str, list[float]] = {TENSORWIRE: [], RAW: []}
    block_seconds: dict[str, float] = {TENSORWIRE: 0.0, RAW: 0.0}
    codec_us: list[float] = []
    try:
        process.start()
        remote.close()
        if not control.poll(_START_S):
            raise RuntimeError(f"the RPC child did not start (exit code {process.exitcode})")
        port, raw_port = control.recv()
        dealer = context.socket(zmq.DEALER)
        client = Client(dealer)  # before connect: it sets the socket's MAXMSGSIZE
        dealer.connect(f"tcp://127.0.0.1:{port}")
        raw.setsockopt(zmq.RCVTIMEO, _TIMEOUT_MS)
        raw.connect(f"tcp://127.0.0.1:{raw_port}")
        frames = _wire(_rpc_messages(x)[0])
        expected = len(_wire(_rpc_messages(x)[1]))

        def call_tensorwire() -> None:
            result = client.call(request, timeout=_TIMEOUT_MS / 1000)
            if not result.ok:
                raise RuntimeError(f"rpc: the echo failed: {result.error}")

        def call_raw() -> None:
            raw.send_multipart(frames)
            try:
                got = raw.recv_multipart(copy=False)
            except zmq.Again:
                raise RuntimeError(f"rpc: no raw echo within {_TIMEOUT_MS / 1000} s") from None
            if len(got) != expected:
                raise RuntimeError(f"rpc: the raw echo has {len(got)} frames, not {expected}")

        first: Any = client.call(request, timeout=_START_S)
        if not (first.ok and torch.equal(first.payload.value, x)):
            raise RuntimeError("rpc: the echo came back different")
        codec = _codec(x)
        runs: dict[str, Callable[[], None]] = {TENSORWIRE: call_tensorwire, RAW: call_raw}
        for fn in runs.values():  # warm up
            for _ in range(max(10, per_block // 5)):
                fn()
        _block_us(codec, max(1, number // 10))
        names = [TENSORWIRE, RAW, "codec"]
        rng = random.Random(seed)
        for _ in range(blocks):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                if name == "codec":
                    codec_us.append(_block_us(codec, number))
                    continue
                block, elapsed = _timed(runs[name], per_block)
                latencies[name] += block
                block_medians[name].append(statistics.median(block) / 1e3)
                block_seconds[name] += elapsed
    finally:
        if client is not None:
            client.close()
        raw.close(linger=0)
        with contextlib.suppress(OSError):
            control.send(None)
        control.close()
        if process.pid is not None:
            _stop(process)
        context.destroy(linger=0)
    rows: list[dict[str, Any]] = [
        {
            "implementation": name,
            "calls": len(values),
            "p50_us": float(np.percentile(values, 50)) / 1e3,
            "p99_us": float(np.percentile(values, 99)) / 1e3,
            "block_min_us": min(block_medians[name]),
            "block_max_us": max(block_medians[name]),
            "calls_per_s": len(values) / block_seconds[name],
        }
        for name, values in latencies.items()
    ]
    p50 = {row["implementation"]: row["p50_us"] for row in rows}
    cost = _summary(codec_us)
    budget = p50[RAW] + cost["median"]
    return {
        "rows": rows,
        "codec_us": cost,
        "target": {
            "target": "tensorwire p50 <= 1.2x (raw echo p50 + codec cost)",
            "budget_us": budget,
            "ratio": p50[TENSORWIRE] / budget,
            "met": p50[TENSORWIRE] <= 1.2 * budget,
        },
    }


def _timed(fn: Callable[[], None], count: int) -> tuple[list[int], float]:
    """Nanoseconds of each of ``count`` calls of ``fn``, and the seconds of all of them."""
    out = []
    clock = time.perf_counter_ns
    first = clock()
    for _ in range(count):
        start = clock()
        fn()
        out.append(clock() - start)
    return out, (clock() - first) / 1e9


def _codec(x: torch.Tensor) -> Callable[[], None]:
    """One call's codec work in process: the request and the result, each encoded and decoded."""
    import tensorwire as tw
    from tensorwire.builtins import REGISTRY

    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    request, result = _rpc_messages(x)
    assert torch.equal(decoder.decode(encoder.encode(request)).kwargs["x"], x)

    def codec() -> None:
        decoder.decode(encoder.encode(request))
        decoder.decode(encoder.encode(result))

    return codec


# -- the run and its report ----------------------------------------------------------------------


def _say(log: Any, text: str) -> None:
    if log is not None:
        print(text, file=log, flush=True)


def run(
    sizes: Sequence[int] = SIZES,
    kinds: Sequence[str] = (TCP, IPC),
    rounds: int | None = None,
    rpc_calls: int = 5000,
    threshold: bool = True,
    quick: bool = False,
    seed: int = 0,
    log: Any = None,
) -> dict[str, Any]:
    """All three parts (``threshold`` False: no part 2; ``rpc_calls`` 0: no part 3); ``quick``:
    fewer rounds and smaller bursts. Returns ``transfers``, ``targets``, ``copy_threshold``, ``rpc``."""
    started = time.monotonic()
    transfers = measure_transfers(sizes, kinds, 3 if quick and rounds is None else rounds, seed, 1 if quick else 2, log)
    results: dict[str, Any] = {"transfers": transfers, "targets": targets(transfers)}
    if threshold:
        sweep_rounds = rounds if rounds is not None else 3 if quick else 7
        results["copy_threshold"] = measure_copy_threshold(
            SWEEP, sweep_rounds, seed, burst_bytes=4 * MiB if quick else 16 * MiB, log=log
        )
    if rpc_calls > 0:
        results["rpc"] = measure_rpc(rpc_calls, 5 if quick else 10, seed, log=log)
    results["seconds"] = time.monotonic() - started
    return results


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def render(results: dict[str, Any]) -> str:
    """The results as markdown tables, then the targets."""
    lines = [
        "Transfers: one float32 tensor per message, one-way + an 8-byte ack, time per message",
        "",
        "| transport | size | implementation | median | min - max | GB/s | x raw | tw speed-up |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in results["transfers"]:
        lines.append(
            f"| {row['transport']} | {row['size']} | {row['label']} | {_time(row['median_s'])} "
            f"| {_time(row['min_s'])} - {_time(row['max_s'])} | {row['gb_per_s']:.2f} | {row['x_raw']:.2f} "
            f"| {row['tw_speedup']:.2f} |"
        )
    sweep = results.get("copy_threshold")
    if sweep is not None:
        lines += [
            "",
            "pyzmq copy=True vs copy=False (copy_threshold 0), tcp, one-way bursts, time per message",
            "",
            "| size | variant | messages | median | min - max | GB/s | x copy=True |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for row in sweep["rows"]:
            lines.append(
                f"| {row['size']} | {row['variant']} | {row['messages']} | {row['median_us']:.2f} us "
                f"| {row['min_us']:.2f} - {row['max_us']:.2f} us | {row['gb_per_s']:.2f} | {row['x_copy']:.2f} |"
            )
        lines.append("")
        for variant, size in sweep["crossover"].items():
            where = f"from {size_label(size)}" if size is not None else "at no size swept"
            lines.append(f"- {variant} beats copy=True {where}")
        lines.append(f"- pyzmq's default copy_threshold: {size_label(sweep['pyzmq_copy_threshold'])}")
    rpc = results.get("rpc")
    if rpc is not None:
        cost = rpc["codec_us"]
        lines += [
            "",
            "RPC over tcp loopback: rpc.Request with a 16x16 float32 tensor, echoed",
            "",
            "| implementation | calls | p50 | p99 | block medians min - max | calls/s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in rpc["rows"]:
            name = "tensorwire Client/Server" if row["implementation"] == TENSORWIRE else "raw DEALER/ROUTER echo"
            lines.append(
                f"| {name} | {row['calls']} | {row['p50_us']:.1f} us | {row['p99_us']:.1f} us "
                f"| {row['block_min_us']:.1f} - {row['block_max_us']:.1f} us | {row['calls_per_s']:.0f} |"
            )
        lines.append(
            f"| codec cost in process (thread time) | - | {cost['median']:.1f} us | - "
            f"| {cost['min']:.1f} - {cost['max']:.1f} us | - |"
        )
    lines += ["", "Targets:"]
    for target in results["targets"]:
        if target["met"] is None:
            lines.append(f"- {target['target']}: not measured")
        else:
            verdict = "met" if target["met"] else "NOT met"
            out_of_band = target.get("out_of_band")
            against = "" if out_of_band is None else f" (against {PICKLE}: {out_of_band:.2f}x)"
            lines.append(f"- {target['target']}: {target['measured']:.2f}x, {verdict}{against}")
    if rpc is not None:
        target = rpc["target"]
        verdict = "met" if target["met"] else "NOT met"
        budget = target["budget_us"]
        lines.append(
            f"- {target['target']}: {target['ratio']:.2f}x of {budget:.1f} us"
            f" (at most {1.2 * budget:.1f} us), {verdict}"
        )
    if "seconds" in results:
        lines.append(f"\n({results['seconds']:.0f} s)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.bench.channels``: measure, print markdown tables (or JSON)."""
    parser = argparse.ArgumentParser(prog="python -m tools.bench.channels", description=_DESCRIPTION)
    parser.add_argument("--sizes", help="comma-separated sizes (default: 4K,64K,1M,16M,64M,256M; --quick: 4K,1M,64M)")
    parser.add_argument("--rounds", type=int, help="measured rounds at every size (default: by size)")
    parser.add_argument("--transports", default="tcp,ipc", help="comma-separated: tcp, ipc (default: both)")
    parser.add_argument(
        "--rpc-calls", type=int, help="RPC calls per implementation (default 5000, --quick 1000; 0: skip)"
    )
    parser.add_argument("--no-threshold", action="store_true", help="skip the copy-threshold sweep")
    parser.add_argument("--quick", action="store_true", help="fewer sizes, rounds and calls (under a minute)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled order (default 0)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    kinds = [kind.strip() for kind in args.transports.split(",") if kind.strip()]
    if not kinds or set(kinds) - {TCP, IPC}:
        parser.error(f"--transports takes tcp and/or ipc, got {args.transports!r}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else QUICK_SIZES if args.quick else SIZES
    calls = args.rpc_calls if args.rpc_calls is not None else 1000 if args.quick else 5000
    results = run(sizes, kinds, args.rounds, calls, not args.no_threshold, args.quick, args.seed, log=sys.stderr)
    print(json.dumps(results, indent=2) if args.json else render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
