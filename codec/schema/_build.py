"""Build the IR from meta-validated schema files: resolve ``$ref``s, name nested types, check defaults."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from tensorwire.rules import known_validators
from tensorwire.schema._source import SourceFile, join_pointer
from tensorwire.schema.ir import (
    MISSING,
    ArrayT,
    Constraint,
    EnumT,
    Field,
    MapT,
    MessageRefT,
    Node,
    NullableT,
    ScalarT,
    StructT,
    TensorT,
    TreeT,
    TupleT,
    UnionT,
    member_name,
    unhandled,
)

__all__ = ["Builder", "FileEntry", "fingerprint_of"]

_DOC = frozenset({"$comment", "title", "description", "examples", "default", "x-compat-ignore"})
_APPLIES: dict[str, frozenset[str]] = {
    "boolean": frozenset({"type"}),
    "integer": frozenset({"type", "minimum", "maximum"}),
    "number": frozenset({"type", "minimum", "maximum"}),
    "string": frozenset({"type", "maxLength", "contentEncoding"}),
    "array": frozenset({"type", "items", "prefixItems", "uniqueItems"}),
    "object": frozenset({"type", "properties", "required", "additionalProperties", "x-constraints", "x-validators"}),
    "enum": frozenset({"type", "enum", "x-enum-name"}),
    "oneOf": frozenset({"oneOf", "discriminator"}),
}
_CLASS_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


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


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_\W]+", name) if part)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    return f"{_JSON_TYPE.get(type(value), type(value).__name__)} {json.dumps(value)}"


class Builder:
    """Turns files into message ``StructT``s; shared nested types are built once and deduplicated."""

    def __init__(self, files: dict[str, FileEntry]) -> None:
        self.files = files
        self.messages: dict[str, StructT] = {}  # file key -> message struct
        self.fingerprints: dict[str, str] = {}  # file key -> fingerprint
        self.named: dict[tuple[str, str], tuple[EnumT | StructT, str]] = {}  # (ns, name) -> (type, where)
        self._defs: dict[tuple[str, str], Node] = {}
        self._active: list[str] = []

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
        try:
            struct = self._struct(entry, entry.source.data, "", entry.name, message=True)
        finally:
            self._active.pop()
        self.messages[key] = struct
        self.fingerprints[key] = fingerprint_of(struct.canonical())
        return struct

    # -- nodes --------------------------------------------------------------------------------
    def _node(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        src = entry.source
        if "$ref" in schema:
            self._only(entry, schema, ptr, _DOC | {"$ref"}, "$ref")
            node = self._ref(entry, schema["$ref"], ptr)
        elif "x-tensor" in schema or "x-ndarray" in schema:
            kind = "tensor" if "x-tensor" in schema else "ndarray"
            self._only(entry, schema, ptr, _DOC | {f"x-{kind}"}, f"x-{kind}")
            node = self._tensor(entry, kind, schema[f"x-{kind}"], join_pointer(ptr, f"x-{kind}"))
        elif "x-tree" in schema:
            self._only(entry, schema, ptr, _DOC | {"x-tree"}, "x-tree")
            spec = schema["x-tree"]
            node = TreeT(max_depth=spec.get("max_depth", 64), json_only=spec.get("json", False))
        elif "oneOf" in schema:
            self._only(entry, schema, ptr, _DOC | _APPLIES["oneOf"], "oneOf")
            node = self._one_of(entry, schema, ptr, hint)
        elif "enum" in schema:
            self._only(entry, schema, ptr, _DOC | _APPLIES["enum"], "enum")
            node = self._enum(entry, schema, ptr)
        elif "type" in schema:
            node = self._typed(entry, schema, ptr, hint)
        else:
            raise src.error(ptr, "no type: expected one of type, $ref, enum, oneOf, x-tensor, x-ndarray, x-tree")
        return node

    def _only(self, entry: FileEntry, schema: dict[str, Any], ptr: str, allowed: frozenset[str], what: str) -> None:
        for key in schema:
            if key not in allowed:
                raise entry.source.error(
                    join_pointer(ptr, key), f"keyword {key!r} cannot be combined with {what!r}", key=True
                )

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
            lo, hi = schema.get("minimum"), schema.get("maximum")
            if kind == "integer":
                for key, bound in (("minimum", lo), ("maximum", hi)):
                    if bound is not None and not float(bound).is_integer():
                        raise src.error(join_pointer(ptr, key), f"{key} of an integer must be whole, got {bound}")
                lo = None if lo is None else int(lo)
                hi = None if hi is None else int(hi)
            if lo is not None and hi is not None and lo > hi:
                raise src.error(ptr, f"minimum {lo} is above maximum {hi}")
            node = ScalarT("int" if kind == "integer" else "float", minimum=lo, maximum=hi)
        elif kind == "string":
            is_bytes = schema.get("contentEncoding") == "base64"
            node = ScalarT("bytes" if is_bytes else "str", max_length=schema.get("maxLength"))
        elif kind == "array":
            node = self._array(entry, schema, ptr, hint)
        else:
            node = self._object(entry, schema, ptr, hint)
        return NullableT(node) if nullable else node

    def _array(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        src = entry.source
        if "items" in schema and "prefixItems" in schema:
            raise src.error(ptr, "an array has either items (a list) or prefixItems (a tuple), not both")
        if "prefixItems" in schema:
            if schema.get("uniqueItems"):
                raise src.error(join_pointer(ptr, "uniqueItems"), "uniqueItems does not apply to a tuple")
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
        return ArrayT(items, unique=unique)

    def _object(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        src = entry.source
        if "properties" in schema and "additionalProperties" in schema:
            raise src.error(ptr, "an object has either properties (a struct) or additionalProperties (a map), not both")
        if "additionalProperties" in schema:
            for key in ("required", "x-constraints", "x-validators"):
                if key in schema:
                    raise src.error(join_pointer(ptr, key), f"keyword {key!r} does not apply to a map", key=True)
            return MapT(
                self._node(entry, schema["additionalProperties"], join_pointer(ptr, "additionalProperties"), hint)
            )
        if "properties" not in schema:
            raise src.error(ptr, "an object needs properties (a struct) or additionalProperties (a map)")
        name = schema.get("title", hint)
        if not isinstance(name, str) or not _CLASS_NAME.match(name):
            name = hint
        return self._struct(entry, schema, ptr, name, message=False)

    def _struct(self, entry: FileEntry, schema: dict[str, Any], ptr: str, name: str, *, message: bool) -> StructT:
        src = entry.source
        props: dict[str, Any] = schema.get("properties", {})
        required = schema.get("required", [])
        for i, field_name in enumerate(required):
            if field_name not in props:
                raise src.error(join_pointer(ptr, "required", i), f"required names unknown property {field_name!r}")
        tag_field = tag = None
        fields: list[Field] = []
        for field_name, prop in props.items():
            fptr = join_pointer(ptr, "properties", field_name)
            if "const" in prop:
                self._only(entry, prop, fptr, _DOC | {"const", "type"}, "const")
                if prop.get("type", "string") != "string" or tag_field is not None:
                    raise src.error(fptr, "const marks the one string tag of a union variant")
                tag_field, tag = field_name, prop["const"]
                continue
            node = self._node(entry, prop, fptr, name + _pascal(field_name))
            is_required = field_name in required
            default = prop.get("default", MISSING)
            if is_required and default is not MISSING:
                raise src.error(join_pointer(fptr, "default"), f"field {field_name!r} is required and has a default")
            if not is_required and default is MISSING:
                raise src.error(fptr, f"optional field {field_name!r} needs a default (add it to required or give one)")
            if default is not MISSING:
                problem = _default_problem(node, default)
                if problem:
                    raise src.error(join_pointer(fptr, "default"), f"default of wrong type: {problem}")
            fields.append(Field(field_name, node, is_required, default, prop.get("description", "")))
        if not fields:
            raise src.error(ptr, "an object type needs at least one property besides its tag")
        constraints = self._constraints(entry, schema.get("x-constraints", {}), ptr, {f.name for f in fields})
        validators = tuple(schema.get("x-validators", ()))
        known = known_validators()
        for i, validator in enumerate(validators):
            if validator not in known:
                raise src.error(
                    join_pointer(ptr, "x-validators", i),
                    f"unknown validator {validator!r}; registered: {', '.join(sorted(known)) or 'none'}",
                )
        struct = StructT(
            namespace=entry.namespace,
            name=name,
            fields=tuple(fields),
            constraints=constraints,
            validators=validators,
            tag_field=tag_field,
            tag=tag,
            description=schema.get("description", schema.get("title", ""))
            if message
            else schema.get("description", ""),
            type_id=f"{entry.namespace}.{entry.name}" if message else None,
            version=entry.version if message else None,
            source=src.path,
            pointer=ptr,
        )
        return struct if message else self._named(entry, struct, ptr)  # type: ignore[return-value]

    def _constraints(self, entry: FileEntry, spec: dict[str, Any], ptr: str, names: set[str]) -> tuple[Constraint, ...]:
        out: list[Constraint] = []
        for rule, groups in spec.items():
            normalized = [groups] if all(isinstance(g, str) for g in groups) else groups
            for g, group in enumerate(normalized):
                if isinstance(group, str):
                    raise entry.source.error(
                        join_pointer(ptr, "x-constraints", rule, g), "expected a list of field names"
                    )
                for name in group:
                    if name not in names:
                        raise entry.source.error(
                            join_pointer(ptr, "x-constraints", rule), f"{rule} names unknown field {name!r}"
                        )
                if len(group) < 2:
                    raise entry.source.error(
                        join_pointer(ptr, "x-constraints", rule), f"{rule} needs two or more fields"
                    )
                out.append(Constraint(rule, tuple(group)))  # type: ignore[arg-type]  # the meta-schema allows only the two rules
        return tuple(out)

    def _enum(self, entry: FileEntry, schema: dict[str, Any], ptr: str) -> Node:
        src = entry.source
        if schema.get("type", "string") != "string":
            raise src.error(join_pointer(ptr, "type"), "an enum is a string enum: type must be 'string'")
        if "x-enum-name" not in schema:
            raise src.error(ptr, "an enum needs x-enum-name (its class name)")
        enum = EnumT(entry.namespace, schema["x-enum-name"], tuple(schema["enum"]), schema.get("description", ""))
        members = [member_name(v) for v in enum.values]
        if len(set(members)) != len(members):
            raise src.error(join_pointer(ptr, "enum"), "enum values map to the same member name")
        return self._named(entry, enum, ptr)

    def _named(self, entry: FileEntry, node: EnumT | StructT, ptr: str) -> EnumT | StructT:
        key = (node.namespace, node.name)
        where = entry.source.where(ptr)
        if key in self.named:
            existing, first = self.named[key]
            if existing.canonical() != node.canonical():
                raise entry.source.error(
                    ptr,
                    f"type name {node.namespace}.{node.name} is already defined differently at {first}; "
                    "rename one (x-enum-name, title or $defs key)",
                )
            return existing
        self.named[key] = (node, where)
        return node

    def _one_of(self, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
        src = entry.source
        variants: list[Node] = []
        nullable = False
        for i, sub in enumerate(schema["oneOf"]):
            if sub.get("type") == "null" and len(sub.keys() - _DOC) == 1:
                nullable = True
                continue
            variants.append(self._node(entry, sub, join_pointer(ptr, "oneOf", i), f"{hint}Variant{i}"))
        if not variants:
            raise src.error(join_pointer(ptr, "oneOf"), "oneOf needs a variant besides null")
        if len(variants) == 1 and "discriminator" not in schema:
            node = variants[0]
        else:
            if "discriminator" not in schema:
                raise src.error(
                    join_pointer(ptr, "oneOf"),
                    f"union without discriminator: {len(variants)} variants need discriminator.propertyName",
                )
            node = self._union(entry, schema, ptr, variants)
        if nullable and isinstance(node, NullableT):
            raise src.error(join_pointer(ptr, "oneOf"), "null appears twice in this oneOf")
        return NullableT(node) if nullable else node

    def _union(self, entry: FileEntry, schema: dict[str, Any], ptr: str, variants: list[Node]) -> UnionT:
        src = entry.source
        tag_field = schema["discriminator"]["propertyName"]
        tags: dict[str, int] = {}
        members: list[StructT | MessageRefT] = []
        for i, variant in enumerate(variants):
            vptr = join_pointer(ptr, "oneOf", i)
            struct = variant.target if isinstance(variant, MessageRefT) else variant
            if not isinstance(struct, StructT) or not isinstance(variant, StructT | MessageRefT):
                raise src.error(vptr, "a union variant must be an object type")
            label = struct.type_id or f"{struct.namespace}.{struct.name}"
            if struct.tag_field != tag_field:
                raise src.error(
                    vptr, f"variant {label} has no const property {tag_field!r} (the union's discriminator)"
                )
            assert struct.tag is not None
            if struct.tag in tags:
                raise src.error(vptr, f"variant {label} repeats tag {struct.tag!r} of variant {tags[struct.tag]}")
            tags[struct.tag] = i
            members.append(variant)
        return UnionT(tag_field, tuple(members))

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
            return MessageRefT(struct, self.fingerprints[target_key])
        match = re.fullmatch(r"/\$defs/([^/]+)", fragment)
        defs = target.source.data.get("$defs", {})
        if match is None or match.group(1) not in defs:
            raise src.error(
                join_pointer(ptr, "$ref"), f"unresolvable $ref {ref!r}: expected #/$defs/<Name> of {target.key}"
            )
        name = match.group(1)
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
        return self._defs[key]


def _hashable(node: Node) -> bool:
    return isinstance(node, EnumT) or (isinstance(node, ScalarT) and node.kind != "bytes")


def _default_problem(node: Node, value: Any) -> str | None:
    """Why ``value`` (a JSON default) does not fit ``node``; None if it does."""
    match node:
        case NullableT():
            return None if value is None else _default_problem(node.inner, value)
        case TreeT():
            return None
        case _ if value is None:
            return "null is not allowed here (the type is not nullable)"
        case ScalarT():
            return _scalar_default_problem(node, value)
        case EnumT():
            return None if value in node.values else f"{_describe(value)} is not one of {list(node.values)}"
        case ArrayT():
            if not isinstance(value, list):
                return f"expected array, got {_describe(value)}"
            return next((p for p in (_default_problem(node.items, v) for v in value) if p), None)
        case TupleT():
            if not isinstance(value, list) or len(value) != len(node.items):
                return f"expected array of {len(node.items)} items, got {_describe(value)}"
            pairs = zip(node.items, value, strict=True)
            return next((p for p in (_default_problem(t, v) for t, v in pairs) if p), None)
        case MapT():
            if not isinstance(value, dict):
                return f"expected object, got {_describe(value)}"
            return next((p for p in (_default_problem(node.values, v) for v in value.values()) if p), None)
        case TensorT() | StructT() | MessageRefT() | UnionT():
            return f"only null can be the default of a {type(node).__name__.removesuffix('T').lower()} field"
        case _:
            unhandled(node)


def _scalar_default_problem(node: ScalarT, value: Any) -> str | None:
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "bytes": value == "",
    }[node.kind]
    if not ok:
        expected = "an empty string (bytes)" if node.kind == "bytes" else node.kind
        return f"expected {expected}, got {_describe(value)}"
    if node.minimum is not None and value < node.minimum:
        return f"{value} is below the minimum {node.minimum}"
    if node.maximum is not None and value > node.maximum:
        return f"{value} is above the maximum {node.maximum}"
    if node.max_length is not None and len(value) > node.max_length:
        return f"longer than maxLength {node.max_length}"
    return None
