"""Decoding verifies before it maps: every bad input is a DecodeError, nothing leaks, nothing foreign is touched."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from wire_helpers import segments_of

import codec
import transports
from codec.generated import REGISTRY, diffusion
from transports.shm import SHM_DIR

SHM = transports.ShmTransport(pool=False)
ENCODER = codec.Encoder(transport=SHM, options=codec.EncodeOptions(inline_threshold=64))
DECODER = codec.Decoder(REGISTRY, transports=[SHM])
INLINE = codec.Encoder()


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


def _header(frames: list[Any]) -> dict[str, Any]:
    return msgspec.msgpack.decode(frames[0])  # type: ignore[no-any-return]


def _release_segments(frames: list[Any]) -> None:
    """Release the one-shot segments ``frames`` name, as their sender would."""
    for entry in _header(frames)["buffers"]:
        if entry["handle"]["transport"] == "shm":
            SHM.release(msgspec.convert(entry["handle"], transports.ShmHandle))


def _with(frames: list[Any], change: Callable[[dict[str, Any]], None]) -> list[Any]:
    header = _header(frames)
    change(header)
    return [msgspec.msgpack.encode(header), *frames[1:]]


def test_every_truncation_and_trailing_bytes_of_a_blob() -> None:
    blob = codec.join(INLINE.encode(_message()))
    for cut in range(len(blob)):
        with pytest.raises(codec.DecodeError):
            DECODER.decode(codec.split(blob[:cut]))
    with pytest.raises(codec.DecodeError, match=r"blob has 3 trailing bytes after its last frame"):
        codec.split(blob + b"abc")
    assert DECODER.decode(codec.split(blob)).stage_durations == {"a": 1.0}


def test_every_truncation_of_the_header_frame() -> None:
    frames = INLINE.encode(_message())
    head = bytes(frames[0])
    for cut in range(len(head)):
        with pytest.raises(codec.DecodeError):
            DECODER.decode([head[:cut], *frames[1:]])
    with pytest.raises(codec.DecodeError, match=r"invalid header"):
        DECODER.decode([head + b"\x00", *frames[1:]])


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda h: h.update(magic="pickle"), r"not a tensorwire message: magic 'pickle' - at `\$.magic`"),
        (lambda h: h.update(wire=2), r"wire format version 2 is not supported \(this reader: 1\) - at `\$.wire`"),
        (lambda h: h.update(type="evil.Type"), r"unknown type id 'evil.Type'; known types: diffusion.DpTagged"),
        (lambda h: h.update(version=9), r"unknown version 9 of diffusion.Output; known versions: v1 - at `\$.type`"),
        (lambda h: h.pop("body"), r"invalid header: Object missing required field `body`"),
        (
            lambda h: h["tensors"][0].__setitem__(1, "object"),
            r"'object' is not in the wire dtype table - at `\$.output\[0\].dtype`",
        ),
        (lambda h: h["tensors"][0].__setitem__(1, ">f4"), r"'>f4' is not in the wire dtype table"),
        (lambda h: h["tensors"][0].__setitem__(1, "datetime64"), r"'datetime64' is not in the wire dtype table"),
        (lambda h: h["tensors"][0].__setitem__(1, "[('a', '<i4')]"), r"is not in the wire dtype table"),
        (lambda h: h["tensors"][0].__setitem__(0, "pickle"), r"'pickle' is neither 'tensor' nor 'ndarray'"),
        (lambda h: h["tensors"][0].__setitem__(2, [2, -3]), r"Expected `int` >= 0 - at `\$.tensors\[0\]\[2\]\[1\]`"),
        (
            lambda h: h["tensors"][0].__setitem__(2, [2, 3.5]),
            r"Expected `int`, got `float` - at `\$.tensors\[0\]\[2\]\[1\]`",
        ),
        (
            lambda h: h["tensors"][0].__setitem__(2, [2**63, 2**63]),
            r"makes the tensor larger than the limit - at|larger than the limit",
        ),
        (
            lambda h: h["tensors"][0].__setitem__(6, 20),
            r"20 != prod\(shape\) \* itemsize = 24 - at `\$.output\[0\].nbytes`",
        ),
        (
            lambda h: h["tensors"][0].__setitem__(3, [3, 100]),
            r"outside the .*-byte buffer 0 - at `\$.output\[0\].strides`",
        ),
        (
            lambda h: h["tensors"][0].__setitem__(3, [-3, 1]),
            r"torch tensors have no negative strides, got -3 - at `\$.output\[0\].strides\[0\]`",
        ),
        (lambda h: h["tensors"][0].__setitem__(4, 4096), r"outside the"),
        (lambda h: h["tensors"][0].__setitem__(4, 2), r"offset: 2 is not a multiple|not a multiple of the itemsize 4"),
        (
            lambda h: h["tensors"][0].__setitem__(5, 9),
            r"9 names no buffer \(the message has 2\) - at `\$.output\[0\].buffer`",
        ),
        (lambda h: h["tensors"][0].__setitem__(2, [1] * 9), r"rank 9 is over the limit of 8"),
        (
            lambda h: h["body"].__setitem__("output", msgspec.msgpack.Ext(1, b"\x09\x00\x00\x00")),
            r"tensor reference 9 names no descriptor",
        ),
        (lambda h: h["body"].__setitem__("output", msgspec.msgpack.Ext(5, b"")), r"unknown msgpack extension type 5"),
        (lambda h: h["body"].__setitem__("chunk_index", -1), r"Expected `int` >= 0 - at `\$.chunk_index`"),
        (
            lambda h: h["body"].__setitem__("stage_durations", msgspec.msgpack.Ext(1, b"\x00\x00\x00\x00")),
            r"Expected `object`, got `ext`|Expected `object`",
        ),
        (lambda h: h["buffers"][0].__setitem__("nbytes", 100), r"frame 1 holds 24 bytes, its buffer entry says 100"),
        (
            lambda h: h["buffers"][0]["handle"].__setitem__("frame", 7),
            r"inline buffer names frame 7; the message has 3 frames",
        ),
        (lambda h: h["buffers"][1]["handle"].__setitem__("frame", 1), r"frame 1 is named by two buffers"),
        (
            lambda h: h["buffers"][0]["handle"].__setitem__("transport", "pipe"),
            r"Invalid value 'pipe' - at `\$.buffers\[0\].handle.transport`",
        ),
    ],
)
def test_bad_headers(change: Callable[[dict[str, Any]], None], error: str) -> None:
    frames = INLINE.encode(_message())
    with pytest.raises(codec.DecodeError, match=error):
        DECODER.decode(_with(frames, change))


def test_limits_are_enforced_on_decode() -> None:
    frames = INLINE.encode(_message())
    strict = [
        (codec.Limits(max_tensors=1), r"2 tensors is over the limit of 1 - at `\$.tensors`"),
        (codec.Limits(max_buffers=1), r"2 buffers is over the limit of 1 - at `\$.buffers`"),
        (codec.Limits(max_message_bytes=10), r"buffer bytes is over the limit of 10"),
        (codec.Limits(max_header_bytes=10), r"header frame of \d+ bytes is over the limit of 10"),
        (codec.Limits(max_tensor_bytes=8), r"larger than the limit of 8 bytes"),
        (codec.Limits(max_rank=1), r"rank 2 is over the limit of 1"),
    ]
    for limits, error in strict:
        decoder = codec.Decoder(REGISTRY, options=codec.DecodeOptions(limits=limits))
        with pytest.raises(codec.DecodeError, match=error):
            decoder.decode(frames)


def test_frames_must_match_the_header() -> None:
    frames = INLINE.encode(_message())
    with pytest.raises(codec.DecodeError, match=r"no frames"):
        DECODER.decode([])
    with pytest.raises(codec.DecodeError, match=r"the message has 4 frames but its header names 2 inline buffers"):
        DECODER.decode([*frames, b"extra"])


def test_a_tensor_reference_in_a_message_without_tensors_is_rejected() -> None:
    frames = INLINE.encode(diffusion.Output(output=[1, 2]))
    forged = _with(frames, lambda h: h["body"].__setitem__("output", msgspec.msgpack.Ext(1, b"\x00\x00\x00\x00")))
    with pytest.raises(codec.DecodeError, match=r"tensor reference 0 names no descriptor \(the message has 0\)"):
        DECODER.decode(forged)


def _deep_header(levels: int, body: bytes | None = None) -> bytes:
    frames = INLINE.encode(diffusion.Output())
    header = _header(frames)
    header["body"] = msgspec.Raw(b"\x81\xa6output" + b"\x91" * levels + b"\x01") if body is None else msgspec.Raw(body)
    return msgspec.msgpack.encode(header)


def test_nesting_deeper_than_the_limit_is_rejected_without_recursion() -> None:
    results: list[Any] = []

    def decode_all() -> None:
        for levels in (100, 5000, 200_000):
            try:
                DECODER.decode([_deep_header(levels)])
                results.append("decoded")
            except codec.DecodeError as exc:
                results.append(str(exc))
        tuple_chain = msgspec.msgpack.encode(None)
        for _ in range(500):
            tuple_chain = msgspec.msgpack.encode(
                msgspec.msgpack.Ext(2, msgspec.msgpack.encode([msgspec.Raw(tuple_chain)]))
            )
        try:
            DECODER.decode([_deep_header(0, b"\x81\xa6output" + tuple_chain)])
            results.append("decoded")
        except codec.DecodeError as exc:
            results.append(str(exc))

    threading.stack_size(256 * 1024)  # a small stack: recursion this deep would crash the process
    try:
        worker = threading.Thread(target=decode_all)
        worker.start()
        worker.join()
    finally:
        threading.stack_size(0)
    assert len(results) == 4
    assert all(r.startswith("nesting deeper than the limit of 66") for r in results), results


def test_a_tree_at_the_depth_limit_decodes_and_one_level_more_does_not() -> None:
    value = DECODER.decode([_deep_header(64)]).output
    for _ in range(64):
        value = value[0]
    assert value == 1
    with pytest.raises(codec.DecodeError, match=r"nesting deeper than the limit"):
        DECODER.decode([_deep_header(65)])


# -- shared memory handles -----------------------------------------------------------------------


def _shm_frames() -> list[Any]:
    return ENCODER.encode(diffusion.Output(output=[torch.ones(64), torch.ones(32, dtype=torch.float64)]))


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
        crafted = _with(frames, lambda h: h["buffers"][1]["handle"].__setitem__("name", name))
        with pytest.raises(codec.DecodeError, match=error):
            DECODER.decode(crafted)
    finally:
        _release_segments(frames)


def test_a_name_twice_in_one_message_is_rejected(decoy: Any) -> None:
    frames = _shm_frames()
    names = [e["handle"]["name"] for e in _header(frames)["buffers"] if e["handle"]["transport"] == "shm"]
    crafted = _with(frames, lambda h: h["buffers"][1]["handle"].__setitem__("name", names[0]))
    with pytest.raises(codec.DecodeError, match=r"is named twice in one message"):
        DECODER.decode(crafted)
    for name in names:
        assert (SHM_DIR / name).exists()  # nothing was opened or released on a rejected message
    _release_segments(frames)


def test_the_real_segment_size_is_checked_and_the_message_released() -> None:
    frames = _shm_frames()
    names = [e["handle"]["name"] for e in _header(frames)["buffers"] if e["handle"]["transport"] == "shm"]
    os.truncate(SHM_DIR / names[1], 64)
    with pytest.raises(
        codec.DecodeError, match=rf"shared memory segment {names[1]} holds 64 bytes, its handle names 4352"
    ):
        DECODER.decode(frames)
    assert not any((SHM_DIR / n).exists() for n in names)


def test_a_failure_at_any_handle_releases_every_segment_of_the_message() -> None:
    for missing in range(3):
        tensors = [torch.full((64,), float(i)) for i in range(3)]
        frames = ENCODER.encode(diffusion.Output(output=tensors))
        names = [e["handle"]["name"] for e in _header(frames)["buffers"]]
        (SHM_DIR / names[missing]).unlink()
        with pytest.raises(codec.TransportError, match=rf"cannot open shared memory segment {names[missing]}"):
            DECODER.decode(frames)
        assert not any((SHM_DIR / n).exists() for n in names)


def test_a_body_failure_after_import_leaves_nothing() -> None:
    frames = _shm_frames()
    crafted = _with(frames, lambda h: h["body"].__setitem__("chunk_index", "x"))
    with pytest.raises(codec.DecodeError, match=r"Expected `int`, got `str` - at `\$.chunk_index`"):
        DECODER.decode(crafted)


def test_a_decoder_without_the_shm_transport_rejects_shm_handles() -> None:
    frames = _shm_frames()
    names = [e["handle"]["name"] for e in _header(frames)["buffers"] if e["handle"]["transport"] == "shm"]
    with pytest.raises(codec.DecodeError, match=r"Invalid value 'shm' - at `\$.buffers\[0\].handle.transport`"):
        codec.Decoder(REGISTRY).decode(frames)
    assert all((SHM_DIR / n).exists() for n in names)
    _release_segments(frames)


def test_an_inline_frame_received_as_bytes_is_copied_unless_asked() -> None:
    frames = [bytes(memoryview(f)) for f in INLINE.encode(_message())]
    out = DECODER.decode(frames).output[0]
    out[0, 0] = 5.0  # writable: a private copy
    shared = codec.Decoder(REGISTRY, options=codec.DecodeOptions(copy_readonly=False))
    import numpy as np

    message = diffusion.Output(output=np.arange(4))
    frames = [bytes(memoryview(f)) for f in INLINE.encode(message)]
    array = shared.decode(frames).output
    assert not array.flags.writeable and np.array_equal(array, np.arange(4))


def test_strict_fingerprint() -> None:
    frames = _with(INLINE.encode(_message()), lambda h: h.update(fingerprint="0" * 64))
    assert DECODER.decode(frames).stage_durations == {"a": 1.0}  # a compatible minor change decodes
    strict = codec.Decoder(REGISTRY, options=codec.DecodeOptions(strict_fingerprint=True))
    with pytest.raises(
        codec.DecodeError, match=r"schema fingerprint 0000000000000000... differs .* - at `\$.fingerprint`"
    ):
        strict.decode(frames)


def test_untouched_foreign_paths(tmp_path: Path) -> None:
    """An shm transport rooted elsewhere never follows names outside its directory."""
    transport = transports.ShmTransport(tmp_path)
    with pytest.raises(codec.DecodeError, match=r"not a tensorwire name"):
        transport.verify([transports.ShmHandle(name="../etc/passwd", capability=bytes(16))], [])


def test_a_descriptor_failure_releases_every_segment_of_the_message() -> None:
    frames = _shm_frames()
    names = [e["handle"]["name"] for e in _header(frames)["buffers"] if e["handle"]["transport"] == "shm"]
    assert names and all((SHM_DIR / n).exists() for n in names)
    crafted = _with(frames, lambda h: h["tensors"][0].__setitem__(1, "object"))
    with pytest.raises(codec.DecodeError, match=r"'object' is not in the wire dtype table"):
        DECODER.decode(crafted)
    assert not any((SHM_DIR / n).exists() for n in names)
