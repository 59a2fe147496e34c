"""What the encoder and decoder need to know about a message class, worked out once per class."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec.inspect as mi

from tensorwire._body import Checker
from tensorwire._prepare import plain_trees, preparer
from tensorwire._type_tree import closed_depth, holds_custom, typed_depth
from tensorwire._wire import EMPTY_DATA, prefix

__all__ = ["UNBOUNDED", "TypePlan", "type_plan"]


@dataclass(frozen=True, slots=True)
class TypePlan:
    """``prefix``: frame 0 up to its data (``bare``: with no data and an empty buffer table); ``tensors``: whether
    a value may hold a tensor (or a tree, which may); ``prepare``: ``tensorwire._prepare.prepare`` for
    the class, None if it holds no tree or set to rewrite; ``check``: the decoder of the encoder's schema check;
    ``plain``: ``check.plain`` where a value holds no tensor and nothing to rewrite (its message is
    one encode and this check), else None; ``trees``: where a value may hold a tensor or something
    to rewrite only in its trees (or optional structs), ``prepare`` that gives
    ``tensorwire._prepare.AS_IS`` for a message that holds none (``plain_trees``: then it is one
    encode and ``check.plain`` as well), else None; ``depth``: where a value holds no tensor, the most levels
    its body is read from if the type leaves msgspec nothing to skip
    (``tensorwire._type_tree.closed_depth``), else None; ``levels``: the most levels the typed part
    of a value nests below the message (``tensorwire._type_tree.typed_depth``; ``UNBOUNDED`` for a
    recursive type), which the encoder checks against its limit only where this is over it."""

    type_id: str
    version: int
    prefix: bytes
    bare: bytes
    tensors: bool
    prepare: Callable[[Any, int], Any] | None
    check: Checker
    plain: Callable[[bytes], Any] | None
    trees: Callable[[Any, int], Any] | None
    depth: int | None
    levels: int


UNBOUNDED = 2**63  # the ``levels`` of a recursive type


def type_plan(cls: Any) -> TypePlan:
    info = cls.__tw_type__
    info_type = mi.type_info(cls)
    head = prefix(info.type_id, info.version, info.fingerprint)
    tensors, prepare, check = holds_custom(info_type), preparer(cls), Checker(cls)
    typed = typed_depth(info_type)
    return TypePlan(
        info.type_id,
        info.version,
        head,
        head + EMPTY_DATA + b"\x90",
        tensors,
        prepare,
        check,
        None if tensors or prepare is not None else check.plain,
        plain_trees(cls) if tensors else None,
        None if tensors else closed_depth(info_type),
        UNBOUNDED if typed is None else typed - 1,
    )
