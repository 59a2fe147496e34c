"""Random damage to valid messages: decoding gives a message or a CodecError, never anything else.

Each example takes frames of a real message (tensors inside frame 0 and in inline frames, tree
tuples, aliasing views, bf16, numpy arrays, pool slots), damages frame 0 or the one-blob form
(flipped, set, inserted or deleted bytes, truncation) or forges a field of one tensor descriptor
(the ext(1) or ext(3) payload in the body), and decodes. The fast paths (all-leaf containers, the
lone-tensor builder, the depth pre-scan) must reject what the careful paths reject; no segment or
slot outlives the test.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire import transports
from tensorwire._wire import KINDS, unpack_descriptor
from tensorwire.builtins import REGISTRY, diffusion, rpc
from tensorwire.transports.base import Buffer
from tests.wire_helpers import damage, ext_data, head_of, segments_of

POOL = transports.ShmTransport()
_BEFORE: set[str] = set()
_INLINE = tw.Decoder(REGISTRY)
DECODERS = {"inline": _INLINE, "embedded": _INLINE, "pool": tw.Decoder(REGISTRY, transports=[POOL])}


def _messages() -> list[tuple[str, Any]]:
    """Each message twice: its tensors in inline frames (ext(1) descriptors), and the small ones
    inside frame 0 as the encoder sends them by default (ext(3))."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    messages = [
        rpc.Request(method="m", args=[1, (2.5, "x")], kwargs={"steps": 3, "t": (None, b"b")}),
        rpc.Request(method="m", kwargs={"latents": torch.randn(16, 16), "a": np.arange(5, dtype=np.int16)}),
        diffusion.Output(output=(base, base[1:, ::2], {"k": torch.ones(3, dtype=torch.bfloat16)})),
        diffusion.Output(output=[torch.zeros(0), np.ones((2, 3)), True], stage_durations={"a": 1.0}),
    ]
    return [(kind, message) for message in messages for kind in ("inline", "embedded")]


MESSAGES = _messages()
_ENCODERS = {
    "inline": tw.Encoder(options=tw.EncodeOptions(embed_threshold=0)),
    "embedded": tw.Encoder(),
    "pool": tw.Encoder(POOL, tw.EncodeOptions(inline_threshold=0, embed_threshold=0)),
}


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


def _decode(kind: str, frames: Sequence[Buffer]) -> None:
    try:
        message = DECODERS[kind].decode(frames)
    except tw.CodecError as exc:
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
    damaged: Sequence[Buffer]
    if blob:
        try:
            damaged = tw.split(bytearray(damage(tw.join(frames), edits, cut)))
        except tw.CodecError:
            return  # the blob's own framing rejected it
    else:
        damaged = [damage(bytes(frames[0]), edits, cut), *frames[1:]]
    _decode(kind, damaged)


class _Head(msgspec.Struct, array_like=True):
    tag: Any
    fingerprint: Any
    buffers: Any
    body: msgspec.Raw


_HEAD = msgspec.msgpack.Decoder(_Head)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(MESSAGES) - 1), edits=_EDITS)
def test_damaged_bodies_decode_or_raise_a_codec_error(which: int, edits: list[tuple[str, int, int]]) -> None:
    kind, message = MESSAGES[which]
    frames = _ENCODERS[kind].encode(message)
    head = bytes(frames[0])
    start = len(head) - len(_HEAD.decode(head).body)  # the body is frame 0's last item
    _decode(kind, [head[:start] + damage(head[start:], edits, None), *frames[1:]])


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


