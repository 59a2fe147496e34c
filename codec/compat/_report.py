"""Findings as text, JSON or GitHub workflow commands; and the exit code they call for."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tensorwire.compat._diff import Finding
from tensorwire.compat._rules import RULES
from tensorwire.errors import printable

__all__ = ["JSON_SCHEMA", "exit_code", "github_command", "render", "rules_table"]

SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}

JSON_SCHEMA = {
    "type": "object",
    "required": ["findings", "summary"],
    "properties": {
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "severity", "side", "message", "type_id", "version", "pointer", "old", "new"],
                "properties": {
                    "rule": {"type": "string", "description": "rule ID from `tensorwire compat --list-rules`"},
                    "severity": {"enum": ["error", "warning", "info"]},
                    "side": {"enum": ["old readers", "old writers", "both", "none"], "description": "whom it breaks"},
                    "message": {"type": "string"},
                    "type_id": {"type": "string"},
                    "version": {"type": "integer"},
                    "pointer": {"type": "string", "description": "JSON pointer into the schema file"},
                    "old": {"type": ["string", "null"], "description": "file:line:col in the old schemas"},
                    "new": {"type": ["string", "null"], "description": "file:line:col in the new schemas"},
                    "suppressed": {"type": ["string", "null"], "description": "the x-compat-ignore reason"},
                },
            },
        },
        "summary": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
}


def _side(finding: Finding) -> str:
    if finding.suppressed is not None:  # (a schema's own text: a newline or ESC in it shown escaped)
        return f"suppressed: {printable(finding.suppressed)}"
    return {"both": "breaks old readers and old writers", "none": "info"}.get(finding.side, f"breaks {finding.side}")


def github_command(level: str, file: str, line: int, col: int, title: str, message: str) -> str:
    """One GitHub workflow command (``::error file=...::message``) that annotates ``file`` at
    ``line:col``, its properties and message escaped as the runner expects (a ``%``, a newline, or
    in a property a ``:`` or ``,`` would otherwise end or change the command)."""

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(text: str) -> str:
        return data(text).replace(":", "%3A").replace(",", "%2C")

    return f"::{level} file={prop(file)},line={line},col={col},title={prop(title)}::{data(message)}"


def render(findings: Sequence[Finding], fmt: str) -> str:
    if fmt == "json":
        summary = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
        return json.dumps({"findings": [f.as_json() for f in findings], "summary": summary}, indent=2)
    lines = []
    for f in findings:
        if fmt == "github":
            level = {"error": "error", "warning": "warning"}.get(f.severity, "notice")
            at = f.location
            file = "" if at is None else at.file
            line, col = (1, 1) if at is None or at.line is None or at.col is None else (at.line, at.col)
            lines.append(github_command(level, file, line, col, f.rule, f"{f.message} [{_side(f)}]"))
        else:
            lines.append(f"{f.where}: {f.rule} [{_side(f)}] {f.message}")
    return "\n".join(lines)


def exit_code(findings: Sequence[Finding], fail_on: str) -> int:
    """1 when a finding (not suppressed) reaches ``fail_on``, else 0."""
    limit = SEVERITY_RANK[fail_on]
    return int(any(SEVERITY_RANK[f.severity] >= limit and f.suppressed is None for f in findings))


def rules_table(fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            [{"id": r.id, "side": r.side, "severity": r.severity, "purpose": r.purpose} for r in RULES.values()],
            indent=2,
        )
    width = max(len(r) for r in RULES)
    return "\n".join(f"{r.id:<{width}}  {r.severity:<7}  {r.side:<11}  {r.purpose}" for r in RULES.values())
