"""Cross-process timing: a long-lived spawned sender and receiver per mode, driven by this process.

For every size: the sender prepares the tensor (outside the timed window), the receiver waits;
the sender notes ``CLOCK_MONOTONIC`` and sends; the receiver checks three elements and notes the
clock when it holds a usable tensor. Warm-ups first, then medians with p10-p90.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import torch

__all__ = ["SIZES", "measure_mode", "measure_copyto", "reps_for", "fits"]

KiB, MiB, GiB = 1024, 1024**2, 1024**3
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB]


def reps_for(nbytes: int, scale: float = 1.0) -> int:
    base = 40 if nbytes <= MiB else 15 if nbytes <= 16 * MiB else 7 if nbytes <= 256 * MiB else 4
    return max(2, int(base * scale))


def fits(nbytes: int) -> bool:
    """Whether five copies of the tensor fit in the memory now available (sender, segments, receiver)."""
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return 5 * nbytes < available


def template(nbytes: int) -> torch.Tensor:
    numel = max(1, nbytes // 4)
    return (torch.arange(numel, dtype=torch.int32) % (1 << 24)).to(torch.float32)


def _expected(numel: int) -> list[tuple[int, float]]:
    return [(i, float(i % (1 << 24))) for i in (0, numel // 2, numel - 1)]


def _sender(name: str, control: Any, channel: Any) -> None:
    from tools.bench.modes import MODES

    mode = MODES[name](channel)
    tensors: dict[int, torch.Tensor] = {}
    try:
        while True:
            command = control.recv()
            if command is None:
                return
            nbytes = command
            if nbytes not in tensors:
                tensors.clear()
                tensors[nbytes] = template(nbytes)
            tensor = mode.prepare(tensors[nbytes])
            start = time.monotonic()
            mode.send(tensor)
            control.send(start)
            del tensor
    finally:
        mode.close()


def _receiver(name: str, control: Any, channel: Any) -> None:
    from tools.bench.modes import MODES

    mode = MODES[name](channel)
    try:
        while True:
            command = control.recv()
            if command is None:
                return
            tensor = mode.recv()
            ok = command == 0 or all(float(tensor[i]) == value for i, value in _expected(command // 4))
            done = time.monotonic()
            del tensor
            control.send((done, ok))
    finally:
        mode.close()


def measure_mode(name: str, sizes: list[int], scale: float = 1.0, warmup: int = 2) -> dict[int, list[float]]:
    """Seconds per transfer, per size, for mode ``name``."""
    from tools.bench.modes import MODES

    kind = MODES[name].channel
    ctx = mp.get_context("spawn")
    send_control, send_remote = ctx.Pipe()
    recv_control, recv_remote = ctx.Pipe()
    cleanup = None
    sender_channel: Any
    receiver_channel: Any
    if kind == "pipe":
        a, b = ctx.Pipe()
        sender_channel, receiver_channel = a, b
    elif kind in ("queue", "pipe+queue"):
        import torch.multiprocessing as tmp

        queue = tmp.get_context("spawn").Queue()
        sender_channel = receiver_channel = queue
        if kind == "pipe+queue":  # frames over a pipe, buffers through the queue
            a, b = ctx.Pipe()
            sender_channel, receiver_channel = (a, queue), (b, queue)
    else:
        folder = tempfile.mkdtemp(prefix="tw-bench-")
        address = f"ipc://{folder}/sock"
        sender_channel, receiver_channel = (address, "sender"), (address, "receiver")
        cleanup = folder
    sender = ctx.Process(target=_sender, args=(name, send_remote, sender_channel), daemon=True)
    receiver = ctx.Process(target=_receiver, args=(name, recv_remote, receiver_channel), daemon=True)
    sender.start()
    receiver.start()
    results: dict[int, list[float]] = {}
    try:
        for nbytes in sizes:
            samples = []
            floor_only = name.startswith("floor")
            for rep in range(warmup + reps_for(nbytes, scale)):
                recv_control.send(0 if floor_only else nbytes)
                send_control.send(nbytes)
                start = send_control.recv()
                done, ok = recv_control.recv()
                if not ok:
                    raise RuntimeError(f"{name}: wrong data received at {nbytes} bytes")
                if rep >= warmup:
                    samples.append(done - start)
                if nbytes >= 64 * MiB:
                    time.sleep(0.2)  # let the previous transfer's memory be freed outside the next one
            results[nbytes] = samples
    finally:
        for control in (send_control, recv_control):
            try:
                control.send(None)
            except OSError:
                pass
        for proc in (sender, receiver):
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        if cleanup:
            import shutil

            shutil.rmtree(cleanup, ignore_errors=True)
    return results


def measure_copyto(sizes: list[int], scale: float = 1.0) -> dict[int, list[float]]:
    """Seconds for ``np.copyto`` of each size into a warm destination (the bandwidth floor)."""
    results = {}
    for nbytes in sizes:
        src = template(nbytes).numpy()
        dst = np.empty_like(src)
        np.copyto(dst, src)
        samples = []
        for _ in range(reps_for(nbytes, scale) * 2):
            start = time.perf_counter()
            np.copyto(dst, src)
            samples.append(time.perf_counter() - start)
        results[nbytes] = samples
        del src, dst
    return results


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(samples),
        "p10": float(np.percentile(samples, 10)),
        "p90": float(np.percentile(samples, 90)),
    }
