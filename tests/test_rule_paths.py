"""The quick rule check (no paths) and the reporting walk (with paths) always agree."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorwire import ValidationError
from tensorwire._breaches import find_breach
from tensorwire._quick_rules import _ok
from tensorwire.rules import CountCheck, EachCheck, TensorCheck, TreeCheck

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.just(torch.zeros(2)),
    st.just(np.zeros(2, dtype=np.int16)),
    st.sampled_from([{1, 2}, object(), 1j]),  # not allowed in any tree
)
TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=12,
)
CHECKS = st.one_of(
    st.builds(TreeCheck, max_depth=st.integers(0, 4), json_only=st.booleans()),
    st.builds(
        lambda c: EachCheck(container="map", inner=c),
        st.builds(TreeCheck, max_depth=st.integers(0, 3), json_only=st.booleans()),
    ),
    st.builds(
        lambda c: EachCheck(container="array", inner=c),
        st.builds(TreeCheck, max_depth=st.integers(0, 3), json_only=st.booleans()),
    ),
    st.builds(CountCheck, minimum=st.integers(2, 3)),  # a map's entries (what is not a set or map passes)
    st.builds(lambda c: EachCheck(container="map", inner=c), st.builds(CountCheck, minimum=st.integers(2, 3))),
)


def _reported(check: Any, value: Any) -> bool:
    try:
        find_breach(check, value, "T.f", {})
    except ValidationError:
        return True
    return False


@settings(max_examples=400, deadline=None)
@given(check=CHECKS, value=TREES)
def test_quick_check_passes_exactly_what_the_reporting_walk_passes(check: Any, value: Any) -> None:
    if isinstance(check, EachCheck) and not isinstance(value, dict if check.container == "map" else list | tuple):
        return  # the schema's type check runs first: a map rule only ever sees a map
    assert _ok(check, value, {}) is not _reported(check, value)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (torch.zeros(2, 3), None),
        (torch.zeros(2, 4), "dim 1 must be 3"),
        (torch.zeros(2, 3, dtype=torch.int8), "dtype int8 is not allowed"),
        (np.zeros((2, 3), dtype=np.float32), "expected torch.Tensor"),
        (torch.zeros(3, 2).t(), "must be contiguous"),
    ],
)
def test_quick_tensor_check_agrees_with_the_reported_breach(value: Any, reason: str | None) -> None:
    check = TensorCheck(kind="tensor", dtypes=("float32",), shape=(None, 3), contiguous=True)
    assert _ok(check, value, {}) is (reason is None)
    if reason is not None:
        with pytest.raises(ValidationError, match=reason):
            find_breach(check, value, "T.f", {})


def test_dtype_names_are_exact_whichever_was_seen_first() -> None:
    from tensorwire.dtypes import dtype_of

    class Listed:  # an unhashable dtype-like value: named from its text, never cached
        __hash__ = None  # type: ignore[assignment]

        def __str__(self) -> str:
            return "int8"

    class Holder:
        dtype = Listed()

    for _ in range(2):  # the second round answers from the cache
        assert dtype_of(np.zeros(1, dtype=">f4")) is None  # big-endian: not the wire's float32
        assert dtype_of(np.zeros(1, dtype="<f4")) == "float32"
        assert dtype_of(torch.zeros(1, dtype=torch.bfloat16)) == "bfloat16"
        assert dtype_of(np.zeros(1, dtype=[("a", "<i4")])) is None
        assert dtype_of(object()) is None
        assert dtype_of(Holder()) == "int8"
