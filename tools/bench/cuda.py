"""GPU benchmark (needs a CUDA device): device-to-host copies and cross-process device transfers.

1. D2H bandwidth of one bf16 tensor (1 GiB by default) into: a warm CUDA-registered shared-memory
   slot (``CudaShmTransport.export_device``: side stream after the producer's, then synchronize),
   a pinned tensor (``copy_(non_blocking=True)`` + synchronize), and pageable memory (``.cpu()``).
   The first registered transfer, which creates and registers the slot, is reported apart.
2. End to end across processes, from "sender starts encoding" to "receiver holds the tensor on its
   GPU" (the receiver synchronizes, checks two elements and reports the time; both processes share
   CLOCK_MONOTONIC): ``CudaShmTransport`` with receiver placement (registered, and pageable),
   staging through ``ShmTransport`` with placement, and the reference sources' style (``.cpu()``,
   a fresh segment, copy out, ``.to(device)``). Each mode's first transfer is a warm-up, not timed:
   it creates the sender's slot, and the receiver registers its mapping of it (kept for the next).

Medians with p10-p90 over the repetitions; the table is printed last.

    python -m tools.bench.cuda [--mib 1024] [--reps 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from tools.bench.harness import summary

MODES = ("cuda_shm, registered receive", "cuda_shm, pageable receive", "staged via shm", "reference style")


def _time(reps: int, step: Callable[[], Any]) -> list[float]:
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return samples


def _d2h(nbytes: int, reps: int) -> dict[str, Any]:
    """Each path's samples, or the error that stopped it (one failing path does not hide the others)."""
    from tensorwire import transports

    source = torch.randn(nbytes // 2, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    storage = source.view(torch.uint8).reshape(-1)
    out: dict[str, Any] = {}
    transport = transports.CudaShmTransport()
    reader = transports.ShmTransport(pool=False)

    def registered() -> None:
        handle = transport.export_device(storage, 0, nbytes, [])
        if handle is None:
            raise RuntimeError("the registered pool's budget has no room for the tensor (is /dev/shm too small?)")
        reader.import_(handle, [], nbytes, borrow=True)  # claimed, and the lease dies at once: the slot is free

    try:
        out["registered, first (creates + registers the slot)"] = _attempt(lambda: _time(1, registered))
        out["registered shm slot (warm)"] = _attempt(lambda: _time(reps, registered))
        out["registrations after the warm runs"] = transport.registrations
    finally:
        transport.close()
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def pinned_copy() -> None:
        pinned.copy_(storage, non_blocking=True)
        torch.cuda.current_stream().synchronize()

    out["pinned copy_ (warm)"] = _attempt(lambda: _time(reps, pinned_copy))
    out["pageable .cpu()"] = _attempt(lambda: _time(reps, storage.cpu))
    return out


def _attempt(measure: Callable[[], list[float]]) -> list[float] | str:
    try:
        return measure()
    except Exception as exc:  # reported in the table
        return f"failed: {type(exc).__name__}: {exc}"


def _receiver(conn: Any) -> None:
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY
    from tensorwire.placement import Placement

    torch.cuda.init()  # type: ignore[no-untyped-call]
    # a transport each: a registered decoder keeps the slots it maps registered, which would make
    # the pageable decoder's copies read page-locked memory too
    decoders = {
        "registered": tw.Decoder(REGISTRY, transports=[transports.ShmTransport()], device=Placement("cuda:0")),
        "pageable": tw.Decoder(
            REGISTRY, transports=[transports.ShmTransport()], device=Placement("cuda:0", register_host=False)
        ),
    }
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            tensor = _receive(decoders, *job)
            torch.cuda.synchronize()
            ok = tensor.device.type == "cuda" and float(tensor[1]) == 1.0 and float(tensor[-1]) == 1.0
            conn.send((time.monotonic(), "" if ok else "the receiver saw wrong values"))
            del tensor
        except Exception as exc:  # the sender reports it
            conn.send((time.monotonic(), f"{type(exc).__name__}: {exc}"))


def _receive(decoders: dict[str, Any], kind: str, payload: Any) -> torch.Tensor:
    if kind != "reference":
        tensor: torch.Tensor = decoders[kind].decode(payload).output
        return tensor
    from multiprocessing import shared_memory

    name, numel = payload
    segment = shared_memory.SharedMemory(name=name)
    host = np.ndarray((numel,), dtype=np.uint16, buffer=segment.buf).copy()
    segment.close()
    segment.unlink()
    return torch.from_numpy(host).view(torch.bfloat16).to("cuda:0")


def _send_reference(parent: Any, tensor: torch.Tensor, nbytes: int) -> None:
    """The reference sources' style: ``.cpu()``, a fresh segment, the receiver copies out and unlinks.

    The receiver is this process's spawned child and shares its resource tracker, so the receiver's
    ``unlink`` also takes the segment off the tracker's list (unregistering here too made the
    tracker print a ``KeyError`` for every segment)."""
    from multiprocessing import shared_memory

    host = tensor.cpu().view(torch.uint16).numpy()
    segment = shared_memory.SharedMemory(create=True, size=nbytes)
    np.ndarray(host.shape, dtype=host.dtype, buffer=segment.buf)[:] = host
    parent.send(("reference", (segment.name, host.size)))
    segment.close()


def _end_to_end(nbytes: int, reps: int) -> dict[str, Any]:
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    receiver = ctx.Process(target=_receiver, args=(child,), daemon=True)
    receiver.start()
    assert parent.recv() == "ready"
    tensor = torch.ones(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    cuda_shm = transports.CudaShmTransport()
    shm = transports.ShmTransport()
    senders = {
        MODES[0]: ("registered", tw.Encoder(transport=cuda_shm)),
        MODES[1]: ("pageable", tw.Encoder(transport=cuda_shm)),
        MODES[2]: ("registered", tw.Encoder(transport=shm)),
    }

    def one(mode: str) -> float:
        torch.cuda.synchronize()
        time.sleep(0.05)
        start = time.monotonic()
        if mode == MODES[3]:
            _send_reference(parent, tensor, nbytes)
        else:
            kind, encoder = senders[mode]
            frames = encoder.encode(diffusion.Output(output=tensor))
            parent.send((kind, [bytes(memoryview(f)) for f in frames]))
        done, error = parent.recv()
        if error:
            raise RuntimeError(f"receiver: {error}")
        return float(done - start)

    def runs(mode: str) -> list[float]:
        return [one(mode) for _ in range(reps + 1)][1:]  # the first is a warm-up

    out: dict[str, Any] = {}
    try:
        for mode in MODES:
            out[mode] = _attempt(partial(runs, mode))
    finally:
        parent.send(None)
        receiver.join(30)
        cuda_shm.close()
        shm.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.cuda", description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="tensor size in MiB (default 1024)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 2
    nbytes = args.mib * 1024 * 1024
    d2h = _d2h(nbytes, args.reps)
    e2e = _end_to_end(nbytes, args.reps)
    results = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "nbytes": nbytes,
        "d2h": {k: summary(v) if isinstance(v, list) else v for k, v in d2h.items()},
        "end_to_end": {k: summary(v) if isinstance(v, list) else v for k, v in e2e.items()},
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)
    print(f"\n{results['device']}, torch {results['torch']}, one {args.mib} MiB bf16 tensor, medians (p10-p90)")
    print(f"{'path':58} {'ms':>24} {'GB/s':>8}")
    for section, rows in (("D2H", results["d2h"]), ("cross-process, onto the receiver's GPU", results["end_to_end"])):
        print(f"-- {section}")
        for name, s in rows.items():
            if not isinstance(s, dict):
                print(f"{name:58} {s}")
                continue
            band = f"{s['median'] * 1e3:8.2f} ({s['p10'] * 1e3:.2f}-{s['p90'] * 1e3:.2f})"
            print(f"{name:58} {band:>24} {nbytes / 1e9 / s['median']:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
