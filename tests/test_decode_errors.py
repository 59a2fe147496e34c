"""Decoding verifies before it maps: every bad input is a DecodeError, nothing leaks, nothing foreign is touched."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch
from msgspec.msgpack import Ext

import tensorwire as tw
from tensorwire import transports
from tensorwire._wire import pack_inline, unpack_descriptor
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.dtypes import DTYPE_NAMES
from tensorwire.inspection import describe
from tensorwire.transports.shm import SHM_DIR
from tests.wire_helpers import edit_descriptor, ext_data, frame_of, head_of, segments_of, tensor_exts

SHM = transports.ShmTransport(pool=False)
ENCODER = tw.Encoder(transport=SHM, options=tw.EncodeOptions(inline_threshold=64, embed_threshold=0))
DECODER = tw.Decoder(REGISTRY, transports=[SHM])
INLINE = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0))  # every tensor in a frame of its own
EMBED = tw.Encoder()  # small tensors inside frame 0
FLOAT32 = DTYPE_NAMES.index("float32")
UINT8 = DTYPE_NAMES.index("uint8")
BFLOAT16 = DTYPE_NAMES.index("bfloat16")


@pytest.fixture(autouse=True)
def no_segments_left() -> Any:
    before = set(segments_of(os.getpid()))  # other modules may keep some (e.g. quarantined on purpose)
    yield
    assert set(segments_of(os.getpid())) <= before


def _message() -> Any:
    return diffusion.Output(
        output=(torch.arange(6, dtype=torch.float32).reshape(2, 3), {"k": torch.ones(2, dtype=torch.bfloat16)}),
        stage_durations={"a": 1.0},
    )


def _shm_handles(frames: list[Any]) -> list[dict[str, Any]]:
    """The shared memory handles of frame 0's buffer table, in buffer order."""
    return [entry[1] for entry in head_of(frames[0])[3] if entry[1]["transport"] == "shm"]


def _release_segments(frames: list[Any]) -> None:
    """Release the one-shot segments ``frames`` name, as their sender would."""
    for handle in _shm_handles(frames):
        SHM.release(msgspec.convert(handle, transports.ShmHandle))


def _with(frames: list[Any], change: Callable[[list[Any]], None]) -> list[Any]:
    """``frames`` with frame 0 (``[tag, fingerprint, data, buffers, body]``) changed by ``change``."""
    head = head_of(frames[0])
    change(head)
    return [frame_of(head), *frames[1:]]


def _map_tensors(value: Any, change: Callable[[int, Ext], Ext], count: list[int]) -> Any:
    """``value`` (a body) with each tensor extension replaced by ``change(body order index, ext)``."""
    if isinstance(value, Ext):
        if value.code == 2:  # a tuple: its items are inside
            items = _map_tensors(msgspec.msgpack.decode(value.data), change, count)
            return Ext(2, msgspec.msgpack.encode(items))
        if value.code in (1, 3):
            count[0] += 1
            return change(count[0] - 1, value)
        return value
    if isinstance(value, dict):
        return {key: _map_tensors(item, change, count) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_tensors(item, change, count) for item in value]
    return value


def _tensor(index: int, make: Callable[[Ext], Ext]) -> Callable[[list[Any]], None]:
    """A frame 0 change: tensor ``index`` (body order) becomes ``make(its extension)``."""

    def change(head: list[Any]) -> None:
        head[4] = _map_tensors(head[4], lambda i, ext: make(ext) if i == index else ext, [0])

    return change


def _desc(index: int = 0, **changes: Any) -> Callable[[list[Any]], None]:
    """A frame 0 change: fields of the descriptor of (buffer) tensor ``index`` replaced."""
    return _tensor(index, lambda ext: edit_descriptor(ext, **changes))


def _payload(index: int, make: Callable[[bytes], bytes], code: int | None = None) -> Callable[[list[Any]], None]:
    """A frame 0 change: the extension payload of tensor ``index`` becomes ``make(payload)``."""
    return _tensor(index, lambda ext: Ext(ext.code if code is None else code, make(ext_data(ext))))


def _inline(
    index: int = 0,
    kind: int = 0,
    dtype: int | None = None,
    shape: Any = None,
    strides: Any = None,
    cut: int = 0,
    at: int | None = None,
) -> Callable[[list[Any]], None]:
    """A frame 0 change: the inline (ext 3) tensor ``index`` rewritten with these fields, at offset
    ``at`` in frame 0's data (None: its own), claiming ``cut`` bytes fewer (more for a negative ``cut``)."""

    def make(ext: Ext) -> Ext:
        assert ext.code == 3
        desc = unpack_descriptor(3, ext_data(ext))
        code = DTYPE_NAMES.index(desc.dtype) if dtype is None else dtype
        return Ext(
            3,
            pack_inline(
                kind,
                code,
                desc.shape if shape is None else shape,
                desc.offset if at is None else at,
                desc.nbytes - cut,
                strides,
            ),
        )

    return _tensor(index, make)


def test_every_truncation_and_trailing_bytes_of_a_blob() -> None:
    for encoder in (INLINE, EMBED):
        blob = tw.join(encoder.encode(_message()))
        for cut in range(len(blob)):
            with pytest.raises(tw.DecodeError):
                DECODER.decode(tw.split(blob[:cut]))
        with pytest.raises(tw.DecodeError, match=r"blob has 3 trailing bytes after its last frame"):
            tw.split(blob + b"abc")
        assert DECODER.decode(tw.split(blob)).stage_durations == {"a": 1.0}


def test_a_blob_of_no_frames_or_a_frame_cut_short_is_a_decode_error_naming_it() -> None:
    for blob in (b"TWB1" + bytes(4), b"TWB1" + bytes(68)):
        with pytest.raises(tw.DecodeError, match=rf"^blob frame table \(0 frames\) does not fit in {len(blob)} bytes$"):
            tw.split(blob)
    blob = tw.join(INLINE.encode(_message()))
    with pytest.raises(
        tw.DecodeError, match=rf"^blob truncated: frame 2 needs 4 bytes at \d+, blob has {len(blob) - 1}$"
    ):
        tw.split(blob[:-1])


def test_join_refuses_no_frames_which_split_would_refuse() -> None:
    with pytest.raises(ValueError, match=r"^a blob holds at least one frame, got none$"):
        tw.join([])


def test_split_takes_at_most_max_frames() -> None:
    frames = INLINE.encode(_message())
    blob = tw.join(frames)
    assert [bytes(f) for f in tw.split(blob, max_frames=len(frames))] == [bytes(f) for f in frames]
    with pytest.raises(
        tw.DecodeError, match=rf"^blob of {len(frames)} frames is over the max_frames of {len(frames) - 1}$"
    ):
        tw.split(blob, max_frames=len(frames) - 1)


def test_split_takes_as_many_frames_as_the_default_limits_allow_unless_told_otherwise() -> None:
    """Each frame costs a view of ~25 times its 8 bytes in the frame table: by default ``split``
    takes frame 0 and as many buffers as the default ``Limits`` allow, before making any."""
    most = tw.Limits().max_buffers + 1
    blob = tw.join([b"x"] * most)
    assert len(tw.split(blob)) == most
    over = tw.join([b"x"] * (most + 1))
    with pytest.raises(tw.DecodeError, match=rf"^blob of {most + 1} frames is over the max_frames of {most}$"):
        tw.split(over)
    assert len(tw.split(over, max_frames=None)) == most + 1


