"""The ``tensorwire`` command line.

Commands: ``gen`` (Python types from a schema directory; ``--check`` for drift), ``schemas`` (types,
versions, fingerprints; ``--meta``), ``compat`` (what a schema change breaks), ``lint`` (style rules:
names, descriptions, unused ``$defs``; with ``--against REV`` version bumps), ``golden record``
(golden wire fixtures of a schema directory), ``demo``, ``inspect`` (a blob's header), ``shm ls``
and ``shm reap`` (shared-memory housekeeping) and ``bench``.

Exit codes: 0 success; 1 findings (``compat``, ``lint``) or drift (``gen --check``); 2 usage error or
invalid input (a schema, a blob, a revision, a rule ID); 3 an internal error, printed on one line
(with ``--debug``, its traceback); 130 interrupted (Ctrl-C); 141 the reader of the output went away
(``| head``). None of these prints a traceback without ``--debug``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from pathlib import Path

from tensorwire import _schema_commands as commands
from tensorwire._version import __version__
from tensorwire.config import ConfigError
from tensorwire.errors import CompatError, DecodeError, SchemaError

__all__ = ["main"]

EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"tensorwire: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tensorwire", description="Schema-driven tensor serialization.")
    parser.add_argument("--version", action="version", version=f"tensorwire {__version__}")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("gen", help="generate Python types from a schema directory")
    gen.add_argument("dir", nargs="?", type=Path, help="schema directory (default: the config's schemas, or schemas)")
    gen.add_argument("-o", "--out", type=Path, help="output package directory (default: the config's out)")
    gen.add_argument(
        "--registry",
        metavar="MODULE",
        help="module of the output package that holds REGISTRY (default: the config's registry, or __init__)",
    )
    gen.add_argument("--check", action="store_true", help="regenerate in memory; print a diff and exit 1 on drift")
    gen.add_argument(
        "--force", action="store_true", help="replace files in the way that gen did not write (no generated header)"
    )
    schemas = sub.add_parser("schemas", help="list types, versions and fingerprints")
    schemas.add_argument(
        "dir", nargs="?", type=Path, help="schema directory (default: the config's schemas, or the built-in ones)"
    )
    schemas.add_argument("--meta", action="store_true", help="print the meta-schema (for editors) instead")
    compat = sub.add_parser("compat", help="check a schema change for old readers and old writers")
    compat.add_argument("dirs", nargs="*", type=Path, help="OLD_DIR NEW_DIR, or with --against REV: [DIR]")
    compat.add_argument("--against", metavar="REV", help="read the old schemas from git (origin/main, a tag, a SHA)")
    compat.add_argument(
        "--mode", choices=["backward", "forward", "full", "none"], help="default: the config's, or full"
    )
    compat.add_argument("--fail-on", choices=["error", "warning"], help="default: the config's, or error")
    compat.add_argument("--format", choices=["text", "json", "github"], default="text")
    compat.add_argument(
        "--transitive", action="store_true", help="with --against: check every earlier state of DIR, not just REV"
    )
    compat.add_argument("--list-rules", action="store_true", help="print the rule catalogue")
    compat.add_argument("--explain", metavar="RULE_ID", help="explain one rule")
    lint = sub.add_parser("lint", help="check a schema directory's style: names, descriptions, unused $defs")
    lint.add_argument("dir", nargs="?", type=Path, help="schema directory (default: the config's schemas, or schemas)")
    lint.add_argument(
        "--disable",
        metavar="RULE",
        action="append",
        default=[],
        help="turn a rule off (repeat it, or separate IDs by commas); adds to the config's lint.disable",
    )
    lint.add_argument(
        "--against", metavar="REV", help="also report breaking changes without a new major version since REV (git)"
    )
    lint.add_argument("--format", choices=["text", "json", "github"], default="text")
    lint.add_argument("--list-rules", action="store_true", help="print the rule catalogue")
    golden = sub.add_parser("golden", help="golden wire fixtures")
    golden_sub = golden.add_subparsers(dest="golden_command", required=True, parser_class=_Parser)
    record = golden_sub.add_parser("record", help="write fixtures for every type version that has none yet")
    record.add_argument(
        "schemas",
        nargs="?",
        type=Path,
        metavar="SCHEMA_DIR",
        help="schema directory (default: the config's schemas, or schemas)",
    )
    record.add_argument("--dir", type=Path, help="fixture root (default: the config's golden, or tests/golden)")
    demo = sub.add_parser("demo", help="send a diffusion result from a producer process through shared memory")
    demo.add_argument(
        "--rpc", action="store_true", help="instead: RPC calls to an engine process over ZeroMQ (the zmq extra)"
    )
    inspect = sub.add_parser("inspect", help="print a joined message blob's header as JSON")
    inspect.add_argument("file", type=Path, help="a blob written by tensorwire.join(frames)")
    shm = sub.add_parser("shm", help="shared-memory housekeeping")
    shm_sub = shm.add_subparsers(dest="shm_command", required=True, parser_class=_Parser)
    reap = shm_sub.add_parser(
        "reap", help="remove this user's tensorwire segments in /dev/shm whose creator process is gone"
    )
    reap.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    reap.add_argument("--dir", type=Path, help="the directory of named segments (default: /dev/shm)")
    ls = shm_sub.add_parser("ls", help="list this user's tensorwire segments: named ones and held memfds")
    ls.add_argument("--dir", type=Path, help="only the named segments of this directory (default: /dev/shm and memfds)")
    ls.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    bench = sub.add_parser("bench", help="benchmark against every peer (from a source checkout)", add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="--json, --plot FILE, --sizes, --modes, --quick")
    return parser


def _inspect(args: argparse.Namespace) -> int:
    import json

    from tensorwire.inspection import describe, read_header_frame

    try:
        frame = read_header_frame(args.file)
    except OSError as exc:
        print(f"tensorwire: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    info = describe(frame)
    json.dump(info, sys.stdout, indent=2, default=str)  # a piece at a time: the text can be large
    sys.stdout.write("\n")
    return 0


def _not_a_directory(path: Path) -> str | None:
    """Why ``path`` is not a directory that can be listed, or None."""
    try:
        with os.scandir(path):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _shm(args: argparse.Namespace) -> int:
    from tensorwire.transports import SHM_DIR, list_segments, reap

    directory = SHM_DIR if args.dir is None else args.dir
    problem = None if args.dir is None else _not_a_directory(args.dir)
    if problem is not None:
        print(f"tensorwire: shm {args.shm_command} --dir {args.dir}: {problem}", file=sys.stderr)
        return 2
    if args.shm_command == "reap":
        names = reap(directory, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        for name in names:
            print(f"{verb} {name}")
        print(f"{len(names)} segment(s) of dead processes {'would be removed' if args.dry_run else 'removed'}")
        return 0
    segments = list_segments(directory, memfds=args.dir is None)
    if args.json:
        import json

        print(json.dumps([dataclasses.asdict(s) for s in segments], indent=2))
        return 0
    if not segments:
        print("no segments")
        return 0
    rows = [("name", "creator", "alive", "size", "age", "backing")]
    for seg in segments:
        size = "?" if seg.size is None else str(seg.size)
        age = "?" if seg.age is None else f"{seg.age:.0f}s"
        rows.append((seg.name, str(seg.creator), "yes" if seg.alive else "no", size, age, seg.backing))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _bench(rest: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    if not (root / "tools" / "bench").is_dir():
        print("tensorwire: bench runs from a source checkout (tools/bench is not here)", file=sys.stderr)
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import importlib

    bench = importlib.import_module("tools.bench.__main__")  # repository tooling, not part of the package
    code: int = bench.main(rest)
    return code


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush into a closed pipe is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (a test's capture)
        pass


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module's docstring)."""
    words = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in words[: words.index("bench") if "bench" in words else len(words)]
    try:
        return _main(words)
    except KeyboardInterrupt:
        print("tensorwire: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        if debug:
            traceback.print_exc()
        else:
            print(
                f"tensorwire: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
                file=sys.stderr,
            )
        return EXIT_INTERNAL


def _main(words: list[str]) -> int:
    if words[:1] == ["bench"] and "-h" not in words[1:2]:  # every later word is the benchmark's own
        return _bench(words[1:])
    args = _parser().parse_args(words)
    if args.command == "bench":
        return _bench(args.rest)
    try:
        if args.command == "gen":
            return commands.gen(args)
        if args.command == "demo":
            if args.rpc:
                from importlib.util import find_spec

                if find_spec("zmq") is None:
                    print("tensorwire: demo --rpc needs pyzmq: pip install 'tensorwire[zmq]'", file=sys.stderr)
                    return 2
                from tensorwire.builtins.rpc_demo import run as run_rpc

                return run_rpc()
            from tensorwire.builtins.demo import run

            return run()
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "compat":
            return commands.compat(args)
        if args.command == "lint":
            return commands.lint(args)
        if args.command == "golden":
            return commands.golden(args)
        if args.command == "shm":
            return _shm(args)
        return commands.schemas(args)
    except (SchemaError, DecodeError, CompatError, ConfigError) as exc:
        print(f"tensorwire: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
