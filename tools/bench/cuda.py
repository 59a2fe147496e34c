"""GPU benchmark (needs a CUDA device): device-to-host copies and cross-process device transfers.

1. D2H bandwidth of one bf16 tensor (1 GiB by default) into: a warm CUDA-registered shared-memory
   slot (``CudaShmTransport.export_device``: side stream after the producer's, then synchronize),
   a pinned tensor (``copy_(non_blocking=True)`` + synchronize), and pageable memory (``.cpu()``).
   The first registered transfer, which creates and registers the slot, is reported apart.
2. End to end across processes, from "sender starts encoding" to "receiver holds the tensor on its
   GPU" (the receiver synchronizes, checks two elements and reports the time; both processes share
   CLOCK_MONOTONIC): ``CudaShmTransport`` with receiver placement (registered, and pageable),
   staging through ``ShmTransport`` with placement, and the reference sources' style (``.cpu()``,
   a fresh segment, copy out, ``.to(device)``).

Medians with p10-p90 over the repetitions; the table is printed last.

    python -m tools.bench.cuda [--mib 1024] [--reps 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from typing import Any

import numpy as np
import torch

from tools.bench.harness import summary

MODES = ("cuda_shm, registered receive", "cuda_shm, pageable receive", "staged via shm", "reference style")


def _d2h(nbytes: int, reps: int) -> dict[str, Any]:
    import transports

    source = torch.randn(nbytes // 2, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    storage = source.view(torch.uint8).reshape(-1)
    out: dict[str, Any] = {}
    transport = transports.CudaShmTransport()
    reader = transports.ShmTransport(pool=False)
    try:
        start = time.perf_counter()
        handle = transport.export_device(storage, 0, nbytes, [])
        out["registered, first (creates + registers the slot)"] = [time.perf_counter() - start]
        if handle is None:
            raise SystemExit("the registered pool's budget has no room for the tensor (is /dev/shm too small?)")
        reader.import_(handle, [], nbytes, borrow=True)  # claim it; the lease dies at once: the slot is free again
        samples = []
        for _ in range(reps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            handle = transport.export_device(storage, 0, nbytes, [])
            samples.append(time.perf_counter() - start)
            assert handle is not None and transport.registrations == 1  # the same registered slot every time
            reader.import_(handle, [], nbytes, borrow=True)
        out["registered shm slot (warm)"] = samples
    finally:
        transport.close()
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        pinned.copy_(storage, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        samples.append(time.perf_counter() - start)
    out["pinned copy_ (warm)"] = samples
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        host = storage.cpu()
        samples.append(time.perf_counter() - start)
        del host
    out["pageable .cpu()"] = samples
    return out


def _receiver(conn: Any) -> None:
    import codec
    import transports
    from codec.generated import REGISTRY
    from codec.placement import Placement

    torch.cuda.init()
    shm = transports.ShmTransport()
    decoders = {
        "registered": codec.Decoder(REGISTRY, transports=[shm], device=Placement("cuda:0")),
        "pageable": codec.Decoder(REGISTRY, transports=[shm], device=Placement("cuda:0", register_host=False)),
    }
    from multiprocessing import shared_memory

    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        kind, payload = job
        if kind == "reference":
            name, numel = payload
            segment = shared_memory.SharedMemory(name=name)
            host = np.ndarray((numel,), dtype=np.uint16, buffer=segment.buf).copy()
            segment.close()
            segment.unlink()
            tensor = torch.from_numpy(host).view(torch.bfloat16).to("cuda:0")
        else:
            tensor = decoders[kind].decode(payload).output
        torch.cuda.synchronize()
        ok = tensor.device.type == "cuda" and float(tensor[1]) == 1.0 and float(tensor[-1]) == 1.0
        conn.send((time.monotonic(), ok))
        del tensor


def _end_to_end(nbytes: int, reps: int) -> dict[str, Any]:
    import codec
    import transports
    from codec.generated import diffusion

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    receiver = ctx.Process(target=_receiver, args=(child,), daemon=True)
    receiver.start()
    assert parent.recv() == "ready"
    tensor = torch.ones(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    cuda_shm = transports.CudaShmTransport()
    shm = transports.ShmTransport()
    senders = {
        MODES[0]: ("registered", codec.Encoder(transport=cuda_shm)),
        MODES[1]: ("pageable", codec.Encoder(transport=cuda_shm)),
        MODES[2]: ("registered", codec.Encoder(transport=shm)),
    }
    out: dict[str, Any] = {}
    try:
        for mode in MODES:
            samples = []
            for rep in range(reps + 1):  # the first is a warm-up
                torch.cuda.synchronize()
                time.sleep(0.05)
                start = time.monotonic()
                if mode == MODES[3]:
                    from multiprocessing import resource_tracker, shared_memory

                    host = tensor.cpu().view(torch.uint16).numpy()
                    segment = shared_memory.SharedMemory(create=True, size=nbytes)
                    np.ndarray(host.shape, dtype=host.dtype, buffer=segment.buf)[:] = host
                    parent.send(("reference", (segment.name, host.size)))
                    segment.close()
                    resource_tracker.unregister(segment._name, "shared_memory")  # type: ignore[attr-defined]  # the receiver unlinks
                else:
                    kind, encoder = senders[mode]
                    frames = encoder.encode(diffusion.Output(output=tensor))
                    parent.send((kind, [bytes(memoryview(f)) for f in frames]))
                done, ok = parent.recv()
                if not ok:
                    raise AssertionError(f"{mode}: the receiver saw wrong values")
                if rep:
                    samples.append(done - start)
            out[mode] = samples
    finally:
        parent.send(None)
        receiver.join(30)
        cuda_shm.close()
        shm.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
        "d2h": {k: summary(v) for k, v in d2h.items()},
        "end_to_end": {k: summary(v) for k, v in e2e.items()},
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)
    print(f"\n{results['device']}, torch {results['torch']}, one {args.mib} MiB bf16 tensor, medians (p10-p90)")
    print(f"{'path':58} {'ms':>24} {'GB/s':>8}")
    for section, rows in (("D2H", results["d2h"]), ("cross-process, onto the receiver's GPU", results["end_to_end"])):
        print(f"-- {section}")
        for name, s in rows.items():
            band = f"{s['median'] * 1e3:8.2f} ({s['p10'] * 1e3:.2f}-{s['p90'] * 1e3:.2f})"
            print(f"{name:58} {band:>24} {nbytes / 1e9 / s['median']:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
