"""The rule catalogue of ``tensorwire lint``: each rule's stable ID and purpose (``RULES``, in the
order ``--list-rules`` prints it), the IDs that name no rule (``unknown_rules``), and the catalogue
as ``--list-rules`` prints it (``rules_table``).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["RULES", "Rule", "rules_table", "unknown_rules"]


@dataclass(frozen=True, slots=True)
class Rule:
    """A lint rule: its stable ID, what it asks for, and whether it needs a baseline to run."""

    id: str
    purpose: str
    needs_baseline: bool = False


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "TYPE_PASCAL_CASE",
            "type names are PascalCase, acronyms written as words (HttpRequest, not HTTPRequest)",
        ),
        Rule("FIELD_LOWER_SNAKE_CASE", "field names are lower_snake_case (sample_rate)"),
        Rule("ENUM_VALUE_LOWER_SNAKE_CASE", "enum values are lower_snake_case (zero_to_255)"),
        Rule("TYPE_DESCRIPTION", "message types have a description or title; nested enums and objects a description"),
        Rule("FIELD_DESCRIPTION", "fields have a description (a union tag needs none)"),
        Rule("DEF_UNUSED", "every $defs entry is the target of a $ref"),
        Rule(
            "VERSION_NOT_BUMPED",
            "no breaking change inside a major version (needs --against REV: the compat rule of that ID)",
            needs_baseline=True,
        ),
    )
}
"""The rule catalogue, by ID, in the order ``--list-rules`` prints it."""


def unknown_rules(ids: Collection[str]) -> list[str]:
    """The IDs of ``ids`` that name no rule, in their order."""
    return [rule_id for rule_id in ids if rule_id not in RULES]


def rules_table(fmt: str = "text") -> str:
    """The rule catalogue as aligned text or as JSON (``id``, ``purpose``, ``needs_baseline``)."""
    if fmt == "json":
        return json.dumps(
            [{"id": r.id, "purpose": r.purpose, "needs_baseline": r.needs_baseline} for r in RULES.values()], indent=2
        )
    width = max(len(r) for r in RULES)
    return "\n".join(f"{r.id:<{width}}  {r.purpose}" for r in RULES.values())
