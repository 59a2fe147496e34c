"""Build the IR from meta-validated schema files: resolve ``$ref``s, name nested types, check defaults.
An object node (a map or a struct with its fields) is built by ``_structs``, a ``oneOf`` by ``_unions``."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from tensorwire.schema._keywords import _APPLIES, _DOC, _only
from tensorwire.schema._names import _CLASS_NAME, _member_problem
from tensorwire.schema._scalars import const_node, counts, number_node, string_node
from tensorwire.schema._source import SourceFile, join_pointer
from tensorwire.schema._structs import object_node, struct_node
from tensorwire.schema._unions import one_of
from tensorwire.schema._values import value_problem
from tensorwire.schema.ir import (
    ArrayT,
    EnumT,
    MessageRefT,
    Node,
    NullableT,
    ScalarT,
    StructT,
    TensorT,
    TreeT,
    TupleT,
    height,
    member_name,
)

__all__ = ["Builder", "FileEntry", "fingerprint_of"]

MAX_TYPE_DEPTH = 200  # nested schema nodes of one message, through $refs: a $ref and its target are two
_TOO_DEEP = (
    f"types nested deeper than {MAX_TYPE_DEPTH} levels, counting through $ref "
    "(the tools and generated code walk a type recursively)"
)


def fingerprint_of(canonical: Any) -> str:
    """SHA-256 of the canonical form (sorted keys, no whitespace)."""
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class FileEntry:
    """One schema file, keyed by its path relative to the schema directory (``media/Video.v1.json``)."""

    key: str
    source: SourceFile
    namespace: str
    name: str
    version: int


class Builder:
    """Turns files into message ``StructT``s; shared nested types are built once and deduplicated."""

    def __init__(self, files: dict[str, FileEntry]) -> None:
        self.files = files
        self.messages: dict[str, StructT] = {}  # file key -> message struct
        self.fingerprints: dict[str, str] = {}  # file key -> fingerprint
        # (ns, name) -> (type, the file and pointer of its first definition)
        self.named: dict[tuple[str, str], tuple[EnumT | StructT, SourceFile, str]] = {}
        self._defs: dict[tuple[str, str], Node] = {}
        self._active: list[str] = []
        self._depth = 0  # levels of types being built, counted through $refs
        self._heights: dict[int, tuple[Node, int]] = {}

    # -- entry points -------------------------------------------------------------------------
    def message(self, key: str) -> StructT:
        """The message type declared by file ``key`` (built on first use)."""
        if key in self.messages:
            return self.messages[key]
        entry = self.files[key]
        if key in self._active:
            cycle = " -> ".join(self.files[k].source.path for k in [*self._active[self._active.index(key) :], key])
            raise entry.source.error(
                "", f"recursive reference ({cycle}); the subset has no recursive types, use x-tree"
            )
        self._active.append(key)
        self._depth += 1  # a message reference and the message are two levels, as a $ref and its $defs entry
        try:
            struct = struct_node(self, entry, entry.source.data, "", entry.name, message=True)
        finally:
            self._active.pop()
            self._depth -= 1
        self.messages[key] = struct
        self.fingerprints[key] = fingerprint_of(struct.canonical())
        return struct

    # -- nodes --------------------------------------------------------------------------------
    def _node(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        if self._depth >= MAX_TYPE_DEPTH:
            raise entry.source.error(ptr, _TOO_DEEP)
        self._depth += 1
        try:
            node = self._node_of(entry, schema, ptr, hint)
        finally:
            self._depth -= 1
        self._check_examples(entry, schema, ptr, node)
        return node

    def _check_examples(self, entry: FileEntry, schema: dict[str, Any], ptr: str, node: Node) -> None:
        """Each of ``examples`` must be a value of ``node``: an example that does not fit is an error."""
        for i, example in enumerate(schema.get("examples", ())):
            problem = value_problem(node, example, whole=True)
            if problem:
                raise entry.source.error(
                    join_pointer(ptr, "examples", i), f"example does not fit the schema: {problem}"
                )

    def _node_of(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        src = entry.source
        if "$ref" in schema:
            _only(entry, schema, ptr, _DOC | {"$ref"}, "$ref")
            node = self._ref(entry, schema["$ref"], ptr)
        elif "x-tensor" in schema or "x-ndarray" in schema:
            kind = "tensor" if "x-tensor" in schema else "ndarray"
            _only(entry, schema, ptr, _DOC | {f"x-{kind}"}, f"x-{kind}")
            node = self._tensor(entry, kind, schema[f"x-{kind}"], join_pointer(ptr, f"x-{kind}"))
        elif "x-tree" in schema:
            _only(entry, schema, ptr, _DOC | {"x-tree"}, "x-tree")
            spec = schema["x-tree"]
            node = TreeT(max_depth=spec.get("max_depth", 64), json_only=spec.get("json", False))
        elif "oneOf" in schema:
            _only(entry, schema, ptr, _DOC | _APPLIES["oneOf"], "oneOf")
            node = one_of(self, entry, schema, ptr, hint)
        elif "enum" in schema:
            _only(entry, schema, ptr, _DOC | _APPLIES["enum"], "enum")
            node = self._enum(entry, schema, ptr)
        elif "const" in schema:
            _only(entry, schema, ptr, _DOC | {"const", "type"}, "const")
            node = const_node(entry.source, schema, ptr)
        elif "type" in schema:
            node = self._typed(entry, schema, ptr, hint)
        else:
            raise src.error(ptr, "no type: expected one of type, $ref, enum, const, oneOf, x-tensor, x-ndarray, x-tree")
        return node

    def _typed(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        src = entry.source
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        nullable = "null" in types
        base = [t for t in types if t != "null"]
        if not base:
            raise src.error(join_pointer(ptr, "type"), "type 'null' alone carries no value; use [T, 'null']")
        if len(base) > 1:
            raise src.error(join_pointer(ptr, "type"), f"one value type expected (plus 'null'), got {base}")
        kind = base[0]
        allowed = _DOC | _APPLIES[kind] | ({"$defs"} if not ptr else frozenset())
        for key in schema:
            if key not in allowed:
                raise src.error(join_pointer(ptr, key), f"keyword {key!r} does not apply to type {kind!r}", key=True)
        node: Node
        if kind == "boolean":
            node = ScalarT("bool")
        elif kind in ("integer", "number"):
            node = number_node(entry.source, schema, ptr, kind)
        elif kind == "string":
            node = string_node(entry.source, schema, ptr)
        elif kind == "array":
            node = self._array(entry, schema, ptr, hint)
        else:
            node = object_node(self, entry, schema, ptr, hint)
        return NullableT(node) if nullable else node

    def _array(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        src = entry.source
        if "items" in schema and "prefixItems" in schema:
            raise src.error(ptr, "an array has either items (a list) or prefixItems (a tuple), not both")
        if "prefixItems" in schema:
            if schema.get("uniqueItems"):
                raise src.error(join_pointer(ptr, "uniqueItems"), "uniqueItems does not apply to a tuple")
            for key in ("minItems", "maxItems"):
                if key in schema:
                    raise src.error(
                        join_pointer(ptr, key), f"{key} does not apply to a tuple: prefixItems fixes its length"
                    )
            return TupleT(
                tuple(
                    self._node(entry, item, join_pointer(ptr, "prefixItems", i), f"{hint}Item{i}")
                    for i, item in enumerate(schema["prefixItems"])
                )
            )
        if "items" not in schema:
            raise src.error(ptr, "an array needs items (a list) or prefixItems (a tuple)")
        items = self._node(entry, schema["items"], join_pointer(ptr, "items"), f"{hint}Item")
        unique = bool(schema.get("uniqueItems", False))
        if unique and not _hashable(items):
            raise src.error(join_pointer(ptr, "uniqueItems"), "a set (uniqueItems) needs scalar, string or enum items")
        low, high = counts(src, schema, ptr, "Items")
        return ArrayT(items, unique=unique, min_items=low, max_items=high)

    def _enum(self, entry: FileEntry, schema: dict[str, Any], ptr: str) -> Node:
        src = entry.source
        if schema.get("type", "string") != "string":
            raise src.error(join_pointer(ptr, "type"), "an enum is a string enum: type must be 'string'")
        if "x-enum-name" not in schema:
            raise src.error(ptr, "an enum needs x-enum-name (its class name)")
        name = schema["x-enum-name"]
        if not _CLASS_NAME.fullmatch(name):
            message = f"x-enum-name {name!r} must be letters and digits, starting with a capital"
            raise src.error(join_pointer(ptr, "x-enum-name"), message)
        enum = EnumT(entry.namespace, name, tuple(schema["enum"]), schema.get("description", ""))
        seen: dict[str, str] = {}
        for i, value in enumerate(enum.values):
            member = member_name(value)
            problem = _member_problem(value, member, name)
            if problem is not None:
                raise src.error(join_pointer(ptr, "enum", i), problem)
            same = seen.setdefault(unicodedata.normalize("NFKC", member), value)
            if same != value:
                raise src.error(
                    join_pointer(ptr, "enum", i),
                    f"enum values {same!r} and {value!r} map to the same member name {member!r} "
                    "(as Python reads names, NFKC-normalized)",
                )
        return self._named(entry, enum, ptr)

    def _named(self, entry: FileEntry, node: EnumT | StructT, ptr: str) -> EnumT | StructT:
        key = (node.namespace, node.name)
        if key in self.named:
            existing, source, first = self.named[key]
            if existing.canonical() != node.canonical():
                raise entry.source.error(
                    ptr,
                    f"type name {node.namespace}.{node.name} is already defined differently at {source.where(first)}; "
                    "rename one (x-enum-name, title or $defs key)",
                )
            return existing
        self.named[key] = (node, entry.source, ptr)
        return node

    def _tensor(self, entry: FileEntry, kind: str, spec: dict[str, Any], ptr: str) -> TensorT:
        shape = spec.get("shape")
        rank = spec.get("rank")
        if shape is not None and rank is not None and rank != len(shape):
            raise entry.source.error(ptr, f"rank {rank} disagrees with shape {shape} (rank {len(shape)})")
        if shape is None and rank is not None:
            shape = [None] * rank
        dtypes = spec.get("dtypes")
        devices = spec.get("devices")
        if kind == "ndarray":
            if devices is not None and devices != ["cpu"]:
                raise entry.source.error(join_pointer(ptr, "devices"), "a numpy array lives on the cpu")
            bad = [d for d in dtypes or () if d in ("bfloat16", "float8_e4m3fn", "float8_e5m2")]
            if bad:
                raise entry.source.error(join_pointer(ptr, "dtypes"), f"numpy has no dtype {bad[0]!r}")
        return TensorT(
            kind,  # type: ignore[arg-type]
            dtypes=None if dtypes is None else tuple(dtypes),
            shape=None if shape is None else tuple(shape),
            devices=None if devices is None else tuple(devices),
            contiguous=spec.get("contiguous"),
        )

    # -- references ---------------------------------------------------------------------------
    def _ref(self, entry: FileEntry, ref: str, ptr: str) -> Node:
        src = entry.source
        file_part, _, fragment = ref.partition("#")
        if file_part:
            target_key = posixpath.normpath(posixpath.join(posixpath.dirname(entry.key), file_part))
            if target_key not in self.files:
                raise src.error(join_pointer(ptr, "$ref"), f"unresolvable $ref {ref!r}: no schema file {target_key!r}")
        else:
            target_key = entry.key
        target = self.files[target_key]
        if fragment in ("", "/"):
            if target_key == entry.key:
                raise src.error(join_pointer(ptr, "$ref"), f"$ref {ref!r} refers to this type itself; use x-tree")
            struct = self.message(target_key)
            return self._reached(src, ptr, MessageRefT(struct, self.fingerprints[target_key]))
        match = re.fullmatch(r"/\$defs/([^/]+)", fragment)
        defs = target.source.data.get("$defs", {})
        if match is None or match.group(1) not in defs:
            raise src.error(
                join_pointer(ptr, "$ref"), f"unresolvable $ref {ref!r}: expected #/$defs/<Name> of {target.key}"
            )
        name = match.group(1)
        if not _CLASS_NAME.fullmatch(name):
            message = f"$defs name {name!r} must be letters and digits, starting with a capital"
            raise target.source.error(join_pointer("", "$defs", name), message, key=True)
        key = (target_key, name)
        if key not in self._defs:
            marker = f"{target_key}#{name}"
            if marker in self._active:
                raise src.error(join_pointer(ptr, "$ref"), f"recursive reference through {ref!r}; use x-tree")
            self._active.append(marker)
            try:
                self._defs[key] = self._node(target, defs[name], join_pointer("", "$defs", name), name)
            finally:
                self._active.pop()
        return self._reached(src, ptr, self._defs[key])

    def _reached(self, src: SourceFile, ptr: str, node: Node) -> Node:
        """``node`` (built before, or just now) referenced at ``ptr``, if the levels above it and its
        own stay within ``MAX_TYPE_DEPTH``."""
        if self._depth + height(node, self._heights) > MAX_TYPE_DEPTH:
            raise src.error(join_pointer(ptr, "$ref"), _TOO_DEEP)
        return node


def _hashable(node: Node) -> bool:
    return isinstance(node, EnumT) or (isinstance(node, ScalarT) and node.kind != "bytes")
