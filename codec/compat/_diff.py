"""Compare two compiled schema directories and report every change with its rule.

One walk over old and new IR emits findings; each finding's rule says whom it breaks. BACKWARD
(new reads old) keeps the findings that break old writers, FORWARD (old reads new) those that
break old readers, FULL both.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, TypeAlias

from tensorwire.compat._rules import BOTH, READERS, WRITERS, covers, rule
from tensorwire.dtypes import DTYPES
from tensorwire.errors import Location
from tensorwire.schema import Message, SchemaSet
from tensorwire.schema._build import value_problem
from tensorwire.schema._source import join_pointer
from tensorwire.schema.ir import (
    ArrayT,
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
    unhandled,
)

__all__ = ["MODES", "Finding", "compare", "compare_transitive", "reader_accepts"]

_GONE = {"FIELD_DELETED", "FIELD_DELETED_OPTIONAL", "TYPE_DELETED"}
MODES = {"backward": {WRITERS, BOTH}, "forward": {READERS, BOTH}, "full": {READERS, WRITERS, BOTH}, "none": set()}


@dataclass(frozen=True)
class Finding:
    """One change and the rule it falls under: whom it breaks (``side``), where it is in the schema
    file (``pointer``) and in the old and new schemas (``old_location``, ``new_location``)."""

    rule: str
    severity: str
    side: str
    message: str
    type_id: str
    version: int
    pointer: str
    old_location: Location | None  # in the old schemas
    new_location: Location | None  # in the new schemas
    suppressed: str | None = None  # the x-compat-ignore reason, if suppressed

    @property
    def old(self) -> str | None:
        """``old_location`` as ``file:line:col``."""
        return None if self.old_location is None else str(self.old_location)

    @property
    def new(self) -> str | None:
        """``new_location`` as ``file:line:col``."""
        return None if self.new_location is None else str(self.new_location)

    @property
    def location(self) -> Location | None:
        """Where to point a reader: the old file for something that is gone, else the new one."""
        if self.rule in _GONE:
            return self.old_location or self.new_location
        return self.new_location or self.old_location

    @property
    def where(self) -> str:
        """``location`` as ``file:line:col`` ("" if there is none)."""
        location = self.location
        return "" if location is None else str(location)

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "side": self.side,
            "message": self.message,
            "type_id": self.type_id,
            "version": self.version,
            "pointer": self.pointer,
            "old": self.old,
            "new": self.new,
            "suppressed": self.suppressed,
        }


class _Walk:
    def __init__(self, old: SchemaSet, new: SchemaSet, old_msg: Message | None, new_msg: Message | None) -> None:
        self.old, self.new = old, new
        msg = new_msg or old_msg
        assert msg is not None
        self.type_id, self.version = msg.type_id, msg.version
        self.findings: list[Finding] = []
        self.dims: dict[str, str] = {}  # named dims of the struct being compared: old name -> new name
        self.free: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # its names that tie nothing
        self.pinned: dict[str, int] = {}  # its new names whose every axis had one fixed size

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
        deleted = [n for n in old_fields if n not in new_fields]
        added = [n for n in new_fields if n not in old_fields]
        for name in list(deleted):
            twin = next((n for n in added if new_fields[n].type.canonical() == old_fields[name].type.canonical()), None)
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
            if b.closed:
                change = f"field {name!r} removed from {label}, which now rejects unknown fields"
                self.emit("FIELD_DELETED_FROM_CLOSED", change, self._ptr(a, name), *gone)
        for name in added:
            kind = "required" if new_fields[name].required else "optional"
            fresh = ((a.source, a.pointer), (b.source, self._ptr(b, name)))
            if new_fields[name].required:
                self.emit("FIELD_ADDED_REQUIRED", f"{kind} field {name!r} added to {label}", self._ptr(b, name), *fresh)
            elif not a.closed:
                self.emit("FIELD_ADDED_OPTIONAL", f"{kind} field {name!r} added to {label}", self._ptr(b, name), *fresh)
            if a.closed:
                change = f"{kind} field {name!r} added to {label}, whose old readers reject unknown fields"
                self.emit("FIELD_ADDED_TO_CLOSED", change, self._ptr(b, name), *fresh)
        outer = self.dims, self.free, self.pinned
        self.dims, self.free, self.pinned = _dim_renames(a, b), (_free_dims(a), _free_dims(b)), _pinned_dims(a, b)
        for name in old_fields.keys() & new_fields.keys():
            fa, fb = old_fields[name], new_fields[name]
            where = ((a.source, self._ptr(a, name)), (b.source, self._ptr(b, name)))
            ptr = self._ptr(b, name)
            if fa.required and not fb.required:
                self.emit("FIELD_MADE_OPTIONAL", f"field {name!r} of {label} is no longer required", ptr, *where)
            if fb.required and not fa.required:
                self.emit("FIELD_MADE_REQUIRED", f"field {name!r} of {label} is now required", ptr, *where)
            if fa.has_default and fb.has_default and not _same_default(fa, fb):
                self.emit(
                    "DEFAULT_CHANGED",
                    f"default of {name!r} in {label} changed from {json.dumps(fa.default)} to {json.dumps(fb.default)}",
                    ptr,
                    *where,
                )
            self.node(fa.type, fb.type, f"field {name!r} of {label}", ptr, where)
        self.dims, self.free, self.pinned = outer
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
        if b.tag_field is not None:
            fresh = ((a.source, a.pointer), (b.source, self._ptr(b, b.tag_field)))
            field = next((f for f in a.fields if f.name == b.tag_field), None)
            if field is not None:
                if field.type != ScalarT("str", const=b.tag):  # old writers may send other values in it
                    change = f"field {b.tag_field!r} of {label} must now be {json.dumps(b.tag)} (the tag)"
                    self.emit("CONST_ADDED", change, self._ptr(b, b.tag_field), *fresh)
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
                    self.scalar(a, b, what, ptr, where)
                    return
                if isinstance(b, EnumT) and _takes(a, b):  # the wire holds the member's string
                    self.emit("TYPE_NARROWED", f"{what} narrowed from string to enum", ptr, *where)
                    return
                if isinstance(b, TreeT) and a.kind in _TREE_SCALARS:
                    self.emit("TYPE_WIDENED", f"{what} widened from {a.kind} to tree", ptr, *where)
                    return
            case EnumT():
                if isinstance(b, EnumT):
                    self.enum(a, b, what, ptr, where)
                    return
                if isinstance(b, ScalarT) and _takes(b, a):
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
                    self.limits(a, b, what, ptr, where)
                    self.node(a.items, b.items, f"items of {what}", ptr, where)
                    return
                if isinstance(b, TupleT) and _spans(a, b):
                    self.emit("TYPE_NARROWED", f"{what} narrowed from array to tuple", ptr, *where)
                    return
                if isinstance(b, TreeT) and _in_tree(a, b):  # a list travels as one, and decodes as one
                    self.emit("TYPE_WIDENED", f"{what} widened from array to tree", ptr, *where)
                    return
            case TupleT():
                if isinstance(b, TupleT):
                    self.tuple_items(a, b, what, ptr, where)
                    return
                if isinstance(b, ArrayT) and _spans(b, a):
                    self.emit("TYPE_WIDENED", f"{what} widened from tuple to array", ptr, *where)
                    return
            case MapT():
                if isinstance(b, MapT):
                    self.limits(a, b, what, ptr, where)
                    self.node(a.values, b.values, f"values of {what}", ptr, where)
                    return
                if isinstance(b, TreeT) and _in_tree(a, b):
                    self.emit("TYPE_WIDENED", f"{what} widened from map to tree", ptr, *where)
                    return
            case TensorT():
                if isinstance(b, TensorT):
                    self.tensor(a, b, what, ptr, where)
                    return
            case TreeT():
                if isinstance(b, TreeT):
                    self.tree_limits(a, b, what, ptr, where)
                    return
                if isinstance(b, EnumT) or (isinstance(b, ScalarT) and b.kind in _TREE_SCALARS):
                    self.emit("TYPE_NARROWED", f"{what} narrowed from tree to {_kind(b)}", ptr, *where)
                    return
                if isinstance(b, ArrayT | MapT) and _in_tree(b, a):
                    self.emit("TYPE_NARROWED", f"{what} narrowed from tree to {_kind(b)}", ptr, *where)
                    return
            case StructT():
                if isinstance(b, StructT):
                    self.struct(a, b)
                    return
            case MessageRefT():
                if isinstance(b, MessageRefT):
                    ka, kb = (a.target.type_id, a.target.version), (b.target.type_id, b.target.version)
                    if ka != kb:
                        change = f"{what} refers to {kb[0]} v{kb[1]} instead of {ka[0]} v{ka[1]}"
                        self.emit("REF_TARGET_CHANGED", change, ptr, *where)
                    return
            case UnionT():
                if isinstance(b, UnionT):
                    self.union(a, b, what, ptr, where)
                    return
            case NullableT():  # unwrapped above: a nullable of a nullable
                if isinstance(b, NullableT):
                    self.node(a.inner, b.inner, what, ptr, where)
                    return
            case _:
                unhandled(a)
        self.emit("TYPE_CHANGED", f"{what} changed from {_kind(a)} to {_kind(b)}", ptr, *where)

    def tuple_items(self, a: TupleT, b: TupleT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        if len(a.items) != len(b.items):
            self.emit("TUPLE_LENGTH_CHANGED", f"{what} has {len(b.items)} items instead of {len(a.items)}", ptr, *where)
            return
        for i, (x, y) in enumerate(zip(a.items, b.items, strict=True)):
            self.node(x, y, f"item {i} of {what}", ptr, where)

    def tree_limits(self, a: TreeT, b: TreeT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        if b.max_depth < a.max_depth:
            self.emit(
                "TREE_DEPTH_DECREASED", f"{what} depth limit went from {a.max_depth} to {b.max_depth}", ptr, *where
            )
        if b.max_depth > a.max_depth:
            self.emit(
                "TREE_DEPTH_INCREASED", f"{what} depth limit went from {a.max_depth} to {b.max_depth}", ptr, *where
            )
        if b.json_only and not a.json_only:
            self.emit("TREE_JSON_TIGHTENED", f"{what} became JSON-only", ptr, *where)
        if a.json_only and not b.json_only:
            self.emit("TREE_JSON_LOOSENED", f"{what} is no longer JSON-only", ptr, *where)

    def scalar(self, a: ScalarT, b: ScalarT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        if a.kind != b.kind:
            if (a.kind, b.kind) == ("int", "float"):
                self.emit("TYPE_WIDENED", f"{what} widened from integer to number", ptr, *where)
                if not _exact_as_float(a):
                    self.emit("TYPE_WIDENED_LOSSY", f"{what}: old writers' integers may exceed ±2**53", ptr, *where)
            elif (a.kind, b.kind) == ("float", "int"):
                self.emit("TYPE_NARROWED", f"{what} narrowed from number to integer", ptr, *where)
                if not _exact_as_float(b):
                    self.emit("TYPE_NARROWED_LOSSY", f"{what}: new writers' integers may exceed ±2**53", ptr, *where)
            else:
                self.emit("TYPE_CHANGED", f"{what} changed from {a.kind} to {b.kind}", ptr, *where)
                return
            self.limits(a, b, what, ptr, where)  # the values both kinds hold are still bounded on each side
            return
        if a.const != b.const:
            if a.const is None:
                if _sole(a) != b.const:  # bounds that held that value alone fixed it already
                    self.emit("CONST_ADDED", f"{what} must now be {json.dumps(b.const)}", ptr, *where)
            elif b.const is None:
                if _sole(b) != a.const:
                    self.emit("CONST_REMOVED", f"{what} no longer has to be {json.dumps(a.const)}", ptr, *where)
            else:
                change = f"{what}: const {json.dumps(a.const)} -> {json.dumps(b.const)}"
                self.emit("CONST_CHANGED", change, ptr, *where)
        if a.pattern != b.pattern:
            if a.pattern is None:
                if not _sole_held(a, b):
                    self.emit("PATTERN_ADDED", f"{what} must now match {b.pattern!r}", ptr, *where)
            elif b.pattern is None:
                if not _sole_held(b, a):
                    self.emit("PATTERN_REMOVED", f"{what} no longer has to match {a.pattern!r}", ptr, *where)
            else:
                self.emit("PATTERN_CHANGED", f"{what}: pattern {a.pattern!r} -> {b.pattern!r}", ptr, *where)
        self.limits(a, b, what, ptr, where)

    def limits(
        self, a: ScalarT | ArrayT | MapT, b: ScalarT | ArrayT | MapT, what: str, ptr: str, where: tuple[Any, Any]
    ) -> None:
        """Bounds, ``multipleOf`` and lengths of a scalar; item or entry counts of an array or a map.
        A scalar that holds one value alone (its ``const``) is sent only as that value: the other
        side's limits change nothing for it while they hold it."""
        tighter, looser = _limit_changes(a, b)
        if isinstance(a, ScalarT) and isinstance(b, ScalarT):
            tighter = [] if _sole_held(a, b) else tighter
            looser = [] if _sole_held(b, a) else looser
        if tighter:
            self.emit("RANGE_TIGHTENED", f"{what}: {', '.join(tighter)}", ptr, *where)
        if looser:
            self.emit("RANGE_LOOSENED", f"{what}: {', '.join(looser)}", ptr, *where)

    def enum(self, a: EnumT, b: EnumT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        removed = [v for v in a.values if v not in b.values]
        added = [v for v in b.values if v not in a.values]
        if removed and len(removed) == len(added):
            pairs = ", ".join(f"{x!r} -> {y!r}" for x, y in zip(removed, added, strict=True))
            self.emit("ENUM_VALUE_CHANGED", f"{what}: enum value changed ({pairs})", ptr, *where)
            return
        if added:
            self.emit("ENUM_MEMBER_ADDED", f"{what}: enum gained {added}", ptr, *where)
        if removed:
            self.emit("ENUM_MEMBER_REMOVED", f"{what}: enum lost {removed}", ptr, *where)

    def union(self, a: UnionT, b: UnionT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        if a.tag_field != b.tag_field:
            self.emit(
                "UNION_TAG_FIELD_CHANGED", f"{what}: discriminator {a.tag_field!r} -> {b.tag_field!r}", ptr, *where
            )
        kept, added, removed = _variant_pairs(a, b)
        for vid in sorted(_variant_id(v) for v in added):
            self.emit("UNION_VARIANT_ADDED", f"{what}: variant {vid} added", ptr, *where)
        for vid in sorted(_variant_id(v) for v in removed):
            self.emit("UNION_VARIANT_REMOVED", f"{what}: variant {vid} removed", ptr, *where)
        for va, vb in sorted(kept, key=lambda pair: _variant_id(pair[0])):
            if _variant_tag(va) != _variant_tag(vb):
                change = f"{what}: tag of {_variant_id(va)} {_variant_tag(va)!r} -> {_variant_tag(vb)!r}"
                self.emit("UNION_TAG_CHANGED", change, ptr, *where)
        # a variant declared in place (not a message type, which is compared as a type) is compared here
        for va, vb in kept:
            if isinstance(va, StructT) and isinstance(vb, StructT):
                self.struct(va, vb)

    def tensor(self, a: TensorT, b: TensorT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
        if a.kind != b.kind:
            self.emit("TENSOR_KIND_CHANGED", f"{what} changed from {a.kind} to {b.kind}", ptr, *where)
        old_d, new_d = _dtypes(a), _dtypes(b)
        if old_d != new_d and not (old_d and new_d and set(old_d) == set(new_d)):
            if old_d and new_d and not set(old_d) & set(new_d):
                self.emit("TENSOR_DTYPE_REPLACED", f"{what}: dtypes {sorted(old_d)} -> {sorted(new_d)}", ptr, *where)
            else:
                grown = new_d is None or (old_d is not None and bool(set(new_d) - set(old_d)))
                shrunk = old_d is None or (new_d is not None and bool(set(old_d) - set(new_d)))
                text = f"{what}: dtypes {sorted(old_d) if old_d else 'any'} -> {sorted(new_d) if new_d else 'any'}"
                if grown:
                    self.emit("TENSOR_DTYPES_GROWN", text, ptr, *where)
                if shrunk:
                    self.emit("TENSOR_DTYPES_SHRUNK", text, ptr, *where)
        if a.shape != b.shape:
            if a.shape is None or b.shape is None:
                rid = "TENSOR_SHAPE_TIGHTENED" if a.shape is None else "TENSOR_SHAPE_LOOSENED"
                self.emit(rid, f"{what}: shape {a.shape} -> {b.shape}", ptr, *where)
            elif len(a.shape) != len(b.shape):
                self.emit("TENSOR_RANK_CHANGED", f"{what}: rank {len(a.shape)} -> {len(b.shape)}", ptr, *where)
            else:
                old = [self.dims.get(d, d) if isinstance(d, str) else d for d in a.shape]  # renamed dims as new
                if _moved(a.shape, b.shape) or _moved(old, b.shape):
                    self.emit("TENSOR_DIMS_REORDERED", f"{what}: dims {list(a.shape)} -> {list(b.shape)}", ptr, *where)
                else:
                    free_a, free_b = self.free  # a name that ties no sizes together is a free dim
                    old = [None if x in free_a else y for x, y in zip(a.shape, old, strict=True)]
                    new = [None if y in free_b else y for y in b.shape]
                    # a name whose every axis had this one fixed size ties sizes that old writers' agree on
                    tighter = any(
                        x != y
                        and y is not None
                        and not (isinstance(x, int) and isinstance(y, str) and self.pinned.get(y) == x)
                        for x, y in zip(old, new, strict=True)
                    )
                    looser = any(x != y and x is not None for x, y in zip(old, new, strict=True))
                    if tighter:
                        self.emit(
                            "TENSOR_SHAPE_TIGHTENED", f"{what}: shape {list(a.shape)} -> {list(b.shape)}", ptr, *where
                        )
                    if looser:
                        self.emit(
                            "TENSOR_SHAPE_LOOSENED", f"{what}: shape {list(a.shape)} -> {list(b.shape)}", ptr, *where
                        )
        old_dev, new_dev = set(a.devices or ("cpu", "cuda")), set(b.devices or ("cpu", "cuda"))
        if new_dev - old_dev:
            self.emit("TENSOR_DEVICES_GROWN", f"{what}: devices {sorted(old_dev)} -> {sorted(new_dev)}", ptr, *where)
        if old_dev - new_dev:
            self.emit("TENSOR_DEVICES_SHRUNK", f"{what}: devices {sorted(old_dev)} -> {sorted(new_dev)}", ptr, *where)
        if bool(b.contiguous) and not a.contiguous:
            self.emit("TENSOR_CONTIGUITY_REQUIRED", f"{what} must now be contiguous", ptr, *where)
        if bool(a.contiguous) and not b.contiguous:
            self.emit("TENSOR_CONTIGUITY_DROPPED", f"{what} no longer has to be contiguous", ptr, *where)


def _dtypes(node: TensorT) -> tuple[str, ...] | None:
    """The dtypes ``node`` allows, ``None`` for any: a list of every dtype its kind can hold (the
    whole table for a tensor, numpy's part of it for an array) allows what an unset one does."""
    if node.dtypes is None:
        return None
    every = {d.name for d in DTYPES.values() if node.kind == "tensor" or d.numpy_name is not None}
    return None if set(node.dtypes) >= every else node.dtypes


# IR limit -> (its JSON Schema keyword, whether a higher value accepts less)
_LOWER = {"minimum": "minimum", "min_length": "minLength", "min_items": "minItems", "min_properties": "minProperties"}
_UPPER = {"maximum": "maximum", "max_length": "maxLength", "max_items": "maxItems", "max_properties": "maxProperties"}


def _limit_changes(a: ScalarT | ArrayT | MapT, b: ScalarT | ArrayT | MapT) -> tuple[list[str], list[str]]:
    """What got tighter and what got looser between the limits of ``a`` and ``b`` (same kind)."""
    tighter: list[str] = []
    looser: list[str] = []
    for attr, keyword in (*_LOWER.items(), *_UPPER.items()):
        if not hasattr(a, attr):
            continue
        lower = attr in _LOWER
        flag = {"minimum": "exclusive_minimum", "maximum": "exclusive_maximum"}.get(attr, "")
        old = (getattr(a, attr), getattr(a, flag, False))
        new = (getattr(b, attr), getattr(b, flag, False))
        if old == new:
            continue
        old_text, new_text = _bound_text(keyword, *old), _bound_text(keyword, *new)
        if new[0] is None:
            looser.append(f"{old_text} dropped")
        elif old[0] is None:
            tighter.append(f"{new_text} added")
        else:
            # a bound is tighter when it moves inwards, or stays and becomes exclusive
            inward = new[0] > old[0] if lower else new[0] < old[0]
            (tighter if inward or (new[0] == old[0] and new[1]) else looser).append(f"{old_text} -> {new_text}")
    old_step, new_step = getattr(a, "multiple_of", None), getattr(b, "multiple_of", None)
    if old_step != new_step:
        # an integer is a multiple of 1: a step that divides 1 (0.5, 0.25) holds every integer
        if new_step is None:
            if not (getattr(b, "kind", None) == "int" and old_step is not None and _divides(old_step, 1)):
                looser.append(f"multipleOf {old_step} dropped")
        elif old_step is None:
            if not (getattr(a, "kind", None) == "int" and _divides(new_step, 1)):
                tighter.append(f"multipleOf {new_step} added")
        else:
            change = f"multipleOf {old_step} -> {new_step}"
            # msgspec checks a float step exactly (fmod), so compare the binary values, not the decimals
            ratio = Fraction(new_step) / Fraction(old_step)
            if ratio.denominator == 1:  # every new value is an old one
                tighter.append(change)
            elif ratio.numerator == 1:  # every old value is a new one
                looser.append(change)
            else:
                tighter.append(change)
                looser.append(change)
    return tighter, looser


def _sole(node: ScalarT) -> bool | int | str | None:
    """The one value ``node`` holds, if it holds one alone: its ``const``, or an integer whose
    bounds are that value (``None`` if it holds more, or none)."""
    if node.const is not None:
        return node.const
    if node.kind == "int" and isinstance(node.minimum, int) and node.minimum == node.maximum:
        return node.minimum if _holds(node, node.minimum) else None
    return None


def _sole_held(writer: ScalarT, reader: ScalarT) -> bool:
    """Whether ``writer`` holds one value alone and ``reader`` accepts it: all ``writer`` sends."""
    value = _sole(writer)
    return value is not None and _holds(reader, value)


def _holds(node: ScalarT, value: bool | int | str) -> bool:
    """Whether a decoder of ``node`` accepts ``value``: its step checked on the binary value, as
    the decoder does (``fmod``), not on the decimal text."""
    if value_problem(replace(node, multiple_of=None), value, whole=False) is not None:
        return False
    return node.multiple_of is None or (isinstance(value, int) and _divides(node.multiple_of, value))


def _divides(step: int | float, value: int) -> bool:
    """Whether ``value`` is a multiple of ``step`` as a decoder checks it: on the step's binary
    value (``fmod``), so 0.5 divides 1 and 0.1 does not."""
    return (Fraction(value) / Fraction(step)).denominator == 1


def _dim_renames(a: StructT, b: StructT) -> dict[str, str]:
    """The named dims of ``a`` that ``b`` renamed: the name is paired, axis for axis, with only one
    new name and that one with no other, which names no dim of ``a`` (two names swapped is a
    reorder). A name only says which sizes of a struct's tensors agree, so a new one keeps the wire."""
    new_types = {f.name: f.type for f in b.fields}
    pairs = {
        (x, y)
        for f in a.fields
        if f.name in new_types
        for x, y in _dims(f.type, new_types[f.name])
        if isinstance(x, str) and isinstance(y, str)
    }
    old_names = {x for f in a.fields for x in _dim_uses(f.type)}
    return {
        x: y
        for x, y in pairs
        if x != y and y not in old_names and [p for p in pairs if x == p[0] or y == p[1]] == [(x, y)]
    }


def _dims(a: Node, b: Node) -> Iterator[tuple[int | str | None, int | str | None]]:
    """The dims of ``a`` and ``b`` at the same axis of the tensors at the same place, within one
    struct (a nested struct's names are its own)."""
    a = a.inner if isinstance(a, NullableT) else a
    b = b.inner if isinstance(b, NullableT) else b
    if isinstance(a, TensorT) and isinstance(b, TensorT):
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            yield from zip(a.shape, b.shape, strict=True)
    elif isinstance(a, ArrayT) and isinstance(b, ArrayT):
        yield from _dims(a.items, b.items)
    elif isinstance(a, MapT) and isinstance(b, MapT):
        yield from _dims(a.values, b.values)
    elif isinstance(a, TupleT) and isinstance(b, TupleT) and len(a.items) == len(b.items):
        for x, y in zip(a.items, b.items, strict=True):
            yield from _dims(x, y)


def _pinned_dims(a: StructT, b: StructT) -> dict[str, int]:
    """The dim names of ``b`` at whose every axis ``a`` had the same fixed size, by that size: the
    sizes such a name ties agreed in every message of ``a``. A name also on an axis ``a`` lacks (of
    a field it lacks, or of a tensor whose rank changed) is not one."""
    old_types = {f.name: f.type for f in a.fields}
    axes: Counter[str] = Counter()  # how many axes of ``b`` each name is on
    paired: Counter[str] = Counter()  # how many of them ``a`` has
    sizes: dict[str, set[int | str | None]] = {}  # the dims of ``a`` there
    for f in b.fields:
        axes.update(y for _, y in _dims(f.type, f.type) if isinstance(y, str))
        for x, y in _dims(old_types[f.name], f.type) if f.name in old_types else ():
            if isinstance(y, str):
                paired[y] += 1
                sizes.setdefault(y, set()).add(x)
    found: dict[str, int] = {}
    for name, seen in sizes.items():
        size, *others = seen
        if not others and isinstance(size, int) and paired[name] == axes[name]:
            found[name] = size
    return found


def _moved(old: Sequence[int | str | None], new: Sequence[int | str | None]) -> bool:
    """Whether a dim name of ``old`` names another axis in ``new``."""
    return any(isinstance(x, str) and x != y and x in new for x, y in zip(old, new, strict=True))


def _free_dims(struct: StructT) -> frozenset[str]:
    """The dim names of ``struct`` that tie no two sizes together (one axis of one tensor)."""
    uses: Counter[str] = Counter()
    for f in struct.fields:
        uses += _dim_uses(f.type)
    return frozenset(name for name, count in uses.items() if count == 1)


def _dim_uses(node: Node, weight: int = 1) -> Counter[str]:
    """How many sizes each dim name of the tensors in ``node`` ties, within one struct; a tensor in
    an array or a map counts twice (its items' sizes agree)."""
    node = node.inner if isinstance(node, NullableT) else node
    uses: Counter[str] = Counter()
    if isinstance(node, TensorT):
        for d in node.shape or ():
            if isinstance(d, str):
                uses[d] += weight
    elif isinstance(node, ArrayT):
        uses = _dim_uses(node.items, 2)
    elif isinstance(node, MapT):
        uses = _dim_uses(node.values, 2)
    elif isinstance(node, TupleT):
        for item in node.items:
            uses += _dim_uses(item, weight)
    return uses


def _exact_as_float(node: ScalarT) -> bool:
    """Whether every integer ``node`` accepts decodes as a number unchanged: its const or bounds
    keep it within ±2**53 (2**53 + 1 decodes as 2**53)."""
    limit = 2**53
    if isinstance(node.const, int):
        return abs(node.const) <= limit
    low, high = node.minimum, node.maximum
    return low is not None and high is not None and low >= -limit and high <= limit


_TREE_SCALARS = ("bool", "int", "float", "str")  # the scalars a tree holds as they are, at any depth limit


def _in_tree(node: Node, tree: TreeT, depth: int = 0) -> bool:
    """Whether ``tree`` holds every value of ``node`` (at ``depth`` containers down), and decodes it
    as the same value: a list (not a set or a tuple, which a tree tells apart), a map, a scalar, a
    member's string, null, and bytes and tensors where the tree is not JSON-only; each list or map
    one level deeper, within its depth limit."""
    node = node.inner if isinstance(node, NullableT) else node
    if isinstance(node, ArrayT | MapT):
        if depth >= tree.max_depth or (isinstance(node, ArrayT) and node.unique):
            return False
        return _in_tree(node.items if isinstance(node, ArrayT) else node.values, tree, depth + 1)
    if isinstance(node, ScalarT):
        return node.kind in _TREE_SCALARS or not tree.json_only
    if isinstance(node, TensorT):
        return not tree.json_only
    return isinstance(node, EnumT)


def _spans(array: ArrayT, items: TupleT) -> bool:
    """Whether ``array`` holds every value of tuple ``items``: a list of its items, of its length."""
    n = len(items.items)
    return (
        not array.unique
        and all(item == array.items for item in items.items)
        and (array.min_items or 0) <= n <= (n if array.max_items is None else array.max_items)
    )


def _takes(string: ScalarT, enum: EnumT) -> bool:
    """Whether ``string`` accepts every member of ``enum`` (a member travels as its string)."""
    return string.kind == "str" and all(value_problem(string, v, whole=False) is None for v in enum.values)


def _same_default(a: Field, b: Field) -> bool:
    """Whether two fields' defaults are one value: an integer's and a number's by value (``1`` is
    ``1.0``, ``2**53 + 1`` is not ``2**53``), others as JSON text: ``1``, ``1.0`` and ``true`` are
    equal in Python (so a writer omits one where its default is another) but not to an ``x-tree``
    reader."""
    if _numeric(a) and _numeric(b):
        return bool(a.default == b.default)
    return json.dumps(a.default, sort_keys=True) == json.dumps(b.default, sort_keys=True)


def _numeric(field: Field) -> bool:
    node = field.type.inner if isinstance(field.type, NullableT) else field.type
    return isinstance(node, ScalarT) and node.kind in ("int", "float")


def _bound_text(keyword: str, value: Any, exclusive: bool) -> str:
    if exclusive:
        keyword = "exclusive" + keyword[0].upper() + keyword[1:]
    return f"{keyword} {value}"


def _kind(node: Node) -> str:
    if isinstance(node, ScalarT):
        return node.kind
    if isinstance(node, MessageRefT):
        return f"{node.target.type_id} v{node.target.version}"
    return type(node).__name__.removesuffix("T").lower()


def _variant_id(node: StructT | MessageRefT) -> str:
    struct = node.target if isinstance(node, MessageRefT) else node
    return f"{struct.type_id} v{struct.version}" if struct.type_id else f"{struct.namespace}.{struct.name}"


_Variant: TypeAlias = StructT | MessageRefT


def _variant_pairs(a: UnionT, b: UnionT) -> tuple[list[tuple[_Variant, _Variant]], list[_Variant], list[_Variant]]:
    """The variants of ``a`` and ``b`` that are one variant on the wire (old, new; in ``b``'s
    order), those of ``b`` alone and those of ``a`` alone. The wire names a variant declared in
    place by its tag alone, so two such variants of one tag are one whatever their names (a tag
    the old union gave another variant included); the others are paired by name (their tag
    changed), a message type by its id."""
    old, new = list(a.variants), list(b.variants)
    pairs: list[tuple[_Variant, _Variant]] = []

    def pair(same: Callable[[_Variant, _Variant], bool]) -> None:
        for vb in list(new):
            va = next((v for v in old if same(v, vb)), None)
            if va is not None:
                pairs.append((va, vb))
                old.remove(va)
                new.remove(vb)

    if a.tag_field == b.tag_field:
        pair(lambda va, vb: isinstance(va, StructT) and isinstance(vb, StructT) and va.tag == vb.tag)
    pair(lambda va, vb: type(va) is type(vb) and _variant_id(va) == _variant_id(vb))
    order = {id(v): i for i, v in enumerate(b.variants)}
    pairs.sort(key=lambda p: order[id(p[1])])
    return pairs, new, old


def _variant_tag(node: StructT | MessageRefT) -> str | None:
    struct = node.target if isinstance(node, MessageRefT) else node
    return struct.tag


def _where(schemas: SchemaSet, source: str, pointer: str) -> Location | None:
    file = schemas.sources.get(source)
    if file is not None:
        return file.location(pointer)
    return Location(source) if source else None


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
        walk = _Walk(old, new, old_by[key], None)
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
        walk = _Walk(old, new, None, new_by[key])
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
            walk = _Walk(old, new, old_by[(type_id, old_top)], None)
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
        walk = _Walk(old, new, a, b)
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
