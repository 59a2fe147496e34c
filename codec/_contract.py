"""Run-time contract of generated types: tensor specs, trees, cross-field constraints, named rules.

Both back-ends (generated source and run-time types) attach the same ``StructRules`` to a class as
``__tw_rules__`` and run them from the class's ``__post_init__``, that is, whenever a message is
built and whenever one is decoded: generated source through ``check_struct``, which compiles each
class's rules on first use; a run-time type's ``__post_init__`` is its rules compiled
(``struct_check``) when the type is made, a call less per struct (generated source cannot do that:
type checkers require ``__post_init__`` to be a method). Rules the schema subset cannot say are *named
validators*: Python functions registered with ``tensorwire.rules.register_validator`` and named in a schema's
``x-validators`` list.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import torch

from tensorwire._compile import build, read_field
from tensorwire._locate import key_segment
from tensorwire.dtypes import DTYPES, dtype_of
from tensorwire.errors import ValidationError
from tensorwire.rules import (
    Check,
    EachCheck,
    StructRules,
    TensorCheck,
    TreeCheck,
    TupleCheck,
    validator,
)

__all__ = ["JSON_LEAVES", "LEAF_TYPES", "LEAVES_ONLY", "SCALAR_TYPES", "TREE_LEAVES", "check_struct", "struct_check"]


def check_struct(obj: Any) -> None:
    """Check ``obj`` against its class's ``__tw_rules__``; raise ``ValidationError`` on the first breach.

    Each ``StructRules`` is compiled once into one straight-line function (``_compile``): the
    fields are first checked without building any path; only a breach walks them again with
    paths, to say exactly where it is.
    """
    rules: StructRules = type(obj).__tw_rules__
    known = _COMPILED.get(id(rules))
    if known is None or known[0] is not rules:  # the entry holds its rules: their id cannot be reused
        if len(_COMPILED) >= 4096:  # far more types than a program defines: checked without compiling
            _interpreted(rules, obj)
            return
        known = _COMPILED[id(rules)] = (rules, _compile(rules))
    known[1](obj)


def struct_check(rules: StructRules) -> Callable[[Any], None]:
    """``check_struct`` for a class whose ``__tw_rules__`` are ``rules``, compiled now: the class's
    ``__post_init__`` itself (a call less per struct built than ``check_struct``). Always a
    function, so that ``message.__post_init__()`` checks a message again as a method would."""
    compiled = _compile(rules)
    if type(compiled) is not partial:
        return compiled

    def check(obj: Any) -> None:  # named dims: the general walk
        _interpreted(rules, obj)

    return check


Compiled: TypeAlias = Callable[[Any], None]
_COMPILED: dict[int, tuple[StructRules, Compiled]] = {}  # by id: hashing the rules costs more than the check


def _compile(rules: StructRules) -> Compiled:
    """``check_struct`` for ``rules`` as one function: per field, the quick predicate written out
    inline where it is a tree rule (or a container or nullable of one), else a call of the bound
    predicate; a breach calls ``_breached``, which finds it with its path (``tensorwire._compile``
    says what the source may hold)."""
    rest = bool(rules.groups or rules.validators)
    quick = _quick(rules) if rules.fields else ()
    if quick is None:  # a named dim: the general walk compares them across fields
        return partial(_interpreted, rules)
    if not quick and not rest:
        return _nothing
    bound: dict[str, Any] = {"rules": rules, "breached": _breached, "rest": _rest, "tree_ok": _tree_ok}
    lines = ["def check(obj):"]
    for i, ((name, predicate), (_, check)) in enumerate(zip(quick, rules.fields, strict=True)):
        lines.append(f"    v = {read_field('obj', name, f'N{i}', bound)}")
        lines.append(f"    if not ({_inline(check, predicate, i, bound)}):")
        lines.append("        return breached(rules, obj)")
    if rest:
        lines.append("    rest(rules, obj)")
    lines.append("    return None")
    return build(lines, bound, "check")


def _inline(check: Check, predicate: Quick, i: int, bound: dict[str, Any]) -> str:
    """The quick ``predicate`` of field ``i`` on ``v`` as an expression: written out for a tree
    rule, a container or nullable of one, or a tensor rule, else a call of it (bound as ``Q{i}``)."""
    inner = check.inner if type(check) is EachCheck else check
    if type(inner) is TensorCheck and (type(check) is TensorCheck or check.container == "nullable"):  # type: ignore[union-attr]
        tensor = _inline_tensor(inner, i, bound)
        if tensor is not None:
            return tensor if type(check) is TensorCheck else f"v is None or ({tensor})"
    if type(inner) is not TreeCheck:
        bound[f"Q{i}"] = predicate
        return f"Q{i}(v)"
    bound[f"L{i}"], bound[f"C{i}"] = _leaves(inner), inner
    flat = f" or (type(v) is list and L{i}.issuperset(map(type, v)))" if inner.max_depth > 0 else ""  # at C speed
    tree = f"type(v) in L{i}{flat} or tree_ok(C{i}, v, 0, L{i})"
    if type(check) is TreeCheck:
        return tree
    assert isinstance(check, EachCheck)
    if check.container == "nullable":
        return f"v is None or {tree}"
    bound[f"I{i}"] = _quick_check(inner)
    values = "v.values()" if check.container == "map" else "v"
    return f"L{i}.issuperset(map(type, {values})) or all(map(I{i}, {values}))"


def _inline_tensor(check: TensorCheck, i: int, bound: dict[str, Any]) -> str | None:
    """``_quick_tensor`` of field ``i`` on ``v`` as an expression; None where the schema names a
    device or contiguity (the bound predicate reads those)."""
    if check.devices is not None or check.contiguous:
        return None
    cls, allowed = _tensor_kind(check)
    bound[f"K{i}"], bound[f"D{i}"] = cls, allowed
    terms = [f"isinstance(v, K{i})", f"v.dtype in D{i}"]
    if check.shape is not None:
        terms.append(f"len(s := v.shape) == {len(check.shape)}")
        for axis, want in enumerate(check.shape):
            if isinstance(want, int):
                bound[f"S{i}_{axis}"] = want
                terms.append(f"s[{axis}] == S{i}_{axis}")
    return " and ".join(terms)


def _nothing(obj: Any) -> None:
    """The check of rules that hold nothing to check."""


def _interpreted(rules: StructRules, obj: Any) -> None:
    """``check_struct`` without compiling: the general walk of the field rules, then the rest."""
    if rules.fields and not _fields_ok(rules, obj):
        _check_fields(rules, obj)
    _rest(rules, obj)


def _breached(rules: StructRules, obj: Any) -> None:
    """A quick predicate failed: raise the breach with its path (then the rest, as the general walk would)."""
    _check_fields(rules, obj)
    _rest(rules, obj)


def _rest(rules: StructRules, obj: Any) -> None:
    """The group rules and named validators of ``rules``."""
    for group in rules.groups:
        count = 0
        for name in group.fields:
            if getattr(obj, name) is not None:
                count += 1
        if count == 1 or (count == 0 and group.rule == "at_most_one_of"):
            continue  # the rule holds; the names are gathered only for a breach
        present = [f for f in group.fields if getattr(obj, f) is not None]
        if group.rule == "at_most_one_of" and len(present) > 1:
            raise ValidationError(
                f"at most one of {', '.join(group.fields)} may be set; got {', '.join(present)}",
                type_id=rules.type_name,
            )
        if group.rule == "exactly_one_of" and len(present) != 1:
            got = ", ".join(present) if present else "none"
            raise ValidationError(
                f"exactly one of {', '.join(group.fields)} must be set; got {got}", type_id=rules.type_name
            )
    for name in rules.validators:
        found = validator(name)
        if found is None:
            raise ValidationError(f"no validator named {name!r} is registered", type_id=rules.type_name)
        found(obj)


def _skips_none(check: Check) -> bool:
    """None is a tree leaf and fills a nullable field: nothing to check."""
    return type(check) is TreeCheck or (type(check) is EachCheck and check.container == "nullable")


def _check_fields(rules: StructRules, obj: Any) -> None:
    dims: dict[str, tuple[int, str]] = {}
    for name, check, skips_none, _ in _field_plan(rules):
        value = getattr(obj, name)
        if value is None and skips_none:
            continue
        _check(check, value, f"{rules.type_name}.{name}", dims, _At(rules.type_name, f"$.{name}"))


class _At(NamedTuple):
    """Where a field rule looks: the struct's type and the path in it (``$`` is the struct)."""

    type_id: str | None
    path: str

    def item(self, index: int) -> _At:
        return _At(self.type_id, f"{self.path}[{index}]")

    def entry(self, key: Any) -> _At:
        return _At(self.type_id, self.path + key_segment(key))


