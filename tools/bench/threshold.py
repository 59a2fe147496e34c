"""The inline/out-of-band crossover: tensorwire inline vs the pool, 4 KiB to 1 MiB.

    python -m tools.bench.threshold

Prints both medians per size and the smallest size from which the pool is faster; that size is
the default ``EncodeOptions.inline_threshold``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence

from tools.bench.harness import measure_mode
from tools.bench.modes import TwInline, TwPool

SWEEP = [4 * 1024 * 2**i for i in range(9)]  # 4 KiB .. 1 MiB


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.threshold", description=__doc__.splitlines()[0])
    parser.parse_args(argv)  # no options: --help, or anything else, before minutes of measuring
    inline = measure_mode(TwInline.name, SWEEP)
    pool = measure_mode(TwPool.name, SWEEP)
    crossover = None
    print(f"{'size':>10} {'inline us':>10} {'pool us':>10}")
    for size in SWEEP:
        a, b = statistics.median(inline[size]) * 1e6, statistics.median(pool[size]) * 1e6
        print(f"{size:>10} {a:>10.1f} {b:>10.1f}")
        if crossover is None and b < a:
            crossover = size
    print(f"pool faster from {crossover} bytes" if crossover else "inline faster at every size")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
