"""Compare two compiled schema directories and report every change with its rule.

One walk over old and new IR emits findings; each finding's rule says whom it breaks. BACKWARD
(new reads old) keeps the findings that break old writers, FORWARD (old reads new) those that
break old readers, FULL both.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tensorwire.compat._finding import Finding
from tensorwire.compat._rules import BOTH, READERS, WRITERS, covers
from tensorwire.compat._walk import Walk
from tensorwire.errors import Location
from tensorwire.schema import Message, SchemaSet
from tensorwire.schema._source import join_pointer

__all__ = ["MODES", "Finding", "compare", "compare_transitive", "reader_accepts"]

MODES = {"backward": {WRITERS, BOTH}, "forward": {READERS, BOTH}, "full": {READERS, WRITERS, BOTH}, "none": set()}


def _shape_without_ids(message: Message) -> str:
    canonical = message.struct.canonical()
    canonical.pop("type_id", None)
    canonical.pop("version", None)
    canonical.pop("name", None)
    return json.dumps(canonical, sort_keys=True)


def _ignores(schemas: SchemaSet, source: str, pointer: str) -> list[dict[str, str]]:
    """The x-compat-ignore entries at ``pointer`` and every ancestor in ``source``."""
    file = schemas.sources.get(source)
    if file is None:
        return []
    found: list[dict[str, str]] = []
    node: Any = file.data
    found += node.get("x-compat-ignore", []) if isinstance(node, dict) else []
    for token in [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]:
        if isinstance(node, list):  # an item of a oneOf or a prefixItems: a variant or a tuple item declared there
            node = node[int(token)] if token.isdigit() and int(token) < len(node) else None
        else:
            node = node.get(token) if isinstance(node, dict) else None
        if isinstance(node, dict):
            found += node.get("x-compat-ignore", [])
    return found


def _suppress(schemas: SchemaSet, message: Message | None, finding: Finding) -> Finding:
    """``finding`` accepted by an ``x-compat-ignore`` at its pointer, or above it, in the file its
    pointer is in: the file that declares the type it is about (a nested type of another file's
    ``$defs`` included), not always the message's."""
    if message is None:
        return finding
    at = finding.new_location
    source = at.file if at is not None and at.file in schemas.sources else message.path
    for entry in _ignores(schemas, source, finding.pointer):
        if covers(str(entry.get("rule")), finding.rule):
            return replace(finding, severity="info", suppressed=entry.get("reason", ""))
    return finding