def test_every_truncation_of_the_header_frame() -> None:
    for encoder in (INLINE, EMBED):
        frames = encoder.encode(_message())
        head = bytes(frames[0])
        for cut in range(len(head)):
            with pytest.raises(tw.DecodeError):
                DECODER.decode([head[:cut], *frames[1:]])
        with pytest.raises(tw.DecodeError, match=r"MessagePack data is malformed: trailing characters"):
            DECODER.decode([head + b"\x00", *frames[1:]])


def _set(index: int, value: Any) -> Callable[[list[Any]], None]:
    return lambda h: h.__setitem__(index, value)


def _body(field: str, value: Any) -> Callable[[list[Any]], None]:
    return lambda h: h[4].__setitem__(field, value)


def _entry(index: int, value: Any) -> Callable[[list[Any]], None]:
    """A frame 0 change: buffer table entry ``index`` replaced by ``value`` (given the old entry)."""
    return lambda h: h[3].__setitem__(index, value(h[3][index]) if callable(value) else value)


def _handle(index: int, key: str, value: Any) -> Callable[[list[Any]], None]:
    return lambda h: h[3][index][1].__setitem__(key, value)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            _set(0, "pickle:2:diffusion.Output:1"),
            r"not a tensorwire message: tag 'pickle:2:diffusion.Output:1' - at `\$\[0\]`",
        ),
        (
            _set(0, "tensorwire:3:diffusion.Output"),
            r"not a tensorwire message: tag 'tensorwire:3:diffusion.Output' - at `\$\[0\]`",
        ),
        (_set(0, 7), r"not a tensorwire message: tag 7 - at `\$\[0\]`"),
        (_set(0, [msgspec.msgpack.Ext(1, b"")]), r"not a tensorwire message: tag is a list, not a str - at `\$\[0\]`"),
        (_set(0, {"tag": 1}), r"not a tensorwire message: tag is a dict, not a str - at `\$\[0\]`"),
        (
            _set(0, "tensorwire:4:diffusion.Output:1"),
            r"wire format version 4 is not supported \(this reader: 3\) - at `\$\[0\]`",
        ),
        (
            _set(0, "tensorwire:3:evil.Type:1"),
            r"unknown type id 'evil.Type'; known types: diffusion.DpTagged, .* - at `\$\[0\]`",
        ),
        (
            _set(0, "tensorwire:3:diffusion.Output:9"),
            r"unknown version 9 of diffusion.Output; known versions: v1 - at `\$\[0\]`",
        ),
        (_set(1, 5), r"Expected `str`, got `int` - at `\$\[1\]`"),
        (lambda h: h.pop(), r"diffusion.Output v1: Expected `array` of at least length 5, got 4"),
        (_desc(dtype=200), r"^diffusion.Output v1: dtype code 200 is not in the wire dtype table"),
        (_desc(dtype=len(DTYPE_NAMES)), rf"dtype code {len(DTYPE_NAMES)} is not in the wire dtype table"),
        (_desc(1, kind=1), r"numpy has no dtype 'bfloat16' - at `\$.output\[1\].k.dtype`"),
        (_desc(kind=7), r"tensor kind 7 is neither 0 \(tensor\) nor 1 \(ndarray\)"),
        (
            _payload(0, lambda d: d[:2] + b"\x03" + d[3:]),  # rank 3, two dimensions
            r"tensor descriptor of 40 bytes, expected 48 for rank 3 and flags 0",
        ),
        (_payload(0, lambda d: d + b"\x00"), r"tensor descriptor of 41 bytes, expected 40 for rank 2"),
        (_payload(0, lambda d: d[:-1]), r"tensor descriptor of 39 bytes, expected 40 for rank 2"),
        (_payload(0, lambda d: d[:2]), r"tensor descriptor of 2 bytes is shorter than its 4-byte head"),
        (_desc(flags=4), r"tensor descriptor of 40 bytes, .*flags 4"),
        (
            _desc(shape=(2, 2**63)),
            r"dimension 9223372036854775808 is larger than the limit of \d+ - at `\$.output\[0\].shape\[1\]`",
        ),
        (
            _desc(shape=(2**20, 2**20)),
            r"1048576 makes the tensor larger than the limit of \d+ bytes - at `\$.output\[0\].shape\[1\]`",
        ),
        (_desc(nbytes=20), r"20 != prod\(shape\) \* itemsize = 24 - at `\$.output\[0\].nbytes`"),
        (_desc(strides=(3, 100)), r"outside the 24-byte buffer 0 - at `\$.output\[0\].strides`"),
        (
            _desc(strides=(-3, 1)),
            r"torch tensors have no negative strides, got -3 - at `\$.output\[0\].strides\[0\]`",
        ),
        (_desc(offset=4096), r"elements reach bytes \[4096, 4120\) outside the 24-byte buffer 0"),
        (_desc(offset=2), r"2 is not a multiple of the itemsize 4 - at `\$.output\[0\].offset`"),
        (
            _desc(dtype=UINT8, shape=(0,), nbytes=0, offset=25),  # an empty tensor starts in its buffer too
            r"25 is past the end of a 24-byte buffer - at `\$.output\[0\].offset`",
        ),
        (_desc(buffer=9), r"9 names no buffer \(the message has 2\) - at `\$.output\[0\].buffer`"),
        (_desc(shape=(1,) * 9, nbytes=4), r"rank 9 is over the limit of 8 - at `\$.output\[0\].shape`"),
        (_desc(shape=(1,) * 40, nbytes=4), r"rank 40 is over the limit of 8 - at `\$.output\[0\].shape`"),
        (_body("output", Ext(5, b"")), r"unknown msgpack extension type 5"),
        (_body("chunk_index", -1), r"Expected `int` >= 0 - at `\$.chunk_index`"),
        (
            lambda h: h[4].__setitem__("stage_durations", tensor_exts(h[4])[0]),
            r"Expected `object`, got `ext` - at `\$.stage_durations`",
        ),
        (_entry(0, lambda e: [100, e[1]]), r"frame 1 holds 24 bytes, its buffer entry says 100"),
        (
            _entry(0, lambda e: [-1, e[1]]),
            r"invalid buffer table: Expected `int` >= 0 - at `\$.buffers\[0\]\[0\]`",
        ),
        (_handle(0, "frame", 7), r"inline buffer names frame 7; the message has 3 frames"),
        (_handle(1, "frame", 1), r"frame 1 is named by two buffers"),
        (
            _handle(0, "transport", "pipe"),
            r"buffer 0 travels by pipe, a transport this decoder does not have \(it has: inline, shm, shm-slot\)"
            r" - at `\$.buffers\[0\]\[1\].transport`",
        ),
        (
            _handle(1, "transport", "p\x1b[2J\n"),  # a peer's name, shown escaped
            r"buffer 1 travels by p\\x1b\[2J\\n, a transport this decoder does not have"
            r" \(it has: inline, shm, shm-slot\) - at `\$.buffers\[1\]\[1\].transport`",
        ),
        (
            _handle(0, "transport", 5),
            r"invalid buffer table: Expected `str`, got `int` - at `\$.buffers\[0\]\[1\].transport`",
        ),
        (  # a bare handle where an [nbytes, handle] pair belongs
            _entry(0, lambda e: e[1]),
            r"invalid buffer table: Expected `array`, got `object` - at `\$.buffers\[0\]`",
        ),
        (
            _entry(0, lambda e: [e[0]]),
            r"invalid buffer table: Expected `array` of length 2, got 1 - at `\$.buffers\[0\]`",
        ),
        (
            _entry(1, lambda e: [*e, 0]),
            r"invalid buffer table: Expected `array` of length 2, got 3 - at `\$.buffers\[1\]`",
        ),
        (_set(3, {}), r"invalid buffer table: Expected `array`, got `object` - at `\$.buffers`"),
        (_set(2, {}), r"Expected `bytes`, got `object` - at `\$.data`"),
        (_set(2, "x"), r"Expected `bytes`, got `str` - at `\$.data`"),
    ],
)
def test_bad_headers(change: Callable[[list[Any]], None], error: str) -> None:
    frames = INLINE.encode(_message())
    with pytest.raises(tw.DecodeError, match=error):
        DECODER.decode(_with(frames, change))


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (_inline(cut=4), r"20 != prod\(shape\) \* itemsize = 24 - at `\$.output\[0\].nbytes`"),
        (_inline(cut=24), r"0 != prod\(shape\) \* itemsize = 24 - at `\$.output\[0\].nbytes`"),
        (_inline(cut=-4), r"28 != prod\(shape\) \* itemsize = 24 - at `\$.output\[0\].nbytes`"),
        (_inline(1, cut=1), r"3 != prod\(shape\) \* itemsize = 4 - at `\$.output\[1\].k.nbytes`"),
        (
            _inline(strides=(1, 2)),  # a transpose's strides over C-contiguous bytes
            r"1 is not the stride of a contiguous tensor - at `\$.output\[0\].strides\[0\]`",
        ),
        (
            _inline(strides=(3, 2)),
            r"2 is not the stride of a contiguous tensor - at `\$.output\[0\].strides\[1\]`",
        ),
        (
            _inline(shape=(2, 1, 3), strides=(3, 2**40, 1)),  # a size-1 dim may carry any stride, within bounds
            r"1099511627776 is out of range - at `\$.output\[0\].strides\[1\]`",
        ),
        (_inline(dtype=250), r"dtype code 250 is not in the wire dtype table"),
        (_inline(kind=9), r"tensor kind 9 is neither 0 \(tensor\) nor 1 \(ndarray\)"),
        (_inline(1, kind=1), r"numpy has no dtype 'bfloat16' - at `\$.output\[1\].k.dtype`"),
        (_inline(shape=(1,) * 9), r"rank 9 is over the limit of 8 - at `\$.output\[0\].shape`"),
        (_inline(shape=(1,) * 40), r"rank 40 is over the limit of 8 - at `\$.output\[0\].shape`"),
        (_inline(shape=(2**63,)), r"dimension 9223372036854775808 is larger than the limit"),
        (
            _payload(0, lambda d: d[:2] + b"\x02\x02" + d[4:]),  # the shared flag has no meaning inline
            r"inline tensor with flags 2: inside frame 0 only flag 1 \(strided\) is defined",
        ),
        (_payload(0, lambda d: d[:10]), r"inline tensor descriptor of 10 bytes, expected 36 for rank 2 and flags 0"),
        (_payload(0, lambda d: d + b"\x00"), r"inline tensor descriptor of 37 bytes, expected 36 for rank 2"),
        (_inline(at=8), r"bytes \[8, 32\) are outside frame 0's 28 bytes of data - at `\$.output\[0\].offset`"),
        (_inline(1, at=25), r"bytes \[25, 29\) are outside frame 0's 28 bytes of data - at `\$.output\[1\].k.offset`"),
        (_inline(at=2**64 - 1), r"bytes \[18446744073709551615, 18446744073709551639\) are outside"),
        (  # one byte past the data, a dtype the common small-tensor path builds
            _inline(at=5),
            r"bytes \[5, 29\) are outside frame 0's 28 bytes of data - at `\$.output\[0\].offset`",
        ),
        (  # a size-1 dim may carry another stride, but not a negative one for torch
            _inline(shape=(2, 1, 3), strides=(3, -1, 1)),
            r"torch tensors have no negative strides, got -1 - at `\$.output\[0\].strides\[1\]`",
        ),
        (_payload(0, lambda d: d[:3]), r"tensor descriptor of 3 bytes is shorter than its 4-byte head"),
        (
            _payload(0, lambda d: d, code=1),  # an inline payload read as a buffer descriptor
            r"tensor descriptor of 36 bytes, expected 40 for rank 2 and flags 0",
        ),
    ],
)
def test_bad_inline_tensors(change: Callable[[list[Any]], None], error: str) -> None:
    frames = EMBED.encode(_message())
    assert len(frames) == 1 and [e.code for e in tensor_exts(head_of(frames[0])[4])] == [3, 3]
    with pytest.raises(tw.DecodeError, match=error):
        DECODER.decode(_with(frames, change))
    assert DECODER.decode(_with(frames, _inline(strides=(3, 1)))).output[0].stride() == (3, 1)  # the control