def _as_int(value: Any, names: tuple[str, ...] = ()) -> int:
    """A forged scalar field: an int as it is, a name by its code (255 if it has none)."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return names.index(value) if value in names else 255
    return len(value) if isinstance(value, list) else 0


def _as_dims(value: Any, rank: int) -> list[int] | None:
    """A forged shape or strides (None: no strides)."""
    if isinstance(value, list):
        return value
    if isinstance(value, int):
        return [value] * rank
    return None


def _forge(ext: msgspec.msgpack.Ext, field: str, value: Any) -> msgspec.msgpack.Ext:
    """``ext`` (a tensor extension) with descriptor field ``field`` set to ``value``, wrapped into the
    field's width (u8 codes, u32 buffer, u64 offset, nbytes and dims, i64 strides). A forged buffer
    or offset turns an inline tensor into one in buffer 0; a forged nbytes of an inline tensor
    resizes its bytes."""
    desc = unpack_descriptor(ext.code, ext_data(ext))
    fields: dict[str, Any] = {
        "kind": KINDS.index(desc.kind),
        "dtype": tw.DTYPE_NAMES.index(desc.dtype),
        "shape": list(desc.shape),
        "strides": None if desc.strides is None else list(desc.strides),
        "buffer": max(desc.buffer, 0),
        "offset": desc.offset if ext.code == 1 else 0,
        "nbytes": desc.nbytes,
    }
    data = ext_data(ext)[desc.offset :] if ext.code == 3 else b""
    code = ext.code
    if field in ("kind", "dtype"):
        fields[field] = _as_int(value, KINDS if field == "kind" else tw.DTYPE_NAMES)
    elif field == "shape":
        fields["shape"] = _as_dims(value, len(desc.shape)) or []
    elif field == "strides":
        fields["strides"] = _as_dims(value, len(desc.shape))
    elif field == "nbytes" and code == 3:
        size = _as_int(value) % 4096
        data = (data + bytes(size))[:size]
    else:
        fields[field] = _as_int(value)
        code = 1 if field in ("buffer", "offset") else code
    shape, strides = fields["shape"], fields["strides"]
    head = struct.pack("<BBBB", fields["kind"] & 0xFF, fields["dtype"] & 0xFF, len(shape) & 0xFF, strides is not None)
    if code == 1:
        head += struct.pack("<IQQ", fields["buffer"] % 2**32, fields["offset"] % 2**64, fields["nbytes"] % 2**64)
    dims = struct.pack(f"<{len(shape)}Q", *(n % 2**64 for n in shape))
    if strides is not None:
        dims += struct.pack(f"<{len(strides)}q", *((n + 2**63) % 2**64 - 2**63 for n in strides))
    return msgspec.msgpack.Ext(code, head + dims + (data if code == 3 else b""))


def _with_tensor(value: Any, index: int, change: Any, seen: list[int]) -> Any:
    """``value`` (a decoded body) with its tensor extension number ``index`` (body order, tree
    tuples entered) replaced by ``change(ext)``."""
    if isinstance(value, msgspec.msgpack.Ext):
        if value.code == 2:
            items = _with_tensor(msgspec.msgpack.decode(value.data), index, change, seen)
            return msgspec.msgpack.Ext(2, msgspec.msgpack.encode(items))
        seen[0] += 1
        return change(value) if seen[0] - 1 == index else value
    if isinstance(value, dict):
        return {k: _with_tensor(v, index, change, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_tensor(v, index, change, seen) for v in value]
    return value


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(MESSAGES) - 1), index=st.integers(0, 16), field=st.sampled_from(_FIELDS), value=_VALUES)
def test_forged_descriptors_are_rejected_or_stay_inside_their_buffers(
    which: int, index: int, field: str, value: Any
) -> None:
    kind, message = MESSAGES[which]
    frames = _ENCODERS[kind].encode(message)
    head = head_of(frames[0])
    count = [0]
    _with_tensor(head[4], -1, lambda ext: ext, count)
    if not count[0]:
        return
    head[4] = _with_tensor(head[4], index % count[0], lambda ext: _forge(ext, field, value), [0])
    _decode(kind, [msgspec.msgpack.encode(head), *frames[1:]])


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
    except tw.DecodeError as exc:
        assert "no longer in flight" in str(exc)
        return
    assert torch.equal(intact.output[1], torch.arange(32, dtype=torch.float32).reshape(4, 8)[:, 1:3])
    del intact
