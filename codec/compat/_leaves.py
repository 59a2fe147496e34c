"""The comparisons at the leaves of a walk over two forms of a message type: a scalar's kind,
const, pattern and limits, an array's or a map's counts, an enum's members, a tree's depth and
JSON-only flag, and a tensor's kind, dtypes, shape, devices and contiguity. Each compares one pair
of nodes of the same kind and appends its findings to the ``Walk`` it is given; none goes deeper
into the types."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tensorwire.compat._dims import moved
from tensorwire.compat._nodes import (
    device_names,
    dtype_names,
    exact_as_float,
    limit_changes,
    sole,
    sole_held,
)
from tensorwire.schema.ir import ArrayT, EnumT, MapT, ScalarT, TensorT, TreeT

if TYPE_CHECKING:
    from tensorwire.compat._walk import Walk

__all__ = ["enum", "limits", "scalar", "tensor", "tree_limits"]


def tree_limits(walk: Walk, a: TreeT, b: TreeT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
    if b.max_depth < a.max_depth:
        walk.emit("TREE_DEPTH_DECREASED", f"{what} depth limit went from {a.max_depth} to {b.max_depth}", ptr, *where)
    if b.max_depth > a.max_depth:
        walk.emit("TREE_DEPTH_INCREASED", f"{what} depth limit went from {a.max_depth} to {b.max_depth}", ptr, *where)
    if b.json_only and not a.json_only:
        walk.emit("TREE_JSON_TIGHTENED", f"{what} became JSON-only", ptr, *where)
    if a.json_only and not b.json_only:
        walk.emit("TREE_JSON_LOOSENED", f"{what} is no longer JSON-only", ptr, *where)


def scalar(walk: Walk, a: ScalarT, b: ScalarT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
    if a.kind != b.kind:
        if (a.kind, b.kind) == ("int", "float"):
            walk.emit("TYPE_WIDENED", f"{what} widened from integer to number", ptr, *where)
            if not exact_as_float(a):
                walk.emit("TYPE_WIDENED_LOSSY", f"{what}: old writers' integers may exceed ±2**53", ptr, *where)
        elif (a.kind, b.kind) == ("float", "int"):
            walk.emit("TYPE_NARROWED", f"{what} narrowed from number to integer", ptr, *where)
            if not exact_as_float(b):
                walk.emit("TYPE_NARROWED_LOSSY", f"{what}: new writers' integers may exceed ±2**53", ptr, *where)
        else:
            walk.emit("TYPE_CHANGED", f"{what} changed from {a.kind} to {b.kind}", ptr, *where)
            return
        limits(walk, a, b, what, ptr, where)  # the values both kinds hold are still bounded on each side
        return
    if a.const != b.const:
        if a.const is None:
            if sole(a) != b.const:  # bounds that held that value alone fixed it already
                walk.emit("CONST_ADDED", f"{what} must now be {json.dumps(b.const)}", ptr, *where)
        elif b.const is None:
            if sole(b) != a.const:
                walk.emit("CONST_REMOVED", f"{what} no longer has to be {json.dumps(a.const)}", ptr, *where)
        else:
            change = f"{what}: const {json.dumps(a.const)} -> {json.dumps(b.const)}"
            walk.emit("CONST_CHANGED", change, ptr, *where)
    if a.pattern != b.pattern:
        if a.pattern is None:
            if not sole_held(a, b):
                walk.emit("PATTERN_ADDED", f"{what} must now match {b.pattern!r}", ptr, *where)
        elif b.pattern is None:
            if not sole_held(b, a):
                walk.emit("PATTERN_REMOVED", f"{what} no longer has to match {a.pattern!r}", ptr, *where)
        else:
            walk.emit("PATTERN_CHANGED", f"{what}: pattern {a.pattern!r} -> {b.pattern!r}", ptr, *where)
    limits(walk, a, b, what, ptr, where)


def limits(
    walk: Walk, a: ScalarT | ArrayT | MapT, b: ScalarT | ArrayT | MapT, what: str, ptr: str, where: tuple[Any, Any]
) -> None:
    """Bounds, ``multipleOf`` and lengths of a scalar; item or entry counts of an array or a map.
    A scalar that holds one value alone (its ``const``) is sent only as that value: the other
    side's limits change nothing for it while they hold it."""
    tighter, looser = limit_changes(a, b)
    if isinstance(a, ScalarT) and isinstance(b, ScalarT):
        tighter = [] if sole_held(a, b) else tighter
        looser = [] if sole_held(b, a) else looser
    if tighter:
        walk.emit("RANGE_TIGHTENED", f"{what}: {', '.join(tighter)}", ptr, *where)
    if looser:
        walk.emit("RANGE_LOOSENED", f"{what}: {', '.join(looser)}", ptr, *where)


