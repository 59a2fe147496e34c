"""Small messages in instructions: what one round trip executes, counted by valgrind, not timed.

    python -m tools.bench.instructions [--number 2000] [--cases envelope,one,step,batch,long,rpc,call,pooled] [--json]

The in-process cases of ``tools.bench.small``, every implementation of each, run in one child
process under ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``). The child warms each
implementation up, then calls ``os.getppid()`` as a marker before ``number`` round trips of it
(the garbage collector off) and once after the last; callgrind's ``--dump-before=os_getppid``
writes the instructions since the previous marker to a file of its own, so each implementation's
part holds its round trips alone. A row gives instructions per round trip, less those of an empty
round trip (a call of ``lambda: None`` in the same loop), and the ratio to the case's reference.

Instruction counts do not move with a noisy machine, as thread CPU time does (5-10% between runs
on two shared vCPUs), and they say how much work each implementation does; they do not say how
fast that work runs (cache misses, allocation, a different CPU), which is what
``tools.bench.small`` times. Under valgrind a round trip runs ~50x slower: the default run takes
one to two minutes. Needs valgrind on the PATH.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CASES", "EMPTY", "instructions", "main", "parts", "render", "run_marked"]

CASES = ("envelope", "one", "step", "batch", "long", "rpc", "call", "pooled")
"""The cases of ``tools.bench.small`` (``case_builders``) counted here, by short name."""

EMPTY = "(empty round trip)"
"""The implementation whose count is taken off every other: the loop and one call of ``lambda: None``."""

_ROOT = Path(__file__).resolve().parents[2]  # the checkout: the child imports tools.bench from there


def run_marked(cases: list[str], number: int, marker: Callable[[], object] = os.getppid) -> list[list[str]]:
    """In the counted child: every implementation of ``cases``, ``number`` round trips each after a
    ``marker()`` call, and one more ``marker()`` after the last. Returns ``[case, implementation,
    reference]`` per counted part, in order."""
    import torch

    from tools.bench import small

    torch.manual_seed(0)
    builders = small.case_builders()
    plan: list[tuple[list[str], Callable[[], Any]]] = [([EMPTY, EMPTY, EMPTY], lambda: None)]
    for name in cases:
        case = builders[name]()
        plan += [([case.name, impl, case.reference], fn) for impl, fn in case.implementations.items()]
    for _, fn in plan:  # warm up: caches, lazy imports, first allocations
        for _ in range(200):
            fn()
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _, fn in plan:
            marker()
            for _ in range(number):
                fn()
        marker()
    finally:
        if collecting:
            gc.enable()
    return [labels for labels, _ in plan]


def parts(out: Path, count: int) -> list[int]:
    """The instructions of parts 2 .. ``count`` + 1 of the callgrind output ``out`` (part 1 is the
    child's start, up to its first marker), read from each part file's ``summary:`` line."""
    totals = []
    for index in range(2, count + 2):
        path = out.with_name(f"{out.name}.{index}")
        for line in path.read_text().splitlines():
            if line.startswith("summary:"):
                totals.append(int(line.split()[1]))
                break
        else:
            raise ValueError(f"{path} has no summary line")
    return totals


def instructions(cases: list[str], number: int) -> list[dict[str, Any]]:
    """Counted rows for ``cases`` (``number`` round trips per implementation), one per implementation."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not on the PATH")
    with tempfile.TemporaryDirectory(prefix="tw-instructions-") as scratch:
        out = Path(scratch) / "callgrind.out"
        command = [
            valgrind,
            "--tool=callgrind",
            "--dump-before=os_getppid",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "tools.bench.instructions",
            "--child",
            "--number",
            str(number),
            "--cases",
            ",".join(cases),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, cwd=_ROOT, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the counted child failed ({done.returncode}): {done.stderr[-2000:].strip()}")
        printed = done.stdout.strip().splitlines()
        if not printed:
            raise RuntimeError("the counted child printed no labels")
        labels = json.loads(printed[-1])
        try:
            counts = parts(out, len(labels))
        except (OSError, ValueError) as exc:  # e.g. a Python whose os.getppid is another C function
            raise RuntimeError(f"callgrind did not dump at every marker (os_getppid): {exc}") from None
    empty = counts[0] / number
    per_call = {(case, impl): total / number - empty for (case, impl, _), total in zip(labels, counts, strict=True)}
    return [
        {
            "case": case,
            "implementation": impl,
            "unit": "instructions",
            "median": per_call[(case, impl)],
            "reference": reference,
            "ratio": per_call[(case, impl)] / per_call[(case, reference)],
        }
        for case, impl, reference in labels[1:]
    ]


def render(rows: list[dict[str, Any]]) -> str:
    """A markdown table of ``instructions`` rows."""
    lines = ["| case | implementation | instructions per round trip | x reference |", "|---|---|---:|---:|"]
    for row in rows:
        ratio = "1 (reference)" if row["implementation"] == row["reference"] else f"{row['ratio']:.2f}"
        lines.append(f"| {row['case']} | {row['implementation']} | {row['median']:,.0f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="round trips per implementation (default 2000)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # the counted process
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown or not cases or args.number < 1:
        parser.error(f"unknown cases {unknown}" if unknown else "give at least one case and a --number of 1 or more")
    if args.child:
        print(json.dumps(run_marked(cases, args.number)))
        return 0
    try:
        rows = instructions(cases, args.number)
    except RuntimeError as exc:
        print(f"python -m tools.bench.instructions: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