_NOWHERE = _At(None, "$")


def _breach(path: str, at: _At, message: str) -> ValidationError:
    """The error for a field rule's breach: ``path`` is the field as the text names it."""
    return ValidationError(message, type_id=at.type_id, path=at.path if at.type_id is not None else None, where=path)


_FieldPlan: TypeAlias = tuple[tuple[str, Check, bool, frozenset[type] | None], ...]  # name, check, skips None, leaves
_FIELD_PLANS: dict[int, tuple[StructRules, _FieldPlan]] = {}  # by id: hashing the rules costs more than the check


def _field_plan(rules: StructRules) -> _FieldPlan:
    known = _FIELD_PLANS.get(id(rules))
    if known is not None and known[0] is rules:  # the entry holds its rules: their id cannot be reused
        return known[1]
    plan = tuple((name, check, _skips_none(check), _leaves(check)) for name, check in rules.fields)
    if len(_FIELD_PLANS) < 4096:  # one per message type in practice
        _FIELD_PLANS[id(rules)] = (rules, plan)
    return plan


def _fields_ok(rules: StructRules, obj: Any) -> bool:
    """Whether every field rule holds (``_check_fields`` without paths: it says nothing about where)."""
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


def _quick(rules: StructRules) -> tuple[tuple[str, Quick], ...] | None:
    """One predicate per field rule, each with its constants bound once; None if a rule names a
    dim (named dims are compared across fields: the general walk does that)."""
    checks = []
    for name, check in rules.fields:
        quick = _quick_check(check)
        if quick is None:
            return None
        checks.append((name, quick))
    return tuple(checks)


