"""Where ``tensorwire.zmq.Channel`` should stop copying frames into ZeroMQ and hand them over instead.

    python -m tools.bench.copy_below [--sizes 64K,256K,512K,1M,2M,4M] [--rounds 40] [--seed 0]

One PAIR socket over tcp loopback to a spawned child that decodes each message, reads its tensor
and sends 8 bytes back. Two channels share the socket: one that copies every frame into ZeroMQ (``copy_below`` past any
size), one with ``copy_below=0`` (every frame from pyzmq's copy threshold up handed over without a
copy and tracked, ``send`` waiting for ZeroMQ to let go).
Each round runs both, in a seeded shuffled order, five messages each; a sample is the wall time of
one message and its ack. A row: the medians and their ratio (``zero/copy`` under 1: handing over is
faster).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import time
from collections.abc import Sequence

import torch
import zmq

from tools.bench.harness import parse_size, size_label

__all__ = ["main", "measure"]

_MESSAGES = 5


def _child(port: int) -> None:
    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    context = zmq.Context()
    socket = context.socket(zmq.PAIR)
    with Channel(socket, REGISTRY) as channel:  # before connect: the channel sets the socket's MAXMSGSIZE
        socket.connect(f"tcp://127.0.0.1:{port}")
        while True:
            message = channel.recv(timeout=60)
            if message.method == "stop":
                return
            float(message.kwargs["x"][0])
            del message
            socket.send(b"received")


def measure(sizes: Sequence[int], rounds: int, seed: int) -> list[tuple[int, float, float]]:
    """``(size, copy median us, zero-copy median us)`` per size."""
    from tensorwire.builtins import REGISTRY, rpc
    from tensorwire.zmq import Channel

    context = zmq.Context()
    socket = context.socket(zmq.PAIR)
    copying, handing = Channel(socket, REGISTRY, copy_below=1 << 62), Channel(socket, REGISTRY, copy_below=0)
    port = socket.bind_to_random_port("tcp://127.0.0.1")  # after the channels, which set MAXMSGSIZE
    child = mp.get_context("spawn").Process(target=_child, args=(port,), daemon=True)
    child.start()
    shuffle = random.Random(seed)
    rows = []
    try:
        for size in sizes:
            message = rpc.Request(method="x", kwargs={"x": torch.randn(size // 4)})
            samples: dict[str, list[float]] = {"copy": [], "zero": []}
            for _ in range(rounds):
                order = [("copy", copying), ("zero", handing)]
                shuffle.shuffle(order)
                for name, channel in order:
                    start = time.perf_counter()
                    for _ in range(_MESSAGES):
                        channel.send(message, timeout=30)
                        if not socket.poll(30_000):
                            raise TimeoutError("the child did not answer within 30 s")
                        socket.recv()
                    samples[name].append((time.perf_counter() - start) / _MESSAGES * 1e6)
            rows.append((size, statistics.median(samples["copy"]), statistics.median(samples["zero"])))
        copying.send(rpc.Request(method="stop"), timeout=5)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join(5)
        context.destroy(linger=0)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.copy_below", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64K,256K,512K,1M,2M,4M", help="comma-separated sizes")
    parser.add_argument("--rounds", type=int, default=40, help="rounds per size (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled order (default 0)")
    args = parser.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print("| size | copied | handed over, waited for | zero/copy |\n|---|---:|---:|---:|")
    for size, copy_us, zero_us in measure(sizes, args.rounds, args.seed):
        print(f"| {size_label(size)} | {copy_us:.0f} us | {zero_us:.0f} us | {zero_us / copy_us:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