@pytest.mark.parametrize("copies", [2, 5000])
def test_tensors_inside_frame_0_read_each_byte_of_its_data_at_most_once(copies: int) -> None:
    """Descriptors that all name one range of frame 0's data would each get a private copy of it:
    what they read together is bounded by the data's size, so a small frame cannot ask for more."""
    frames = EMBED.encode(diffusion.Output(output=[torch.arange(6.0)]))
    head = head_of(frames[0])
    (ext,) = tensor_exts(head[4])
    head[4]["output"] = [ext] * copies
    error = r"^diffusion.Output v1: the tensors inside frame 0 read 48 bytes of its 24 bytes of data"
    with pytest.raises(tw.DecodeError, match=error + r" \(each byte may be read once\) - at `\$.output\[1\].nbytes`$"):
        DECODER.decode([frame_of(head)])
    placed = tw.Decoder(REGISTRY, device="cpu")  # the other path that builds tensors inside frame 0
    with pytest.raises(tw.DecodeError, match=error):
        placed.decode([frame_of(head)])
    head[4]["output"] = [ext]
    assert torch.equal(DECODER.decode([frame_of(head)]).output[0], torch.arange(6.0))  # the control


def test_an_inline_tensor_shorter_than_its_shape_is_a_decode_error_naming_nbytes() -> None:
    for value, path in ((torch.arange(12, dtype=torch.int16), "$.output"), (np.arange(3.0), "$.output")):
        frames = EMBED.encode(diffusion.Output(output=value))
        (ext,) = tensor_exts(head_of(frames[0])[4])
        desc = unpack_descriptor(3, ext_data(ext))
        for cut in (1, desc.nbytes // 2, desc.nbytes):
            forged = _with(frames, _inline(cut=cut))
            with pytest.raises(tw.DecodeError) as info:
                DECODER.decode(forged)
            assert str(info.value) == (
                f"diffusion.Output v1: {desc.nbytes - cut} != prod(shape) * itemsize = {desc.nbytes} "
                f"- at `{path}.nbytes`"
            )


def test_a_wire_1_frame_0_names_its_version_and_the_supported_one() -> None:
    """What a wire-1 writer sent: frame 0 a map naming its version, tensors in a separate table."""
    wire_1 = {
        "magic": "tensorwire",
        "wire": 1,
        "type": "diffusion.Output",
        "version": 1,
        "fingerprint": diffusion.Output.__tw_type__.fingerprint,
        "buffers": [{"nbytes": 24, "handle": {"transport": "inline", "frame": 1}}],
        "tensors": [["tensor", "float32", [2, 3], [3, 1], 0, 0, 24]],
        "body": {"kind": "diffusion.Output", "output": Ext(1, b"\x00\x00\x00\x00")},
    }
    frames = [msgspec.msgpack.encode(wire_1), bytes(24)]
    error = r"^wire format version 1 is not supported \(this reader: 3\) - at `\$.wire`$"
    with pytest.raises(tw.DecodeError, match=error):
        DECODER.decode(frames)
    with pytest.raises(tw.DecodeError, match=error):
        DECODER.decode(tw.split(tw.join(frames)))
    with pytest.raises(tw.DecodeError, match=r"wire format version 1 is not supported \(this reader: 3\)"):
        describe(frames[0])
    with pytest.raises(tw.DecodeError, match=r"^invalid header: frame 0 is not a msgpack array"):
        DECODER.decode([msgspec.msgpack.encode({"type": "diffusion.Output"})])  # a map, but not ours


def test_a_wire_2_frame_0_names_its_version_and_the_supported_one() -> None:
    """What a wire-2 writer sent: ``[tag, fingerprint, buffers, body]``, a small tensor's bytes
    inside its ``ext(3)`` payload."""
    payload = b"\x00\x0b\x01\x00" + (2).to_bytes(8, "little") + bytes(8)  # a float32 tensor of shape [2]
    wire_2 = [
        "tensorwire:2:diffusion.Output:1",
        diffusion.Output.__tw_type__.fingerprint,
        [],
        {"kind": "diffusion.Output", "output": Ext(3, payload)},
    ]
    frame = msgspec.msgpack.encode(wire_2)
    error = r"^wire format version 2 is not supported \(this reader: 3\) - at `\$\[0\]`$"
    for frames in ([frame], tw.split(tw.join([frame]))):
        with pytest.raises(tw.DecodeError, match=error) as info:
            DECODER.decode(frames)
        assert info.value.path == "$[0]" and info.value.type_id is None
    with pytest.raises(tw.DecodeError, match=error):
        describe(frame)


def test_limits_are_enforced_on_decode() -> None:
    buffered, embedded = INLINE.encode(_message()), EMBED.encode(_message())
    assert len(buffered) == 3 and len(embedded) == 1
    both = [buffered, embedded]
    strict = [
        (tw.Limits(max_tensors=1), r"more than 1 tensors in one message \(limit max_tensors\)", both),
        (tw.Limits(max_buffers=1), r"2 buffers is over the limit of 1 - at `\$.buffers`", [buffered]),
        (tw.Limits(max_message_bytes=10), r"28 buffer bytes is over the limit of 10 - at `\$.buffers`", [buffered]),
        (tw.Limits(max_header_bytes=10), r"header frame of \d+ bytes is over the limit of 10", both),
        (
            tw.Limits(max_tensor_bytes=8),
            r"3 makes the tensor larger than the limit of 8 bytes - at `\$.output\[0\].shape\[1\]`",
            both,
        ),
        (tw.Limits(max_rank=1), r"rank 2 is over the limit of 1 - at `\$.output\[0\].shape`", both),
    ]
    for limits, error, cases in strict:
        decoder = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=limits))
        for frames in cases:
            with pytest.raises(tw.DecodeError, match=error):
                decoder.decode(frames)
    assert tw.Limits().max_tensors == 65536


