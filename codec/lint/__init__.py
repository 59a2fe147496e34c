"""Style rules for a schema directory (``tensorwire lint``): names, descriptions, unused ``$defs``.

``lint(schemas)`` checks a compiled ``SchemaSet`` and returns ``Finding``s, each naming its rule,
file, line, column and JSON pointer. Every rule has a stable ID and can be turned off on its own
(``disable``), or for some files only (``ignore``). The rules:

* ``TYPE_PASCAL_CASE``: a type name (a message type, a ``$defs`` key, an ``x-enum-name``, the
  ``title`` of a nested object) is PascalCase: letters and digits, starting with a capital, and
  acronyms written as words: no run of three or more capitals (``HttpRequest``, not ``HTTPRequest``).
* ``FIELD_LOWER_SNAKE_CASE``: a field name is lower_snake_case (``sample_rate``): lower-case letters
  and digits in words joined by single underscores, starting with a letter.
* ``ENUM_VALUE_LOWER_SNAKE_CASE``: an enum value is lower_snake_case (``zero_to_255``; a value may
  start with a digit, as ``1080p``), so that every enum reads the same way on the wire.
* ``TYPE_DESCRIPTION``: a message type has a ``description`` or ``title``; a nested enum or object
  has a ``description``.
* ``FIELD_DESCRIPTION``: a field has a ``description`` (a union tag, a ``const``, needs none).
* ``DEF_UNUSED``: a ``$defs`` entry is the target of some ``$ref`` of the directory.
* ``VERSION_NOT_BUMPED``: with a baseline (``tensorwire lint --against REV``), no type changed in a
  way that breaks old readers or writers without a new major version; this is the compat checker's
  rule of the same ID (``tensorwire.compat``), reported like the others.

Findings print as ``file:line:col: RULE_ID message`` (``render``); ``JSON_SCHEMA`` is the schema of
the JSON format. This package needs neither torch nor numpy. The catalogue is ``_rules``'s, a
finding and its formats ``_report``'s, what each rule finds ``_checks``'s; ``lint`` runs the checks
and keeps what is neither turned off nor ignored.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Sequence

from tensorwire.lint._checks import CHECKS, Files, not_bumped
from tensorwire.lint._report import FORMATS, JSON_SCHEMA, Finding, render
from tensorwire.lint._rules import RULES, Rule, rules_table, unknown_rules
from tensorwire.schema import SchemaSet

__all__ = ["FORMATS", "JSON_SCHEMA", "RULES", "Finding", "Rule", "lint", "render", "rules_table", "unknown_rules"]


def lint(
    schemas: SchemaSet,
    *,
    disable: Collection[str] = (),
    ignore: Sequence[tuple[str, str]] = (),
    baseline: SchemaSet | None = None,
    mode: str = "full",
) -> list[Finding]:
    """Every finding of the enabled rules over ``schemas``, sorted by file, line and column.

    ``disable`` turns rules off; ``ignore`` holds ``(rule ID, file pattern)`` pairs that turn a rule
    off for the files whose path relative to the schema directory matches the pattern
    (``fnmatch``: ``rpc/*``). ``VERSION_NOT_BUMPED`` runs only with a ``baseline`` (the schemas as
    they were), compared in ``mode`` (see ``tensorwire.compat``). An unknown rule ID is a
    ``ValueError``.
    """
    unknown = unknown_rules([*disable, *(rule_id for rule_id, _ in ignore)])
    if unknown:
        raise ValueError(f"unknown lint rule {unknown[0]!r}; known: {', '.join(RULES)}")
    files = Files(schemas)
    found: list[tuple[str, Finding]] = []
    for rule_id, check in CHECKS.items():
        if rule_id not in disable:
            found += check(files)
    if baseline is not None and "VERSION_NOT_BUMPED" not in disable:
        found += not_bumped(files, baseline, mode)
    kept = [
        finding
        for key, finding in found
        if not any(rule_id == finding.rule and fnmatch.fnmatchcase(key, pattern) for rule_id, pattern in ignore)
    ]
    return sorted(kept, key=lambda f: (f.file, f.line, f.col, f.rule, f.message))
