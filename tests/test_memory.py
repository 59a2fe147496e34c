"""Buffers over host memory at an address (``tensorwire._memory``), and the encoder's byte views of
host tensors made with them: each keeps what owns its memory alive."""

from __future__ import annotations

import ctypes
import gc
import weakref

import pytest
import torch

import tensorwire as tw
from tensorwire import _blocks
from tensorwire._memory import Chars
from tensorwire.builtins import REGISTRY, diffusion


class _Owner:
    """Owns a block of memory; counts nothing, only lives as long as something refers to it."""

    def __init__(self, size: int) -> None:
        self.block = ctypes.create_string_buffer(size)


def test_a_chars_keeps_the_types_of_its_first_sizes_only() -> None:
    chars = Chars(kept=2)
    eight = chars.type(8)
    assert ctypes.sizeof(eight) == 8 and eight._type_ is ctypes.c_char
    assert chars.type(8) is eight  # kept: the same type again
    assert ctypes.sizeof(chars.type(3)) == 3
    assert chars.type(5) is None and chars.view(0, 5, object()) is None  # past the two kept sizes
    assert sorted(chars.types) == [3, 8]


def test_a_view_is_the_memory_at_its_address_and_keeps_its_owner_alive() -> None:
    owner = _Owner(64)
    address = ctypes.addressof(owner.block)
    view = Chars().view(address + 16, 8, owner)
    assert view.base is owner and len(view) == 8
    data = memoryview(view).cast("B")
    assert not data.readonly and data.nbytes == 8
    data[:] = b"abcdefgh"  # written through the view, read from the owner's memory
    assert owner.block.raw[16:24] == b"abcdefgh"
    owner.block.raw = b"\x01" * 64
    assert bytes(data) == b"\x01" * 8
    gone = weakref.ref(owner)
    del owner, view
    gc.collect()
    assert gone() is not None  # the byte view keeps the buffer, which keeps its owner
    tensor = torch.frombuffer(data, dtype=torch.uint8)
    del data
    gc.collect()
    assert gone() is not None and tensor.tolist() == [1] * 8  # as does a tensor made on it
    del tensor
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("kept", [256, 0], ids=["ctypes view", "numpy view"])
def test_a_sent_buffer_outlives_the_tensor_it_views(monkeypatch: pytest.MonkeyPatch, kept: int) -> None:
    views = Chars(kept)
    monkeypatch.setattr(_blocks, "_VIEWS", views)
    tensor = torch.arange(100_000, dtype=torch.float32)
    storage = weakref.ref(tensor.untyped_storage())
    want = tensor.numpy().tobytes()
    frames = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0)).encode(diffusion.Output(output=tensor))
    assert len(frames) == 2 and memoryview(frames[1]).nbytes == len(want)
    assert sorted(views.types) == ([len(want)] if kept else [])  # the way it was viewed
    assert memoryview(frames[1]).cast("B").obj is not None
    del tensor
    gc.collect()
    junk = [torch.full((100_000,), 7.0) for _ in range(4)]  # memory a freed storage would be reused for
    assert bytes(frames[1]) == want and storage() is not None  # the frame keeps the tensor's memory
    out = tw.Decoder(REGISTRY).decode(frames).output
    assert out.numpy().tobytes() == want
    del frames, out, junk
    gc.collect()
    assert storage() is None  # let go of with the frames
