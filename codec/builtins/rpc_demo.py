"""``tensorwire demo --rpc``: an API-server-like client and an engine-like server over ZeroMQ.

The engine (a spawned process) serves ``rpc.Request`` on a ROUTER socket at an ``ipc://``
endpoint; for each request it returns an ``rpc.Result`` whose payload is a generated frame batch
(a float16 tensor of ``FRAMES_SHAPE``, seeded by the request), which travels through shared
memory because both processes are on this host. This process, the client, makes ``calls``
requests over a DEALER socket, checks every returned tensor bit for bit against the same seeded
build, and prints throughput, latency percentiles, how the tensors travelled and that no segment
of ours is left. Needs the ``zmq`` extra.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import torch

__all__ = ["FRAMES_SHAPE", "frames_for", "run"]

FRAMES_SHAPE = (8, 3, 256, 256)
"""The engine's reply: 8 RGB frames of 256x256, float16 (3 MiB)."""


def frames_for(seed: int) -> torch.Tensor:
    """The frames the engine returns for a request with ``seed`` (the same for the same seed)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(FRAMES_SHAPE, generator=gen).to(torch.float16)


def _engine(endpoint: str, ready: Any) -> None:
    import zmq

    from tensorwire import transports
    from tensorwire.builtins import rpc
    from tensorwire.zmq import Server

    def handle(request: rpc.Request) -> rpc.Result:
        frames = frames_for(int(request.kwargs["seed"]))
        return rpc.Result(method=request.method, ok=True, payload=rpc.Value(value={"frames": frames}))

    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    with transports.ShmTransport() as shm, Server(socket, transport=shm) as server:
        socket.bind(endpoint)  # (after the server is made: ZeroMQ bounds frames from its MAXMSGSIZE at bind)
        ready.send("ready")
        while not ready.poll(0):
            server.serve_one(handle, timeout=0.05)
        ready.recv()
        ready.send(server.handled)
        ready.recv()  # the client has let go of every slot: the pool may close
    context.term()


def run(out: TextIO = sys.stdout, calls: int = 200) -> int:
    """Run the demo; 0 when every reply arrived bit-exact and /dev/shm holds nothing of ours."""
    import zmq

    from tensorwire import transports
    from tensorwire.builtins import rpc
    from tensorwire.transports import held_memfds
    from tensorwire.transports.shm import our_segments
    from tensorwire.zmq import Client

    directory = tempfile.mkdtemp(prefix="tensorwire-demo-")
    endpoint = f"ipc://{Path(directory) / 'engine'}"
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    engine = ctx.Process(target=_engine, args=(endpoint, child), name="tensorwire-demo-engine")
    engine.start()
    latencies: list[float] = []
    exact = True
    handled = inline = -1
    try:
        if not parent.poll(60):
            raise TimeoutError("the engine did not start within 60 s")
        parent.recv()
        context = zmq.Context()
        socket = context.socket(zmq.DEALER)
        with transports.ShmTransport() as shm, Client(socket, transport=shm) as client:
            socket.connect(endpoint)
            start = time.perf_counter()
            for seed in range(calls):
                sent = time.perf_counter()
                result = client.call(rpc.Request(method="generate", kwargs={"seed": seed}), timeout=30)
                latencies.append(time.perf_counter() - sent)
                payload = result.payload
                assert isinstance(payload, rpc.Value), payload
                frames = payload.value["frames"]
                exact = exact and bool(torch.equal(frames, frames_for(seed)))
                del result, payload, frames  # the slot goes back to the engine's pool
            elapsed = time.perf_counter() - start
            inline = client.channel.buffer_frames
        context.term()
        parent.send("stop")
        handled = parent.recv()
        parent.send("done")
    finally:
        engine.join(timeout=60)
        if engine.is_alive():
            engine.kill()
        Path(directory, "engine").unlink(missing_ok=True)
        Path(directory).rmdir()
    nbytes = 2 * torch.Size(FRAMES_SHAPE).numel()
    quantiles = statistics.quantiles(latencies, n=100)
    prefix = f"tw-{engine.pid}-"
    left = [n for n in [*our_segments(), *held_memfds()] if n.startswith(prefix)]
    print(f"engine at {endpoint}: {handled} requests answered", file=out)
    print(
        f"{calls} calls in {elapsed:.2f} s: {calls / elapsed:.0f} calls/s, "
        f"{calls * nbytes / elapsed / 1e9:.2f} GB/s of frames ({nbytes / 2**20:.1f} MiB each, "
        f"{'through shared memory' if inline == 0 else f'inline: {inline} buffer frames'})",
        file=out,
    )
    print(
        f"latency per call: p50 {quantiles[49] * 1e3:.2f} ms, p99 {quantiles[98] * 1e3:.2f} ms, "
        f"max {max(latencies) * 1e3:.2f} ms",
        file=out,
    )
    marks = f"bit-exact: {'all' if exact else 'NO'}; segments of ours left (in /dev/shm or memfds): {len(left)}"
    print(marks, file=out)
    return 0 if exact and not left and handled == calls and inline == 0 else 1
