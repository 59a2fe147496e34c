"""What each style rule of ``tensorwire lint`` finds in a schema directory: the directory's files
and every schema node in them (``Files``), a check per rule that returns its findings (``CHECKS``,
by rule ID), the names' conventions they hold names to (PascalCase, lower_snake_case, with the
name a breach suggests instead), and the compat checker's ``VERSION_NOT_BUMPED`` findings against
a baseline, placed as the others (``not_bumped``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator
from typing import Any

from tensorwire.compat import compare
from tensorwire.errors import Location
from tensorwire.lint._report import Finding
from tensorwire.schema import SchemaSet
from tensorwire.schema._source import SourceFile, join_pointer

__all__ = ["CHECKS", "Files", "not_bumped"]


# -- names --------------------------------------------------------------------------------------
_PASCAL = re.compile(r"[A-Z][A-Za-z0-9]*")  # fullmatch: a name and a newline is no name
_CAPITALS = re.compile(r"[A-Z]{3,}")
_FIELD = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
_VALUE = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]*|[a-z0-9]+")


def _words(name: str) -> list[str]:
    return _WORD.findall(name)


def _as_pascal(name: str) -> str:
    return "".join(w[:1].upper() + w[1:].lower() for w in _words(name))


def _as_snake(name: str) -> str:
    return "_".join(w.lower() for w in _words(name))


def _suggest(fixed: str, name: str) -> str:
    return f" ({fixed})" if fixed and fixed != name else ""


# -- the files ----------------------------------------------------------------------------------
class Files:
    """The directory's schema files: each with its key (path relative to the directory) and nodes."""

    def __init__(self, schemas: SchemaSet) -> None:
        self.schemas = schemas
        self.entries: list[tuple[str, SourceFile]] = sorted(
            ((m.key, schemas.sources[m.path]) for m in schemas.messages if m.path in schemas.sources),
            key=lambda e: e[0],
        )
        self.key_of = {source.path: key for key, source in self.entries}
        self.name_of = {m.path: m.struct.name for m in schemas.messages}

    def finding(
        self, key: str, source: SourceFile, rule_id: str, pointer: str, message: str, *, key_pos: bool
    ) -> tuple[str, Finding]:
        """A finding in file ``key`` at ``pointer`` (at its key's position with ``key_pos``)."""
        return key, _at(rule_id, message, source.location(pointer, key=key_pos), pointer)

    def nodes(self) -> Iterator[tuple[str, SourceFile, str, dict[str, Any], bool]]:
        """``(key, source, pointer, node, named)`` of every schema node; ``named`` when the node is
        a member of ``properties`` or ``$defs`` (its position is then its key's)."""
        for key, source in self.entries:
            data = source.data
            yield from _walk(key, source, data, "", named=False)
            defs = data.get("$defs")
            if isinstance(defs, dict):
                for name, node in defs.items():
                    if isinstance(node, dict):
                        yield from _walk(key, source, node, join_pointer("", "$defs", name), named=True)


def _walk(
    key: str, source: SourceFile, node: dict[str, Any], pointer: str, *, named: bool
) -> Iterator[tuple[str, SourceFile, str, dict[str, Any], bool]]:
    yield key, source, pointer, node, named
    for word in ("items", "additionalProperties"):
        child = node.get(word)
        if isinstance(child, dict):
            yield from _walk(key, source, child, join_pointer(pointer, word), named=False)
    for word in ("prefixItems", "oneOf"):
        children = node.get(word)
        if isinstance(children, list):
            for i, child in enumerate(children):
                if isinstance(child, dict):
                    yield from _walk(key, source, child, join_pointer(pointer, word, i), named=False)
    props = node.get("properties")
    if isinstance(props, dict):
        for name, child in props.items():
            if isinstance(child, dict):
                yield from _walk(key, source, child, join_pointer(pointer, "properties", name), named=True)


def _at(rule_id: str, message: str, where: Location, pointer: str) -> Finding:
    """A finding at ``where``."""
    return Finding(rule_id, message, where.file, where.line or 1, where.col or 1, pointer)


def _described(node: dict[str, Any], *keys: str) -> bool:
    return any(isinstance(node.get(k), str) and node[k].strip() for k in keys)


def _is_struct(node: dict[str, Any]) -> bool:
    return isinstance(node.get("properties"), dict)


# -- the checks ---------------------------------------------------------------------------------
_Found = list[tuple[str, Finding]]


def _pascal_problem(name: str) -> str | None:
    if not _PASCAL.fullmatch(name):
        return "use letters and digits only, starting with a capital"
    run = _CAPITALS.search(name)
    if run is None:
        return None
    acronym = run.group()
    if name[run.end() : run.end() + 1].islower():
        acronym = acronym[:-1]  # the last capital starts the next word: HTTPRequest
    return f"write the acronym {acronym!r} as a word"


def _type_names(files: Files) -> _Found:
    out: _Found = []

    def check(key: str, source: SourceFile, name: str, pointer: str, what: str, *, key_pos: bool) -> None:
        problem = _pascal_problem(name)
        if problem:
            message = f"{what} {name!r} is not PascalCase: {problem}{_suggest(_as_pascal(name), name)}"
            out.append(files.finding(key, source, "TYPE_PASCAL_CASE", pointer, message, key_pos=key_pos))

    for key, source in files.entries:
        check(key, source, files.name_of.get(source.path, ""), "/$id", "message type name", key_pos=False)
        defs = source.data.get("$defs")
        for name in defs if isinstance(defs, dict) else ():
            check(key, source, name, join_pointer("", "$defs", name), "$defs name", key_pos=True)
    for key, source, pointer, node, _ in files.nodes():
        enum_name = node.get("x-enum-name")
        if isinstance(enum_name, str):
            check(key, source, enum_name, join_pointer(pointer, "x-enum-name"), "enum name", key_pos=False)
        title = node.get("title")
        if pointer and _is_struct(node) and isinstance(title, str):
            check(key, source, title, join_pointer(pointer, "title"), "nested object name (title)", key_pos=False)
    return out


