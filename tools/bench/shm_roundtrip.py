"""Cross-process transfer of one large float32 tensor through one-shot shared-memory segments, against np.copyto.

A long-lived spawned receiver decodes each message (private copy, or borrowed view of the
mapping), checks a few elements and reports when the tensor was usable; the time counted is from
"sender starts encoding" to that moment (CLOCK_MONOTONIC is shared by both processes). In the same
run: ``np.copyto`` of the same tensor into a warm destination (one warm copy) and into freshly
allocated memory (a copy that takes page faults). Medians over the repetitions, with ratios. A short
pause between repetitions keeps the kernel's freeing of the previous message out of the next one.

    python -m tools.bench.shm_roundtrip [--mib 256] [--reps 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch


def _receiver(conn: Any) -> None:
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY

    shm = transports.ShmTransport(pool=False)
    decoders = {
        borrow: tw.Decoder(REGISTRY, transports=[shm], options=tw.DecodeOptions(borrow=borrow))
        for borrow in (False, True)
    }
    while True:
        job = conn.recv()
        if job is None:
            return
        frames = [conn.recv_bytes() for _ in range(job["frames"])]
        message = decoders[job["borrow"]].decode(frames)
        tensor = message.output
        ok = float(tensor[0]) == job["first"] and float(tensor[-1]) == job["last"]
        done = time.monotonic()
        del message, tensor
        conn.send((done, ok))


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def run(mib: int, reps: int) -> dict[str, Any]:
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    numel = mib * 2**20 // 4
    tensor = torch.arange(numel, dtype=torch.float32)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    receiver = ctx.Process(target=_receiver, args=(child,))
    receiver.start()
    encoder = tw.Encoder(transport=transports.ShmTransport(pool=False), options=tw.EncodeOptions(inline_threshold=0))
    first, last = float(tensor[0]), float(tensor[-1])
    results: dict[str, Any] = {"mib": mib, "reps": reps, "modes": {}}
    try:
        for label, borrow in (("shm copy-receive", False), ("shm borrow", True)):
            samples = []
            for rep in range(reps + 1):  # the first is a warm-up
                start = time.monotonic()
                frames = encoder.encode(diffusion.Output(output=tensor))
                parent.send({"frames": len(frames), "borrow": borrow, "first": first, "last": last})
                for frame in frames:
                    parent.send_bytes(frame)
                done, ok = parent.recv()
                if not ok:
                    raise RuntimeError(f"{label}: the receiver saw wrong data")
                if rep:
                    samples.append(done - start)
                time.sleep(0.2)  # let the previous message's pages be freed outside the timed window
            results["modes"][label] = samples
    finally:
        parent.send(None)
        receiver.join(timeout=60)
        if receiver.is_alive():
            receiver.kill()
    src = tensor.numpy()
    warm = np.empty_like(src)
    np.copyto(warm, src)
    copies = []
    fresh = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(warm, src)
        copies.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        dst = np.empty_like(src)
        np.copyto(dst, src)
        fresh.append(time.perf_counter() - t0)
        del dst
    results["modes"]["np.copyto (warm destination)"] = copies
    results["modes"]["np.copyto (fresh destination)"] = fresh
    floor = _median(copies)
    results["table"] = [
        {
            "mode": label,
            "median_ms": _median(samples) * 1e3,
            "p10_ms": float(np.percentile(samples, 10)) * 1e3,
            "p90_ms": float(np.percentile(samples, 90)) * 1e3,
            "gb_per_s": mib * 2**20 / _median(samples) / 1e9,
            "x_warm_copyto": _median(samples) / floor,
        }
        for label, samples in results["modes"].items()
    ]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.shm_roundtrip",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.mib, args.reps)
    if args.json:
        print(json.dumps(results["table"], indent=2))
        return 0
    print(f"{args.mib} MiB float32, cross-process, median of {args.reps} (p10-p90)")
    print(f"{'mode':<32} {'median ms':>10} {'p10-p90 ms':>16} {'GB/s':>7} {'x warm copyto':>14}")
    for row in results["table"]:
        spread = f"{row['p10_ms']:.1f}-{row['p90_ms']:.1f}"
        ratio = row["x_warm_copyto"]
        print(f"{row['mode']:<32} {row['median_ms']:>10.1f} {spread:>16} {row['gb_per_s']:>7.2f} {ratio:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
