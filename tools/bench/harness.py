"""Cross-process timing: a long-lived spawned sender and receiver per mode, driven by this process.

For every size: the sender prepares the tensor (outside the timed window), the receiver waits;
the sender notes ``CLOCK_MONOTONIC`` and sends; the receiver checks three elements and notes the
clock when it holds a usable tensor. Warm-ups first, then medians with p10-p90. ``measure_mode``
runs one mode on its own; ``measure_modes`` keeps several alive together and interleaves them,
one transfer each per round.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import random
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import torch

__all__ = [
    "SIZES",
    "GiB",
    "KiB",
    "MiB",
    "fits",
    "measure_copyto",
    "measure_mode",
    "measure_modes",
    "missing_extra",
    "parse_size",
    "reps_for",
    "size_label",
    "summary",
]

KiB, MiB, GiB = 1024, 1024**2, 1024**3
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB]


def reps_for(nbytes: int, scale: float = 1.0) -> int:
    base = 40 if nbytes <= MiB else 15 if nbytes <= 16 * MiB else 7 if nbytes <= 256 * MiB else 4
    return max(2, int(base * scale))


def fits(nbytes: int, modes: int = 1) -> bool:
    """Whether the tensor fits in the memory now available, ``modes`` modes alive together: each
    sender's tensor and warm slots, and three more copies for the transfer under way."""
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return (2 * modes + 3) * nbytes < available


def parse_size(text: str) -> int:
    """``4K``, ``16M``, ``1G`` or a byte count."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def size_label(nbytes: int) -> str:
    """``4 KiB``, ``16 MiB``, ``1 GiB``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


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


def missing_extra(name: str) -> str | None:
    """Why mode ``name`` cannot run here (an optional module it imports is missing), or None."""
    from tools.bench.modes import MODES

    for module in MODES[name].requires:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return str(exc)
    return None


class _Pair:
    """One mode's long-lived spawned sender and receiver, driven over two control pipes."""

    def __init__(self, name: str) -> None:
        from tools.bench.modes import MODES

        mode = MODES[name]
        problem = missing_extra(name)
        if problem is not None:  # an ImportError here rather than a child that dies
            raise ImportError(problem)
        self.name = name
        self._unchecked = not mode.carries
        ctx = mp.get_context("spawn")
        self._send, send_remote = ctx.Pipe()
        self._recv, recv_remote = ctx.Pipe()
        self._folder: str | None = None
        local: list[Any] = [send_remote, recv_remote]  # ends only the children use: closed here once they run
        sender_channel: Any
        receiver_channel: Any
        if mode.channel == "pipe":
            a, b = ctx.Pipe()
            sender_channel, receiver_channel = a, b
            local += [a, b]
        elif mode.channel in ("queue", "pipe+queue"):
            import torch.multiprocessing as tmp

            queue = tmp.get_context("spawn").Queue()
            sender_channel = receiver_channel = queue
            if mode.channel == "pipe+queue":  # frames over a pipe, buffers through the queue
                a, b = ctx.Pipe()
                sender_channel, receiver_channel = (a, queue), (b, queue)
                local += [a, b]
        else:
            self._folder = tempfile.mkdtemp(prefix="tw-bench-")
            address = f"ipc://{self._folder}/sock"
            sender_channel, receiver_channel = (address, "sender"), (address, "receiver")
        # held for the pair's life: a queue dropped here would unlink its semaphores before the
        # spawned children open them
        self._channels = (sender_channel, receiver_channel)
        self._procs = [
            ctx.Process(target=_sender, args=(name, send_remote, sender_channel), daemon=True),
            ctx.Process(target=_receiver, args=(name, recv_remote, receiver_channel), daemon=True),
        ]
        for proc in self._procs:
            proc.start()
        for end in local:  # a child that dies is then an EOF here, never a wait forever
            end.close()

    def transfer(self, nbytes: int) -> float:
        """Seconds from "sender starts encoding" to "receiver holds the tensor", for one tensor."""
        self._recv.send(0 if self._unchecked else nbytes)
        self._send.send(nbytes)
        try:
            start = self._send.recv()
            done, ok = self._recv.recv()
        except EOFError:
            codes = [proc.exitcode for proc in self._procs]
            raise RuntimeError(f"{self.name}: a benchmark process died (exit codes {codes})") from None
        if not ok:
            raise RuntimeError(f"{self.name}: wrong data received at {nbytes} bytes")
        if nbytes >= 64 * MiB:
            time.sleep(0.2)  # let the previous transfer's memory be freed outside the next one
        seconds: float = done - start
        return seconds

    def close(self) -> None:
        for control in (self._send, self._recv):
            try:
                control.send(None)
            except OSError:
                pass
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)


def measure_modes(
    names: list[str], sizes: list[int], scale: float = 1.0, warmup: int = 2, rounds: int | None = None
) -> dict[str, dict[int, list[float]]]:
    """Seconds per transfer, per mode and size, every mode's processes alive together.

    Each round moves one tensor through every mode in turn, in an order shuffled afresh each round
    (seeded, so runs repeat): no mode always goes first or always follows the same other mode (a
    fixed or merely reversed order gives some modes warm caches after their own previous transfer
    and others cold ones after a big copy); ``warmup`` rounds first, then ``rounds`` (default:
    ``reps_for`` the size).
    """
    if len(set(names)) != len(names):
        raise ValueError(f"a mode is named twice: {names}")
    results: dict[str, dict[int, list[float]]] = {name: {} for name in names}
    with contextlib.ExitStack() as stack:
        pairs = []
        for name in names:
            pair = _Pair(name)
            stack.callback(pair.close)
            pairs.append(pair)
        for nbytes in sizes:
            count = reps_for(nbytes, scale) if rounds is None else rounds
            for name in names:
                results[name][nbytes] = []
            shuffle = random.Random(nbytes).shuffle
            for index in range(warmup + count):
                order = list(pairs)
                shuffle(order)
                for pair in order:
                    seconds = pair.transfer(nbytes)
                    if index >= warmup:
                        results[pair.name][nbytes].append(seconds)
    return results


def measure_mode(name: str, sizes: list[int], scale: float = 1.0, warmup: int = 2) -> dict[int, list[float]]:
    """Seconds per transfer, per size, for mode ``name`` on its own."""
    return measure_modes([name], sizes, scale, warmup)[name]


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
