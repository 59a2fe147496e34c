"""What one send through shared memory costs while earlier messages are still in flight.

    python -m tools.bench.in_flight [--in-flight 0,8,64,512] [--size 64K] [--rounds 15] [--number 50]
                                    [--seed 0] [--one-shot | --held | --pipeline]

A sender ahead of its receivers has messages handed over that no receiver has claimed yet, each
holding a pool slot. For each count N, one ``ShmTransport`` holds N such messages (never read; a
claim timeout of an hour keeps them in flight) and times sends of a float32 tensor of ``size``
bytes, copied into a pool slot: the encode, then its decode in the same process, after which the
tensor dies and the slot is free for the next send. With ``--one-shot`` the transport has no
pool (``pool=False``: a one-shot segment per buffer) and its N earlier messages were sent and
read (a sender remembers each one-shot segment until its claim timeout: it does not see claims).
With ``--held`` the receiver keeps the tensors of its N earlier messages (their slots stay
claimed), and keeps the tensor of every timed send too, so each timed send finds no slot free and
grows the pool (the slots grown are given back between samples).
A sample is the thread CPU time (``time.thread_time_ns``) of ``number`` such round trips with the
garbage collector off, per round trip; rounds are interleaved, every N once per round in a seeded
shuffled order. A row gives the median over rounds, the min and max, and the ratio to the first
count's median (1.0: the earlier messages cost a send nothing).

With ``--pipeline`` the receiver is a spawned process: the sender keeps up to N messages sent and
not yet acknowledged (a thread reads the acknowledgements), the receiver decodes each message from
a Pipe, reads an element of its tensor, drops it and acknowledges. Each N has its own transport;
a sample is the wall time per message of ``number`` messages, with the sender's thread CPU time
per message beside it, interleaved in the same way; the sender and the receiver run on two fixed
CPUs (``tools.bench.cpus``) when there are two. The row also gives how many slots the pool grew to.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import random
import statistics
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import torch

from tools.bench.cpus import two_cpus
from tools.bench.harness import parse_size, size_label

__all__ = ["main", "measure", "measure_pipeline", "render", "render_pipeline"]


def measure(
    in_flight: Sequence[int],
    size: int,
    rounds: int,
    number: int,
    seed: int,
    *,
    one_shot: bool = False,
    held: bool = False,
) -> list[dict[str, Any]]:
    """One row per count of earlier messages: ``in_flight``, ``median_us``, ``min_us``, ``max_us``
    (per round trip) and ``ratio`` (to the first count's median)."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion

    options = tw.EncodeOptions(inline_threshold=0, embed_threshold=0)  # every tensor through the pool
    tensor = torch.ones(max(1, size // 4))
    setups: dict[int, tuple[Any, Any, Any, list[Any]]] = {}
    kept: dict[int, list[Any]] = {n: [] for n in in_flight}  # with ``held``: tensors the receiver keeps
    samples: dict[int, list[float]] = {n: [] for n in in_flight}
    shuffle = random.Random(seed)
    collecting = gc.isenabled()
    try:
        for n in in_flight:
            shm = transports.ShmTransport(pool=not one_shot, claim_timeout=3600.0)
            encoder, decoder = tw.Encoder(shm, options), tw.Decoder(REGISTRY, [shm])
            pending = [encoder.encode(diffusion.Output(output=tensor)) for _ in range(n)]
            if held:
                kept[n] = [decoder.decode(frames).output for frames in pending]
                pending = []
            if one_shot:  # read: each one-shot segment is gone, and still remembered by its sender
                for frames in pending:
                    decoder.decode(frames)
                pending = []
            setups[n] = (shm, encoder, decoder, pending)
            for _ in range(3):  # warm: the slot the timed sends reuse exists
                decoder.decode(encoder.encode(diffusion.Output(output=tensor)))
        gc.disable()
        for _ in range(rounds):
            order = list(in_flight)
            shuffle.shuffle(order)
            for n in order:
                shm, encoder, decoder, _ = setups[n]
                if held:
                    more: list[Any] = []
                    start = time.thread_time_ns()
                    for _ in range(number):
                        more.append(decoder.decode(encoder.encode(diffusion.Output(output=tensor))).output)
                    samples[n].append((time.thread_time_ns() - start) / number / 1000)
                    del more
                    shm.trim(0)  # the slots just grown: the next sample grows them again
                    continue
                start = time.thread_time_ns()
                for _ in range(number):
                    decoder.decode(encoder.encode(diffusion.Output(output=tensor)))
                samples[n].append((time.thread_time_ns() - start) / number / 1000)
    finally:
        if collecting:
            gc.enable()
        kept.clear()
        for shm, _, decoder, pending in setups.values():
            for frames in pending:  # read at last: every slot free before the pool is closed
                decoder.decode(frames)
            shm.close()
    reference = statistics.median(samples[in_flight[0]])
    return [
        {
            "in_flight": n,
            "median_us": statistics.median(samples[n]),
            "min_us": min(samples[n]),
            "max_us": max(samples[n]),
            "ratio": statistics.median(samples[n]) / reference,
        }
        for n in in_flight
    ]


def _receive(conn: Connection, cpus: set[int] | None) -> None:
    """The pipeline's receiver: decode, read an element, drop, acknowledge (an empty message), until
    an empty message comes."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY

    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    with transports.ShmTransport() as shm:
        decoder = tw.Decoder(REGISTRY, [shm])
        while blob := conn.recv_bytes():
            message = decoder.decode(tw.split(blob))
            float(message.output[0])
            del message
            conn.send_bytes(b"")
    conn.send_bytes(b"!")  # the end: the sender's acknowledgement reader stops


def measure_pipeline(windows: Sequence[int], size: int, rounds: int, number: int, seed: int) -> list[dict[str, Any]]:
    """One row per window (messages allowed unacknowledged): ``in_flight``, ``median_us``, ``min_us``,
    ``max_us`` (wall time per message), ``sender_cpu_us`` (median) and ``slots`` (the pool's, at the end)."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    pinned = two_cpus()
    ours, conn = mp.Pipe()
    child = mp.get_context("spawn").Process(target=_receive, args=(conn, pinned[1] if pinned else None), daemon=True)
    child.start()
    affinity = os.sched_getaffinity(0)
    if pinned is not None:
        os.sched_setaffinity(0, pinned[0])
    room = threading.Semaphore(0)
    acks = threading.Thread(target=_acknowledged, args=(ours, room), daemon=True)
    options = tw.EncodeOptions(inline_threshold=0, embed_threshold=0)  # every tensor through the pool
    tensor = torch.ones(max(1, size // 4))
    senders = {n: transports.ShmTransport() for n in windows}
    encoders = {n: tw.Encoder(shm, options) for n, shm in senders.items()}
    wall: dict[int, list[float]] = {n: [] for n in windows}
    cpu: dict[int, list[float]] = {n: [] for n in windows}
    shuffle = random.Random(seed)
    try:
        acks.start()
        for n in windows:  # warm: each pool grows to what its window needs
            _pipeline_block(ours, room, encoders[n], diffusion.Output, tensor, n, number)
        for _ in range(rounds):
            order = list(windows)
            shuffle.shuffle(order)
            for n in order:
                start, start_cpu = time.perf_counter(), time.thread_time()
                _pipeline_block(ours, room, encoders[n], diffusion.Output, tensor, n, number)
                wall[n].append((time.perf_counter() - start) / number * 1e6)
                cpu[n].append((time.thread_time() - start_cpu) / number * 1e6)
        slots = {n: len(shm.pool.slots()) if shm.pool is not None else 0 for n, shm in senders.items()}
    finally:
        ours.send_bytes(b"")
        acks.join(30)
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join(5)
        for shm in senders.values():
            shm.close()
        os.sched_setaffinity(0, affinity)
    return [
        {
            "in_flight": n,
            "median_us": statistics.median(wall[n]),
            "min_us": min(wall[n]),
            "max_us": max(wall[n]),
            "sender_cpu_us": statistics.median(cpu[n]),
            "slots": slots[n],
        }
        for n in windows
    ]


def _acknowledged(conn: Connection, room: threading.Semaphore) -> None:
    """Room for one more message per acknowledgement, until the receiver's last word."""
    while conn.recv_bytes() != b"!":
        room.release()


def _pipeline_block(
    conn: Connection, room: threading.Semaphore, encoder: Any, message: Any, tensor: Any, window: int, number: int
) -> None:
    """Send ``number`` messages, at most ``window`` unacknowledged, and wait for every acknowledgement."""
    import tensorwire as tw

    for _ in range(window):
        room.release()
    for _ in range(number):
        room.acquire()
        conn.send_bytes(tw.join(encoder.encode(message(output=tensor))))
    for _ in range(window):  # the last acknowledgements: back to no message in flight
        room.acquire()


def render_pipeline(rows: Sequence[dict[str, Any]], size: int) -> str:
    """The pipeline's rows as a markdown table."""
    lines = [
        f"| messages allowed in flight | one {size_label(size)} message | min - max | sender CPU | pool slots |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['in_flight']} | {row['median_us']:.1f} us | {row['min_us']:.1f} - {row['max_us']:.1f} us "
            f"| {row['sender_cpu_us']:.1f} us | {row['slots']} |"
        )
    return "\n".join(lines)


def render(rows: Sequence[dict[str, Any]], size: int, *, one_shot: bool = False, held: bool = False) -> str:
    """The rows as a markdown table."""
    first = rows[0]["in_flight"]
    earlier = (
        "messages sent and read (one-shot segments)"
        if one_shot
        else "tensors the receiver keeps (each send grows the pool)"
        if held
        else "messages in flight"
    )
    lines = [
        f"| {earlier} | one {size_label(size)} send + receive | min - max | x {first} |",
        "|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['in_flight']} | {row['median_us']:.1f} us | {row['min_us']:.1f} - {row['max_us']:.1f} us "
            f"| {row['ratio']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.in_flight", description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", help="comma-separated counts (default 0,8,64,512; with --pipeline 1,8,64,512)")
    parser.add_argument("--size", default="64K", help="the tensor's size (default 64K)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--number", type=int, default=50, help="round trips per sample (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled order (default 0)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--one-shot", action="store_true", help="one-shot segments (no pool) behind messages read")
    mode.add_argument("--held", action="store_true", help="the receiver keeps N tensors, and each one sent")
    mode.add_argument("--pipeline", action="store_true", help="to a receiver process, N messages unacknowledged")
    args = parser.parse_args(argv)
    default = "1,8,64,512" if args.pipeline else "0,8,64,512"  # a pipeline of 0 messages sends nothing
    try:
        counts = [int(n) for n in (default if args.in_flight is None else args.in_flight).split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < (1 if args.pipeline else 0):
        parser.error("--in-flight takes counts of 0 or more (1 or more with --pipeline)")
    size = parse_size(args.size)
    if args.pipeline:
        print(render_pipeline(measure_pipeline(counts, size, args.rounds, args.number, args.seed), size))
        return 0
    rows = measure(counts, size, args.rounds, args.number, args.seed, one_shot=args.one_shot, held=args.held)
    print(render(rows, size, one_shot=args.one_shot, held=args.held))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
