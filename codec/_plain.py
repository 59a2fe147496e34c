"""The shorter decode of a message whose type holds no tensor, tree or untyped value, or holds
tensors only in its trees (or optional structs: ``TypePlan.trees``).

Such a message, as encoders write it, has frame 0 up to its body exactly that type's own (no data,
no buffers: ``body_at`` finds where its body starts), so its body is decoded alone as its class
(``plain_bodies``, each read as ``PlainBody`` says): uncounted where the type, its closed twin or
its closed mirror bounds its depth, else its level openers counted first; where the count finds
too many, the closed mirror decodes it first where that bounds it (``unguarded``: none does, the
full decode reads it).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

import msgspec
import msgspec.inspect as mi

from tensorwire._body import tree_tuple
from tensorwire._plan import type_plan
from tensorwire._scan import OTHERS
from tensorwire._twin import closed_mirror, closed_twin, structs_inside
from tensorwire._type_tree import closed_depth
from tensorwire._wire import EMPTY_DATA, EXT_TUPLE
from tensorwire.registry import Registry

__all__ = ["PlainBody", "body_at", "plain_bodies", "unguarded"]

_NOTHING_ELSE = EMPTY_DATA + b"\x90"  # frame 0 of a message with no data and no buffers, up to its body


def body_at(frame: bytes) -> int:
    """Where the body of frame 0 ``frame`` (over 72 bytes) starts if it opens as encoders write a
    message with no data and no buffers, its fingerprint 64 characters (a SHA-256 in hex); else 0."""
    first = frame[1]  # the tag's str header: then the data's bin header is at ``at``
    at = first - 0x5C if 0xA0 <= first <= 0xBF else frame[2] + 69 if first == 0xD9 else 0
    return at + 3 if at and frame.startswith(_NOTHING_ELSE, at) else 0


class PlainBody(NamedTuple):
    """How the body of a plain type (``plain_bodies``) is read: ``read`` decodes it; ``depth``:
    the most levels that decode reads (None: unbounded, the body is counted first); ``become``:
    the class a closed twin's instance ``read`` gives is made one of (None: ``read`` decodes the
    class itself); ``guard``: where the count finds too many level openers, a decode by the type's
    closed mirror (``tensorwire._twin.closed_mirror``) that reads at most ``guard_depth`` levels
    and refuses what the class would skip, run before ``read`` (None: none)."""

    read: Callable[[bytes], Any]
    depth: int | None
    become: type | None = None
    guard: Callable[[bytes], Any] | None = None
    guard_depth: int = 0


@lru_cache(maxsize=64)
def plain_bodies(registry: Registry) -> tuple[dict[bytes, PlainBody], int]:
    """The body decoders of the types of ``registry`` whose values hold no tensor, tree or untyped
    value, or hold tensors only in their trees or optional structs (``PlainBody``), by frame 0 up
    to the body (``TypePlan.bare``) where the decoder finds where the body starts (``body_at``: the
    fingerprint is 64 characters); and the most level openers one of those holds. The body of a
    type with trees is always counted (a tree bounds nothing) and read with ``_tuples_only``.

    A type that does not bound its depth (``TypePlan.depth``) but whose closed mirror does
    (``tensorwire._twin``: no struct inside itself, no union of two structs) is read through it:
    frame 0 up to the body names the type's fingerprint, so an encoder of the same fields wrote it,
    which writes no field the mirror does not know. A type that holds no struct is decoded as its
    closed twin, uncounted, and the instance made one of the class itself; a type that holds
    structs is counted as before, and where the count finds too many level openers (a long list of
    structs) the mirror decodes the body first, in place of walking it."""
    plain: dict[bytes, PlainBody] = {}
    for cls in registry:
        plan = type_plan(cls)
        if (plan.tensors and plan.trees is None) or body_at(plan.bare) != len(plan.bare):
            continue
        if plan.tensors:  # tensors only in its trees (or optional structs): with none, no data and no
            # buffers, its body is read with tree tuples and counted first; an extension of any other
            # kind (a tensor's: an empty one has no data) is the full decode's to read
            plain[plan.bare] = PlainBody(msgspec.msgpack.Decoder(cls, ext_hook=_tuples_only).decode, None)
            continue
        mirror = closed_mirror(cls) if plan.depth is None else None
        depth = None if mirror is None else closed_depth(mi.type_info(mirror))
        twin = closed_twin(cls) if depth is not None and not structs_inside(cls) else None
        if depth is None:
            plain[plan.bare] = PlainBody(plan.check.plain, plan.depth)
        elif twin is not None:  # no struct inside it: its twin's instance becomes the class's
            plain[plan.bare] = PlainBody(msgspec.msgpack.Decoder(twin).decode, depth, cls)
        else:
            plain[plan.bare] = PlainBody(plan.check.plain, None, None, msgspec.msgpack.Decoder(mirror).decode, depth)
    return plain, max((len(bare.translate(None, OTHERS)) for bare in plain), default=0)


class _NotATuple(Exception):
    """An extension other than a tree tuple in a body read by ``_tuples_only``."""


def _tuples_only(code: int, data: memoryview) -> tuple[Any, ...]:
    """The extension hook of a plain body whose type holds trees: a tree tuple as itself; any other
    extension refuses the body (the full decode reads it)."""
    if code != EXT_TUPLE:
        raise _NotATuple
    return tree_tuple(data, _tuples_only)


class _Unguarded(Exception):
    """A plain body with more level openers than the count lets through, and no guard."""


def unguarded(body: bytes) -> None:
    """The guard of a plain body no closed mirror bounds within the limit: too many level openers
    there, it is read by the full decode."""
    raise _Unguarded