def test_limits_hold_at_their_boundary() -> None:
    """A limit equal to what the message needs lets it through; one less refuses it."""
    buffered, embedded = INLINE.encode(_message()), EMBED.encode(_message())
    cases = [
        (
            "max_message_bytes",
            28,
            r"^diffusion.Output v1: 28 buffer bytes is over the limit of 27 - at `\$.buffers`$",
            [buffered],
        ),
        (
            "max_tensor_bytes",
            24,
            r"^diffusion.Output v1: 3 makes the tensor larger than the limit of 23 bytes "
            r"- at `\$.output\[0\].shape\[1\]`$",
            [buffered, embedded],
        ),
    ]
    for name, needed, error, messages in cases:
        at_limit = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(**{name: needed})))
        under = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(**{name: needed - 1})))
        for frames in messages:
            assert at_limit.decode(frames).stage_durations == {"a": 1.0}
            with pytest.raises(tw.DecodeError, match=error):
                under.decode(frames)


def test_tensors_inside_frame_0_may_read_all_of_its_data_once_and_not_a_byte_more() -> None:
    frames = EMBED.encode(diffusion.Output(output=[torch.arange(24, dtype=torch.uint8)]))
    head = head_of(frames[0])
    (ext,) = tensor_exts(head[4])
    assert len(head[2]) == 24
    head[4]["output"] = [ext, Ext(3, pack_inline(0, UINT8, (1,), 0, 1))]  # one byte of it again
    with pytest.raises(
        tw.DecodeError,
        match=r"^diffusion.Output v1: the tensors inside frame 0 read 25 bytes of its 24 bytes of data "
        r"\(each byte may be read once\) - at `\$.output\[1\].nbytes`$",
    ):
        DECODER.decode([frame_of(head)])
    halves = [Ext(3, pack_inline(0, UINT8, (12,), at, 12)) for at in (0, 12)]
    head[4]["output"] = halves  # every byte once: the control
    out = DECODER.decode([frame_of(head)]).output
    assert torch.equal(torch.cat(out), torch.arange(24, dtype=torch.uint8))


@pytest.mark.parametrize(
    "output",
    [
        [1.0],  # a frame 0 under 512 bytes
        ["x" * 800],  # 512-2,048 bytes, no data
        [torch.arange(250, dtype=torch.float32)],  # 512-2,048 bytes, most of it data
        ["x" * 5000],  # over 2,048 bytes
    ],
    ids=["small", "mid, no data", "mid, data", "large"],
)
def test_the_header_limit_holds_at_every_size_of_frame_0(output: Any) -> None:
    (head,) = EMBED.encode(diffusion.Output(output=output))
    for frame in (head, memoryview(head), bytearray(head)):
        at_limit = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(max_header_bytes=len(head))))
        assert _same(at_limit.decode([frame]).output, output)
        under = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(max_header_bytes=len(head) - 1)))
        error = rf"^header frame of {len(head)} bytes is over the limit of {len(head) - 1}$"
        with pytest.raises(tw.DecodeError, match=error):
            under.decode([frame])


@pytest.mark.parametrize("given", ["bytes", "bytearray", "an int"])
def test_one_buffer_given_for_the_list_of_frames_is_told_so(given: str) -> None:
    """``decode(frame)`` instead of ``decode([frame])``: frame 0 would be the buffer's first byte."""
    (head,) = EMBED.encode(diffusion.Output(output=["x"]))
    frames: Any = {"bytes": head, "bytearray": bytearray(head), "an int": [head[0]]}[given]
    with pytest.raises(tw.DecodeError) as info:
        DECODER.decode(frames)
    assert info.value.message == (
        "invalid header: frame 0 is an int, not a buffer (decode takes a sequence of frames, "
        "as Encoder.encode returns them or tw.split(blob) gives them, not one buffer)"
    )
    assert (info.value.path, info.value.type_id) == (None, None)


@pytest.mark.parametrize("size", [300, 1000, 5000], ids=["small", "mid", "large"])
def test_a_frame_0_that_is_not_one_run_of_bytes_is_an_invalid_header(size: int) -> None:
    """Not a buffer, or a view with gaps: a decode error before anything reads it. A C-contiguous
    buffer of another shape decodes as its bytes."""
    (head,) = EMBED.encode(diffusion.Output(output=["x" * size]))
    with pytest.raises(
        tw.DecodeError, match=r"^invalid header: memoryview: a bytes-like object is required, not 'str'$"
    ):
        DECODER.decode(["x" * size])
    gapped = memoryview(bytearray(2 * len(head)))[::2]
    gapped[:] = head  # the frame's bytes, every other byte of the array
    with pytest.raises(tw.DecodeError, match=r"^invalid header: memoryview: casts are restricted to C-contiguous"):
        DECODER.decode([gapped])
    two_d = np.frombuffer(head, dtype=np.uint8).reshape(1, len(head))
    assert DECODER.decode([two_d]).output == ["x" * size]


