"""Run the benchmark: ``python -m tools.bench`` (see the package docstring)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any

from tools.bench.harness import (
    SIZES,
    fits,
    measure_copyto,
    measure_mode,
    measure_modes,
    missing_extra,
    parse_size,
    size_label,
    summary,
)
from tools.bench.inprocess import measure_small
from tools.bench.modes import FLOORS, MODES, PEERS, TENSORWIRE, TinyMessage

FLOOR = TinyMessage.name


def run(
    sizes: list[int], scale: float, names: list[str], log: Any = sys.stderr, interleave: bool = False
) -> dict[str, Any]:
    """Every mode in ``names`` at every size that fits, one mode after another (``interleave``: all
    modes alive together, one transfer each per round), then ``np.copyto`` and the in-process cases."""
    for name in names:
        problem = missing_extra(name)
        if problem is not None:  # e.g. pyzmq missing: say so and go on
            print(f"skipped {name}: {problem}", file=log)
    names = [name for name in names if missing_extra(name) is None]
    skipped = [s for s in sizes if not fits(s, len(names) if interleave else 1)]
    sizes = [s for s in sizes if s not in skipped]
    raw: dict[str, dict[int, list[float]]] = {}
    if interleave:
        print(f"measuring {len(names)} modes, interleaved ...", file=log, flush=True)
        raw.update(measure_modes(names, sizes, scale))
    for name in [] if interleave else names:
        print(f"measuring {name} ...", file=log, flush=True)
        raw[name] = measure_mode(name, sizes, scale)
    print("measuring np.copyto ...", file=log, flush=True)
    raw["floor: np.copyto (warm)"] = measure_copyto(sizes, scale)
    rows = []
    peer_names = {m.name for m in PEERS}
    for nbytes in sizes:
        stats = {name: summary(samples[nbytes]) for name, samples in raw.items() if nbytes in samples}
        copy = stats["floor: np.copyto (warm)"]["median"]
        wake = stats[FLOOR]["median"] if FLOOR in stats else None
        peers = {n: s["median"] for n, s in stats.items() if n in peer_names}
        best_peer = min(peers, key=lambda n: peers[n]) if peers else None
        for name, s in stats.items():
            rows.append(
                {
                    "bytes": nbytes,
                    "size": size_label(nbytes),
                    "mode": name,
                    "median_ms": s["median"] * 1e3,
                    "p10_ms": s["p10"] * 1e3,
                    "p90_ms": s["p90"] * 1e3,
                    "gb_per_s": nbytes / s["median"] / 1e9,
                    "x_copyto": s["median"] / copy,
                    "x_wakeup": s["median"] / wake if wake else None,
                    "best_peer": best_peer,
                    "speedup_vs_best_peer": peers[best_peer] / s["median"] if best_peer else None,
                }
            )
    return {
        "rows": rows,
        "skipped_sizes": [size_label(s) for s in skipped],
        "in_process": measure_small(),
    }


def render(results: dict[str, Any]) -> str:
    lines = []
    header = (
        f"{'mode':<48} {'median ms':>10} {'p10-p90 ms':>17} {'GB/s':>7} {'x copyto':>9} {'x wake':>8} "
        f"{'vs best peer':>12}"
    )
    size = None
    for row in results["rows"]:
        if row["size"] != size:
            size = row["size"]
            best = row["best_peer"]
            lines += ["", f"== {size} (best peer: {best})", header]
        spread = f"{row['p10_ms']:.3f}-{row['p90_ms']:.3f}"
        wake = f"{row['x_wakeup']:.1f}" if row["x_wakeup"] else "-"
        peer = f"{row['speedup_vs_best_peer']:.2f}x" if row["speedup_vs_best_peer"] else "-"
        lines.append(
            f"{row['mode']:<48} {row['median_ms']:>10.3f} {spread:>17} {row['gb_per_s']:>7.2f} "
            f"{row['x_copyto']:>9.2f} {wake:>8} {peer:>12}"
        )
    if results["skipped_sizes"]:
        lines.append(f"\nskipped (not enough free memory): {', '.join(results['skipped_sizes'])}")
    lines += ["", "in process (median us per round trip):"]
    for row in results["in_process"]:
        lines.append(f"  {row['case']:<55} {row['us']:>8.2f}")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    modes = sorted({r["mode"] for r in results["rows"]} - {FLOOR})
    for mode in modes:
        points = [(r["bytes"], r["gb_per_s"]) for r in results["rows"] if r["mode"] == mode]
        style = "-" if mode.startswith("tensorwire") else "--" if not mode.startswith("floor") else ":"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", label=mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tensor size (bytes)")
    ax.set_ylabel("GB/s, sender starts encoding -> receiver holds the tensor")
    ax.set_title("Cross-process tensor transfer (2 vCPUs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _sizes(text: str) -> list[int]:
    """``--sizes``: each a positive multiple of 4 bytes (a float32 tensor's); else a usage error."""
    sizes = []
    for word in text.split(","):
        try:
            size = parse_size(word)
        except (ValueError, IndexError):
            raise argparse.ArgumentTypeError(f"{word!r} is not a size (4K, 16M, 1G or a byte count)") from None
        if size < 4 or size % 4:
            raise argparse.ArgumentTypeError(f"{word!r} is not a positive multiple of 4 bytes (a float32 tensor's)")
        sizes.append(size)
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensorwire bench", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--plot", metavar="FILE", help="write a PNG plot (GB/s vs size, log axes)")
    parser.add_argument("--sizes", type=_sizes, help="comma-separated sizes, e.g. 4K,1M,256M (default: 4K..1G)")
    parser.add_argument("--modes", help="semicolon-separated mode names (default: all)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--interleave", action="store_true", help="all modes alive together, one transfer each per round"
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or SIZES
    names = args.modes.split(";") if args.modes else [m.name for m in [*TENSORWIRE, *PEERS, *FLOORS]]
    unknown = [n for n in names if n not in MODES]
    if unknown:
        parser.error(f"unknown modes: {unknown}; known: {sorted(MODES)}")
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # said before the run, not after it
        parser.error("--plot needs matplotlib, which the bench extra installs (make bench, or pip install '.[bench]')")
    results = run(sizes, 0.3 if args.quick else 1.0, names, interleave=args.interleave)
    print(json.dumps(results, indent=2) if args.json else render(results))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
