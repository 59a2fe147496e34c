"""``python -m tools.fuzz``: fuzz the decoder against a live victim, or replay saved cases.

Prints one line per case family, the failures, and the summary line; exits 1 if anything but
decoded messages and CodecErrors was seen (crashes, non-codec exceptions, harmed decoys, leaks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.fuzz import known
from tools.fuzz.runner import Config, run

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    defaults = Config()
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=defaults.cases, help="cases to run (default %(default)s)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="the run's seed (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=None, help="stop starting batches after this long")
    parser.add_argument("--corpus", type=Path, default=defaults.corpus, help="where --save-failures writes")
    parser.add_argument("--save-failures", action="store_true", help="save every failing input to --corpus")
    parser.add_argument("--workers", type=int, default=defaults.workers, help="worker processes (default: CPUs)")
    parser.add_argument("--batch", type=int, default=defaults.batch, help="cases per worker per round")
    parser.add_argument("--replay", type=Path, nargs="+", default=[], help="replay case files (or directories)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    parser.add_argument("--write-known", type=Path, default=None, help="write the known-bug cases to this directory")
    parser.add_argument("--max-isolations", type=int, default=defaults.max_isolations, help=argparse.SUPPRESS)
    parser.add_argument("--verbose", action="store_true", help="progress after every round, on stderr")
    parser.add_argument("--sabotage", default="", help=argparse.SUPPRESS)  # the fuzzer's own tests only
    return parser


def _case_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.twcase")) if path.is_dir() else [path]
    return files


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.write_known is not None:
        for path in known.write(args.write_known):
            print(path)
        return 0
    replay = _case_files(args.replay)
    if args.replay and not replay:
        print(f"no case files in {', '.join(map(str, args.replay))}", file=sys.stderr)
        return 2
    config = Config(
        cases=args.cases,
        seed=args.seed,
        seconds=args.seconds,
        workers=args.workers,
        batch=args.batch,
        corpus=args.corpus,
        save_failures=args.save_failures,
        replay=replay,
        sabotage=args.sabotage,
        max_isolations=args.max_isolations,
        verbose=args.verbose,
    )
    report = run(config)
    for line in report.lines():
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
    return 1 if report.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
