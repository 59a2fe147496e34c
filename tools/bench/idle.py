"""What an idle pause costs the next piece of work on this machine: memory touched and messages decoded.

    python -m tools.bench.idle [--mib 64] [--rounds 5]

For each pause (0 to 0.5 s, slept before every timed step): the time of a pure-Python loop that
touches no new memory (2,000 additions), the time per 4 KiB page to write one byte in each page of
an already-touched array, and the time to decode one 4 KiB-tensor message with tensorwire and with
a raw msgspec Struct. A process that waits between messages (every receiver, every sender between
requests) pays what these rows show; where the loop slows down as much as the rest, the machine
runs slower after a pause, whatever the work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

__all__ = ["PAUSES", "main", "measure"]

PAUSES = [0.0, 0.001, 0.005, 0.02, 0.1, 0.5]
PAGE = 4096


class _Raw(msgspec.Struct, array_like=True):
    shape: list[int]
    dtype: str
    data: bytes


def _after(pause: float, step: Callable[[], Any], rounds: int) -> float:
    """Median seconds of ``step`` run right after sleeping ``pause``."""
    samples = []
    for _ in range(rounds):
        if pause:
            time.sleep(pause)
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(mib: int = 64, rounds: int = 5, pauses: list[float] | None = None) -> list[dict[str, float]]:
    """One row per pause: us per loop, ns per page written, us per message decoded (both decoders)."""
    import torch

    import tensorwire as tw
    from tensorwire.builtins import REGISTRY, diffusion

    area = np.ones(mib << 20, np.uint8)
    pages = np.arange(0, area.size, PAGE)
    tensor = torch.arange(1024, dtype=torch.float32)
    blob = tw.join(tw.Encoder().encode(diffusion.Output(output=tensor)))
    decoder = tw.Decoder(REGISTRY)
    raw = msgspec.msgpack.encode(_Raw([1024], "float32", tensor.numpy().tobytes()))
    raw_decoder = msgspec.msgpack.Decoder(_Raw)

    def loop() -> None:
        total = 0
        for i in range(2000):
            total += i

    def write() -> None:
        area[pages] = 2

    def tensorwire() -> None:
        decoder.decode(tw.split(bytearray(blob)))

    def msgspec_raw() -> None:
        item = raw_decoder.decode(raw)
        torch.frombuffer(bytearray(item.data), dtype=torch.float32)

    for step in (loop, write, tensorwire, msgspec_raw):
        for _ in range(20):
            step()  # warm
    rows = []
    for pause in PAUSES if pauses is None else pauses:
        rows.append(
            {
                "pause_s": pause,
                "loop_us": _after(pause, loop, rounds) * 1e6,
                "write_ns_per_page": _after(pause, write, rounds) / pages.size * 1e9,
                "tensorwire_decode_us": _after(pause, tensorwire, rounds * 4) * 1e6,
                "msgspec_decode_us": _after(pause, msgspec_raw, rounds * 4) * 1e6,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.idle", description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the touched array (default 64)")
    parser.add_argument("--rounds", type=int, default=5, help="timed steps per pause (default 5)")
    args = parser.parse_args(argv)
    print(f"{'pause s':>8} {'loop us':>8} {'write ns/page':>14} {'tensorwire decode us':>21} {'msgspec us':>11}")
    for row in measure(args.mib, args.rounds):
        print(
            f"{row['pause_s']:>8g} {row['loop_us']:>8.1f} {row['write_ns_per_page']:>14.1f}"
            f" {row['tensorwire_decode_us']:>21.1f} {row['msgspec_decode_us']:>11.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