def _released(data: bytes) -> memoryview:
    view = memoryview(bytearray(data))
    view.release()
    return view


def _gapped(data: bytes) -> memoryview:
    view = memoryview(bytearray(2 * len(data)))[::2]
    view[:] = data  # the bytes, every other byte of the array
    return view


def test_a_released_frame_0_is_an_invalid_header() -> None:
    (head,) = EMBED.encode(diffusion.Output(output=["x"]))
    with pytest.raises(tw.DecodeError, match=r"^invalid header: operation forbidden on released memoryview object$"):
        DECODER.decode([_released(bytes(head))])


@pytest.mark.parametrize("given", ["a set", "an iterator", "a generator"])
def test_frames_that_are_not_a_sequence_are_told_so(given: str) -> None:
    (head,) = EMBED.encode(diffusion.Output(output=["x"]))
    frames: Any = {"a set": {head}, "an iterator": iter([head]), "a generator": (f for f in [head])}[given]
    kind = type(frames).__name__
    with pytest.raises(tw.DecodeError) as info:
        DECODER.decode(frames)
    assert info.value.message == (f"frames must be a sequence of buffers (as Encoder.encode returns them), got {kind}")


@pytest.mark.parametrize("given", ["gapped", "Fortran order", "released", "a tensor"])
@pytest.mark.parametrize("named", [True, False], ids=["named by a tensor", "named by no tensor"])
def test_a_buffer_frame_that_is_not_one_run_of_bytes_is_a_decode_error(given: str, named: bool) -> None:
    """Frame 1 given as something other than one run of bytes: the decode refuses it, naming the
    frame, whether a tensor reads it or only the buffer table names it."""
    frames = INLINE.encode(diffusion.Output(output=[torch.arange(4096, dtype=torch.float32)]))
    data = bytes(frames[1])
    if not named:  # the table still names frame 1; the body holds no tensor
        head = msgspec.msgpack.decode(frames[0])
        head[4]["output"] = ["x"]
        frames = [msgspec.msgpack.encode(head), frames[1]]
    fortran = np.asfortranarray(np.frombuffer(data, np.uint8).reshape(8, -1)).data
    frame: Any = {
        "gapped": _gapped(data),
        "Fortran order": fortran,
        "released": _released(data),
        "a tensor": torch.frombuffer(bytearray(data), dtype=torch.uint8),
    }[given]
    problem = {
        "gapped": "memoryview: casts are restricted to C-contiguous views",
        "Fortran order": "memoryview: casts are restricted to C-contiguous views",
        "released": "operation forbidden on released memoryview object",
        "a tensor": "memoryview: a bytes-like object is required, not 'Tensor'",
    }[given]
    with pytest.raises(tw.DecodeError) as info:
        DECODER.decode([frames[0], frame])
    assert info.value.message == f"frame 1 is not a contiguous buffer: {problem}"
    assert (info.value.type_id, info.value.version) == ("diffusion.Output", 1)
    sent = [torch.arange(4096, dtype=torch.float32)] if named else ["x"]
    assert _same(DECODER.decode([frames[0], data]).output, sent)  # the same bytes as one run decode


@pytest.mark.parametrize("given", ["gapped", "released"])
def test_a_blob_that_is_not_one_run_of_bytes_is_a_decode_error(given: str) -> None:
    blob = tw.join(EMBED.encode(_message()))
    problem = {
        "gapped": "memoryview: casts are restricted to C-contiguous views",
        "released": "operation forbidden on released memoryview object",
    }[given]
    with pytest.raises(tw.DecodeError, match=rf"^blob is not a contiguous buffer: {problem}$"):
        tw.split(_gapped(blob) if given == "gapped" else _released(blob))
    assert DECODER.decode(tw.split(blob)).stage_durations == {"a": 1.0}


def _same(got: Any, sent: Any) -> bool:
    return len(got) == len(sent) and all(
        torch.equal(g, s) if isinstance(s, torch.Tensor) else g == s for g, s in zip(got, sent, strict=True)
    )


def test_5000_small_tensors_in_one_message_decode_from_one_frame() -> None:
    floats = [torch.full((3,), float(i)) for i in range(4000)]
    ints = [np.full(2, i, np.int16) for i in range(1000)]
    tensors = [*floats, *ints]
    frames = EMBED.encode(diffusion.Output(output=tensors))
    assert len(frames) == 1 and head_of(frames[0])[3] == []
    out = DECODER.decode(frames).output
    assert len(out) == 5000
    assert all(torch.equal(got, sent) for got, sent in zip(out[:4000], floats, strict=True))
    assert all(np.array_equal(got, sent) for got, sent in zip(out[4000:], ints, strict=True))
    few = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(max_tensors=4999)))
    with pytest.raises(tw.DecodeError, match=r"more than 4999 tensors in one message \(limit max_tensors\)"):
        few.decode(frames)


def test_frames_must_match_the_header() -> None:
    with pytest.raises(tw.DecodeError, match=r"no frames"):
        DECODER.decode([])
    frames = INLINE.encode(_message())
    with pytest.raises(tw.DecodeError, match=r"the message has 4 frames but its header names 2 inline buffers"):
        DECODER.decode([*frames, b"extra"])
    with pytest.raises(tw.DecodeError, match=r"inline buffer names frame 2; the message has 2 frames"):
        DECODER.decode(frames[:2])
    frames = EMBED.encode(_message())
    with pytest.raises(tw.DecodeError, match=r"the message has 2 frames but its header names 0 inline buffers"):
        DECODER.decode([*frames, b"extra"])


def test_a_message_of_one_buffer_must_match_its_header_too() -> None:
    frames = INLINE.encode(diffusion.Output(output=torch.ones(3)))  # one inline buffer
    assert len(frames) == 2
    with pytest.raises(tw.DecodeError, match=r"the message has 3 frames but its header names 1 inline buffers"):
        DECODER.decode([*frames, b"extra"])
    with pytest.raises(tw.DecodeError, match=r"inline buffer names frame 1; the message has 1 frames"):
        DECODER.decode(frames[:1])
    shared = tw.Encoder(transport=SHM, options=tw.EncodeOptions(inline_threshold=0, embed_threshold=0))
    frames = shared.encode(diffusion.Output(output=torch.ones(3)))  # one shared-memory segment
    assert len(frames) == 1
    with pytest.raises(tw.DecodeError, match=r"the message has 2 frames but its header names 0 inline buffers"):
        DECODER.decode([*frames, b"extra"])
    assert torch.equal(DECODER.decode(frames).output, torch.ones(3))  # the refusal claimed nothing


def test_a_tensor_descriptor_in_a_message_without_buffers_is_rejected() -> None:
    frames = EMBED.encode(diffusion.Output(output=[1, 2]))
    descriptor = Ext(1, tw._wire.pack_descriptor(0, FLOAT32, (2,), None, 0, 0, 8))
    forged = _with(frames, _body("output", descriptor))
    with pytest.raises(tw.DecodeError, match=r"0 names no buffer \(the message has 0\) - at `\$.output.buffer`"):
        DECODER.decode(forged)


def _deep_header(levels: int, body: bytes | None = None) -> bytes:
    head = head_of(EMBED.encode(diffusion.Output())[0])
    head[4] = msgspec.Raw(b"\x81\xa6output" + b"\x91" * levels + b"\x01") if body is None else msgspec.Raw(body)
    return frame_of(head)


