"""One walk over the old and new form of a message type: every change it finds, as findings."""

from __future__ import annotations

import json
from typing import Any

from tensorwire.compat._dims import dim_renames, free_dims, kept_ties, pinned_dims
from tensorwire.compat._finding import Finding
from tensorwire.compat._leaves import enum, limits, scalar, tensor, tree_limits
from tensorwire.compat._nodes import (
    alone,
    in_tree,
    kind_of,
    never_sent,
    same_default,
    sole,
    spans,
    takes,
    variant_id,
    variant_pairs,
    variant_tag,
)
from tensorwire.compat._rules import rule
from tensorwire.errors import Location
from tensorwire.schema import Message, SchemaSet
from tensorwire.schema._source import join_pointer
from tensorwire.schema.ir import (
    ArrayT,
    EnumT,
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
    unhandled,
)

__all__ = ["Walk"]


class Walk:
    """Compares the old and new IR of one message type (either missing for an added or deleted
    type), appending a ``Finding`` per change to ``findings``."""

    def __init__(self, old: SchemaSet, new: SchemaSet, old_msg: Message | None, new_msg: Message | None) -> None:
        self.old, self.new = old, new
        msg = new_msg or old_msg
        assert msg is not None
        self.type_id, self.version = msg.type_id, msg.version
        self.findings: list[Finding] = []
        self.dims: dict[str, str] = {}  # named dims of the struct being compared: old name -> new name
        self.free: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # its names that tie nothing
        self.pinned: dict[str, int] = {}  # its new names whose every axis had one fixed size
        self.ties: tuple[dict[str, str], dict[str, str]] = ({}, {})  # its ties both sides keep (kept_ties)

    def emit(
        self, rule_id: str, message: str, pointer: str, old_src: tuple[str, str] | None, new_src: tuple[str, str] | None
    ) -> None:
        r = rule(rule_id)
        old_at = _where(self.old, *old_src) if old_src else None
        new_at = _where(self.new, *new_src) if new_src else None
        self.findings.append(
            Finding(r.id, r.severity, r.side, message, self.type_id, self.version, pointer, old_at, new_at)
        )

    # -- structs ------------------------------------------------------------------------------
    def struct(self, a: StructT, b: StructT) -> None:
        label = f"{self.type_id} v{self.version}"
        old_fields = {f.name: f for f in a.fields}
        new_fields = {f.name: f for f in b.fields}
        # a field that became the tag, or a tag that became a field, is on every message: ``tag_field``
        deleted = [n for n in old_fields if n not in new_fields and n != b.tag_field]
        added = [n for n in new_fields if n not in old_fields and n != a.tag_field]
        # a required field gone and a required one of its type added break both sides as one rename;
        # an optional one on either side is what its deletion or addition alone says
        for name in [n for n in deleted if old_fields[n].required]:
            twin = next(
                (
                    n
                    for n in added
                    if new_fields[n].required and new_fields[n].type.canonical() == old_fields[name].type.canonical()
                ),
                None,
            )
            if twin is not None:
                deleted.remove(name)
                added.remove(twin)
                self.emit(
                    "FIELD_RENAMED",
                    f"field {name!r} renamed to {twin!r} in {label}",
                    self._ptr(b, twin),
                    (a.source, self._ptr(a, name)),
                    (b.source, self._ptr(b, twin)),
                )
        for name in deleted:
            rid = "FIELD_DELETED" if old_fields[name].required else "FIELD_DELETED_OPTIONAL"
            gone = ((a.source, self._ptr(a, name)), (b.source, b.pointer))
            self.emit(rid, f"field {name!r} removed from {label}", self._ptr(a, name), *gone)
            if b.closed and not never_sent(old_fields[name]):
                change = f"field {name!r} removed from {label}, which now rejects unknown fields"
                self.emit("FIELD_DELETED_FROM_CLOSED", change, self._ptr(a, name), *gone)
        for name in added:
            kind = "required" if new_fields[name].required else "optional"
            fresh = ((a.source, a.pointer), (b.source, self._ptr(b, name)))
            unknown = a.closed and not never_sent(new_fields[name])  # to old readers, which reject one
            if new_fields[name].required:
                self.emit("FIELD_ADDED_REQUIRED", f"{kind} field {name!r} added to {label}", self._ptr(b, name), *fresh)
            elif not unknown:
                self.emit("FIELD_ADDED_OPTIONAL", f"{kind} field {name!r} added to {label}", self._ptr(b, name), *fresh)
            if unknown:
                change = f"{kind} field {name!r} added to {label}, whose old readers reject unknown fields"
                self.emit("FIELD_ADDED_TO_CLOSED", change, self._ptr(b, name), *fresh)
        outer = self.dims, self.free, self.pinned, self.ties
        self.dims, self.free, self.pinned = dim_renames(a, b), (free_dims(a), free_dims(b)), pinned_dims(a, b)
        self.ties = kept_ties(a, b)
        for name in [n for n in new_fields if n in old_fields]:  # in the file's order, not a set's
            fa, fb = old_fields[name], new_fields[name]
            where = ((a.source, self._ptr(a, name)), (b.source, self._ptr(b, name)))
            ptr = self._ptr(b, name)
            if fa.required and not fb.required:
                self.emit("FIELD_MADE_OPTIONAL", f"field {name!r} of {label} is no longer required", ptr, *where)
            if fb.required and not fa.required:
                self.emit("FIELD_MADE_REQUIRED", f"field {name!r} of {label} is now required", ptr, *where)
            if fa.has_default and fb.has_default and not same_default(fa, fb):
                self.emit(
                    "DEFAULT_CHANGED",
                    f"default of {name!r} in {label} changed from {json.dumps(fa.default)} to {json.dumps(fb.default)}",
                    ptr,
                    *where,
                )
            self.node(fa.type, fb.type, f"field {name!r} of {label}", ptr, where)
        self.dims, self.free, self.pinned, self.ties = outer
        where = ((a.source, a.pointer), (b.source, b.pointer))
        if b.closed and not a.closed:
            self.emit("UNKNOWN_FIELDS_REJECTED", f"{label} now rejects unknown fields", b.pointer, *where)
        if a.closed and not b.closed:
            self.emit("UNKNOWN_FIELDS_IGNORED", f"{label} ignores unknown fields again", b.pointer, *where)
        old_groups = {(c.rule, tuple(sorted(c.fields))) for c in a.constraints}  # a group is a set of fields
        new_groups = {(c.rule, tuple(sorted(c.fields))) for c in b.constraints}
        for rule_name, fields in sorted(new_groups - old_groups):
            self.emit("CONSTRAINT_TIGHTENED", f"{label} now has {rule_name} {list(fields)}", b.pointer, *where)
        for rule_name, fields in sorted(old_groups - new_groups):
            self.emit("CONSTRAINT_LOOSENED", f"{label} no longer has {rule_name} {list(fields)}", b.pointer, *where)
        for name in sorted(set(b.validators) - set(a.validators)):
            self.emit("VALIDATOR_ADDED", f"{label} now runs validator {name!r}", b.pointer, *where)
        for name in sorted(set(a.validators) - set(b.validators)):
            self.emit("VALIDATOR_REMOVED", f"{label} no longer runs validator {name!r}", b.pointer, *where)
        if (a.tag_field, a.tag) != (b.tag_field, b.tag):
            self.emit(
                "STRUCT_TAG_CHANGED",
                f"tag of {label} changed from {a.tag_field}={a.tag!r} to {b.tag_field}={b.tag!r}",
                b.pointer,
                *where,
            )
            self.tag_field(a, b, label)

    def tag_field(self, a: StructT, b: StructT, label: str) -> None:
        """What a changed tag breaks: every writer sends its tag, and a reader refuses a tag field
        that holds another value, or (closed) one it does not know."""
        if a.tag_field is not None and a.tag_field == b.tag_field:
            where = ((a.source, self._ptr(a, a.tag_field)), (b.source, self._ptr(b, b.tag_field)))
            change = f"tag field {a.tag_field!r} of {label}: const {json.dumps(a.tag)} -> {json.dumps(b.tag)}"
            self.emit("CONST_CHANGED", change, self._ptr(b, b.tag_field), *where)
            return
        if a.tag_field is not None and b.closed and all(f.name != a.tag_field for f in b.fields):
            change = f"tag field {a.tag_field!r} removed from {label}, which now rejects unknown fields"
            gone = ((a.source, self._ptr(a, a.tag_field)), (b.source, b.pointer))
            self.emit("FIELD_DELETED_FROM_CLOSED", change, self._ptr(a, a.tag_field), *gone)
        old_field = next((f for f in b.fields if f.name == a.tag_field), None)
        if a.tag_field is not None and old_field is not None:  # old writers send their tag in it, old
            # readers take no other value there
            where = ((a.source, self._ptr(a, a.tag_field)), (b.source, self._ptr(b, a.tag_field)))
            what = f"field {a.tag_field!r} of {label} (the tag {json.dumps(a.tag)} before)"
            self.node(ScalarT("str", const=a.tag), old_field.type, what, self._ptr(b, a.tag_field), where)
        if b.tag_field is not None:
            fresh = ((a.source, a.pointer), (b.source, self._ptr(b, b.tag_field)))
            field = next((f for f in a.fields if f.name == b.tag_field), None)
            if field is not None:  # new writers send their tag in it; old writers may send other values
                what = f"field {b.tag_field!r} of {label} (now the tag {json.dumps(b.tag)})"
                self.node(field.type, ScalarT("str", const=b.tag), what, self._ptr(b, b.tag_field), fresh)
            elif a.closed:
                change = f"tag field {b.tag_field!r} added to {label}, whose old readers reject unknown fields"
                self.emit("FIELD_ADDED_TO_CLOSED", change, self._ptr(b, b.tag_field), *fresh)

    @staticmethod
    def _ptr(struct: StructT, field: str) -> str:
        return join_pointer(struct.pointer, "properties", field)

    # -- nodes --------------------------------------------------------------------------------
    def node(self, a: Node, b: Node, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        na, nb = isinstance(a, NullableT), isinstance(b, NullableT)
        na, nb = na or isinstance(a, TreeT), nb or isinstance(b, TreeT)  # a tree holds null
        if nb and not na:
            self.emit("NULLABLE_ADDED", f"{what} may now be null", ptr, *where)
        if na and not nb:
            self.emit("NULLABLE_REMOVED", f"{what} may no longer be null", ptr, *where)
        a = a.inner if isinstance(a, NullableT) else a
        b = b.inner if isinstance(b, NullableT) else b
        match a:  # each case returns when ``b`` is of the same kind; other pairs changed type
            case ScalarT():
                if isinstance(b, ScalarT):
                    scalar(self, a, b, what, ptr, where)
                    return
                if isinstance(b, EnumT) and sole(a) in b.values:  # one member, sent as its string
                    if b.values != (sole(a),):
                        self.emit("CONST_REMOVED", f"{what} no longer has to be {json.dumps(sole(a))}", ptr, *where)
                    return
                if isinstance(b, EnumT) and takes(a, b):  # the wire holds the member's string
                    self.emit("TYPE_NARROWED", f"{what} narrowed from string to enum", ptr, *where)
                    return
                if isinstance(b, TreeT) and in_tree(a, b):  # bytes too, where the tree is not JSON-only
                    self.emit("TYPE_WIDENED", f"{what} widened from {a.kind} to tree", ptr, *where)
                    return
            case EnumT():
                if isinstance(b, EnumT):
                    enum(self, a, b, what, ptr, where)
                    return
                if isinstance(b, ScalarT) and sole(b) in a.values:
                    if a.values != (sole(b),):
                        self.emit("CONST_ADDED", f"{what} must now be {json.dumps(sole(b))}", ptr, *where)
                    return
                if isinstance(b, ScalarT) and takes(b, a):
                    self.emit("TYPE_WIDENED", f"{what} widened from enum to string", ptr, *where)
                    return
                if isinstance(b, TreeT):
                    self.emit("TYPE_WIDENED", f"{what} widened from enum to tree", ptr, *where)
                    return
            case ArrayT():
                if isinstance(b, ArrayT):
                    if b.unique and not a.unique:
                        self.emit("ARRAY_MADE_SET", f"{what} changed from a list to a set", ptr, *where)
                    if a.unique and not b.unique:
                        self.emit("SET_MADE_ARRAY", f"{what} changed from a set to a list", ptr, *where)
                    limits(self, a, b, what, ptr, where)
                    self.node(a.items, b.items, f"items of {what}", ptr, where)
                    return
                if isinstance(b, TupleT) and spans(a, b):
                    self.emit("TYPE_NARROWED", f"{what} narrowed from array to tuple", ptr, *where)
                    return
                if isinstance(b, TreeT) and in_tree(a, b):  # a list travels as one, and decodes as one
                    self.emit("TYPE_WIDENED", f"{what} widened from array to tree", ptr, *where)
                    return
            case TupleT():
                if isinstance(b, TupleT):
                    self.tuple_items(a, b, what, ptr, where)
                    return
                if isinstance(b, ArrayT) and spans(b, a):
                    self.emit("TYPE_WIDENED", f"{what} widened from tuple to array", ptr, *where)
                    return
            case MapT():
                if isinstance(b, MapT):
                    limits(self, a, b, what, ptr, where)
                    self.node(a.values, b.values, f"values of {what}", ptr, where)
                    return
                if isinstance(b, TreeT) and in_tree(a, b):
                    self.emit("TYPE_WIDENED", f"{what} widened from map to tree", ptr, *where)
                    return
            case TensorT():
                if isinstance(b, TensorT):
                    tensor(self, a, b, what, ptr, where)
                    return
                if isinstance(b, TreeT) and in_tree(a, b):
                    self.emit("TYPE_WIDENED", f"{what} widened from {a.kind} to tree", ptr, *where)
                    return
            case TreeT():
                if isinstance(b, TreeT):
                    tree_limits(self, a, b, what, ptr, where)
                    return
                if in_tree(b, a):  # a scalar, a member, a tensor, a list or a map the tree holds as it is
                    self.emit("TYPE_NARROWED", f"{what} narrowed from tree to {kind_of(b)}", ptr, *where)
                    return
            case StructT():
                if isinstance(b, StructT | MessageRefT):  # a message type nested in another is its struct
                    self.struct(a, b.target if isinstance(b, MessageRefT) else b)
                    return
                if isinstance(b, UnionT) and (one := alone(a, b)) is not None:  # variants added beside it
                    self.union(one, b, what, ptr, where)
                    return
            case MessageRefT():
                if isinstance(b, MessageRefT):
                    ka, kb = (a.target.type_id, a.target.version), (b.target.type_id, b.target.version)
                    if ka != kb:
                        change = f"{what} refers to {kb[0]} v{kb[1]} instead of {ka[0]} v{ka[1]}"
                        self.emit("REF_TARGET_CHANGED", change, ptr, *where)
                    return
                if isinstance(b, StructT):
                    self.struct(a.target, b)
                    return
                if isinstance(b, UnionT) and (one := alone(a, b)) is not None:
                    self.union(one, b, what, ptr, where)
                    return
            case UnionT():
                if isinstance(b, UnionT):
                    self.union(a, b, what, ptr, where)
                    return
                if (one := alone(b, a)) is not None:  # every variant but one removed
                    self.union(a, one, what, ptr, where)
                    return
            case NullableT():  # unwrapped above: a nullable of a nullable
                if isinstance(b, NullableT):
                    self.node(a.inner, b.inner, what, ptr, where)
                    return
            case _:
                unhandled(a)
        self.emit("TYPE_CHANGED", f"{what} changed from {kind_of(a)} to {kind_of(b)}", ptr, *where)

    def tuple_items(self, a: TupleT, b: TupleT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        if len(a.items) != len(b.items):
            self.emit("TUPLE_LENGTH_CHANGED", f"{what} has {len(b.items)} items instead of {len(a.items)}", ptr, *where)
            return
        for i, (x, y) in enumerate(zip(a.items, b.items, strict=True)):
            self.node(x, y, f"item {i} of {what}", ptr, where)

    def union(self, a: UnionT, b: UnionT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        if a.tag_field != b.tag_field:
            self.emit(
                "UNION_TAG_FIELD_CHANGED", f"{what}: discriminator {a.tag_field!r} -> {b.tag_field!r}", ptr, *where
            )
        kept, added, removed = variant_pairs(a, b)
        for vid in sorted(variant_id(v) for v in added):
            self.emit("UNION_VARIANT_ADDED", f"{what}: variant {vid} added", ptr, *where)
        for vid in sorted(variant_id(v) for v in removed):
            self.emit("UNION_VARIANT_REMOVED", f"{what}: variant {vid} removed", ptr, *where)
        for va, vb in sorted(kept, key=lambda pair: variant_id(pair[0])):
            if variant_tag(va) != variant_tag(vb):
                change = f"{what}: tag of {variant_id(va)} {variant_tag(va)!r} -> {variant_tag(vb)!r}"
                self.emit("UNION_TAG_CHANGED", change, ptr, *where)
        # a variant declared in place (not a message type, which is compared as a type) is compared here
        for va, vb in kept:
            if isinstance(va, StructT) and isinstance(vb, StructT):
                self.struct(va, vb)


def _where(schemas: SchemaSet, source: str, pointer: str) -> Location | None:
    file = schemas.sources.get(source)
    if file is not None:
        return file.location(pointer)
    return Location(source) if source else None