def _field_names(files: Files) -> _Found:
    out: _Found = []
    for key, source, pointer, node, _ in files.nodes():
        props = node.get("properties")
        for name in props if isinstance(props, dict) else ():
            if not _FIELD.fullmatch(name):
                message = f"field name {name!r} is not lower_snake_case{_suggest(_as_snake(name), name)}"
                here = join_pointer(pointer, "properties", name)
                out.append(files.finding(key, source, "FIELD_LOWER_SNAKE_CASE", here, message, key_pos=True))
    return out


def _enum_values(files: Files) -> _Found:
    out: _Found = []
    for key, source, pointer, node, _ in files.nodes():
        values = node.get("enum")
        label = f" of {node['x-enum-name']}" if isinstance(node.get("x-enum-name"), str) else ""
        for i, value in enumerate(values if isinstance(values, list) else ()):
            if isinstance(value, str) and not _VALUE.fullmatch(value):
                message = f"enum value {value!r}{label} is not lower_snake_case{_suggest(_as_snake(value), value)}"
                here = join_pointer(pointer, "enum", i)
                out.append(files.finding(key, source, "ENUM_VALUE_LOWER_SNAKE_CASE", here, message, key_pos=False))
    return out


def _type_descriptions(files: Files) -> _Found:
    out: _Found = []
    for key, source, pointer, node, named in files.nodes():
        if not pointer:
            if not _described(node, "description", "title"):
                name = files.name_of.get(source.path, key)
                message = f"message type {name} has no description or title"
                out.append(files.finding(key, source, "TYPE_DESCRIPTION", "", message, key_pos=False))
            continue
        if _is_struct(node) or isinstance(node.get("x-enum-name"), str):
            if not _described(node, "description"):
                kind = "object" if _is_struct(node) else "enum"
                message = f"nested {kind} {_label(node, pointer)} has no description"
                out.append(files.finding(key, source, "TYPE_DESCRIPTION", pointer, message, key_pos=named))
    return out


def _label(node: dict[str, Any], pointer: str) -> str:
    """What a nested type is called: its class name where the file gives one, else its place."""
    for name in (node.get("x-enum-name"), node.get("title")):
        if isinstance(name, str) and _PASCAL.fullmatch(name):
            return name
    if re.fullmatch(r"/\$defs/[^/]+", pointer):
        return pointer.rsplit("/", 1)[-1]
    return f"at {pointer}"


def _field_descriptions(files: Files) -> _Found:
    out: _Found = []
    for key, source, pointer, node, _ in files.nodes():
        props = node.get("properties")
        for name, prop in props.items() if isinstance(props, dict) else ():
            if isinstance(prop, dict) and "const" not in prop and not _described(prop, "description"):
                here = join_pointer(pointer, "properties", name)
                message = f"field {name!r} has no description"
                out.append(files.finding(key, source, "FIELD_DESCRIPTION", here, message, key_pos=True))
    return out


def _unused_defs(files: Files) -> _Found:
    used: set[tuple[str, str]] = set()
    for key, _, _, node, _ in files.nodes():
        ref = node.get("$ref")
        if not isinstance(ref, str):
            continue
        file_part, _, fragment = ref.partition("#")
        target = posixpath.normpath(posixpath.join(posixpath.dirname(key), file_part)) if file_part else key
        match = re.fullmatch(r"/\$defs/([^/]+)", fragment)
        if match:
            used.add((target, match.group(1)))
    out: _Found = []
    for key, source in files.entries:
        defs = source.data.get("$defs")
        for name in defs if isinstance(defs, dict) else ():
            if (key, name) not in used:
                message = f"$defs entry {name!r} is not used: no $ref of the directory points at it; remove it"
                here = join_pointer("", "$defs", name)
                out.append(files.finding(key, source, "DEF_UNUSED", here, message, key_pos=True))
    return out


def not_bumped(files: Files, baseline: SchemaSet, mode: str) -> _Found:
    out: _Found = []
    findings = compare(baseline, files.schemas, mode)
    for f in findings:
        if f.rule != "VERSION_NOT_BUMPED" or f.suppressed is not None or f.new_location is None:
            continue
        breaking = sorted(
            {
                g.rule
                for g in findings
                if g.type_id == f.type_id
                and g.version == f.version
                and g.severity == "error"
                and g.suppressed is None
                and g is not f
            }
        )
        message = f"{f.message} (changes: {', '.join(breaking)}; see tensorwire compat)"
        finding = _at(f.rule, message, f.new_location, f.pointer)
        out.append((files.key_of.get(finding.file, finding.file), finding))
    return out


CHECKS: dict[str, Callable[[Files], _Found]] = {
    "TYPE_PASCAL_CASE": _type_names,
    "FIELD_LOWER_SNAKE_CASE": _field_names,
    "ENUM_VALUE_LOWER_SNAKE_CASE": _enum_values,
    "TYPE_DESCRIPTION": _type_descriptions,
    "FIELD_DESCRIPTION": _field_descriptions,
    "DEF_UNUSED": _unused_defs,
}
