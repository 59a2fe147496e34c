"""The encoder's rewrite of trees and sets (``tensorwire._prepare.prepare``), and its quick form."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorwire._prepare import AS_IS, TupleMarker, plain_trees, prepare, preparer
from tensorwire.builtins import rpc
from tensorwire.errors import EncodeError

_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=3))
_TREES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=2), inner, max_size=3),
    ),
    max_leaves=12,
)
_MAPS = st.dictionaries(st.text(max_size=2), _TREES, max_size=3)


def _plain(value: Any) -> Any:
    """``value`` with tuple markers, structs and containers as comparable data."""
    if isinstance(value, TupleMarker):
        return ("tuple", [_plain(v) for v in value.items])
    if isinstance(value, rpc.Request):
        return ("request", _plain(value.args), _plain(value.kwargs))
    if isinstance(value, rpc.Result):
        return ("result", _plain(value.payload))
    if isinstance(value, rpc.Value):
        return ("value", _plain(value.value))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_plain(v) for v in value])
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _outcome(rewrite: Any, message: Any, max_depth: int) -> Any:
    try:
        return rewrite(message, max_depth)
    except EncodeError as exc:
        return str(exc)


@given(
    args=_TREES,
    kwargs=st.dictionaries(st.text(max_size=2), _TREES, max_size=3),
    max_depth=st.sampled_from([1, 2, 3, 64]),
)
def test_the_quick_form_rewrites_exactly_as_prepare_does(args: Any, kwargs: dict[str, Any], max_depth: int) -> None:
    message = rpc.Request(method="m", args=args, kwargs=kwargs)
    quick = preparer(rpc.Request)
    assert quick is not None and quick is not prepare  # args: a tree, kwargs: a map of trees
    got, want = _outcome(quick, message, max_depth), _outcome(prepare, message, max_depth)
    assert _plain(got) == _plain(want), (got, want)
    assert (got is message) == (want is message)  # the message itself when nothing is rewritten


@pytest.mark.parametrize(
    ("args", "kwargs", "unchanged"),
    [
        ([], {}, True),
        ([1, "a", None], {"x": 2.0}, True),
        ([[1]], {}, True),  # not flat: walked, and nothing to rewrite
        ((1, 2), {}, False),  # a tuple becomes a tuple marker
        ([], {"x": (1,)}, False),
        ((), {}, False),  # empty, but a tuple: still a tuple marker
        ([], {"x": ()}, False),
    ],
)
def test_flat_trees_come_back_as_they_are(args: Any, kwargs: dict[str, Any], unchanged: bool) -> None:
    message = rpc.Request(method="m", args=args, kwargs=kwargs)
    quick = preparer(rpc.Request)
    assert quick is not None
    out = quick(message, 64)
    assert _plain(out) == _plain(prepare(message, 64)) and (out is message) == unchanged
    assert message.args == args and message.kwargs == kwargs  # the caller's message is untouched


class _Walked(Exception):
    pass


def _no_walk(message: Any, max_depth: int) -> Any:
    raise _Walked


class _Items(list):  # type: ignore[type-arg]
    """A list subclass: a tree may hold one, but only the full rewrite looks into it."""


@pytest.mark.parametrize(
    ("args", "kwargs", "max_depth", "walked"),
    [
        ([[1, [2, "a"]], {"k": [None]}], {"stop": ["\n"], "opts": {"n": 1, "m": [1.0]}}, 64, False),
        ([], {"a": {"b": {"c": 1}}}, 3, False),  # the map at level 1, its values' maps at 2 and 3
        ([], {"a": {"b": {"c": [1]}}}, 3, True),  # a list at level 4: the walk names it
        ([[1, (2,)]], {}, 64, True),  # a tuple inside: rewritten
        ([[1, {2, 3}]], {}, 64, True),  # a set: the walk refuses it
        ([[1, _Items([2])]], {}, 64, True),
        ([[1, object()]], {}, 64, True),
    ],
)
def test_nested_lists_and_maps_of_leaves_come_back_as_they_are_without_the_walk(
    monkeypatch: pytest.MonkeyPatch, args: Any, kwargs: dict[str, Any], max_depth: int, walked: bool
) -> None:
    """The quick form looks through lists and maps of leaves, nested within the limit
    (``plain_tree``); anything else there takes the full rewrite, which rewrites or names it."""
    from tensorwire import _prepare

    message = rpc.Request(method="m")
    message.args, message.kwargs = args, kwargs  # (set after building: no rule of the class runs)
    want = _outcome(prepare, message, max_depth)
    monkeypatch.setattr(_prepare, "prepare", _no_walk)
    quick = preparer(rpc.Request)
    assert quick is not None
    if walked:
        with pytest.raises(_Walked):
            quick(message, max_depth)
    else:
        assert quick(message, max_depth) is message is want


_ANY_LEAVES = _LEAVES | st.binary(max_size=2) | st.builds(torch.zeros, st.integers(0, 2))
_ANY_TREES = st.recursive(
    _ANY_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.text(max_size=2), inner, max_size=3),
        st.frozensets(st.integers(0, 3), max_size=2),
        st.builds(_Items, st.lists(inner, max_size=2)),
    ),
    max_leaves=12,
)


def _holds_no_extension(value: Any) -> bool:
    """Whether ``value`` is made of lists and maps (of exactly those types) of leaves msgpack writes
    without an extension."""
    if type(value) in (list, dict):
        return all(map(_holds_no_extension, value.values() if isinstance(value, dict) else value))
    return type(value) in (type(None), bool, int, float, str, bytes)


@settings(max_examples=500)
@given(
    args=_ANY_TREES,
    kwargs=st.dictionaries(st.text(max_size=2), _ANY_TREES, max_size=3) | _ANY_TREES,
    max_depth=st.sampled_from([1, 2, 3, 64]),
)
def test_the_trees_form_says_as_is_exactly_where_prepare_rewrites_nothing_and_no_extension_is_written(
    args: Any, kwargs: Any, max_depth: int
) -> None:
    """``plain_trees``'s function gives ``AS_IS`` only where ``prepare`` gives the message itself and
    its trees hold no tensor (nor anything else an extension writes); else exactly what ``prepare``
    gives, or the same error."""
    message = rpc.Request(method="m")
    message.args, message.kwargs = args, kwargs  # (set after building: no rule of the class runs)
    trees = plain_trees(rpc.Request)
    assert trees is not None
    got, want = _outcome(trees, message, max_depth), _outcome(prepare, message, max_depth)
    if got is AS_IS:
        assert want is message and _holds_no_extension(args) and _holds_no_extension(kwargs)
    else:
        assert _plain(got) == _plain(want) and (got is message) == (want is message), (got, want)
        if want is message and max_depth >= 2 and type(kwargs) is dict:  # (kwargs as declared: a map)
            assert not (_holds_no_extension(args) and _holds_no_extension(kwargs) and _within(message, max_depth))


def _depth(value: Any) -> int:
    """The most lists and maps nested in ``value``, itself included."""
    if isinstance(value, list | dict):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max(map(_depth, items), default=0)
    return 0


def _within(message: Any, max_depth: int) -> bool:
    """Whether no list or map in the message's trees is more than ``max_depth`` levels below it."""
    return _depth(message.args) <= max_depth and _depth(message.kwargs) <= max_depth


