"""Random damage to valid messages: decoding gives a message or a CodecError, never anything else.

Each example takes frames of a real message (inline tensors, tree tuples, aliasing views, bf16,
numpy arrays, pool slots), damages frame 0 or the one-blob form (flipped, set, inserted or deleted
bytes, truncation), and decodes. The fast paths (all-leaf containers, the lone-tensor builder,
the depth pre-scan) must reject what the careful paths reject; no segment or slot outlives the test.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_helpers import damage, segments_of

import codec
import transports
from codec.generated import REGISTRY, diffusion, rpc

POOL = transports.ShmTransport()
_BEFORE: set[str] = set()
DECODERS = {"inline": codec.Decoder(REGISTRY), "pool": codec.Decoder(REGISTRY, transports=[POOL])}


def _messages() -> list[tuple[str, Any]]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return [
        ("inline", rpc.Request(method="m", args=[1, (2.5, "x")], kwargs={"steps": 3, "t": (None, b"b")})),
        ("inline", rpc.Request(method="m", kwargs={"latents": torch.randn(16, 16), "a": np.arange(5, dtype=np.int16)})),
        ("inline", diffusion.Output(output=(base, base[1:, ::2], {"k": torch.ones(3, dtype=torch.bfloat16)}))),
        ("inline", diffusion.Output(output=[torch.zeros(0), np.ones((2, 3)), True], stage_durations={"a": 1.0})),
    ]


MESSAGES = _messages()
_ENCODERS = {"inline": codec.Encoder(), "pool": codec.Encoder(POOL, codec.EncodeOptions(inline_threshold=0))}


def setup_module() -> None:
    _BEFORE.update(segments_of(os.getpid()))  # what other modules keep is not this module's


def teardown_module() -> None:
    POOL.close()
    assert set(segments_of(os.getpid())) <= _BEFORE


_EDITS = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]), st.integers(0, 2**16), st.integers(0, 255)),
    min_size=1,
    max_size=4,
)


def _decode(kind: str, frames: list[Any]) -> None:
    try:
        message = DECODERS[kind].decode(frames)
    except codec.CodecError as exc:
        assert str(exc)  # a clear message, never an empty one
        return
    assert type(message).__tw_type__.type_id in {"rpc.Request", "diffusion.Output"}
    _touch(message)  # every element of every tensor it holds is readable
    del message  # a slot it borrowed goes back to the pool


def _touch(value: Any) -> None:
    if isinstance(value, msgspec.Struct):
        _touch(msgspec.structs.asdict(value))
    elif isinstance(value, torch.Tensor):
        value.clone()
    elif isinstance(value, np.ndarray):
        value.copy()
    elif isinstance(value, dict):
        for item in value.values():
            _touch(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _touch(item)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(MESSAGES) - 1), edits=_EDITS, cut=st.none() | st.integers(0, 400), blob=st.booleans())
def test_damaged_inline_messages_decode_or_raise_a_codec_error(
    which: int, edits: list[tuple[str, int, int]], cut: int | None, blob: bool
) -> None:
    kind, message = MESSAGES[which]
    frames = _ENCODERS[kind].encode(message)
    if blob:
        try:
            damaged = codec.split(bytearray(damage(codec.join(frames), edits, cut)))
        except codec.CodecError:
            return  # the blob's own framing rejected it
    else:
        damaged = [damage(bytes(frames[0]), edits, cut), *frames[1:]]
    _decode(kind, damaged)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(MESSAGES) - 1), edits=_EDITS)
def test_damaged_bodies_decode_or_raise_a_codec_error(which: int, edits: list[tuple[str, int, int]]) -> None:
    kind, message = MESSAGES[which]
    frames = _ENCODERS[kind].encode(message)
    head = bytes(frames[0])
    start = len(head) - len(_ENTRIES.decode(head)["body"])  # the body is frame 0's last entry
    _decode(kind, [head[:start] + damage(head[start:], edits, None), *frames[1:]])


_ENTRIES = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])
_FIELDS = ["kind", "dtype", "shape", "strides", "offset", "buffer", "nbytes"]
_EDGES = st.sampled_from(
    [0, 1, 2, 3, 4, 7, 8, 15, 16, 64, 255, 1024, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -1, -2]
)
_INTS = _EDGES | st.integers(-(2**63), 2**64 - 1) | st.integers(-8, 300)
_VALUES = st.one_of(
    _INTS,
    st.lists(_INTS, max_size=5),
    st.sampled_from(["tensor", "ndarray", "float32", "bfloat16", "complex128", "bool", "uint64", "float8_e5m2", "x"]),
    st.none(),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(MESSAGES) - 1), index=st.integers(0, 16), field=st.sampled_from(_FIELDS), value=_VALUES)
def test_forged_descriptors_are_rejected_or_stay_inside_their_buffers(
    which: int, index: int, field: str, value: Any
) -> None:
    kind, message = MESSAGES[which]
    frames = _ENCODERS[kind].encode(message)
    header = msgspec.msgpack.decode(frames[0])
    if not header["tensors"]:
        return
    desc = header["tensors"][index % len(header["tensors"])]
    desc[_FIELDS.index(field)] = value
    _decode(kind, [msgspec.msgpack.encode(header), *frames[1:]])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=_EDITS, cut=st.none() | st.integers(0, 400))
def test_damaged_pool_messages_decode_or_raise_and_leave_no_slot_behind(
    edits: list[tuple[str, int, int]], cut: int | None
) -> None:
    tensor = POOL.empty((4, 8), torch.float32)
    tensor.copy_(torch.arange(32, dtype=torch.float32).reshape(4, 8))
    frames = _ENCODERS["pool"].encode(diffusion.Output(output=[tensor, tensor[:, 1:3]]))
    del tensor
    _decode("pool", [damage(bytes(frames[0]), edits, cut), *frames[1:]])
    try:  # the intact message: still readable, unless the damaged one claimed its slot or gave it back
        intact = DECODERS["pool"].decode(frames)
    except codec.DecodeError as exc:
        assert "no longer in flight" in str(exc)
        return
    assert torch.equal(intact.output[1], torch.arange(32, dtype=torch.float32).reshape(4, 8)[:, 1:3])
    del intact