def _quick_check(check: Check) -> Quick | None:
    kind = type(check)
    if kind is TensorCheck:
        return _quick_tensor(check)  # type: ignore[arg-type]
    if kind is TreeCheck:
        tree_leaves = _leaves(check)
        assert tree_leaves is not None
        nests = check.max_depth > 0  # type: ignore[union-attr]
        return lambda v: (
            type(v) in tree_leaves
            or (nests and type(v) is list and tree_leaves.issuperset(map(type, v)))  # a flat list, at C speed
            or _tree_ok(check, v, 0, tree_leaves)  # type: ignore[arg-type]
        )
    if kind is TupleCheck:
        items = [None if c is None else _quick_check(c) for c in check.items]  # type: ignore[union-attr]
        if any(q is None for q, c in zip(items, check.items, strict=True) if c is not None):  # type: ignore[union-attr]
            return None
        return lambda v: all(q is None or q(x) for q, x in zip(items, v, strict=False))
    assert isinstance(check, EachCheck)
    inner = _quick_check(check.inner)
    if inner is None:
        return None
    leaves = _leaves(check.inner)
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
    cls, allowed = _tensor_kind(check)
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


def _tensor_kind(check: TensorCheck) -> tuple[type, frozenset[Any]]:
    """The class a value of ``check`` must be, and the dtypes (torch's or numpy's) it may have."""
    names = check.dtypes if check.dtypes is not None else tuple(DTYPES)
    if check.kind == "tensor":
        return torch.Tensor, frozenset(getattr(torch, DTYPES[n].torch_name) for n in names)
    return np.ndarray, frozenset(np.dtype(DTYPES[n].numpy_name) for n in names if DTYPES[n].numpy_name)


def _ok(check: Check, value: Any, dims: dict[str, tuple[int, str]]) -> bool:
    kind = type(check)
    if kind is TreeCheck:
        return _tree_ok(check, value, 0, _leaves(check))  # type: ignore[arg-type]
    if kind is TensorCheck:
        try:
            _check_tensor(check, value, "", dims)  # type: ignore[arg-type]
        except ValidationError:
            return False
        return True
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
    leaves = _leaves(inner)
    if leaves is not None and leaves.issuperset(map(type, items)):
        return True  # a leaf passes every tree rule
    for item in items:
        if not _ok(inner, item, dims):
            return False
    return True


def _leaves(check: Check) -> frozenset[type] | None:
    """Exact types that pass tree rule ``check`` with nothing to walk; None for other rules."""
    if type(check) is not TreeCheck:
        return None
    return SCALAR_TYPES if check.json_only else LEAF_TYPES


def _tree_ok(check: TreeCheck, value: Any, depth: int, leaves: frozenset[type]) -> bool:
    """``_check_tree`` without paths; ``leaves`` is ``_leaves(check)``."""
    if type(value) in leaves:
        return True
    if isinstance(value, dict | list | tuple):
        if depth >= check.max_depth:
            return False
        if isinstance(value, dict):
            if _STR_ONLY(map(type, value)) and leaves.issuperset(map(type, value.values())):
                return True  # the common flat map, checked at C speed
            for key, item in value.items():
                if not isinstance(key, str) or not (type(item) in leaves or _tree_ok(check, item, depth + 1, leaves)):
                    return False
            return True
        if check.json_only and isinstance(value, tuple):
            return False
        if leaves.issuperset(map(type, value)):
            return True
        for item in value:
            if not (type(item) in leaves or _tree_ok(check, item, depth + 1, leaves)):
                return False
        return True
    return isinstance(value, JSON_LEAVES if check.json_only else TREE_LEAVES)


