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


_NOT_ITERABLE = object()


@pytest.mark.parametrize(
    ("kind", "arguments", "message"),
    [
        ("Encoder", {"options": tw.DecodeOptions()}, r"^Encoder options must be an EncodeOptions, got DecodeOptions\("),
        ("Encoder", {"transport": "shm"}, r"^Encoder transport must be a tensorwire Transport, got 'shm'$"),
        ("Decoder", {"registry": None}, r"^Decoder registry must be a Registry, got None$"),
        ("Decoder", {"options": tw.EncodeOptions()}, r"^Decoder options must be a DecodeOptions, got EncodeOptions\("),
        ("Decoder", {"transports": None}, r"^Decoder transports must be an iterable of transports, got None$"),
        ("Decoder", {"transports": "inline"}, r"^Decoder transports must be tensorwire Transports, got 'i'$"),
        ("Decoder", {"transports": ["shm"]}, r"^Decoder transports must be tensorwire Transports, got 'shm'$"),
        ("Decoder", {"transports": _NOT_ITERABLE}, r"^Decoder transports must be an iterable of transports, got <"),
    ],
)
def test_an_encoder_or_decoder_of_arguments_of_the_wrong_kind_is_refused_naming_the_argument(
    kind: str, arguments: dict[str, Any], message: str
) -> None:
    """Options of the other side or a transport's name: a TypeError naming the argument, not an
    AttributeError from inside."""
    from tensorwire.builtins import REGISTRY

    with pytest.raises(TypeError, match=message):
        if kind == "Encoder":
            tw.Encoder(**arguments)
        else:
            tw.Decoder(**{"registry": REGISTRY, **arguments})


def test_one_transport_where_an_iterable_of_them_is_due_is_refused() -> None:
    from tensorwire.builtins import REGISTRY

    with pytest.raises(TypeError, match=r"^Decoder transports must be an iterable of transports, got <"):
        tw.Decoder(REGISTRY, transports=tw.transports.InlineTransport())  # type: ignore[arg-type]


def test_a_decoder_of_an_empty_registry_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^Decoder registry holds no message type: it would refuse every message$"):
        tw.Decoder(tw.Registry([]))
