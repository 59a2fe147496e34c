"""Write a benchmark JSON (``python -m tools.bench --json``) into README.md between the bench markers.

python -m tools.bench --json --plot docs/bench.png > bench.json
python -m tools.bench.readme bench.json README.md
"""

from __future__ import annotations

import json
import sys
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


def main(argv: list[str]) -> int:
    results = json.loads(Path(argv[0]).read_text())
    readme = Path(argv[1])
    text = readme.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    readme.write_text(f"{head}{START}\n{markdown(results)}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