def enum(walk: Walk, a: EnumT, b: EnumT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
    removed = [v for v in a.values if v not in b.values]
    added = [v for v in b.values if v not in a.values]
    if removed and len(removed) == len(added):
        pairs = ", ".join(f"{x!r} -> {y!r}" for x, y in zip(removed, added, strict=True))
        walk.emit("ENUM_VALUE_CHANGED", f"{what}: enum value changed ({pairs})", ptr, *where)
        return
    if added:
        walk.emit("ENUM_MEMBER_ADDED", f"{what}: enum gained {added}", ptr, *where)
    if removed:
        walk.emit("ENUM_MEMBER_REMOVED", f"{what}: enum lost {removed}", ptr, *where)


def tensor(walk: Walk, a: TensorT, b: TensorT, what: str, ptr: str, where: tuple[Any, Any]) -> None:
    if a.kind != b.kind:
        walk.emit("TENSOR_KIND_CHANGED", f"{what} changed from {a.kind} to {b.kind}", ptr, *where)
    old_d, new_d = dtype_names(a), dtype_names(b)
    if old_d != new_d and not (old_d and new_d and set(old_d) == set(new_d)):
        if old_d and new_d and not set(old_d) & set(new_d):
            walk.emit("TENSOR_DTYPE_REPLACED", f"{what}: dtypes {sorted(old_d)} -> {sorted(new_d)}", ptr, *where)
        else:
            grown = new_d is None or (old_d is not None and bool(set(new_d) - set(old_d)))
            shrunk = old_d is None or (new_d is not None and bool(set(old_d) - set(new_d)))
            text = f"{what}: dtypes {sorted(old_d) if old_d else 'any'} -> {sorted(new_d) if new_d else 'any'}"
            if grown:
                walk.emit("TENSOR_DTYPES_GROWN", text, ptr, *where)
            if shrunk:
                walk.emit("TENSOR_DTYPES_SHRUNK", text, ptr, *where)
    if a.shape != b.shape:
        if a.shape is None or b.shape is None:
            rid = "TENSOR_SHAPE_TIGHTENED" if a.shape is None else "TENSOR_SHAPE_LOOSENED"
            walk.emit(rid, f"{what}: shape {a.shape} -> {b.shape}", ptr, *where)
        elif len(a.shape) != len(b.shape):
            walk.emit("TENSOR_RANK_CHANGED", f"{what}: rank {len(a.shape)} -> {len(b.shape)}", ptr, *where)
        else:
            old = [walk.dims.get(d, d) if isinstance(d, str) else d for d in a.shape]  # renamed dims as new
            if moved(a.shape, b.shape) or moved(old, b.shape):
                walk.emit("TENSOR_DIMS_REORDERED", f"{what}: dims {list(a.shape)} -> {list(b.shape)}", ptr, *where)
            else:
                free_a, free_b = walk.free  # a name that ties no sizes together is a free dim
                old = [None if x in free_a else y for x, y in zip(a.shape, old, strict=True)]
                new = [None if y in free_b else y for y in b.shape]
                kept, held = walk.ties
                axes = list(zip(a.shape, b.shape, old, new, strict=True))
                # a name whose every axis had this one fixed size, or one old name, ties sizes
                # that old writers' agree on; an old name whose every axis has one new name
                # ties sizes that new writers' agree on
                tighter = any(
                    x != y
                    and y is not None
                    and not (isinstance(x, int) and isinstance(y, str) and walk.pinned.get(y) == x)
                    and not (isinstance(p, str) and isinstance(q, str) and held.get(q) == p)
                    for p, q, x, y in axes
                )
                looser = any(
                    x != y and x is not None and not (isinstance(p, str) and isinstance(q, str) and kept.get(p) == q)
                    for p, q, x, y in axes
                )
                if tighter:
                    walk.emit(
                        "TENSOR_SHAPE_TIGHTENED", f"{what}: shape {list(a.shape)} -> {list(b.shape)}", ptr, *where
                    )
                if looser:
                    walk.emit("TENSOR_SHAPE_LOOSENED", f"{what}: shape {list(a.shape)} -> {list(b.shape)}", ptr, *where)
    old_dev, new_dev = device_names(a), device_names(b)
    if new_dev - old_dev:
        walk.emit("TENSOR_DEVICES_GROWN", f"{what}: devices {sorted(old_dev)} -> {sorted(new_dev)}", ptr, *where)
    if old_dev - new_dev:
        walk.emit("TENSOR_DEVICES_SHRUNK", f"{what}: devices {sorted(old_dev)} -> {sorted(new_dev)}", ptr, *where)
    if bool(b.contiguous) and not a.contiguous:
        walk.emit("TENSOR_CONTIGUITY_REQUIRED", f"{what} must now be contiguous", ptr, *where)
    if bool(a.contiguous) and not b.contiguous:
        walk.emit("TENSOR_CONTIGUITY_DROPPED", f"{what} no longer has to be contiguous", ptr, *where)
