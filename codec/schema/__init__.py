"""The schema compiler: load a schema directory, meta-validate every file, build the IR.

``load_dir(path)`` returns a ``SchemaSet``: every message type with its fingerprint, and the named
nested types (enums, structs) of every namespace in dependency order.
"""

from __future__ import annotations

import keyword
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tensorwire._files import find
from tensorwire.errors import SchemaError, printable
from tensorwire.schema._build import Builder, FileEntry, fingerprint_of
from tensorwire.schema._meta import check_against_meta, meta_schema, meta_schema_text
from tensorwire.schema._source import SourceFile, read_source
from tensorwire.schema.ir import EnumT, StructT

__all__ = [
    "MAX_VERSION",
    "META_DIR",
    "Message",
    "SchemaSet",
    "class_name",
    "fingerprint_of",
    "load_dir",
    "meta_schema",
    "meta_schema_text",
]

META_DIR = "meta"
MAX_VERSION = 10**18 - 1  # the largest version a frame's tag carries (``tensorwire._wire.parse_tag``)
_NAMESPACE = re.compile(r"[a-z][a-z0-9_]*")  # fullmatch: never a name and a newline
_FILE = re.compile(r"([A-Z][A-Za-z0-9]*)\.v([1-9][0-9]*)\.json")


@dataclass(frozen=True)
class Message:
    """A message type: its IR, fingerprint and file (``key`` relative to the schema directory)."""

    struct: StructT
    fingerprint: str
    key: str
    path: str

    @property
    def type_id(self) -> str:
        assert self.struct.type_id is not None
        return self.struct.type_id

    @property
    def version(self) -> int:
        assert self.struct.version is not None
        return self.struct.version


@dataclass(frozen=True)
class SchemaSet:
    """Everything one schema directory declares."""

    root: Path
    label: str  # the directory's name, used in generated headers (stable across machines)
    messages: tuple[Message, ...]  # dependency order
    named: tuple[EnumT | StructT, ...]  # nested enums and structs, dependency order
    sources: dict[str, SourceFile] = field(default_factory=dict)  # display path -> parsed file (positions)

    def namespaces(self) -> list[str]:
        return sorted({m.struct.namespace for m in self.messages})

    def latest_version(self, type_id: str) -> int:
        return self._latest[type_id]

    def message(self, type_id: str, version: int) -> Message:
        try:
            return self._by_id[type_id, version]
        except KeyError:
            raise KeyError(f"{type_id} v{version}") from None

    @cached_property
    def _by_id(self) -> dict[tuple[str, int], Message]:
        """Each message by its type id and version (found once: gen asks for every message's)."""
        found: dict[tuple[str, int], Message] = {}
        for m in self.messages:
            found.setdefault((m.type_id, m.version), m)
        return found

    @cached_property
    def _latest(self) -> dict[str, int]:
        """Each type id's latest version."""
        latest: dict[str, int] = {}
        for type_id, version in self._by_id:
            latest[type_id] = max(version, latest.get(type_id, version))
        return latest


def class_name(schemas: SchemaSet, struct: StructT) -> str:
    """Python class name: ``Name`` for a type's latest version, ``NameV<N>`` for older ones."""
    if struct.type_id is None:
        return struct.name
    assert struct.version is not None
    latest = schemas.latest_version(struct.type_id)
    return struct.name if struct.version == latest else f"{struct.name}V{struct.version}"


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


_PACKAGE_SCHEMAS = Path(__file__).parent.parent / "builtins" / "schemas"


def _is_package_schemas(root: Path) -> bool:
    """Whether ``root`` is tensorwire's own built-in schema directory, whose files an editable
    install links to the source tree: the only schema files read through a link."""
    try:
        return os.path.samefile(root, _PACKAGE_SCHEMAS)
    except OSError:
        return False


