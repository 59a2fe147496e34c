"""The hooked msgspec codecs each call borrows: a nested or concurrent call gets its own, and none
keeps a call's tensors or frames once the call has returned."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
import torch

import tensorwire as tw
import tensorwire._body
import tensorwire._decoder
from tensorwire._incoming import Reading
from tensorwire._tensors import Outgoing
from tensorwire.builtins import REGISTRY, diffusion

ENCODER = tw.Encoder()
FRAMES = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0))  # tensors in frames of their own
DECODER = tw.Decoder(REGISTRY)


def _output(*values: float) -> diffusion.Output:
    return diffusion.Output(output=[torch.full((4,), v) for v in values])


@pytest.mark.parametrize("encoder", [ENCODER, FRAMES], ids=["inside frame 0", "own frames"])
def test_a_decode_nested_in_a_decode_gets_its_own_state(monkeypatch: pytest.MonkeyPatch, encoder: Any) -> None:
    outer, inner = encoder.encode(_output(1.0, 2.0)), encoder.encode(_output(7.0))
    nested: list[Any] = []
    ext = Reading.ext

    def ext_and_decode(self: Reading, code: int, data: memoryview) -> Any:
        if not nested:  # the first tensor of the outer decode: decode another message on the same decoder
            nested.append(None)
            nested[0] = decoder.decode(inner)
        return ext(self, code, data)

    monkeypatch.setattr(Reading, "ext", ext_and_decode)
    decoder = tw.Decoder(REGISTRY)  # its pooled readers are made from now on, with the patched hook
    got = decoder.decode(outer)
    assert [t.tolist() for t in got.output] == [[1.0] * 4, [2.0] * 4]
    assert [t.tolist() for t in nested[0].output] == [[7.0] * 4]


def test_an_encode_nested_in_an_encode_gets_its_own_state(monkeypatch: pytest.MonkeyPatch) -> None:
    nested: list[Any] = []
    tensor = Outgoing.tensor

    def tensor_and_encode(self: Outgoing, value: torch.Tensor) -> Any:
        if not nested:
            nested.append(None)
            nested[0] = ENCODER.encode(_output(7.0))
        return tensor(self, value)

    monkeypatch.setattr(Outgoing, "tensor", tensor_and_encode)
    frames = ENCODER.encode(_output(1.0, 2.0))
    monkeypatch.undo()
    assert [t.tolist() for t in DECODER.decode(frames).output] == [[1.0] * 4, [2.0] * 4]
    assert [t.tolist() for t in DECODER.decode(nested[0]).output] == [[7.0] * 4]


def test_threads_sharing_one_encoder_and_decoder_each_get_their_own_message() -> None:
    errors: list[str] = []

    def run(value: float) -> None:
        for _ in range(300):
            got = DECODER.decode(ENCODER.encode(_output(value, value + 0.5)))
            if [t[0].item() for t in got.output] != [value, value + 0.5]:
                errors.append(f"thread {value}: {[t[0].item() for t in got.output]}")

    threads = [threading.Thread(target=run, args=(float(i),)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_no_pooled_codec_keeps_a_call_s_tensors_or_frames() -> None:
    sent = torch.arange(6, dtype=torch.float32)
    sent_ref = weakref.ref(sent)
    frames = FRAMES.encode(diffusion.Output(output=[sent, sent[1:3]]))  # a shared storage: written twice
    got = DECODER.decode(frames).output
    got_ref, frame_ref = weakref.ref(got[0]), weakref.ref(frames[1])
    assert all(w.outgoing is None for w in tw._body._WRITERS)
    assert all(r.state is None for r in DECODER._free)
    del sent, frames, got
    gc.collect()
    assert sent_ref() is None and got_ref() is None and frame_ref() is None


def test_a_failed_decode_leaves_its_pooled_decoder_clean() -> None:
    frames = FRAMES.encode(_output(1.0))
    with pytest.raises(tw.DecodeError, match=r"inline buffer names frame 1; the message has 1 frames"):
        DECODER.decode(frames[:1])
    assert DECODER._free and all(r.state is None for r in DECODER._free)
    assert DECODER.decode(frames).output[0].tolist() == [1.0] * 4
