"""Differential check of ``tensorwire.compat``: the checker's verdict against real decoding.

``python -m tools.compat_diff --trials N --seed S [--messages M] [--only MISS|ALARM]`` runs the
trials of ``tools.compat_diff`` and prints each finding, numbered by its trial.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from tools.compat_diff import trial

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.compat_diff", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--messages", type=int, default=300, help="messages drawn per side and trial")
    parser.add_argument("--only", choices=["MISS", "ALARM"], help="print one kind of finding alone")
    args = parser.parse_args()
    r = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.trials):
            for line in trial(r, Path(tmp) / str(i), args.messages):
                if args.only is None or line.startswith(args.only):
                    print(f"[{i}] {line}", flush=True)


if __name__ == "__main__":
    main()