def test_nesting_deeper_than_the_limit_is_rejected_without_recursion() -> None:
    """The error names the type frame 0's tag names (read alone, not past it) and the path of the
    first value past the limit, as the encoder does (a tree tuple's items are ``[i]``)."""
    results: list[Any] = []

    def decode_all() -> None:
        for levels in (100, 5000, 200_000):
            try:
                DECODER.decode([_deep_header(levels)])
                results.append("decoded")
            except tw.DecodeError as exc:
                results.append((exc.message, exc.path, exc.type_id, exc.version))
        tuple_chain = msgspec.msgpack.encode(None)
        for _ in range(500):
            tuple_chain = msgspec.msgpack.encode(Ext(2, msgspec.msgpack.encode([msgspec.Raw(tuple_chain)])))
        try:
            DECODER.decode([_deep_header(0, b"\x81\xa6output" + tuple_chain)])
            results.append("decoded")
        except tw.DecodeError as exc:
            results.append((exc.message, exc.path, exc.type_id, exc.version))

    threading.stack_size(256 * 1024)  # a small stack: recursion this deep would crash the process
    try:
        worker = threading.Thread(target=decode_all)
        worker.start()
        worker.join()
    finally:
        threading.stack_size(0)
    expected = ("nesting deeper than the limit of 64", "$.output" + "[0]" * 64, "diffusion.Output", 1)
    assert results == [expected] * 4


def test_a_tree_at_the_depth_limit_decodes_and_one_level_more_does_not() -> None:
    value = DECODER.decode([_deep_header(64)]).output
    for _ in range(64):
        value = value[0]
    assert value == 1
    with pytest.raises(tw.DecodeError, match=r"nesting deeper than the limit"):
        DECODER.decode([_deep_header(65)])


def _deep_registry(root: Path) -> tw.Registry:
    """``t.L``: fields nesting 70 levels of arrays (``x``), of maps (``m``) and, under a list of
    structs (``t.LItem``), of arrays (``s``); ``t.C``, the same as a closed type (unknown fields
    refused; ``t.CItem``)."""
    from tests.conftest import write_schemas

    arrays: dict[str, Any] = {"type": "integer"}
    maps: dict[str, Any] = {"type": "integer"}
    for _ in range(70):
        arrays = {"type": "array", "items": arrays}
        maps = {"type": "object", "additionalProperties": maps}
    item = {"type": "object", "properties": {"v": {**arrays, "default": []}}}
    fields = {
        "x": {**arrays, "default": []},
        "m": {**maps, "default": {}},
    }

    def schema(type_id: str, closed: bool) -> dict[str, Any]:
        closing = {"additionalProperties": False} if closed else {}
        name = type_id[2:] + "Item"
        properties = {**fields, "s": {"type": "array", "items": {"$ref": f"#/$defs/{name}"}, "default": []}}
        defs = {name: {**item, **closing}}
        return {"$id": type_id, "x-version": 1, "type": "object", "properties": properties, "$defs": defs, **closing}

    files = {"t/L.v1.json": schema("t.L", False), "t/C.v1.json": schema("t.C", True)}
    return tw.load_schemas(write_schemas(root, files))


def _lists(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _dicts(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize("type_id", ["t.L", "t.C"])
@pytest.mark.parametrize("field", ["x", "m", "s"])
@pytest.mark.parametrize("pad", [0, 3000])  # a frame 0 read by the count, and one walked
def test_a_frame_nested_past_the_limit_is_refused_as_the_encoder_refuses_it(
    tmp_path: Path, type_id: str, field: str, pad: int
) -> None:
    """The decoder's refusal names the type, the version and the path of the first value past the
    limit, with the encoder's words: for a typed field of arrays, of maps, under a list of structs,
    of an open type and a closed one (read by the shorter path when within the limit)."""
    registry = _deep_registry(tmp_path)
    cls, item = registry.type(type_id), registry.type(f"{type_id}Item")
    values = {"x": _lists(65), "m": _dicts(65), "s": [item(), item(v=_lists(63))]}
    padding: dict[str, Any] = {"x": [[] for _ in range(pad)]}  # shallow values that make frame 0 large
    if field == "x":
        padding = {"m": {f"k{i}": {} for i in range(pad)}}
    message = cls(**{field: values[field]}, **padding)
    with pytest.raises(tw.EncodeError) as sent:
        tw.Encoder().encode(message)
    roomy = tw.Encoder(options=tw.EncodeOptions(limits=tw.Limits(max_depth=70)))
    frames = roomy.encode(message)
    assert (len(frames[0]) > 2048) == (pad > 0)
    with pytest.raises(tw.DecodeError) as read:
        tw.Decoder(registry).decode(frames)
    expected = {"x": "$.x" + "[0]" * 64, "m": "$.m" + ".k" * 64, "s": "$.s[1].v" + "[0]" * 62}
    refused = read.value
    assert (refused.message, refused.path, refused.type_id, refused.version) == (
        "nesting deeper than the limit of 64",
        expected[field],
        type_id,
        1,
    )
    assert (sent.value.message, sent.value.path, sent.value.type_id) == (refused.message, refused.path, type_id)
    assert str(refused) == f"{type_id} v1: nesting deeper than the limit of 64 - at `{expected[field]}`"


def test_nesting_past_the_limit_is_named_as_deep_as_a_path_can_name_it() -> None:
    """Inside a tree (tuples as ``[i]``, map values by their keys, an int key as ``[1]``) and in a
    field the type does not know, the path goes down to the first value past the limit; it ends
    at a map whose key is a container or where the key is what nests too deep."""
    head = head_of(EMBED.encode(diffusion.Output())[0])

    def refused(body: bytes) -> tuple[str | None, str | None, int | None]:
        head[4] = msgspec.Raw(body)
        with pytest.raises(tw.DecodeError, match=r"nesting deeper than the limit of 64") as caught:
            DECODER.decode([frame_of(head)])
        return caught.value.path, caught.value.type_id, caught.value.version

    tuples = msgspec.msgpack.encode(1)
    for _ in range(65):
        tuples = msgspec.msgpack.encode(Ext(2, msgspec.msgpack.encode([0, msgspec.Raw(tuples)])))
    assert refused(b"\x81\xa6output" + tuples) == ("$.output" + "[1]" * 64, "diffusion.Output", 1)
    keyed = b"\x81\xa6output\x81\x01\x81\xa3a b\x82\xa1k\x01\xc4\x01z" + b"\x91" * 62 + b"\x01"
    assert refused(keyed) == ("$.output[1][\"a b\"][b'z']" + "[0]" * 61, "diffusion.Output", 1)
    unknown = b"\x82\xa6output\x90\xa7unknown" + b"\x81\xa1k" * 65 + b"\x01"
    assert refused(unknown) == ("$.unknown" + ".k" * 64, "diffusion.Output", 1)
    container_key = b"\x81\xa6output\x81\x91\x01" + b"\x91" * 64 + b"\x01"
    assert refused(container_key) == ("$.output", "diffusion.Output", 1)
    in_a_key = b"\x81\xa6output\x81" + b"\x91" * 64 + b"\x01\x01"
    assert refused(in_a_key) == ("$.output", "diffusion.Output", 1)
    in_the_buffer_table = frame_of([*head[:3], msgspec.Raw(b"\x91" * 65 + b"\x90"), head[4]])
    with pytest.raises(tw.DecodeError) as caught:
        DECODER.decode([in_the_buffer_table])
    assert (caught.value.path, caught.value.type_id) == ("$.buffers" + "[0]" * 65, "diffusion.Output")


def test_nesting_past_the_limit_names_no_type_the_decoder_does_not_know() -> None:
    """A tag of a type the decoder has no class for (or not a tag) names nothing: the walk refuses
    the frame before the tag is checked, and the type id is the peer's text."""
    head = head_of(EMBED.encode(diffusion.Output())[0])
    head[4] = msgspec.Raw(b"\x81\xa6output" + b"\x91" * 65 + b"\x01")
    unknown = ("tensorwire:3:no.Such\x1b[31m:1", "tensorwire:3:diffusion.Output:9", "tensorwire:2:diffusion.Output:1")
    for tag in (*unknown, 7):
        head[0] = tag
        with pytest.raises(tw.DecodeError) as caught:
            DECODER.decode([frame_of(head)])
        assert (caught.value.type_id, caught.value.version) == (None, None)
        assert str(caught.value) == "nesting deeper than the limit of 64 - at `$.output" + "[0]" * 64 + "`"


# -- shared memory handles -----------------------------------------------------------------------


def _shm_frames() -> list[Any]:
    frames = ENCODER.encode(diffusion.Output(output=[torch.ones(64), torch.ones(32, dtype=torch.float64)]))
    assert len(_shm_handles(frames)) == 2
    return frames


@pytest.fixture
def decoy() -> Any:
    """A segment that is not ours, and one that imitates our pattern for another creator."""
    paths = [SHM_DIR / "psm_decoy_not_ours", SHM_DIR / ("tw-1-" + "a" * 32 + "-1")]
    for path in paths:
        path.write_bytes(b"x" * 256)
    yield paths
    for path in paths:
        assert path.exists(), f"{path} was touched"
        path.unlink()


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("psm_decoy_not_ours", r"'psm_decoy_not_ours' is not a tensorwire name"),
        ("/psm_decoy_not_ours", r"is not a tensorwire name"),
        ("/tw-1-" + "a" * 32 + "-1", r"is not a tensorwire name"),
        ("../shm/psm_decoy_not_ours", r"is not a tensorwire name"),
        ("tw-1-" + "a" * 24 + "-1", r"is not a tensorwire name"),
        ("tw-1-" + "A" * 32 + "-1", r"is not a tensorwire name"),
        ("tw-1-" + "a" * 32 + "-1", r"names a different creator than the message's others"),
    ],
)
def test_foreign_segment_names_are_rejected_before_any_open(decoy: Any, name: str, error: str) -> None:
    frames = _shm_frames()
    try:
        crafted = _with(frames, _handle(1, "name", name))
        with pytest.raises(tw.DecodeError, match=error):
            DECODER.decode(crafted)
    finally:
        _release_segments(frames)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("tw-1\n[fake] line\x1b[31m", r"'tw-1\n[fake] line\x1b[31m'"),
        ("x" * 1_000_000, "'" + "x" * 64 + "'... (1000000 characters)"),
    ],
)
def test_a_foreign_segment_name_is_quoted_escaped_and_cut_short(name: str, shown: str) -> None:
    """A peer's segment name is quoted with its newlines and escapes written as such, and only its
    first 64 characters (a megabyte name made the refusal a thousand characters of it, cut there
    with the rest of the text)."""
    frames = _shm_frames()
    try:
        with pytest.raises(tw.DecodeError) as caught:
            DECODER.decode(_with(frames, _handle(0, "name", name)))
        assert caught.value.message == f"shm segment name {shown} is not a tensorwire name (tw-<pid>-<token>-<seq>)"
    finally:
        _release_segments(frames)


