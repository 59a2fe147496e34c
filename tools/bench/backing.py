"""The memfd-backed pool against the named-segment pool, the pool modes of both backings interleaved.

    python -m tools.bench.backing [--sizes 64K,1M,16M,256M,1G] [--rounds 20] [--json]

Each round moves one tensor through every pool mode in turn across processes, with the harness of
``tools.bench``: one copy memfd, one copy named, pool-allocated memfd, pool-allocated named (in
an order shuffled afresh each round). Per size and mode: the median and min-max of each backing and
``named/memfd`` of the medians (above 1: memfd is faster), then a verdict. The memfd pool stays
the default unless it is more than 10% slower at some size from 1 MiB to 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from tools.bench.harness import GiB, KiB, MiB, fits, measure_modes, parse_size, size_label
from tools.bench.modes import POOL_TWINS

__all__ = ["SIZES", "TOLERANCE", "compare", "main", "render"]

SIZES = [64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB]
TOLERANCE = 0.10  # how much slower than the named pool the memfd pool may be
DECIDING = (1 * MiB, 1 * GiB)  # the sizes whose verdicts decide the default


def _stats(samples: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(samples) * 1e3,
        "min_ms": min(samples) * 1e3,
        "max_ms": max(samples) * 1e3,
    }


def compare(sizes: list[int], rounds: int, warmup: int = 2) -> dict[str, Any]:
    """Rows (size, pool mode, both backings, ``named_over_memfd``) and one verdict per size."""
    names = [mode.name for twins in POOL_TWINS.values() for mode in twins]
    skipped = [s for s in sizes if not fits(s, len(names))]
    sizes = [s for s in sizes if s not in skipped]
    raw = measure_modes(names, sizes, warmup=warmup, rounds=rounds)
    rows, verdicts = [], []
    for nbytes in sizes:
        slower: dict[str, float] = {}  # pool mode -> how much slower memfd is (negative: faster)
        for kind, (memfd, named) in POOL_TWINS.items():
            ours, theirs = _stats(raw[memfd.name][nbytes]), _stats(raw[named.name][nbytes])
            ratio = theirs["median_ms"] / ours["median_ms"]
            slower[kind] = 1 / ratio - 1
            rows.append(
                {
                    "bytes": nbytes,
                    "size": size_label(nbytes),
                    "kind": kind,
                    "memfd": ours,
                    "named": theirs,
                    "named_over_memfd": ratio,
                }
            )
        worst = max(slower, key=lambda kind: slower[kind])
        verdicts.append(
            {
                "bytes": nbytes,
                "size": size_label(nbytes),
                "worst": worst,
                "memfd_slower_pct": slower[worst] * 100,
                "within": slower[worst] <= TOLERANCE,
                "deciding": DECIDING[0] <= nbytes <= DECIDING[1],
            }
        )
    deciding = [v for v in verdicts if v["deciding"]]
    return {
        "rounds": rounds,
        "warmup": warmup,
        "rows": rows,
        "verdicts": verdicts,
        "skipped_sizes": [size_label(s) for s in skipped],
        "memfd_stays_default": all(v["within"] for v in deciding) if deciding else None,
    }


def _verdict(verdict: dict[str, Any]) -> str:
    pct, worst = verdict["memfd_slower_pct"], verdict["worst"]
    if not verdict["within"]:
        return f"verdict: memfd slower by {pct:.1f}% ({worst})"
    detail = f"at most {pct:.1f}% slower, {worst}" if pct > 0 else "faster in both modes"
    return f"verdict: memfd within {TOLERANCE:.0%} ({detail})"


def render(results: dict[str, Any]) -> str:
    """The comparison as text: a block per size, then the decision on the default."""
    lines = [
        f"pool backings across processes: {results['rounds']} interleaved rounds per size "
        f"(+{results['warmup']} warm-up); named/memfd > 1: memfd faster"
    ]
    header = (
        f"{'pool mode':<16} {'memfd median (min-max) ms':>30} {'named median (min-max) ms':>30} {'named/memfd':>12}"
    )
    verdicts = {v["bytes"]: v for v in results["verdicts"]}
    for index, row in enumerate(results["rows"]):
        if index == 0 or row["bytes"] != results["rows"][index - 1]["bytes"]:
            lines += ["", f"== {row['size']}", header]
        cells = [f"{s['median_ms']:.3f} ({s['min_ms']:.3f}-{s['max_ms']:.3f})" for s in (row["memfd"], row["named"])]
        lines.append(f"{row['kind']:<16} {cells[0]:>30} {cells[1]:>30} {row['named_over_memfd']:>12.2f}")
        if index + 1 == len(results["rows"]) or results["rows"][index + 1]["bytes"] != row["bytes"]:
            lines.append(_verdict(verdicts[row["bytes"]]))
    if results["skipped_sizes"]:
        lines.append(f"\nskipped (not enough free memory): {', '.join(results['skipped_sizes'])}")
    span = f"{size_label(DECIDING[0])} to {size_label(DECIDING[1])}"
    slower = [v["size"] for v in results["verdicts"] if v["deciding"] and not v["within"]]
    if results["memfd_stays_default"] is None:
        lines.append(f"\ndefault: undecided (no size from {span} measured)")
    elif slower:
        lines.append(f"\ndefault: memfd is more than {TOLERANCE:.0%} slower at {', '.join(slower)}")
    else:
        lines.append(f"\ndefault: memfd stays (within {TOLERANCE:.0%} at every size measured from {span})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.backing", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", help="comma-separated sizes, e.g. 1M,256M (default: 64K,1M,16M,256M,1G)")
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds per size (default: 20)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else SIZES
    results = compare(sizes, args.rounds)
    print(json.dumps(results, indent=2) if args.json else render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
