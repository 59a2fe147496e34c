"""Hostile shapes and strides: sizes are checked in Python before torch or numpy computes any.

Every dimension, and the product of the non-zero dimensions times the itemsize, must be at most
``max_tensor_bytes`` (16 GiB by default), for an empty tensor too; strides are bounded the same
way. A descriptor past those bounds is a ``DecodeError`` naming its axis, never a torch or numpy
error; the encoder refuses what a decoder would refuse.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire._wire import EXT_INLINE, pack_inline
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.dtypes import DTYPE_NAMES
from tests.wire_helpers import edit_descriptor, frame_of, head_of, tensor_exts

DECODER = tw.Decoder(REGISTRY)
INLINE = tw.Encoder()
LIMIT = tw.Limits().max_tensor_bytes  # 2**34
FRAMES_OPTIONS = tw.EncodeOptions(embed_threshold=0)  # the tensor in frame 1, described in frame 0
FRAMES = {
    "tensor": tw.Encoder(options=FRAMES_OPTIONS).encode(diffusion.Output(output=[torch.zeros(4)])),
    "ndarray": tw.Encoder(options=FRAMES_OPTIONS).encode(diffusion.Output(output=[np.zeros(4, np.float32)])),
}
ITEMSIZE = {"float32": 4, "uint8": 1, "complex128": 16}


def forged(
    kind: str, shape: list[int], strides: list[int] | None = None, dtype: str = "float32", offset: int = 0
) -> list[Any]:
    """The frames of a one-tensor message whose descriptor says ``shape`` and ``strides`` (None: C order)."""
    head = head_of(FRAMES[kind][0])
    numel = 1
    for dim in shape:
        numel *= dim
    nbytes = numel * ITEMSIZE[dtype] if numel * ITEMSIZE[dtype] < 2**64 else 0
    (ext,) = tensor_exts(head[4])
    head[4]["output"] = [
        edit_descriptor(ext, dtype=DTYPE_NAMES.index(dtype), shape=shape, strides=strides, nbytes=nbytes, offset=offset)
    ]
    return [frame_of(head), *FRAMES[kind][1:]]


def forged_inside(kind: str, shape: list[int], dtype: str = "float32") -> list[Any]:
    """The one frame of a message whose tensor, carried inside frame 0 with no bytes, says ``shape``."""
    payload = pack_inline(["tensor", "ndarray"].index(kind), DTYPE_NAMES.index(dtype), shape, 0, 0)
    head = head_of(FRAMES[kind][0])
    head[3], head[4]["output"] = [], [msgspec.msgpack.Ext(EXT_INLINE, payload)]
    return [frame_of(head)]


def _at(axis: str) -> str:
    return rf" - at `\$\.output\[0\]\.{axis}`$"


DIMENSION = r"dimension {} is larger than the limit of 17179869184"
PRODUCT = r"{} makes the tensor larger than the limit of 17179869184 bytes"
STRIDE = r"{} is out of range"

BAD_SHAPES = [
    ([2**63 - 1], None, "shape\\[0\\]", DIMENSION.format(2**63 - 1)),
    ([2**63], None, "shape\\[0\\]", DIMENSION.format(2**63)),
    ([2**64 - 1], None, "shape\\[0\\]", DIMENSION.format(2**64 - 1)),
    ([2**63, 0], None, "shape\\[0\\]", DIMENSION.format(2**63)),
    ([0, 2**63], None, "shape\\[1\\]", DIMENSION.format(2**63)),
    ([0, 2**64 - 1], None, "shape\\[1\\]", DIMENSION.format(2**64 - 1)),
    ([2**63 - 1, 0], None, "shape\\[0\\]", DIMENSION.format(2**63 - 1)),
    ([2**40, 2**40, 0], None, "shape\\[0\\]", DIMENSION.format(2**40)),
    ([0, 2**62], None, "shape\\[1\\]", DIMENSION.format(2**62)),
    ([0, 2**40], None, "shape\\[1\\]", DIMENSION.format(2**40)),
    ([0, LIMIT + 1], None, "shape\\[1\\]", DIMENSION.format(LIMIT + 1)),
    ([LIMIT, 0], None, "shape\\[0\\]", PRODUCT.format(LIMIT)),  # LIMIT elements of 4 bytes
    ([2**32, 0, 4], None, "shape\\[2\\]", PRODUCT.format(4)),
    ([2**31] * 8, None, "shape\\[1\\]", PRODUCT.format(2**31)),
    ([0, *[2**31] * 7], None, "shape\\[2\\]", PRODUCT.format(2**31)),
    ([2**17, 0, 2**15, 2**17], None, "shape\\[3\\]", PRODUCT.format(2**17)),
    ([0, 5], [2**62, 1], "strides\\[0\\]", STRIDE.format(2**62)),
    ([0, 5], [2**63 - 1, 1], "strides\\[0\\]", STRIDE.format(2**63 - 1)),
    ([0, 5], [-(2**63), 1], "strides\\[0\\]", STRIDE.format(-(2**63))),
    ([5, 0], [1, LIMIT + 1], "strides\\[1\\]", STRIDE.format(LIMIT + 1)),
    ([3, 2], [LIMIT + 1, 1], "strides\\[0\\]", STRIDE.format(LIMIT + 1)),
]


@pytest.mark.parametrize("kind", ["tensor", "ndarray"])
@pytest.mark.parametrize(("shape", "strides", "axis", "reason"), BAD_SHAPES)
def test_sizes_past_the_limits_are_decode_errors_naming_the_axis(
    kind: str, shape: list[int], strides: list[int] | None, axis: str, reason: str
) -> None:
    with pytest.raises(tw.DecodeError, match=rf"^diffusion\.Output v1: {reason}{_at(axis)}"):
        DECODER.decode(forged(kind, shape, strides))


@pytest.mark.parametrize("kind", ["tensor", "ndarray"])
@pytest.mark.parametrize(("shape", "axis", "reason"), [(s, a, r) for s, strides, a, r in BAD_SHAPES if strides is None])
def test_sizes_past_the_limits_inside_frame_0_are_decode_errors_naming_the_axis(
    kind: str, shape: list[int], axis: str, reason: str
) -> None:
    with pytest.raises(tw.DecodeError, match=rf"^diffusion\.Output v1: {reason}{_at(axis)}"):
        DECODER.decode(forged_inside(kind, shape))


def test_torch_tensors_have_no_negative_strides_even_empty() -> None:
    with pytest.raises(tw.DecodeError, match=r"no negative strides, got -1" + _at("strides\\[0\\]")):
        DECODER.decode(forged("tensor", [0, 3], [-1, 1]))
    with pytest.raises(tw.DecodeError, match=r"no negative strides, got -5" + _at("strides\\[1\\]")):
        DECODER.decode(forged("tensor", [3, 0], [1, -5]))


@pytest.mark.parametrize(
    ("kind", "shape", "strides", "dtype"),
    [
        ("tensor", [2**32, 0], [1, 1], "float32"),  # the product of the non-zero dims at the limit
        ("ndarray", [2**32, 0], [1, 1], "float32"),
        ("tensor", [0, LIMIT], [LIMIT, 1], "uint8"),  # a dimension and a stride at the limit
        ("ndarray", [0, LIMIT], [LIMIT, 1], "uint8"),
        ("ndarray", [0, 3], [-1, 1], "float32"),  # numpy takes negative strides
        ("ndarray", [0, 3], [-LIMIT, LIMIT], "float32"),
        ("tensor", [0, 2**20, 0, 2**10], [LIMIT, 1, LIMIT, 1], "complex128"),  # 2**34 bytes
        ("ndarray", [0, 2**20, 0, 2**10], [-LIMIT, 1, LIMIT, -1], "complex128"),
    ],
)
def test_empty_tensors_within_the_limits_decode_with_their_layout(
    kind: str, shape: list[int], strides: list[int], dtype: str
) -> None:
    value = DECODER.decode(forged(kind, shape, strides, dtype)).output[0]
    assert isinstance(value, torch.Tensor if kind == "tensor" else np.ndarray)
    assert list(value.shape) == shape
    got = list(value.stride()) if isinstance(value, torch.Tensor) else [s // ITEMSIZE[dtype] for s in value.strides]
    assert got == strides


_DIMS = st.sampled_from([0, 0, 1, 2, 3, 2**16, 2**31, 2**32, LIMIT, LIMIT + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1])
_STRIDES = st.sampled_from([0, 1, -1, 3, 2**31, LIMIT, -LIMIT, LIMIT + 1, -(2**63), 2**63 - 1])  # the wire's i64


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["tensor", "ndarray"]),
    dtype=st.sampled_from(list(ITEMSIZE)),
    layout=st.integers(0, 8).flatmap(
        lambda r: st.tuples(st.lists(_DIMS, min_size=r, max_size=r), st.lists(_STRIDES, min_size=r, max_size=r))
    ),
    offset=st.sampled_from([0, 16, 2**40, 2**63]),
)
def test_any_shape_strides_and_offset_decode_or_raise_a_decode_error(
    kind: str, dtype: str, layout: tuple[list[int], list[int]], offset: int
) -> None:
    shape, strides = layout
    try:
        value = DECODER.decode(forged(kind, shape, strides, dtype, offset)).output[0]
    except tw.DecodeError as exc:
        assert " - at `$.output[0]" in str(exc)
        return
    assert list(value.shape) == shape
    value.clone() if isinstance(value, torch.Tensor) else value.copy()  # every element readable


# -- the encoder refuses what a decoder refuses ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (torch.empty(0, 2**40), r"shape\[1\]: dimension 1099511627776 is larger than the limit of 17179869184"),
        (torch.empty(2**40, 0, dtype=torch.uint8), r"shape\[0\]: dimension 1099511627776 is larger than the limit"),
        (torch.empty(0, 2**33), r"shape\[1\]: 8589934592 makes the tensor larger than the limit of 17179869184 bytes"),
        (torch.empty(0, 2**20, 2**20), r"shape\[2\]: 1048576 makes the tensor larger than the limit"),
        (torch.empty_strided((0, 5), (2**40, 1)), r"strides\[0\]: 1099511627776 is out of range"),
        (np.empty((0, 2**40), np.uint8), r"shape\[1\]: dimension 1099511627776 is larger than the limit"),
        (np.empty((2**32, 0, 4), np.float32), r"shape\[2\]: 4 makes the tensor larger than the limit"),
        (np.empty((2**33, 0), np.float32), r"shape\[0\]: 8589934592 makes the tensor larger than the limit"),
    ],
)
def test_empty_tensors_past_the_limits_are_encode_errors_naming_the_axis(value: Any, error: str) -> None:
    with pytest.raises(tw.EncodeError, match=rf"^diffusion\.Output: {error}.* - at `\$\.output\.big`$"):
        INLINE.encode(diffusion.Output(output={"small": torch.zeros(2), "big": value}))


def test_what_the_encoder_sends_at_the_limits_decodes() -> None:
    values: list[Any] = [
        torch.empty(0, LIMIT, dtype=torch.uint8),
        torch.empty(2**32, 0),
        np.empty((0, LIMIT // 16), np.complex128),
        torch.empty_strided((0, 5), (LIMIT, 1), dtype=torch.uint8),
    ]
    out = DECODER.decode(INLINE.encode(diffusion.Output(output=values))).output
    assert [tuple(v.shape) for v in out] == [tuple(v.shape) for v in values]
    assert list(out[3].stride()) == [LIMIT, 1]


def test_a_smaller_limit_bounds_every_dimension_on_both_sides() -> None:
    limits = tw.Limits(max_tensor_bytes=100)
    encoder = tw.Encoder(options=tw.EncodeOptions(limits=limits))
    decoder = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=limits))
    with pytest.raises(tw.EncodeError, match=r"shape\[1\]: dimension 101 is larger than the limit of 100"):
        encoder.encode(diffusion.Output(output=torch.empty(0, 101, dtype=torch.uint8)))
    frames = encoder.encode(diffusion.Output(output=torch.empty(0, 100, dtype=torch.uint8)))
    assert decoder.decode(frames).output.shape == (0, 100)
    head = head_of(frames[0])
    head[4]["output"] = msgspec.msgpack.Ext(EXT_INLINE, pack_inline(0, DTYPE_NAMES.index("uint8"), [0, 101], 0, 0))
    with pytest.raises(
        tw.DecodeError, match=r"dimension 101 is larger than the limit of 100 - at `\$\.output\.shape\[1\]`"
    ):
        decoder.decode([frame_of(head), *frames[1:]])


_MIB = tw.Limits(max_tensor_bytes=1 << 20)


def _both(limits: tw.Limits, **options: Any) -> tuple[tw.Encoder, tw.Decoder]:
    """An encoder and a decoder with the same ``limits``."""
    encoder = tw.Encoder(options=tw.EncodeOptions(limits=limits, **options))
    return encoder, tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=limits))


@pytest.mark.parametrize("embed", [True, False], ids=["inside frame 0", "in a buffer"])
def test_a_dim_of_size_1_whose_stride_is_past_the_limit_travels_with_its_canonical_stride(embed: bool) -> None:
    """No index moves along a dim of size 1, so its stride is free: one past ``max_tensor_bytes``
    (a row of a large batch, keepdim) is sent as the C-contiguous one, which a decoder with the same
    limits takes; a stride within the limit still travels as it is."""
    encoder, decoder = _both(_MIB, **({} if embed else {"embed_threshold": 0}))
    big = torch.zeros(4, 2 << 20, dtype=torch.uint8)
    big[1, :100] = torch.arange(100, dtype=torch.uint8)
    values: list[Any] = [big[1:2, :100], big.numpy()[1:2, :100], big[1:2, :100].t(), big[1:2, ::2][:, :50]]
    assert values[0].stride() == (2 << 20, 1) and values[0].is_contiguous()
    out = decoder.decode(encoder.encode(diffusion.Output(output=values))).output
    assert [tuple(v.shape) for v in out] == [(1, 100), (1, 100), (100, 1), (1, 50)]
    assert out[0].stride() == (100, 1) and out[1].strides == (100, 1) and out[2].stride() == (1, 1)
    assert out[3].stride() == (50, 2)  # strided, in the buffer the views of ``big`` share
    assert torch.equal(out[0], values[0]) and np.array_equal(out[1], values[1]) and torch.equal(out[2], values[2])
    assert torch.equal(out[3], values[3])
    huge = torch.arange(3.0).as_strided((1, 3), (2**35, 1))  # past the default limit of 2**34
    got = DECODER.decode(INLINE.encode(diffusion.Output(output=huge))).output
    assert torch.equal(got, huge) and got.stride() == (3, 1)
    kept = torch.arange(8.0)[None].t()  # (8, 1) with strides (1, 8): within the limit, kept
    assert DECODER.decode(INLINE.encode(diffusion.Output(output=kept))).output.stride() == (1, 8)


def test_an_empty_tensor_with_a_dim_of_size_1_past_the_limit_travels_too() -> None:
    value = torch.empty_strided((1, 0), (2**40, 1))
    got = DECODER.decode(INLINE.encode(diffusion.Output(output=value))).output
    assert tuple(got.shape) == (1, 0) and got.stride()[0] <= LIMIT


def test_views_sharing_one_buffer_whose_strides_are_past_the_limit_are_encode_errors() -> None:
    """Views of one storage travel in one buffer with their own strides: a stride no decoder with the
    same limits takes (in a dim of size 2 or more) is an ``EncodeError`` naming the view, raised
    before anything is exported; alone, such a view travels as its own elements."""
    encoder, decoder = _both(_MIB)
    big = torch.zeros(4, 2 << 20, dtype=torch.uint8)
    array = np.zeros((4, 2 << 20), np.uint8)
    for columns in ([big[:, 0], big[:, 1]], [array[:, 0], array[:, 1]]):
        with pytest.raises(
            tw.EncodeError,
            match=r"^diffusion\.Output: strides\[0\]: 2097152 is out of range \(over the limit of 1048576\)"
            r" - at `\$\.output\[0\]`$",
        ) as caught:
            encoder.encode(diffusion.Output(output=columns))
        assert caught.value.path == "$.output[0]"
        alone = decoder.decode(encoder.encode(diffusion.Output(output=columns[0]))).output
        assert alone.shape == (4,) and alone.tolist() == [0, 0, 0, 0]
    flat = torch.arange(1600 << 10, dtype=torch.int32).to(torch.uint8)
    near = flat.as_strided((2, 400 << 10), (1100 << 10, 1))  # 800 KiB, a stride past 1 MiB
    out = decoder.decode(encoder.encode(diffusion.Output(output=near))).output  # reaches < 2x its bytes
    assert torch.equal(out, near)


@pytest.mark.parametrize("inside", [False, True])  # in a buffer, or inside frame 0
@pytest.mark.parametrize("kind", ["tensor", "ndarray"])
@pytest.mark.parametrize("shape", [[2**63, 0], [0, 2**64 - 1], [3, 0, 2**63]])  # past int64
def test_with_limits_past_what_torch_and_numpy_hold_a_decode_still_raises_only_a_decode_error(
    kind: str, shape: list[int], inside: bool
) -> None:
    decoder = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(max_tensor_bytes=2**80)))
    with pytest.raises(tw.DecodeError, match=r"tensor 0 of shape .* cannot be built: "):
        decoder.decode(forged_inside(kind, shape) if inside else forged(kind, shape))