@settings(max_examples=300)
@given(value=_ANY_TREES, max_depth=st.sampled_from([1, 2, 3, 4, 64]))
def test_the_trees_form_looks_into_an_optional_struct_one_level_down(value: Any, max_depth: int) -> None:
    """An ``rpc.Result`` whose payload is an ``rpc.Value``: ``AS_IS`` exactly where the value's tree,
    two levels below the result, would be ``AS_IS`` in a message of its own (and ``prepare``
    rewrites nothing); else what ``prepare`` gives."""
    payload = rpc.Value(value=None)
    payload.value = value  # (set after building: no rule of the class runs)
    message = rpc.Result(method="m", ok=True, payload=payload)
    trees = plain_trees(rpc.Result)
    assert trees is not None
    got, want = _outcome(trees, message, max_depth), _outcome(prepare, message, max_depth)
    plain = _holds_no_extension(value) and 1 + _depth(value) <= max_depth
    if got is AS_IS:
        assert want is message and plain
    else:
        assert _plain(got) == _plain(want) and (got is message) == (want is message), (got, want)
        assert not (want is message and plain and max_depth >= 3)  # (below 3: the value's check is not made)


def test_a_type_without_trees_or_sets_needs_no_rewrite() -> None:
    assert preparer(rpc.RankStatus) is None


# Field names Python source cannot hold as written: a keyword, and U+FB01, which Python code would
# read as ``fi`` (another field of the same kind here).
_ODD = msgspec.defstruct(
    "Odd", [("class", Any, None), ("fi", list[Any], []), ("\ufb01", list[Any], []), ("map", dict[str, Any], {})]
)


@given(tree=_TREES, items=st.lists(_TREES, max_size=3), others=st.lists(_TREES, max_size=3), values=_MAPS)
def test_the_quick_form_reads_every_field_by_its_own_name(
    tree: Any, items: list[Any], others: list[Any], values: dict[str, Any]
) -> None:
    message = _ODD(tree, items, others, values)
    quick = preparer(_ODD)
    assert quick is not None and quick is not prepare
    got, want = quick(message, 64), prepare(message, 64)
    assert (got is message) == (want is message)
    fields = ("class", "fi", "\ufb01", "map")
    assert [_plain(getattr(got, f)) for f in fields] == [_plain(getattr(want, f)) for f in fields]


_INNER = msgspec.defstruct("Inner", [("tree", Any, None), ("tags", frozenset[str], frozenset())], tag=True)
_OTHER = msgspec.defstruct("Other", [("tree", Any, None)], tag=True)
_OUTER = msgspec.defstruct("Outer", [("tree", Any, None), ("inner", _INNER | None, None)])
_EITHER = msgspec.defstruct("Either", [("inner", _INNER | _OTHER | None, None)])
_INNERS = st.builds(_INNER, _TREES, st.frozensets(st.text(max_size=2), max_size=3))


@given(tree=_TREES, inner=st.one_of(st.none(), _INNERS, st.builds(_OTHER, _TREES)))
def test_an_optional_struct_is_rewritten_exactly_as_prepare_does_unless_it_is_none(tree: Any, inner: Any) -> None:
    """An optional struct field (of one struct type, or a tagged union of them) lets the quick form
    return the message as it is only when it is None: a struct in it may hold a tuple in a tree or
    a set, which ``prepare`` rewrites (a set into a sorted list)."""
    messages = [_EITHER(inner)]
    if not isinstance(inner, _OTHER):
        messages.append(_OUTER(tree, inner))
    for message in messages:
        quick = preparer(type(message))
        assert quick is not None and quick is not prepare
        got, want = _outcome(quick, message, 64), _outcome(prepare, message, 64)
        assert (got is message) == (want is message)
        assert type(got.inner) is type(want.inner)
        if want.inner is not None:
            assert _plain(got.inner.tree) == _plain(want.inner.tree)
            tags = getattr(inner, "tags", None)
            if tags:
                assert got.inner.tags == want.inner.tags == sorted(tags)
        if isinstance(message, _OUTER):
            assert _plain(got.tree) == _plain(want.tree)
