"""Write a benchmark JSON (``python -m tools.bench --json``) into README.md between the bench markers.

python -m tools.bench --json --plot docs/bench.png > bench.json
python -m tools.bench.readme bench.json README.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| size | mode | median ms | p10-p90 ms | GB/s | x np.copyto | x wake-up | vs best peer |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        wake = f"{row['x_wakeup']:.1f}" if row["x_wakeup"] else "-"
        peer = f"{row['speedup_vs_best_peer']:.2f}x" if row["speedup_vs_best_peer"] else "-"
        mode = f"**{row['mode']}**" if row["mode"].startswith("tensorwire") else row["mode"]
        lines.append(
            f"| {row['size']} | {mode} | {row['median_ms']:.3f} | {row['p10_ms']:.3f}-{row['p90_ms']:.3f} "
            f"| {row['gb_per_s']:.2f} | {row['x_copyto']:.2f} | {wake} | {peer} |"
        )
    if results.get("skipped_sizes"):
        lines.append(f"\nSkipped (not enough free memory): {', '.join(results['skipped_sizes'])}.")
    lines += ["", "| in process | median us |", "|---|---:|"]
    lines += [f"| {row['case']} | {row['us']:.2f} |" for row in results["in_process"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.readme", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the benchmark's JSON")
    parser.add_argument("readme", type=Path, help="the file to write the tables into, between the bench markers")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    text = args.readme.read_text()
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not (start and end):  # a file without the markers is left as it is, not appended to
        parser.error(f"{args.readme} has no {START} ... {END} section")
    args.readme.write_text(f"{head}{START}\n{markdown(results)}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
