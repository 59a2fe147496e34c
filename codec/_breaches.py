"""Finding a breach of a field rule, with its path: the general walk that raises the
``ValidationError`` of the first value a tensor, tree, tuple or container rule refuses
(``find_breach``), its text naming the value and its fields the struct's type and the path in it
(``At``). It runs where the quick checks failed, or where they cannot say (named dims).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from tensorwire._leaf_types import JSON_LEAVES, SCALAR_TYPES, TREE_LEAVES
from tensorwire._locate import key_segment
from tensorwire.dtypes import dtype_of
from tensorwire.errors import ValidationError
from tensorwire.rules import Check, CountCheck, TensorCheck, TreeCheck, TupleCheck

__all__ = ["COUNTED", "At", "check_tensor", "find_breach"]

COUNTED = (frozenset, set, dict)
"""What a ``CountCheck`` counts: a set or map as decoded or built (anything else msgspec refuses)."""


class At(NamedTuple):
    """Where a field rule looks: the struct's type and the path in it (``$`` is the struct)."""

    type_id: str | None
    path: str

    def item(self, index: int) -> At:
        return At(self.type_id, f"{self.path}[{index}]")

    def entry(self, key: Any) -> At:
        return At(self.type_id, self.path + key_segment(key))


_NOWHERE = At(None, "$")


def _breach(path: str, at: At, message: str) -> ValidationError:
    """The error for a field rule's breach: ``path`` is the field as the text names it."""
    return ValidationError(message, type_id=at.type_id, path=at.path if at.type_id is not None else None, where=path)


def find_breach(check: Check, value: Any, path: str, dims: dict[str, tuple[int, str]], at: At = _NOWHERE) -> None:
    """Raise the ``ValidationError`` of the first breach of ``check`` by ``value`` (``path`` names
    the value in the error's text, ``at`` in its fields)."""
    if isinstance(check, TensorCheck):
        check_tensor(check, value, path, dims, at)
    elif isinstance(check, TreeCheck):
        _check_tree(check, value, path, 0, at)
    elif isinstance(check, CountCheck):
        if isinstance(value, COUNTED) and len(value) < check.minimum:
            noun = "key" if isinstance(value, dict) else "item"
            raise _breach(
                path,
                at,
                f"expected at least {check.minimum} distinct {noun}s, got {len(value)} (a repeated {noun} counts once)",
            )
        if check.inner is not None:
            find_breach(check.inner, value, path, dims, at)
    elif isinstance(check, TupleCheck):
        for i, (item_check, item) in enumerate(zip(check.items, value, strict=False)):
            if item_check is not None:
                find_breach(item_check, item, f"{path}[{i}]", dims, at.item(i))
    elif check.container == "nullable":
        if value is not None:
            find_breach(check.inner, value, path, dims, at)
    elif check.container == "map":
        for key, item in value.items():
            find_breach(check.inner, item, f"{path}[{key!r}]", dims, at.entry(key))
    else:
        for i, item in enumerate(value):
            find_breach(check.inner, item, f"{path}[{i}]", dims, at.item(i))


def check_tensor(
    check: TensorCheck, value: Any, path: str, dims: dict[str, tuple[int, str]], at: At = _NOWHERE
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


def _check_tree(check: TreeCheck, value: Any, path: str, depth: int, at: At = _NOWHERE) -> None:
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
