"""A finding of ``tensorwire lint`` and how findings print: ``Finding`` (a rule's breach at a file,
line, column and JSON pointer), ``render`` in each of ``FORMATS`` (``file:line:col: RULE_ID
message`` lines, JSON, GitHub workflow commands) and ``JSON_SCHEMA``, the schema of the JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorwire.compat._report import github_command

__all__ = ["FORMATS", "JSON_SCHEMA", "Finding", "render"]

FORMATS = ("text", "json", "github")


@dataclass(frozen=True, slots=True)
class Finding:
    """One breach of a rule, at ``file:line:col`` (1-based) and JSON ``pointer`` of the schema file."""

    rule: str
    message: str
    file: str
    line: int
    col: int
    pointer: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.rule} {self.message}"

    def as_json(self) -> dict[str, Any]:
        """The finding as the JSON format prints it."""
        return {
            "rule": self.rule,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "pointer": self.pointer,
        }


JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["findings", "summary"],
    "properties": {
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "message", "file", "line", "col", "pointer"],
                "properties": {
                    "rule": {"type": "string", "description": "rule ID from `tensorwire lint --list-rules`"},
                    "message": {"type": "string"},
                    "file": {"type": "string"},
                    "line": {"type": "integer", "minimum": 1},
                    "col": {"type": "integer", "minimum": 1},
                    "pointer": {"type": "string", "description": "JSON pointer into the schema file"},
                },
            },
        },
        "summary": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "findings per rule"},
    },
}
"""The schema of ``render(findings, "json")``."""


def render(findings: Sequence[Finding], fmt: str) -> str:
    """``findings`` as ``text`` (one ``file:line:col: RULE_ID message`` line each), ``json`` or
    ``github`` (workflow commands that annotate a pull request)."""
    if fmt == "json":
        summary: dict[str, int] = {}
        for f in findings:
            summary[f.rule] = summary.get(f.rule, 0) + 1
        return json.dumps({"findings": [f.as_json() for f in findings], "summary": summary}, indent=2)
    if fmt == "github":
        return "\n".join(github_command("error", f.file, f.line, f.col, f.rule, f.message) for f in findings)
    if fmt != "text":
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return "\n".join(str(f) for f in findings)