def test_a_name_twice_in_one_message_is_rejected(decoy: Any) -> None:
    frames = _shm_frames()
    names = [h["name"] for h in _shm_handles(frames)]
    crafted = _with(frames, _handle(1, "name", names[0]))
    with pytest.raises(tw.DecodeError, match=r"is named twice in one message"):
        DECODER.decode(crafted)
    for name in names:
        assert (SHM_DIR / name).exists()  # nothing was opened or released on a rejected message
    _release_segments(frames)


def test_the_real_segment_size_is_checked_and_the_message_released() -> None:
    frames = _shm_frames()
    names = [h["name"] for h in _shm_handles(frames)]
    os.truncate(SHM_DIR / names[1], 64)
    with pytest.raises(
        tw.DecodeError, match=rf"shared memory segment {names[1]} holds 64 bytes, its handle names 4352"
    ):
        DECODER.decode(frames)
    assert not any((SHM_DIR / n).exists() for n in names)


def test_a_failure_at_any_handle_releases_every_segment_of_the_message() -> None:
    for missing in range(3):
        tensors = [torch.full((64,), float(i)) for i in range(3)]
        frames = ENCODER.encode(diffusion.Output(output=tensors))
        names = [h["name"] for h in _shm_handles(frames)]
        assert len(names) == 3
        (SHM_DIR / names[missing]).unlink()
        with pytest.raises(tw.TransportError, match=rf"cannot open shared memory segment {names[missing]}"):
            DECODER.decode(frames)
        assert not any((SHM_DIR / n).exists() for n in names)


def test_a_body_failure_after_import_leaves_nothing() -> None:
    frames = _shm_frames()
    crafted = _with(frames, _body("chunk_index", "x"))  # after the tensors: read once they are imported
    with pytest.raises(tw.DecodeError, match=r"Expected `int`, got `str` - at `\$.chunk_index`"):
        DECODER.decode(crafted)


def _early_field(head: list[Any]) -> None:
    head[4] = {"kind": head[4].pop("kind"), "chunk_index": "x", **head[4]}  # before the tensors


@pytest.mark.parametrize(
    ("change", "decoder", "error"),
    [
        (_early_field, DECODER, r"Expected `int`, got `str` - at `\$.chunk_index`"),
        (_set(0, "tensorwire:3:diffusion.Output:9"), DECODER, r"unknown version 9 of diffusion.Output"),
        (
            _set(1, "0" * 64),
            tw.Decoder(REGISTRY, transports=[SHM], options=tw.DecodeOptions(strict_fingerprint=True)),
            r"schema fingerprint 0000000000000000... differs",
        ),
    ],
    ids=["body-field", "unknown-version", "strict-fingerprint"],
)
def test_a_failure_before_any_tensor_is_read_releases_every_segment(
    change: Callable[[list[Any]], None], decoder: tw.Decoder, error: str
) -> None:
    frames = _shm_frames()
    names = [h["name"] for h in _shm_handles(frames)]
    try:
        with pytest.raises(tw.DecodeError, match=error):
            decoder.decode(_with(frames, change))
        assert not any((SHM_DIR / n).exists() for n in names)
    finally:
        _release_segments(frames)  # what a failing library left is not left for the next test


def test_a_decoder_without_the_shm_transport_rejects_shm_handles() -> None:
    """The error names the transport the message needs and those the decoder has (it said only
    ``invalid buffer table: Invalid value 'shm'``)."""
    frames = _shm_frames()
    names = [h["name"] for h in _shm_handles(frames)]
    try:
        with pytest.raises(tw.DecodeError) as info:
            tw.Decoder(REGISTRY).decode(frames)
        error = info.value
        assert error.message == "buffer 0 travels by shm, a transport this decoder does not have (it has: inline)"
        assert (error.path, error.type_id, error.version) == ("$.buffers[0][1].transport", "diffusion.Output", 1)
        assert all((SHM_DIR / n).exists() for n in names)
    finally:
        _release_segments(frames)
    pool = transports.ShmTransport()
    try:
        frames = tw.Encoder(transport=pool, options=tw.EncodeOptions(inline_threshold=1, embed_threshold=0)).encode(
            _message()
        )
        receiver = transports.QueueTransport(queue.Queue())  # nothing is put on it
        with pytest.raises(tw.DecodeError) as info:
            tw.Decoder(REGISTRY, transports=[receiver]).decode(frames)
        assert info.value.message == (
            "buffer 0 travels by shm-slot, a transport this decoder does not have (it has: inline, queue)"
        )
        assert info.value.path == "$.buffers[0][1].transport"
    finally:
        pool.close()


