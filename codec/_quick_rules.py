"""The field rules checked without paths: one predicate per rule with its constants bound once
(``quick_predicates``, ``quick_check``), and the general walk that only says whether every rule
holds (``fields_ok``; ``check_fields`` walks again with paths to name a breach). A tree rule's
leaves (``leaves_of``) and flat lists and maps are checked at C speed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import torch

from tensorwire._breaches import COUNTED, At, check_tensor, find_breach
from tensorwire._leaf_types import JSON_LEAVES, LEAF_TYPES, SCALAR_TYPES, TREE_LEAVES
from tensorwire.dtypes import DTYPES
from tensorwire.errors import ValidationError
from tensorwire.rules import Check, CountCheck, EachCheck, StructRules, TensorCheck, TreeCheck, TupleCheck

__all__ = [
    "Quick",
    "check_fields",
    "fields_ok",
    "leaves_of",
    "quick_check",
    "quick_predicates",
    "tensor_kind",
    "tree_ok",
]

_STR_ONLY = frozenset({str}).issuperset


def _skips_none(check: Check) -> bool:
    """None is a tree leaf and fills a nullable field: nothing to check."""
    return type(check) is TreeCheck or (type(check) is EachCheck and check.container == "nullable")


def check_fields(rules: StructRules, obj: Any) -> None:
    dims: dict[str, tuple[int, str]] = {}
    for name, check, skips_none, _ in _field_plan(rules):
        value = getattr(obj, name)
        if value is None and skips_none:
            continue
        find_breach(check, value, f"{rules.type_name}.{name}", dims, At(rules.type_name, f"$.{name}"))


_FieldPlan: TypeAlias = tuple[tuple[str, Check, bool, frozenset[type] | None], ...]  # name, check, skips None, leaves
_FIELD_PLANS: dict[int, tuple[StructRules, _FieldPlan]] = {}  # by id: hashing the rules costs more than the check


def _field_plan(rules: StructRules) -> _FieldPlan:
    known = _FIELD_PLANS.get(id(rules))
    if known is not None and known[0] is rules:  # the entry holds its rules: their id cannot be reused
        return known[1]
    plan = tuple((name, check, _skips_none(check), leaves_of(check)) for name, check in rules.fields)
    if len(_FIELD_PLANS) < 4096:  # one per message type in practice
        _FIELD_PLANS[id(rules)] = (rules, plan)
    return plan


def fields_ok(rules: StructRules, obj: Any) -> bool:
    """Whether every field rule holds (``check_fields`` without paths: it says nothing about where)."""
    dims: dict[str, tuple[int, str]] = {}
    for name, check, skips_none, leaves in _field_plan(rules):
        value = getattr(obj, name)
        if value is None:
            if skips_none:
                continue
        elif leaves is not None and type(value) in leaves:
            continue  # a leaf passes its tree rule
        if not _ok(check, value, dims):
            return False
    return True


Quick: TypeAlias = Callable[[Any], bool]


def quick_predicates(rules: StructRules) -> tuple[tuple[str, Quick], ...] | None:
    """One predicate per field rule, each with its constants bound once; None if a rule names a
    dim (named dims are compared across fields: the general walk does that)."""
    checks = []
    for name, check in rules.fields:
        quick = quick_check(check)
        if quick is None:
            return None
        checks.append((name, quick))
    return tuple(checks)


def quick_check(check: Check) -> Quick | None:
    kind = type(check)
    if kind is TensorCheck:
        return _quick_tensor(check)  # type: ignore[arg-type]
    if kind is TreeCheck:
        tree_leaves = leaves_of(check)
        assert tree_leaves is not None
        nests = check.max_depth > 0  # type: ignore[union-attr]
        return lambda v: (
            type(v) in tree_leaves
            or (nests and type(v) is list and tree_leaves.issuperset(map(type, v)))  # a flat list, at C speed
            or tree_ok(check, v, 0, tree_leaves)  # type: ignore[arg-type]
        )
    if kind is CountCheck:
        minimum, inner_check = check.minimum, check.inner  # type: ignore[union-attr]
        within = None if inner_check is None else quick_check(inner_check)
        if within is None:
            return None if inner_check is not None else lambda v: not isinstance(v, COUNTED) or len(v) >= minimum
        return lambda v: (not isinstance(v, COUNTED) or len(v) >= minimum) and within(v)
    if kind is TupleCheck:
        items = [None if c is None else quick_check(c) for c in check.items]  # type: ignore[union-attr]
        if any(q is None for q, c in zip(items, check.items, strict=True) if c is not None):  # type: ignore[union-attr]
            return None
        return lambda v: all(q is None or q(x) for q, x in zip(items, v, strict=False))
    assert isinstance(check, EachCheck)
    inner = quick_check(check.inner)
    if inner is None:
        return None
    leaves = leaves_of(check.inner)
    if check.container == "nullable":
        return lambda v: v is None or inner(v)
    if check.container == "map":
        if leaves is not None:
            return lambda v: leaves.issuperset(map(type, v.values())) or all(map(inner, v.values()))
        return lambda v: all(map(inner, v.values()))
    if leaves is not None:
        return lambda v: leaves.issuperset(map(type, v)) or all(map(inner, v))
    return lambda v: all(map(inner, v))


def _quick_tensor(check: TensorCheck) -> Quick | None:
    if check.shape is not None and any(isinstance(d, str) for d in check.shape):
        return None
    cls, allowed = tensor_kind(check)
    rank = None if check.shape is None else len(check.shape)
    fixed = () if check.shape is None else tuple((a, d) for a, d in enumerate(check.shape) if isinstance(d, int))
    devices, contiguous = check.devices, check.contiguous

    def ok(v: Any) -> bool:
        if not isinstance(v, cls) or v.dtype not in allowed:  # type: ignore[attr-defined]
            return False
        if rank is not None:
            shape = v.shape  # type: ignore[attr-defined]
            if len(shape) != rank:
                return False
            for axis, want in fixed:
                if shape[axis] != want:
                    return False
        if devices is not None or contiguous:  # read only when the schema asks
            return _ok(check, v, {})
        return True

    return ok


def tensor_kind(check: TensorCheck) -> tuple[type, frozenset[Any]]:
    """The class a value of ``check`` must be, and the dtypes (torch's or numpy's) it may have."""
    names = check.dtypes if check.dtypes is not None else tuple(DTYPES)
    if check.kind == "tensor":
        return torch.Tensor, frozenset(getattr(torch, DTYPES[n].torch_name) for n in names)
    return np.ndarray, frozenset(np.dtype(DTYPES[n].numpy_name) for n in names if DTYPES[n].numpy_name)


def _ok(check: Check, value: Any, dims: dict[str, tuple[int, str]]) -> bool:
    kind = type(check)
    if kind is TreeCheck:
        return tree_ok(check, value, 0, leaves_of(check))  # type: ignore[arg-type]
    if kind is TensorCheck:
        try:
            check_tensor(check, value, "", dims)  # type: ignore[arg-type]
        except ValidationError:
            return False
        return True
    if kind is CountCheck:
        if isinstance(value, COUNTED) and len(value) < check.minimum:  # type: ignore[union-attr]
            return False
        return check.inner is None or _ok(check.inner, value, dims)  # type: ignore[union-attr]
    if kind is TupleCheck:
        for item_check, item in zip(check.items, value, strict=False):  # type: ignore[union-attr]
            if item_check is not None and not _ok(item_check, item, dims):
                return False
        return True
    assert isinstance(check, EachCheck)
    if check.container == "nullable":
        return value is None or _ok(check.inner, value, dims)
    items = value.values() if check.container == "map" else value
    inner = check.inner
    leaves = leaves_of(inner)
    if leaves is not None and leaves.issuperset(map(type, items)):
        return True  # a leaf passes every tree rule
    for item in items:
        if not _ok(inner, item, dims):
            return False
    return True


def leaves_of(check: Check) -> frozenset[type] | None:
    """Exact types that pass tree rule ``check`` with nothing to walk; None for other rules."""
    if type(check) is not TreeCheck:
        return None
    return SCALAR_TYPES if check.json_only else LEAF_TYPES


def tree_ok(check: TreeCheck, value: Any, depth: int, leaves: frozenset[type]) -> bool:
    """The tree walk of ``tensorwire._breaches`` without paths; ``leaves`` is ``leaves_of(check)``."""
    if type(value) in leaves:
        return True
    if isinstance(value, dict | list | tuple):
        if depth >= check.max_depth:
            return False
        if isinstance(value, dict):
            if _STR_ONLY(map(type, value)) and leaves.issuperset(map(type, value.values())):
                return True  # the common flat map, checked at C speed
            for key, item in value.items():
                if not isinstance(key, str) or not (type(item) in leaves or tree_ok(check, item, depth + 1, leaves)):
                    return False
            return True
        if check.json_only and isinstance(value, tuple):
            return False
        if leaves.issuperset(map(type, value)):
            return True
        for item in value:
            if not (type(item) in leaves or tree_ok(check, item, depth + 1, leaves)):
                return False
        return True
    return isinstance(value, JSON_LEAVES if check.json_only else TREE_LEAVES)
