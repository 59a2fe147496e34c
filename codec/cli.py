"""The ``tensorwire`` command line: ``gen [--check]``, ``schemas [--meta]``.

Exit codes: 0 success, 1 drift (``gen --check``), 2 usage error or invalid schema.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codec.errors import SchemaError

__all__ = ["main"]

DEFAULT_SCHEMAS = Path("schemas")
DEFAULT_OUT = Path("codec/generated")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"tensorwire: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tensorwire", description="Schema-driven tensor serialization.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("gen", help="generate Python types from a schema directory")
    gen.add_argument("dir", nargs="?", type=Path, default=DEFAULT_SCHEMAS, help="schema directory (default: schemas)")
    gen.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT, help="output package (default: codec/generated)")
    gen.add_argument("--check", action="store_true", help="regenerate in memory; print a diff and exit 1 on drift")
    schemas = sub.add_parser("schemas", help="list types, versions and fingerprints")
    schemas.add_argument("dir", nargs="?", type=Path, help="schema directory (default: the generated built-ins)")
    schemas.add_argument("--meta", action="store_true", help="print the meta-schema (for editors) instead")
    return parser


def _gen(args: argparse.Namespace) -> int:
    from codec.gen import check, generate

    if args.check:
        diff = check(args.dir, args.out)
        if diff:
            sys.stdout.write(diff)
            print(f"tensorwire gen --check: {args.out} is out of date; run 'tensorwire gen'", file=sys.stderr)
            return 1
        print(f"tensorwire gen --check: {args.out} is up to date")
        return 0
    for path in generate(args.dir, args.out):
        print(f"wrote {path}")
    return 0


def _schemas(args: argparse.Namespace) -> int:
    from codec.schema import meta_schema_text

    if args.meta:
        sys.stdout.write(meta_schema_text())
        return 0
    if args.dir is None:
        from codec.generated import REGISTRY as registry
    else:
        from codec import load_schemas

        registry = load_schemas(args.dir)
    infos = registry.infos()
    width = max(len(i.type_id) for i in infos)
    print(f"{'type':<{width}}  version  fingerprint")
    for info in infos:
        print(f"{info.type_id:<{width}}  v{info.version:<6}  sha256:{info.fingerprint}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "gen":
            return _gen(args)
        return _schemas(args)
    except SchemaError as exc:
        print(f"tensorwire: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