def test_an_inline_frame_received_as_bytes_is_copied_unless_asked() -> None:
    for encoder in (INLINE, EMBED):
        frames = [bytes(memoryview(f)) for f in encoder.encode(_message())]
        out = DECODER.decode(frames).output[0]
        out[0, 0] = 5.0  # writable: a private copy
        assert out[0, 0].item() == 5.0
    shared = tw.Decoder(REGISTRY, options=tw.DecodeOptions(copy_readonly=False))
    message = diffusion.Output(output=np.arange(4))
    frames = [bytes(memoryview(f)) for f in INLINE.encode(message)]
    array = shared.decode(frames).output
    assert not array.flags.writeable and np.array_equal(array, np.arange(4))
    frames = [bytes(memoryview(f)) for f in EMBED.encode(message)]
    array = shared.decode(frames).output  # inside frame 0: always its own copy
    assert array.flags.writeable and np.array_equal(array, np.arange(4))


def _inside(value: Any, frame: bytes | bytearray) -> bool:
    """Whether any byte of ``value``'s memory (for a tensor: its whole storage) lies in ``frame``."""
    raw = np.frombuffer(frame, np.uint8)
    if isinstance(value, np.ndarray):
        return bool(np.shares_memory(value, raw))
    storage = value.untyped_storage()
    start: int = raw.ctypes.data
    address: int = storage.data_ptr()
    return address < start + raw.nbytes and start < address + storage.nbytes()


def test_a_tensor_of_a_decoded_message_is_writable_and_does_not_alias_frame_0() -> None:
    transposed = torch.ones(3, 1, 2).transpose(0, 1)
    sent: list[torch.Tensor | np.ndarray] = [
        torch.arange(6, dtype=torch.float32).reshape(2, 3),
        transposed,
        np.arange(5),
    ]
    frames = EMBED.encode(diffusion.Output(output=sent))
    assert len(frames) == 1 and [e.code for e in tensor_exts(head_of(frames[0])[4])] == [3, 3, 3]
    for decoder in (DECODER, tw.Decoder(REGISTRY, options=tw.DecodeOptions(copy_readonly=False))):
        for frame in (bytearray(frames[0]), bytes(frames[0])):
            original = bytes(frame)
            out = decoder.decode([frame]).output
            for got, want in zip(out, sent, strict=True):
                assert not _inside(got, frame)
                if isinstance(got, np.ndarray):
                    assert got.flags.writeable
                got[0] = 7
                assert (got[0] == 7).all() and (want[0] != 7).all()
            assert bytes(frame) == original  # frame 0 is untouched by writes to its tensors
            assert out[1].stride() == transposed.stride()


def test_strict_fingerprint() -> None:
    frames = _with(INLINE.encode(_message()), _set(1, "0" * 64))
    assert DECODER.decode(frames).stage_durations == {"a": 1.0}  # a compatible minor change decodes
    strict = tw.Decoder(REGISTRY, options=tw.DecodeOptions(strict_fingerprint=True))
    with pytest.raises(tw.DecodeError, match=r"schema fingerprint 0000000000000000... differs .* - at `\$\[1\]`"):
        strict.decode(frames)
    assert strict.decode(INLINE.encode(_message())).stage_durations == {"a": 1.0}


def test_untouched_foreign_paths(tmp_path: Path) -> None:
    """An shm transport rooted elsewhere never follows names outside its directory."""
    transport = transports.ShmTransport(tmp_path)
    with pytest.raises(tw.DecodeError, match=r"not a tensorwire name"):
        transport.verify([transports.ShmHandle(name="../etc/passwd", capability=bytes(16))], [])


def test_a_descriptor_failure_releases_every_segment_of_the_message() -> None:
    for index in (0, 1):  # before any buffer is imported, and after
        frames = _shm_frames()
        names = [h["name"] for h in _shm_handles(frames)]
        assert names and all((SHM_DIR / n).exists() for n in names)
        crafted = _with(frames, _desc(index, dtype=200))
        try:
            with pytest.raises(tw.DecodeError, match=r"dtype code 200 is not in the wire dtype table"):
                DECODER.decode(crafted)
            assert not any((SHM_DIR / n).exists() for n in names), f"segments left after tensor {index} failed"
        finally:
            _release_segments(frames)  # what a failing library left is not left for the next test


def test_a_string_that_is_not_utf_8_is_a_decode_error_wherever_it_is() -> None:
    """msgspec before 0.23 raised UnicodeDecodeError for such a string, not one of its own errors
    (the reason for the msgspec floor)."""
    from tensorwire.builtins import rpc

    (head,) = EMBED.encode(rpc.Request(method="zzz"))
    assert isinstance(head, bytes)
    forged = {
        "rpc.Request v1: ": head.replace(b"\xa3zzz", b"\xa3\xed\xa0\x80"),  # a field of the body
        "invalid header: ": head.replace(b"tensorwire:", b"tensor\xed\xa0\x80\x80:"),  # the tag
    }
    not_utf_8 = "Invalid UTF-8 encoded string"
    for label, frame in forged.items():
        assert frame != head and len(frame) == len(head)
        with pytest.raises(tw.DecodeError, match=rf"^{label}{not_utf_8}"):
            DECODER.decode([frame])
        with pytest.raises(tw.DecodeError, match=rf"^invalid header: {not_utf_8}"):
            describe(frame)


def _video() -> Any:
    from tensorwire.builtins import media

    return media.Video(
        tensor=torch.zeros(1, 3, 1, 2, 2),
        layout=media.VideoTensorLayout.BCTHW,
        encoding=media.VideoTensorEncoding("normalized_float"),
        value_range=media.VideoValueRange("zero_to_one"),
    )


def test_a_peer_s_long_value_is_quoted_cut_short_in_the_error() -> None:
    from tensorwire.builtins import REGISTRY as BUILTINS

    frames = EMBED.encode(_video())
    frame = msgspec.msgpack.decode(frames[0], ext_hook=lambda code, data: Ext(code, bytes(data)))
    value = "\x1b]52;c;QUFB\x07" + "x" * 100_000  # a terminal escape, then a megabyte's worth
    frame[4]["layout"] = value
    with pytest.raises(tw.DecodeError) as caught:
        tw.Decoder(BUILTINS).decode([msgspec.msgpack.encode(frame), *frames[1:]])
    error = caught.value
    whole = len(f"Invalid enum value {value!r}")
    assert error.message.startswith("Invalid enum value '\\x1b]52;c;QUFB\\x07xxx")
    assert error.message.endswith(f"xxx... (cut: {whole} characters)") and len(error.message) <= 1000
    assert (error.path, error.type_id, error.version) == ("$.layout", "media.Video", 1)
    frame[0] = "tw:" + "t" * 100_000  # a tag of no message: quoted, cut as well
    cut = r"^not a tensorwire message: tag 'tw:ttt+\.\.\. \(cut: 100035 characters\) - at `\$\[0\]`$"
    with pytest.raises(tw.DecodeError, match=cut):
        tw.Decoder(BUILTINS).decode([msgspec.msgpack.encode(frame), *frames[1:]])


def test_a_short_message_is_kept_whole() -> None:
    text = "x" * 1000
    assert tw.DecodeError(text, path="$.a").message == text
    assert tw.EncodeError(text + "y").message == "x" * 960 + "... (cut: 1001 characters)"
