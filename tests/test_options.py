"""Options and limits refuse values that cannot mean anything, naming the option and the value."""

from __future__ import annotations

from typing import Any

import pytest

import tensorwire as tw


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: tw.Limits(max_depth=-1), ValueError, "Limits.max_depth must be 0 or more, got -1"),
        (lambda: tw.Limits(max_tensors=True), TypeError, "Limits.max_tensors must be an int, got True"),
        (lambda: tw.Limits(max_header_bytes=1e6), TypeError, "Limits.max_header_bytes must be an int, got 1000000.0"),  # type: ignore[arg-type]
        (lambda: tw.Limits(max_rank="8"), TypeError, "Limits.max_rank must be an int, got '8'"),  # type: ignore[arg-type]
        (lambda: tw.EncodeOptions(embed_threshold=-1), ValueError, "EncodeOptions.embed_threshold must be 0 or more"),
        (lambda: tw.EncodeOptions(inline_threshold=None), TypeError, "EncodeOptions.inline_threshold must be an int"),  # type: ignore[arg-type]
        (lambda: tw.EncodeOptions(validate=1), TypeError, "EncodeOptions.validate must be a bool, got 1"),  # type: ignore[arg-type]
        (lambda: tw.EncodeOptions(limits={}), TypeError, r"EncodeOptions.limits must be a Limits, got \{\}"),  # type: ignore[arg-type]
        (lambda: tw.DecodeOptions(borrow=0), TypeError, "DecodeOptions.borrow must be a bool, got 0"),  # type: ignore[arg-type]
        (lambda: tw.DecodeOptions(copy_readonly="no"), TypeError, "DecodeOptions.copy_readonly must be a bool"),  # type: ignore[arg-type]
        (lambda: tw.DecodeOptions(strict_fingerprint=None), TypeError, "DecodeOptions.strict_fingerprint must be"),  # type: ignore[arg-type]
        (lambda: tw.DecodeOptions(limits=None), TypeError, "DecodeOptions.limits must be a Limits, got None"),  # type: ignore[arg-type]
    ],
)
def test_a_value_that_cannot_mean_anything_is_refused(build: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        build()


def test_every_value_that_means_something_is_kept() -> None:
    limits = tw.Limits(max_tensor_bytes=2**80, max_tensors=0, max_depth=0)  # any size; 0: none at all
    assert (limits.max_tensor_bytes, limits.max_tensors, limits.max_depth) == (2**80, 0, 0)
    options = tw.EncodeOptions(embed_threshold=0, inline_threshold=0, validate=False, limits=limits)
    assert (options.embed_threshold, options.inline_threshold, options.validate) == (0, 0, False)
    for borrow in (None, True, False):
        assert tw.DecodeOptions(borrow=borrow, limits=limits).borrow is borrow
