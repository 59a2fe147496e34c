"""The schema commands of the ``tensorwire`` command line: ``gen``, ``schemas``, ``compat``, ``lint``
and ``golden record``. Each takes the parsed arguments and returns the exit code (``tensorwire.cli``);
none imports torch or numpy."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tensorwire.config import CONFIG_FILE, CompatIgnore, Config, ConfigError, find_config

if TYPE_CHECKING:
    from tensorwire.compat import Finding
    from tensorwire.golden import Cases
    from tensorwire.schema import SchemaSet

__all__ = ["compat", "gen", "golden", "lint", "schemas"]

DEFAULT_SCHEMAS = Path("schemas")


def _config() -> Config | None:
    """The configuration of the current directory (``tensorwire.config``), if any."""
    return find_config()


def gen(args: argparse.Namespace) -> int:
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


def schemas(args: argparse.Namespace) -> int:
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


def compat(args: argparse.Namespace) -> int:
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


def lint(args: argparse.Namespace) -> int:
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


def golden(args: argparse.Namespace) -> int:
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