def load_dir(directory: str | os.PathLike[str], display_root: str | None = None) -> SchemaSet:
    """Load and compile every ``<namespace>/<Name>.v<N>.json`` under ``directory``.

    ``display_root`` replaces the directory in the paths errors and findings show (e.g.
    ``origin/main:schemas`` for schemas read out of git). A schema file that is a symbolic link is
    a ``SchemaError``, unread (but in tensorwire's own built-in schema directory).
    """
    root = Path(directory)
    if not root.is_dir():
        raise SchemaError(f"{directory}: not a schema directory")
    parsed: list[tuple[str, str, int, SourceFile]] = []
    links = _is_package_schemas(root)
    try:
        paths = find(root, "*.json")
    except OSError as exc:
        raise SchemaError(f"cannot list {printable(str(exc.filename))}: {exc.strerror}", file=_display(root)) from None
    for path in paths:
        rel = path.relative_to(root)
        display = printable(f"{display_root}/{rel.as_posix()}" if display_root else _display(path))
        if rel.parts[0] == META_DIR:
            continue
        if len(rel.parts) != 2 or not _NAMESPACE.fullmatch(rel.parts[0]):
            raise SchemaError(
                "schema files live at <namespace>/<Name>.v<N>.json (namespace: lower_snake)", file=display
            )
        if keyword.iskeyword(rel.parts[0]):
            raise SchemaError(
                f"namespace {rel.parts[0]!r} is a Python keyword, which cannot name the generated module",
                file=display,
            )
        match = _FILE.fullmatch(rel.parts[1])
        if match is None:
            raise SchemaError("file name must be <Name>.v<N>.json, e.g. Video.v1.json", file=display)
        source = read_source(path, display, follow=links)
        if not isinstance(source.data, dict):
            raise source.error("", "a schema file holds one JSON object")
        check_against_meta(source)
        parsed.append((rel.as_posix(), match.group(1), int(match.group(2)), source))
    declared: dict[tuple[str, int], str] = {}
    for _, _, _, source in parsed:
        ident = (source.data["$id"], source.data["x-version"])
        if ident in declared:
            raise source.error("/$id", f"duplicate $id {ident[0]} v{ident[1]} (also declared in {declared[ident]})")
        declared[ident] = source.path
    files: dict[str, FileEntry] = {}
    for key, name, version, source in parsed:
        namespace = key.split("/")[0]
        expected_id = f"{namespace}.{name}"
        if source.data["$id"] != expected_id:
            raise source.error(
                "/$id", f"$id {source.data['$id']!r} does not match the file's path (expected {expected_id!r})"
            )
        if source.data["x-version"] > MAX_VERSION:
            raise source.error(
                "/x-version",
                f"x-version {source.data['x-version']} is over {MAX_VERSION}: a message's tag carries a version "
                "of at most 18 digits",
            )
        if source.data["x-version"] != version:
            raise source.error(
                "/x-version", f"x-version {source.data['x-version']} does not match the file name (expected {version})"
            )
        files[key] = FileEntry(key, source, namespace, name, version)
    if not files:
        raise SchemaError(f"{_display(root)}: no schema files found (expected <namespace>/<Name>.v<N>.json)")
    builder = Builder(files)
    for key in files:
        builder.message(key)
    messages = tuple(
        Message(builder.messages[key], builder.fingerprints[key], key, files[key].source.path)
        for key in builder.messages
    )
    named = tuple(node for node, _, _ in builder.named.values())
    sources = {entry.source.path: entry.source for entry in files.values()}
    schemas = SchemaSet(root, root.resolve().name, messages, named, sources)
    _check_class_names(schemas, builder)
    return schemas


def _check_class_names(schemas: SchemaSet, builder: Builder) -> None:
    """Refuse a class name that is a Python keyword (``None``, ``True``, ``False``: a generated
    class cannot be declared so), a message class's name that another message type's class takes
    (``h.MsgV1`` beside ``h.Msg`` v1), or a nested type's name that a message class takes."""
    for m in schemas.messages:
        if keyword.iskeyword(m.struct.name):
            message = f"type name {m.struct.name!r} is a Python keyword, which cannot name a generated class"
            raise schemas.sources[m.path].error("/$id", message)
    for (_, name), (_, source, pointer) in builder.named.items():
        if keyword.iskeyword(name):
            raise source.error(pointer, f"type name {name!r} is a Python keyword, which cannot name a generated class")
    taken: dict[tuple[str, str], str] = {}
    owner: dict[tuple[str, str], str] = {}
    for m in schemas.messages:
        for name in sorted({class_name(schemas, m.struct), f"{m.struct.name}V{m.version}"}):
            key = (m.struct.namespace, name)
            if owner.setdefault(key, m.type_id) != m.type_id:
                raise schemas.sources[m.path].error(
                    "/$id",
                    f"message class name {m.struct.namespace}.{name} of {m.type_id} v{m.version} clashes with the "
                    f"message class of {owner[key]} declared in {taken[key]}; rename one",
                )
            taken[key] = m.path
    for (namespace, name), (_, source, pointer) in builder.named.items():
        if (namespace, name) in taken:
            raise source.error(
                pointer,
                f"nested type name {namespace}.{name} clashes with the message class declared in "
                f"{taken[(namespace, name)]}; rename it",
            )
