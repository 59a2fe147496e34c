"""Where one cross-process transfer's time goes: per-stage medians on each side.

    python -m tools.bench.stages [--mib 1] [--count 300] [--copy] [--spin]

A spawned sender encodes ``diffusion.Output(output=tensor)`` with a pool-allocated tensor (or,
with ``--copy``, an ordinary one the pool copies) and sends frame 0 over a pipe; a spawned
receiver decodes it and reads one element. The stages of the encoder and decoder are wrapped
with timers in those processes only (each wrapper adds well under a microsecond), so the figures
are those of a process that waits between messages, as in ``tools.bench``; with ``--spin`` the
receiver polls its pipe instead of sleeping in it (what a busy-looping consumer sees). With two
CPUs or more the sender runs on one and the receiver on another (``tools.bench.cpus``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tools.bench.cpus import two_cpus

__all__ = ["measure", "main"]

Samples = dict[str, list[int]]


def _wrap(owner: Any, name: str, samples: Samples, label: str) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return inner(*args, **kwargs)
        finally:
            samples.setdefault(label, []).append(time.perf_counter_ns() - start)

    setattr(owner, name, timed)


class _TimedDecoder:
    """A ``decode`` callable whose calls are timed (msgspec's own decoder type takes no wrapper)."""

    def __init__(self, inner: Callable[[Any], Any], samples: Samples, label: str) -> None:
        self.inner, self.samples, self.label = inner, samples, label

    def decode(self, data: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.inner(data)
        finally:
            self.samples.setdefault(self.label, []).append(time.perf_counter_ns() - start)


def _wrap_frame_decoder(decoder_module: Any, samples: Samples, label: str) -> None:
    """Time the one typed decode of frame 0 that decoders made from now on run."""
    make: Callable[..., Any] = decoder_module._frame_decoder
    decoder_module._frame_decoder = lambda *args: _TimedDecoder(make(*args).decode, samples, label)


def _wrap_checking(checking: Any, samples: Samples, label: str) -> None:
    """Time the schema-check decodes of the encoder's checking decoders made from now on (the
    encoder runs them inline, so there is no call of its own to wrap)."""
    init: Callable[..., None] = checking.__init__

    def timed_init(self: Any, cls: type) -> None:
        init(self, cls)
        self.decode = _TimedDecoder(self.decode, samples, label).decode

    checking.__init__ = timed_init


def _medians(samples: Samples, skip: int) -> dict[str, float]:
    return {label: statistics.median(values[skip:]) / 1000 for label, values in samples.items() if values[skip:]}


def _sender(pipe: Any, control: Any, count: int, nbytes: int, copy: bool, cpus: set[int] | None) -> None:
    import numpy as np
    import torch

    import tensorwire as tw
    import tensorwire._encoder as encoder_module
    from tensorwire import transports
    from tensorwire._body import Checking
    from tensorwire._tensors import Outgoing
    from tensorwire.builtins import diffusion

    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    samples: Samples = {}
    _wrap(encoder_module, "encode_body", samples, "encode: body (+ descriptors)")
    _wrap(Outgoing, "tensor", samples, "encode: descriptor, per tensor")
    _wrap_checking(Checking, samples, "encode: schema check (decode)")
    _wrap(tw.Encoder, "_export_all", samples, "encode: export")
    shm = transports.ShmTransport()
    encoder = tw.Encoder(shm, tw.EncodeOptions(inline_threshold=0, embed_threshold=0))  # through the pool
    template = torch.ones(max(1, nbytes // 4))
    try:
        for _ in range(count):
            control.recv()
            tensor = template if copy else shm.empty_like(template)
            if not copy:  # numpy copies on this thread; torch's copy_ would leave its worker threads
                # spinning into the transfer, on the receiver's CPU (2.5x its decode on two CPUs)
                np.copyto(tensor.numpy(), template.numpy())
            start = time.perf_counter_ns()
            message = diffusion.Output(output=tensor)
            built = time.perf_counter_ns()
            frames = encoder.encode(message)
            done = time.perf_counter_ns()
            pipe.send_bytes(tw.join(frames))
            samples.setdefault("sender: build the message", []).append(built - start)
            samples.setdefault("sender: encode, total", []).append(done - built)
            del tensor, message, frames
        control.send(samples)
    finally:
        shm.close()


def _receiver(pipe: Any, control: Any, count: int, spin: bool, cpus: set[int] | None) -> None:
    import tensorwire as tw
    import tensorwire._decoder as decoder_module
    import tensorwire._incoming as incoming_module
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY

    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    samples: Samples = {}
    _wrap(decoder_module, "walk", samples, "decode: depth walk")
    _wrap_frame_decoder(decoder_module, samples, "decode: frame 0 (+ body, tensors)")
    _wrap(incoming_module.Incoming, "read_buffers", samples, "decode: buffer table and imports")
    _wrap(tw.Decoder, "verify_handles", samples, "decode: handle checks")
    _wrap(transports.ShmTransport, "import_", samples, "decode: import buffers")
    _wrap(incoming_module, "verify_descriptor", samples, "decode: descriptor check, per tensor")
    _wrap(incoming_module, "build", samples, "decode: build one tensor")
    shm = transports.ShmTransport()
    decoder = tw.Decoder(REGISTRY, [shm])
    try:
        for _ in range(count):
            if spin:
                while not pipe.poll(0):
                    pass
            blob = pipe.recv_bytes()
            start = time.perf_counter_ns()
            tensor = decoder.decode(tw.split(bytearray(blob))).output
            float(tensor[0])
            samples.setdefault("receiver: decode, total", []).append(time.perf_counter_ns() - start)
            del tensor
            control.send(None)
        control.send(samples)
    finally:
        shm.close()


def _recv(conn: Any, *procs: Any) -> Any:
    """The next object on ``conn``; ``RuntimeError`` instead once one of ``procs`` has failed (or all
    have exited) without it coming."""
    while not conn.poll(1.0):
        failed = [p for p in procs if not p.is_alive() and p.exitcode != 0]
        if (failed or not any(p.is_alive() for p in procs)) and not conn.poll(0):
            culprit = (failed or list(procs))[0]
            raise RuntimeError(f"{culprit.name} exited with code {culprit.exitcode} mid-measurement")
    return conn.recv()


def measure(nbytes: int, count: int, copy: bool = False, spin: bool = False) -> dict[str, float]:
    """Median microseconds per stage over ``count`` transfers (the first tenth are warm-ups)."""
    ctx = mp.get_context("spawn")
    send_end, recv_end = ctx.Pipe()
    sender_control, sender_remote = ctx.Pipe()
    receiver_control, receiver_remote = ctx.Pipe()
    cpus = two_cpus()
    sender_cpus, receiver_cpus = cpus if cpus is not None else (None, None)
    sender = ctx.Process(target=_sender, args=(send_end, sender_remote, count, nbytes, copy, sender_cpus), daemon=True)
    receiver = ctx.Process(target=_receiver, args=(recv_end, receiver_remote, count, spin, receiver_cpus), daemon=True)
    sender.start()
    receiver.start()
    try:
        for _ in range(count):
            sender_control.send(None)
            _recv(receiver_control, sender, receiver)
        skip = count // 10
        medians = _medians(_recv(sender_control, sender, receiver), skip)
        medians.update(_medians(_recv(receiver_control, sender, receiver), skip))
        return medians
    finally:
        for proc in (sender, receiver):
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.stages", description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=1.0, help="tensor size in MiB (default 1)")
    parser.add_argument("--count", type=int, default=300, help="transfers (default 300)")
    parser.add_argument("--copy", action="store_true", help="an ordinary tensor the pool copies (default: allocated)")
    parser.add_argument("--spin", action="store_true", help="the receiver polls its pipe instead of sleeping in it")
    args = parser.parse_args(argv)
    medians = measure(int(args.mib * 2**20), args.count, args.copy, args.spin)
    for label, micros in medians.items():
        print(f"{label:38s} {micros:9.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
