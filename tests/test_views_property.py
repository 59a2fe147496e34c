"""Random views travel as their values: whatever slicing, transposing, broadcasting, ``as_strided``
overlap, byte offset or lazy bit (conjugate, negative) a tensor or array has, and however many
views of one block a message holds, what the decoder gives back equals what was sent, and a
message the encoder writes is one its decoder takes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports.base import Buffer

SHM = transports.ShmTransport()
ENCODERS = {
    "inside frame 0": tw.Encoder(),
    "inline frames": tw.Encoder(options=tw.EncodeOptions(embed_threshold=0)),
    "pool": tw.Encoder(transport=SHM, options=tw.EncodeOptions(inline_threshold=1, embed_threshold=0)),
    "mixed": tw.Encoder(transport=SHM, options=tw.EncodeOptions(inline_threshold=64, embed_threshold=32)),
}
DECODER = tw.Decoder(REGISTRY, transports=[SHM])
NUMPY_DTYPES = [np.float32, np.float64, np.int8, np.uint8, np.int16, np.int64, np.complex64, np.bool_, np.float16]
TORCH_DTYPES = [torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32, torch.complex64, torch.bool]
TORCH_DTYPES += [torch.bfloat16, torch.float16]


def teardown_module() -> None:
    SHM.close()


def _numpy_block(data: Any, shape: list[int]) -> np.ndarray:
    dtype = np.dtype(data.draw(st.sampled_from(NUMPY_DTYPES)))
    block = (np.arange(math.prod(shape)) % 100).astype(dtype).reshape(shape)
    offset = data.draw(st.none() | st.integers(0, 15))
    if offset is None:
        return block
    raw = bytearray(block.nbytes + 16)  # the same values at a byte offset into other memory
    placed: np.ndarray = np.frombuffer(raw, np.uint8)[offset : offset + block.nbytes].view(dtype).reshape(shape)
    placed[...] = block
    return placed


def _torch_block(data: Any, shape: list[int]) -> torch.Tensor:
    dtype = data.draw(st.sampled_from(TORCH_DTYPES))
    block = (torch.arange(math.prod(shape)) % 100).to(dtype).reshape(shape)
    if dtype == torch.complex64 and data.draw(st.booleans()):
        block = block.conj()
        if data.draw(st.booleans()):
            return block.imag  # a real view with the negative bit
    return block


def _view(data: Any, value: Any) -> Any:
    is_numpy = isinstance(value, np.ndarray)
    for op in data.draw(st.lists(st.sampled_from(["slice", "T", "index", "broadcast", "overlap"]), max_size=3)):
        if value.ndim == 0:
            break
        axis = data.draw(st.integers(0, value.ndim - 1))
        size = value.shape[axis]
        if op == "slice" and size:
            lo = data.draw(st.integers(0, size))
            hi = data.draw(st.integers(lo, size))
            step = data.draw(st.sampled_from([1, 2, 3, -1, -2] if is_numpy else [1, 2, 3]))
            cut = slice(lo, hi, step) if step > 0 else slice(hi - 1 if hi else None, lo - 1 if lo else None, step)
            value = value[(slice(None),) * axis + (cut,)]
        elif op == "T":
            value = value.T if is_numpy else value.permute(*reversed(range(value.ndim)))
        elif op == "index" and value.ndim > 1 and value.shape[0]:
            value = value[data.draw(st.integers(0, value.shape[0] - 1))]
        elif op == "broadcast" and size:
            shape = list(value.shape)
            shape[axis] = data.draw(st.integers(0, 4))
            one = value[(slice(None),) * axis + (slice(0, 1),)]
            value = np.broadcast_to(one, shape) if is_numpy else one.expand(*shape)
        elif op == "overlap" and (value.size if is_numpy else value.numel()) > 1:
            flat: np.ndarray | torch.Tensor = (
                np.ascontiguousarray(value).reshape(-1) if is_numpy else value.contiguous().reshape(-1)
            )
            rows = data.draw(st.integers(1, len(flat) - 1))
            if isinstance(flat, np.ndarray):  # rows of two elements, each starting one element after the last
                value = np.lib.stride_tricks.as_strided(flat, shape=(rows, 2), strides=(flat.itemsize,) * 2)
            else:
                value = flat.as_strided((rows, 2), (1, 1))
    return value


def _same(sent: Any, got: Any) -> bool:
    if isinstance(sent, torch.Tensor):
        want = sent.resolve_conj().resolve_neg()
        return (
            isinstance(got, torch.Tensor)
            and (got.dtype, got.shape) == (want.dtype, want.shape)
            and torch.equal(got, want)
        )
    return (
        isinstance(got, np.ndarray) and (got.dtype, got.shape) == (sent.dtype, sent.shape) and np.array_equal(got, sent)
    )


def _copy(value: Any) -> Any:
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value.resolve_conj().resolve_neg().clone()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), mode=st.sampled_from(sorted(ENCODERS)), blob=st.booleans())
def test_random_views_arrive_as_their_values(data: Any, mode: str, blob: bool) -> None:
    sent: list[Any] = []
    for _ in range(data.draw(st.integers(1, 3))):
        shape = data.draw(st.lists(st.integers(0, 6), max_size=3))
        block = _numpy_block(data, shape) if data.draw(st.booleans()) else _torch_block(data, shape)
        sent += [_view(data, block) for _ in range(data.draw(st.integers(1, 3)))]
    before = [
        np.array(v, copy=True) if isinstance(v, np.ndarray) else v.resolve_conj().resolve_neg().clone() for v in sent
    ]
    frames: Sequence[Buffer] = ENCODERS[mode].encode(diffusion.Output(output=sent))
    if blob:
        frames = tw.split(bytearray(tw.join(frames)))
    got = DECODER.decode(frames).output
    assert len(got) == len(sent)
    for index, (one, back) in enumerate(zip(sent, got, strict=True)):
        assert _same(one, back), f"view {index}: {one!r} came back as {back!r}"
    assert all(_same(b, s) for b, s in zip(before, sent, strict=True))  # the sender's values are untouched


@pytest.mark.parametrize("mode", sorted(ENCODERS))
def test_the_views_the_properties_found_wrong(mode: str) -> None:
    """Fixed cases: a real view with the negative bit, an array cut at an odd byte, views of an
    ``as_strided`` block sent together."""
    raw = bytearray(40)
    cut = np.frombuffer(raw, np.uint8)[1:33].view(np.float32)
    cut[...] = np.arange(8)
    flat = np.arange(6, dtype=np.float32)
    strided = np.lib.stride_tricks.as_strided(flat[::-1], shape=(3, 2), strides=(-4, -4))
    sent = [torch.tensor([1 + 2j, 3 - 4j]).conj().imag, cut, cut[2:], strided, strided[1:]]
    got = DECODER.decode(ENCODERS[mode].encode(diffusion.Output(output=sent))).output
    assert all(_same(one, back) for one, back in zip(sent, got, strict=True))