def _check(check: Check, value: Any, path: str, dims: dict[str, tuple[int, str]], at: _At = _NOWHERE) -> None:
    """Raise the ``ValidationError`` of the first breach of ``check`` by ``value`` (``path`` names
    the value in the error's text, ``at`` in its fields)."""
    if isinstance(check, TensorCheck):
        _check_tensor(check, value, path, dims, at)
    elif isinstance(check, TreeCheck):
        _check_tree(check, value, path, 0, at)
    elif isinstance(check, TupleCheck):
        for i, (item_check, item) in enumerate(zip(check.items, value, strict=False)):
            if item_check is not None:
                _check(item_check, item, f"{path}[{i}]", dims, at.item(i))
    elif check.container == "nullable":
        if value is not None:
            _check(check.inner, value, path, dims, at)
    elif check.container == "map":
        for key, item in value.items():
            _check(check.inner, item, f"{path}[{key!r}]", dims, at.entry(key))
    else:
        for i, item in enumerate(value):
            _check(check.inner, item, f"{path}[{i}]", dims, at.item(i))


def _check_tensor(
    check: TensorCheck, value: Any, path: str, dims: dict[str, tuple[int, str]], at: _At = _NOWHERE
) -> None:
    expected = torch.Tensor if check.kind == "tensor" else np.ndarray
    if not isinstance(value, expected):
        label = "torch.Tensor" if check.kind == "tensor" else "numpy.ndarray"
        raise _breach(path, at, f"expected {label}, got {type(value).__name__}")
    dtype = dtype_of(value)
    if dtype is None:
        raise _breach(path, at, f"dtype {value.dtype} is not in the wire dtype table")
    if check.dtypes is not None and dtype not in check.dtypes:
        raise _breach(path, at, f"dtype {dtype} is not allowed; expected one of {', '.join(check.dtypes)}")
    shape = tuple(value.shape)
    if check.shape is not None:
        if len(shape) != len(check.shape):
            raise _breach(path, at, f"expected rank {len(check.shape)}, got shape {shape}")
        for axis, (want, got) in enumerate(zip(check.shape, shape, strict=True)):
            if isinstance(want, int) and want != got:
                raise _breach(path, at, f"dim {axis} must be {want}, got shape {shape}")
            if isinstance(want, str):
                seen = dims.setdefault(want, (got, path))
                if seen[0] != got:
                    raise _breach(
                        path, at, f"dim {want!r} is {got}, but {seen[0]} in {seen[1]} (named dims must agree)"
                    )
    if isinstance(value, torch.Tensor):
        device, contiguous = value.device.type, value.is_contiguous()
    else:
        device, contiguous = "cpu", bool(value.flags.c_contiguous)
    if check.devices is not None and device not in check.devices:
        raise _breach(path, at, f"device {device} is not allowed; expected {', '.join(check.devices)}")
    if check.contiguous and not contiguous:
        raise _breach(path, at, "must be contiguous")


JSON_LEAVES = (type(None), bool, int, float, str)  # what a JSON-only tree may hold besides containers
TREE_LEAVES = (*JSON_LEAVES, bytes, torch.Tensor, np.ndarray)  # what any tree may hold
SCALAR_TYPES = frozenset(JSON_LEAVES)  # exact types: the fast path of the tree walks
LEAF_TYPES = frozenset(TREE_LEAVES)  # exact types of every leaf of a (non-JSON) tree: nothing in them to walk
LEAVES_ONLY = LEAF_TYPES.issuperset  # ``LEAVES_ONLY(map(type, items))``: every item a leaf (one C call)
_STR_ONLY = frozenset({str}).issuperset


def _check_tree(check: TreeCheck, value: Any, path: str, depth: int, at: _At = _NOWHERE) -> None:
    if type(value) in SCALAR_TYPES:
        return  # the common leaf, allowed in every tree
    if isinstance(value, dict | list | tuple):
        if depth >= check.max_depth:
            raise _breach(path, at, f"tree is deeper than its limit of {check.max_depth}")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _breach(path, at, f"tree dict keys must be str, got {type(key).__name__}")
                _check_tree(check, item, f"{path}[{key!r}]", depth + 1, at.entry(key))
            return
        if check.json_only and isinstance(value, tuple):
            raise _breach(path, at, "a JSON tree has no tuples")
        for i, item in enumerate(value):
            _check_tree(check, item, f"{path}[{i}]", depth + 1, at.item(i))
        return
    leaves = JSON_LEAVES if check.json_only else TREE_LEAVES
    if not isinstance(value, leaves):
        kind = "a JSON tree" if check.json_only else "a tree"
        raise _breach(path, at, f"{type(value).__name__} is not allowed in {kind}")
