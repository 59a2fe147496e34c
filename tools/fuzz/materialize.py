"""Turn a case into the receiver's input: resolve its bindings, do its damage, join it if asked.

Refs (the ``ref`` of a ``Binding``):

- ``["lit", value]``: ``value`` itself;
- ``["del"]``: remove the key (or list item) at the path;
- ``["ctx", *path]``: a value of the run's context: ``victim`` (the victim's table, see
  ``tools.fuzz.targets``), ``own`` (per export of the case: ``{"handle": ..., "nbytes": ...}``);
- ``["fmt", template]``: ``template`` formatted with ``victim_pid``, ``victim_token``,
  ``self_pid`` and ``self_token`` (the decoding worker's);
- ``["add", ref, delta]``: the int ``ref`` names, plus ``delta``.

A binding's path starts with the index of an item of frame 0's array (``[tag, fingerprint, data,
buffers, body]``: in practice the buffer table, 3). Only the items a binding touches are decoded
and re-encoded; every other byte stays as generated (a body nested 100,000 deep included).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import msgspec

import tensorwire as tw
from tensorwire._wire import BLOB_MAGIC, BLOB_PREAMBLE
from tools.fuzz import rawmp
from tools.fuzz.case import Binding, Case
from tools.fuzz.damage import apply

__all__ = ["Delivery", "HarnessError", "bind", "bindable", "materialize", "resolve"]

_DELETE = object()


class HarnessError(Exception):
    """The fuzzer itself could not build a case (a bug of the harness, never of the decoder)."""


@dataclass(frozen=True)
class Delivery:
    """What the receiver gets: ``frames``, or a ``blob`` it must ``tw.split`` first."""

    frames: list[Any]
    blob: bytearray | bytes | None = None


def resolve(ref: list[Any], context: dict[str, Any]) -> Any:
    """The value ``ref`` names in ``context`` (``HarnessError`` if it names nothing)."""
    kind = ref[0] if ref else None
    if kind == "lit":
        return ref[1]
    if kind == "del":
        return _DELETE
    if kind == "fmt":
        return str(ref[1]).format(**context["names"])
    if kind == "add":
        base = resolve(ref[1], context)
        if not isinstance(base, int):
            raise HarnessError(f"ref {ref!r} adds to a non-int")
        return base + int(ref[2])
    if kind == "ctx":
        node: Any = context
        for step in ref[1:]:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                raise HarnessError(f"ref {ref!r} names nothing in this run's context") from None
        return copy.deepcopy(node)
    raise HarnessError(f"unknown ref {ref!r}")


def _set(root: list[Any], path: list[str | int], value: Any) -> None:
    """Put ``value`` at ``path`` below ``root[0]`` (a missing map key is added, an index one past the
    end appends)."""
    node: Any = root
    steps: list[str | int] = [0, *path]
    for step in steps[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            raise HarnessError(f"binding path {path!r} leads nowhere") from None
    last = steps[-1]
    if isinstance(node, dict):
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and 0 <= last <= len(node):
        if value is _DELETE:
            if last < len(node):
                del node[last]
        elif last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        raise HarnessError(f"binding path {path!r} ends in a {type(node).__name__}")


def bind(frame: bytes, bindings: list[Binding], context: dict[str, Any]) -> bytes:
    """Frame 0 with every binding applied, in order (each to the item of frame 0 its path starts with)."""
    split = rawmp.items(frame)
    if split is None:
        raise HarnessError("bindings on a frame 0 that is not a msgpack array")
    head, items, rest = split
    values: dict[int, list[Any]] = {}  # item index -> [decoded value], for the items touched
    for binding in bindings:
        top, path = binding.path[0], binding.path[1:]
        if not isinstance(top, int) or not 0 <= top < len(items):
            raise HarnessError(f"binding of item {top!r}: frame 0 has no such item before its first unparsed one")
        if top not in values:
            try:
                values[top] = [msgspec.msgpack.decode(items[top])]
            except (msgspec.MsgspecError, RecursionError) as exc:
                raise HarnessError(f"bound item {top} does not decode: {exc}") from None
        value = resolve(binding.ref, context)
        if not path:
            values[top][0] = value
        else:
            _set(values[top], path, value)
    for index, holder in values.items():
        try:
            items[index] = msgspec.msgpack.encode(holder[0])
        except (TypeError, OverflowError) as exc:
            raise HarnessError(f"bound item {index} does not encode: {exc}") from None
    return head + b"".join(items) + rest


def bindable(frame: bytes, bindings: list[Binding]) -> bool:
    """Whether every binding's item can be found in ``frame`` and decoded, and its path leads to a
    map or list there (or to what an earlier binding puts there): a frame whose items shifted, e.g.
    under a bin that claims more or less than its bytes, may not hold the buffer table where a
    binding names it."""
    split = rawmp.items(frame)
    if split is None:
        return False
    found = split[1]
    decoded: dict[int, Any] = {}
    bound: list[list[str | int]] = []
    for binding in bindings:
        top = binding.path[0]
        if not isinstance(top, int) or not 0 <= top < len(found):
            return False
        if top not in decoded:
            try:
                decoded[top] = msgspec.msgpack.decode(found[top])
            except (msgspec.MsgspecError, RecursionError):
                return False
        parent = binding.path[:-1]
        if parent and parent not in bound and not isinstance(_node(decoded[top], parent[1:]), dict | list):
            return False
        bound.append(binding.path)
    return True


def _node(node: Any, steps: list[str | int]) -> Any:
    """What ``steps`` (map keys and list indices) lead to from ``node`` (None where they lead nowhere)."""
    for step in steps:
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
        else:
            return None
    return node


def materialize(case: Case, context: dict[str, Any]) -> Delivery:
    """The receiver's input for ``case``."""
    frames: list[bytes] = list(case.frames)
    if case.bindings:
        if not frames:
            raise HarnessError("bindings on a case without frames")
        frames[0] = bind(frames[0], case.bindings, context)
    damage = case.damage
    if damage is not None and 0 <= damage.target < len(frames):
        frames[damage.target] = apply(frames[damage.target], damage)
    if case.joined:  # (a blob of no frames, which ``tw.join`` refuses to make, by hand: a reader refuses it)
        blob = tw.join(frames) if frames else BLOB_PREAMBLE.pack(BLOB_MAGIC, 0)
        if damage is not None and damage.target < 0:
            blob = apply(blob, damage)
        return Delivery([], bytearray(blob) if case.writable else blob)
    if case.writable:
        return Delivery([bytearray(f) for f in frames])
    return Delivery(frames)