def compare(old: SchemaSet, new: SchemaSet, mode: str = "full") -> list[Finding]:
    """Every finding of ``old`` -> ``new`` that matters in ``mode`` (plus info-level notes)."""
    sides = MODES[mode]
    old_by = {(m.type_id, m.version): m for m in old.messages}
    new_by = {(m.type_id, m.version): m for m in new.messages}
    findings: list[Finding] = []
    gone = sorted(old_by.keys() - new_by.keys())
    fresh = sorted(new_by.keys() - old_by.keys())
    renamed: dict[tuple[str, int], tuple[str, int]] = {}
    fresh_shapes = {k: _shape_without_ids(new_by[k]) for k in fresh}
    for key in gone:
        shape = _shape_without_ids(old_by[key])
        twin = next((k for k in fresh if k not in renamed.values() and fresh_shapes[k] == shape), None)
        if twin is not None:
            renamed[key] = twin
    for key in gone:
        walk = Walk(old, new, old_by[key], None)
        msg = old_by[key]
        if key in renamed:
            nk = renamed[key]
            walk.emit(
                "TYPE_ID_CHANGED",
                f"{key[0]} v{key[1]} is now {nk[0]} v{nk[1]}",
                "",
                (msg.path, ""),
                (new_by[nk].path, "/$id"),
            )
        else:
            walk.emit("TYPE_DELETED", f"{key[0]} v{key[1]} was removed", "", (msg.path, ""), None)
        findings += walk.findings
    for key in fresh:
        if key in renamed.values():
            continue
        walk = Walk(old, new, None, new_by[key])
        known = [v for (t, v) in old_by if t == key[0]]
        kept = [v for v in known if (key[0], v) in new_by]
        if known:
            beside = f"beside v{max(kept)}" if kept else f"in place of v{max(known)}, which was removed"
            walk.emit(
                "MAJOR_VERSION_ADDED",
                f"{key[0]} v{key[1]} added {beside}",
                "",
                None,
                (new_by[key].path, ""),
            )
        else:
            walk.emit("TYPE_ADDED", f"{key[0]} v{key[1]} added", "", None, (new_by[key].path, ""))
        findings += walk.findings
    for type_id in sorted({t for t, _ in old_by} & {t for t, _ in new_by}):
        old_top = max(v for t, v in old_by if t == type_id)
        new_top = max(v for t, v in new_by if t == type_id)
        if new_top < old_top:
            walk = Walk(old, new, old_by[(type_id, old_top)], None)
            walk.emit(
                "VERSION_DECREASED",
                f"{type_id}: newest version went from v{old_top} to v{new_top}",
                "",
                (old_by[(type_id, old_top)].path, "/x-version"),
                (new_by[(type_id, new_top)].path, "/x-version"),
            )
            findings += walk.findings
    for key in sorted(old_by.keys() & new_by.keys()):
        a, b = old_by[key], new_by[key]
        walk = Walk(old, new, a, b)
        walk.struct(a.struct, b.struct)
        type_findings = [_suppress(new, b, f) for f in walk.findings]
        breaking = [f for f in type_findings if f.severity == "error" and f.side in sides and not f.suppressed]
        if breaking:
            walk.findings = []
            walk.emit(
                "VERSION_NOT_BUMPED",
                f"{key[0]} v{key[1]} has {len(breaking)} breaking change(s) but kept its major version; "
                f"add {a.struct.name}.v{key[1] + 1}.json",
                "/x-version",
                (a.path, "/x-version"),
                (b.path, "/x-version"),
            )
            broken = {f.side for f in breaking}  # the side(s) its changes break, not always both
            side = BOTH if BOTH in broken or {READERS, WRITERS} <= broken else broken.pop()
            type_findings += [replace(f, side=side) for f in walk.findings]
        elif not type_findings and a.fingerprint == b.fingerprint and _docs(old, a) != _docs(new, b):
            walk.findings = []
            walk.emit("DOC_CHANGED", f"{key[0]} v{key[1]}: documentation changed", "", (a.path, ""), (b.path, ""))
            type_findings += walk.findings
        findings += type_findings
    return [f for f in findings if f.side in sides or f.side == "none" or f.suppressed]


def compare_transitive(olds: list[SchemaSet], new: SchemaSet, mode: str = "full") -> list[Finding]:
    """``compare`` against every earlier state (newest first); each finding reported once."""
    seen: set[tuple[str, str, Location | None]] = set()
    out: list[Finding] = []
    for old in olds:
        for finding in compare(old, new, mode):
            key = (finding.rule, finding.message, finding.new_location)
            if key not in seen:
                seen.add(key)
                out.append(finding)
    return out


_DOC_KEYWORDS = frozenset({"title", "description", "$comment", "examples", "deprecated", "readOnly", "writeOnly"})
_NAME_MAPS = frozenset({"properties", "$defs"})  # their keys are names, not keywords


def _docs(schemas: SchemaSet, message: Message) -> str:
    """The documentation of a message's file (every doc keyword by pointer), without its layout:
    reordered keys, lists the wire reads as sets and formatting are not documentation."""
    file = schemas.sources.get(message.path)
    found: list[tuple[str, str]] = []

    def walk(node: Any, pointer: str, names: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = join_pointer(pointer, key)
                if not names and key in _DOC_KEYWORDS:
                    found.append((here, json.dumps(value, sort_keys=True)))
                else:
                    walk(value, here, not names and key in _NAME_MAPS)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, join_pointer(pointer, i), False)

    walk(file.data if file is not None else None, "", False)
    return json.dumps(sorted(found))


def reader_accepts(reader: SchemaSet, writer: SchemaSet) -> list[Finding]:
    """Findings that stop ``reader`` from decoding what ``writer`` writes (BACKWARD of writer -> reader)."""
    return [f for f in compare(writer, reader, "backward") if f.severity != "info"]
