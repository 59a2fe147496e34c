"""Read-only memory never becomes a writable tensor, whatever ``copy_readonly`` says.

An in-process inline encode hands the receiver read-only views of the sender's tensors; a blob
received as ``bytes`` is immutable. With ``copy_readonly=False`` numpy arrays over such memory come
back read-only, and torch tensors (which cannot be read-only) are built on a private copy: writing
them changes neither the sender's tensor nor the bytes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion

SHARE = tw.Decoder(REGISTRY, options=tw.DecodeOptions(copy_readonly=False))
ENCODER = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0))  # every tensor in an inline frame


@pytest.mark.parametrize("form", ["frames", "bytes frames", "bytes blob"])
def test_torch_tensors_over_read_only_memory_are_copies(form: str) -> None:
    sent = torch.arange(16, dtype=torch.float32)
    frames = ENCODER.encode(diffusion.Output(output=(sent, np.arange(4))))
    if form == "bytes frames":
        frames = [bytes(memoryview(f)) for f in frames]
    blob = tw.join(frames)
    received = SHARE.decode(tw.split(blob) if form == "bytes blob" else frames).output
    tensor, array = received
    tensor.fill_(-1.0)  # writable, and private
    assert torch.equal(sent, torch.arange(16, dtype=torch.float32))
    assert tw.join(frames) == blob and SHARE.decode(tw.split(blob)).output[0][3] == 3.0
    assert not array.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        array[0] = 7


def test_numpy_arrays_over_writable_memory_are_shared_views() -> None:
    blob = bytearray(tw.join(ENCODER.encode(diffusion.Output(output=np.arange(4)))))
    array = SHARE.decode(tw.split(blob)).output
    assert array.flags.writeable
    array[0] = 9
    assert SHARE.decode(tw.split(blob)).output[0] == 9  # no copy where none is needed
