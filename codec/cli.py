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
import shlex
import subprocess
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from tensorwire._version import __version__
from tensorwire.config import CONFIG_FILE, CompatIgnore, Config, ConfigError, find_config
from tensorwire.errors import CompatError, DecodeError, SchemaError

if TYPE_CHECKING:
    from tensorwire.compat import Finding
    from tensorwire.golden import Cases
    from tensorwire.schema import SchemaSet

__all__ = ["main"]

DEFAULT_SCHEMAS = Path("schemas")
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
    inspect.add_argument("file", type=Path, help="a blob written by codec.join(frames)")
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


def _config() -> Config | None:
    """The configuration of the current directory (``tensorwire.config``), if any."""
    return find_config()


def _gen(args: argparse.Namespace) -> int:
    from tensorwire.gen import check, generate

    config = _config()
    args.dir = args.dir or (config.schemas if config and config.schemas else DEFAULT_SCHEMAS)
    args.out = args.out or (config.out if config else None)
    args.registry = args.registry or (config.registry if config and config.registry else "__init__")
    if args.out is None:
        print(
            f"tensorwire: gen needs -o OUT, the package to write (or out = ... in {CONFIG_FILE} or "
            "[tool.tensorwire] of pyproject.toml)",
            file=sys.stderr,
        )
        return 2
    if not args.out.is_absolute() and args.out.parts[:1] == ("tensorwire",):
        print(f"tensorwire: gen will not write {args.out}: a package of that name hides tensorwire", file=sys.stderr)
        return 2
    try:
        if args.check:
            diff = check(args.dir, args.out, args.registry)
        else:
            written = generate(args.dir, args.out, args.registry, force=args.force)
    except ValueError as exc:
        print(f"tensorwire: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tensorwire: cannot write {exc.filename or args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not args.check:
        for path in written:
            print(f"wrote {path}")
        return 0
    if diff:
        sys.stdout.write(diff)
        again = shlex.join(["tensorwire", "gen", str(args.dir), "-o", str(args.out)])
        if args.registry != "__init__":
            again += f" --registry {shlex.quote(args.registry)}"
        print(f"tensorwire gen --check: {args.out} is out of date; run '{again}'", file=sys.stderr)
        return 1
    print(f"tensorwire gen --check: {args.out} is up to date")
    return 0


def _schemas(args: argparse.Namespace) -> int:
    from tensorwire.schema import meta_schema_text

    if args.meta:
        sys.stdout.write(meta_schema_text())
        return 0
    from tensorwire.builtins import SCHEMA_DIR
    from tensorwire.rules import TypeInfo
    from tensorwire.schema import load_dir

    # straight from the schemas (the built-in ones by default): no classes built, no torch imported
    config = _config()
    default = config.schemas if config and config.schemas else SCHEMA_DIR
    messages = load_dir(default if args.dir is None else args.dir).messages
    infos = sorted(
        (TypeInfo(m.type_id, m.version, m.fingerprint) for m in messages), key=lambda i: (i.type_id, i.version)
    )
    width = max(len(i.type_id) for i in infos)
    print(f"{'type':<{width}}  version  fingerprint")
    for info in infos:
        print(f"{info.type_id:<{width}}  v{info.version:<6}  sha256:{info.fingerprint}")
    return 0


def _compat(args: argparse.Namespace) -> int:
    from tensorwire.compat import RETIRED, RULES, compare, compare_transitive
    from tensorwire.compat._git import history, temporary_dir
    from tensorwire.compat._report import exit_code, render, rules_table
    from tensorwire.schema import load_dir

    if args.list_rules:
        print(rules_table("json" if args.format == "json" else "text"))
        return 0
    if args.explain:
        rule = RULES.get(args.explain)
        if rule is None and args.explain in RETIRED:
            print(
                f"{args.explain}: retired; replaced by {', '.join(RETIRED[args.explain])} (an ignore of it covers them)"
            )
            return 0
        if rule is None:
            print(f"tensorwire: unknown rule {args.explain!r}; see tensorwire compat --list-rules", file=sys.stderr)
            return 2
        print(f"{rule.id} ({rule.severity}, breaks {rule.side}): {rule.purpose}")
        return 0
    config = _config()
    args.mode = args.mode or (config.mode if config and config.mode else "full")
    args.fail_on = args.fail_on or (config.fail_on if config and config.fail_on else "error")
    ignores: tuple[CompatIgnore, ...] = ()
    if config is not None:
        ignores = config.ignore
        unknown = [entry.rule for entry in ignores if entry.rule not in RULES and entry.rule not in RETIRED]
        if unknown:
            raise ConfigError(f"{config.path}: compat.ignore: unknown rule {unknown[0]!r}")
    if args.against:
        if len(args.dirs) > 1:
            print("tensorwire: compat --against REV takes at most one DIR", file=sys.stderr)
            return 2
        new_dir = args.dirs[0] if args.dirs else _default_schemas(config)
        revs = history(new_dir, args.against) if args.transitive else [args.against]
        olds = []
        with temporary_dir() as tmp:
            for i, rev in enumerate(revs):
                label = f"{rev if not args.transitive else rev[:12]}:{new_dir.as_posix()}"
                olds.append(_schemas_at(new_dir, rev, Path(tmp) / str(i), label))
            new = load_dir(new_dir)
        findings = compare_transitive(olds, new, args.mode)
    else:
        if len(args.dirs) != 2:
            print("tensorwire: compat needs OLD_DIR NEW_DIR, or --against REV [DIR]", file=sys.stderr)
            return 2
        if args.transitive:
            print("tensorwire: --transitive needs --against REV (the history to walk)", file=sys.stderr)
            return 2
        findings = compare(load_dir(args.dirs[0]), load_dir(args.dirs[1]), args.mode)
    findings = [_ignored(f, ignores) for f in findings]
    text = render(findings, args.format)
    if text:
        print(text)
    return exit_code(findings, args.fail_on)


def _schemas_at(schema_dir: Path, rev: str, into: Path, label: str) -> SchemaSet:
    """``schema_dir`` as of git revision ``rev`` (written under ``into``), its paths shown as
    ``label``; an empty set where it did not exist at ``rev``."""
    from tensorwire.compat._git import checkout_schemas
    from tensorwire.schema import SchemaSet, load_dir

    old_root = checkout_schemas(schema_dir, rev, into)
    return load_dir(old_root, display_root=label) if old_root else SchemaSet(into, label, (), ())


def _lint(args: argparse.Namespace) -> int:
    from tensorwire.compat._git import temporary_dir
    from tensorwire.lint import lint, render, rules_table, unknown_rules
    from tensorwire.schema import load_dir

    if args.list_rules:
        print(rules_table("json" if args.format == "json" else "text"))
        return 0
    config = _config()
    disable = [rule.strip() for word in args.disable for rule in word.split(",") if rule.strip()]
    unknown = unknown_rules(disable)
    if unknown:
        print(
            f"tensorwire: lint --disable: unknown rule {unknown[0]!r}; see tensorwire lint --list-rules",
            file=sys.stderr,
        )
        return 2
    ignore: list[tuple[str, str]] = []
    accepted: set[str | None] = set()  # types whose VERSION_NOT_BUMPED compat.ignore accepts (None: all)
    if config is not None:
        for key, ids in (("lint.disable", config.lint_disable), ("lint.ignore", [e.rule for e in config.lint_ignore])):
            unknown = unknown_rules(ids)
            if unknown:
                raise ConfigError(
                    f"{config.path}: {config.key(key)}: unknown rule {unknown[0]!r}; known: {_lint_ids()}"
                )
        disable += config.lint_disable
        ignore = [(entry.rule, entry.file) for entry in config.lint_ignore]
        accepted = {entry.type for entry in config.ignore if entry.rule == "VERSION_NOT_BUMPED"}
    schema_dir = args.dir or (config.schemas if config and config.schemas else DEFAULT_SCHEMAS)
    schemas = load_dir(schema_dir)
    mode = config.mode if config and config.mode else "full"
    if args.against and "VERSION_NOT_BUMPED" not in disable:
        with temporary_dir() as tmp:
            baseline = _schemas_at(schema_dir, args.against, Path(tmp), f"{args.against}:{schema_dir.as_posix()}")
            findings = lint(schemas, disable=disable, ignore=ignore, baseline=baseline, mode=mode)
    else:
        findings = lint(schemas, disable=disable, ignore=ignore)
    if accepted:
        type_of = {m.path: m.type_id for m in schemas.messages}
        findings = [
            f for f in findings if f.rule != "VERSION_NOT_BUMPED" or not ({None, type_of.get(f.file)} & accepted)
        ]
    text = render(findings, args.format)
    if text:
        print(text)
    return int(bool(findings))


def _lint_ids() -> str:
    from tensorwire.lint import RULES

    return ", ".join(RULES)


def _golden(args: argparse.Namespace) -> int:
    from tensorwire.golden import record

    config = _config()
    schema_dir = args.schemas or (config.schemas if config and config.schemas else DEFAULT_SCHEMAS)
    out = args.dir or (config.golden if config and config.golden else Path("tests/golden"))
    try:
        written = record(out, _golden_cases(schema_dir))
    except ValueError as exc:
        print(f"tensorwire: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tensorwire: cannot write {exc.filename or out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"{len(written)} fixture file(s) written; manifest {out / 'MANIFEST.sha256'}")
    return 0


def _golden_cases(schema_dir: Path) -> Cases:
    """The built-in types' own cases for the built-in schemas; for any other directory, one
    ``minimal`` case per message type version (``tensorwire._synth``), each built here, so that a
    type no value can be synthesized for stops the command before it writes anything."""
    from tensorwire.builtins import SCHEMA_DIR

    if _same_schema_files(schema_dir, SCHEMA_DIR):
        from tensorwire.builtins.golden import cases

        return cases()
    from tensorwire._synth import minimal_cases
    from tensorwire.gen._runtime import build_registry
    from tensorwire.schema import load_dir

    schemas = load_dir(schema_dir)
    return minimal_cases(schemas, build_registry(schemas))


def _same_schema_files(a: Path, b: Path) -> bool:
    """Whether directories ``a`` and ``b`` hold the same schema files, byte for byte (an installed
    copy of the built-in schemas is the built-in schemas). Each is read as the schema loader reads
    it (``read_regular``): a directory holding anything else is not the built-in schemas, and the
    loader then says what is wrong with it."""
    from tensorwire._files import find, read_regular
    from tensorwire.schema._source import MAX_FILE_BYTES

    def files(root: Path) -> dict[str, bytearray] | None:
        found: dict[str, bytearray] = {}
        try:
            for path in find(root, "*.json") if root.is_dir() else ():
                found[path.relative_to(root).as_posix()] = read_regular(path, MAX_FILE_BYTES)
        except OSError:
            return None
        return found

    mine = files(a)
    return bool(mine) and mine == files(b)


def _ignored(finding: Finding, ignores: tuple[CompatIgnore, ...]) -> Finding:
    """``finding`` accepted by the first config ignore that matches its rule (and type), if any."""
    from tensorwire.compat import covers

    for entry in ignores:
        if covers(entry.rule, finding.rule) and entry.type in (None, finding.type_id) and finding.suppressed is None:
            return dataclasses.replace(finding, severity="info", suppressed=entry.reason)
    return finding


def _inspect(args: argparse.Namespace) -> int:
    import json

    from tensorwire.inspection import describe, read_header_frame

    try:
        frame = read_header_frame(args.file)
    except OSError as exc:
        print(f"tensorwire: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    info = describe(frame)
    print(json.dumps(info, indent=2, default=str))
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


def _default_schemas(config: Config | None) -> Path:
    """The config's schema directory, else ``schemas`` of the current directory, else of the git
    repository it is in (so that ``compat`` runs from any directory of the repository)."""
    if config is not None and config.schemas is not None:
        return config.schemas
    if DEFAULT_SCHEMAS.is_dir():
        return DEFAULT_SCHEMAS
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return DEFAULT_SCHEMAS
    found = Path(top.stdout.strip()) / DEFAULT_SCHEMAS
    return found if top.returncode == 0 and found.is_dir() else DEFAULT_SCHEMAS


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
            return _gen(args)
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
            return _compat(args)
        if args.command == "lint":
            return _lint(args)
        if args.command == "golden":
            return _golden(args)
        if args.command == "shm":
            return _shm(args)
        return _schemas(args)
    except (SchemaError, DecodeError, CompatError, ConfigError) as exc:
        print(f"tensorwire: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
