"""No pickle on the wire: every built-in type round-trips with pickling made impossible.

With ``pickle``'s and ``multiprocessing``'s picklers replaced by functions that fail, messages of
every built-in type go through the inline and shared-memory transports and come back equal; a
frame that carries a pickle is just bytes to the decoder (a ``DecodeError``, nothing unpickled).
"""

from __future__ import annotations

import pickle
from typing import Any

import msgspec
import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY
from tensorwire.builtins.golden import cases
from tests.wire_helpers import frame_of, head_of, same


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("pickle was used")


@pytest.fixture
def no_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    from multiprocessing.reduction import ForkingPickler

    for name in ("dumps", "loads", "dump", "load"):
        monkeypatch.setattr(pickle, name, _refuse)
    monkeypatch.setattr(pickle, "Unpickler", _refuse)
    monkeypatch.setattr(ForkingPickler, "dumps", _refuse)
    monkeypatch.setattr(ForkingPickler, "loads", _refuse)


def test_every_builtin_type_travels_without_pickle(no_pickle: None) -> None:
    shm = transports.ShmTransport()
    try:
        for transport in (None, shm):
            options = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor in a buffer
            encoder = tw.Encoder(transport=transport, options=options)
            decoder = tw.Decoder(REGISTRY, transports=[shm])
            for message in (build() for builders in cases().values() for _, build in builders):
                out = decoder.decode(encoder.encode(message))
                assert same(out, message), type(message).__name__
                del out
    finally:
        shm.close()


@pytest.mark.parametrize("code", [1, 3])  # where a tensor in a buffer / a tensor inside frame 0 goes
def test_a_pickle_in_a_frame_is_only_bytes(no_pickle: None, code: int) -> None:
    frames = tw.Encoder().encode(REGISTRY.type("diffusion.Output")(output=torch.ones(3)))
    head = head_of(frames[0])
    head[4]["output"] = msgspec.msgpack.Ext(code, b"\x80\x05K\x01.")  # a pickle where a tensor descriptor goes
    with pytest.raises(tw.DecodeError, match=r"tensor kind 128 is neither 0 \(tensor\) nor 1 \(ndarray\)"):
        tw.Decoder(REGISTRY).decode([frame_of(head), *frames[1:]])
