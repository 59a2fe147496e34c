"""Encode -> decode round trips: tensors of every dtype, rank and layout, aliasing, built-in types."""

from __future__ import annotations

import copy
import math
import os
import pickle
from typing import Any

import msgspec
import numpy as np
import pytest
import torch
import torch.multiprocessing as torch_mp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire import transports
from tensorwire._wire import EXT_INLINE, unpack_descriptor
from tensorwire.builtins import REGISTRY, diffusion, media, rpc
from tensorwire.transports._page_layout import FREE
from tests.wire_helpers import bits, ext_data, frame_of, head_of, same, segments_of, tensor_exts

SHM = transports.ShmTransport(pool=False)
SHM_NAMED = transports.ShmTransport(pool=False, backing="named")  # a receiver that maps one-shot segments
POOL = transports.ShmTransport()
NAMED_POOL = transports.ShmTransport(backing="named")
QUEUE = torch_mp.get_context("spawn").Queue()
FRAMES = tw.EncodeOptions(embed_threshold=0)  # every tensor in a buffer of its own, none inside frame 0
ALL_OOB = tw.EncodeOptions(inline_threshold=1, embed_threshold=0)  # and every buffer through the transport
MODES = {
    "inline": (tw.Encoder(), tw.Decoder(REGISTRY)),
    "inline-frames": (tw.Encoder(options=FRAMES), tw.Decoder(REGISTRY)),
    "shm-copy": (tw.Encoder(transport=SHM, options=ALL_OOB), tw.Decoder(REGISTRY, transports=[SHM])),
    "shm-borrow": (
        tw.Encoder(transport=SHM_NAMED, options=ALL_OOB),
        tw.Decoder(REGISTRY, transports=[SHM_NAMED], options=tw.DecodeOptions(borrow=True)),
    ),
    "pool-borrow": (tw.Encoder(transport=POOL, options=ALL_OOB), tw.Decoder(REGISTRY, transports=[POOL])),
    "named-pool-borrow": (
        tw.Encoder(transport=NAMED_POOL, options=ALL_OOB),
        tw.Decoder(REGISTRY, transports=[NAMED_POOL]),
    ),
    "pool-copy": (
        tw.Encoder(transport=POOL, options=ALL_OOB),
        tw.Decoder(REGISTRY, transports=[POOL], options=tw.DecodeOptions(borrow=False)),
    ),
    "queue": (
        tw.Encoder(transport=transports.QueueTransport(QUEUE, snapshot=True), options=ALL_OOB),
        tw.Decoder(REGISTRY, transports=[transports.QueueTransport(QUEUE)]),
    ),
}


def roundtrip(message: Any, mode: str = "inline") -> Any:
    encoder, decoder = MODES[mode]
    return decoder.decode(encoder.encode(message))


@pytest.fixture(autouse=True)
def no_segments_left() -> Any:
    """After each test: no one-shot segment left, and every pool slot handed back (segments that
    were there before the test, e.g. kept by other modules, are not this test's)."""
    before = set(segments_of(os.getpid()))
    yield
    assert POOL.pool is not None and NAMED_POOL.pool is not None
    slots = POOL.pool.slots() + NAMED_POOL.pool.slots()
    assert all(slot.state == FREE for slot in slots)
    assert set(segments_of(os.getpid())) - before <= {slot.name for slot in slots}


# -- every dtype, rank and layout ---------------------------------------------------------------

TORCH_DTYPES = [getattr(torch, name) for name in tw.DTYPE_NAMES]
NUMPY_DTYPES = [np.dtype(d.numpy_name) for d in tw.DTYPES.values() if d.numpy_name]


def _random_bits(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A tensor of ``dtype`` filled with random raw bits (NaN payloads, subnormals, infinities)."""
    gen = torch.Generator().manual_seed(seed)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (int(np.prod(shape)) * itemsize,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        return (raw % 2).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(TORCH_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=6)))
    base = _random_bits(dtype, tuple(d + 2 for d in shape) if shape else (), draw(st.integers(0, 2**16)))
    layout = draw(st.sampled_from(["contiguous", "slice", "transpose", "step", "expand"]))
    if not shape:
        return base
    if layout == "slice":
        return base[tuple(slice(1, 1 + d) for d in shape)]
    if layout == "step":
        return base[tuple(slice(0, 2 * d, 2) if d <= (d + 2) // 2 else slice(0, d) for d in shape)]
    if layout == "transpose" and len(shape) >= 2:
        return base[tuple(slice(0, d) for d in shape)].transpose(0, -1)
    if layout == "expand":
        return base[tuple(slice(0, 1) for _ in shape)].expand(*shape)
    return base[tuple(slice(0, d) for d in shape)].contiguous()


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(st.sampled_from(NUMPY_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    full = tuple(d + 2 for d in shape)
    raw = rng.integers(0, 256, size=int(np.prod(full)) * dtype.itemsize, dtype=np.uint8)
    base = (
        raw.view(bool if dtype == np.bool_ else dtype).reshape(full)
        if dtype != np.bool_
        else (raw % 2 == 1).reshape(full)
    )
    layout = draw(st.sampled_from(["contiguous", "reversed", "fortran", "step"]))
    view = base[tuple(slice(0, d) for d in shape)]
    if layout == "reversed" and shape:
        reversed_view: np.ndarray = view[::-1]
        return reversed_view
    if layout == "fortran":
        return np.asfortranarray(view)
    if layout == "step" and shape:
        stepped: np.ndarray = base[tuple(slice(0, d) for d in shape)][..., ::-1][..., ::1]
        return stepped
    return np.ascontiguousarray(view)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.one_of(tensors(), arrays()), min_size=1, max_size=4), mode=st.sampled_from(list(MODES)))
def test_tensors_of_any_dtype_rank_and_layout_round_trip_bit_exactly(values: list[Any], mode: str) -> None:
    out = roundtrip(diffusion.Output(output=list(values)), mode).output
    assert len(out) == len(values)
    for sent, got in zip(values, out, strict=True):
        assert type(got) is type(sent)
        assert got.dtype == sent.dtype and tuple(got.shape) == tuple(sent.shape)
        assert bits(got) == bits(sent)
        if isinstance(sent, torch.Tensor) and sent.numel():
            if _sparse(sent.shape, sent.stride(), sent.is_contiguous(), 1):
                assert got.is_contiguous()  # a lone sparse view sends only its own elements
            else:
                assert got.stride() == sent.stride()  # views keep their strides
        if isinstance(sent, np.ndarray) and sent.size:
            if _sparse(sent.shape, sent.strides, sent.flags.c_contiguous, sent.itemsize):
                assert got.flags.c_contiguous
            else:
                assert got.strides == sent.strides


def _sparse(shape: Any, strides: Any, contiguous: bool, unit: int) -> bool:
    """Whether a view reaches at least twice as many elements as it holds (and is not contiguous)."""
    reach = 1 + sum((n - 1) * abs(s) // unit for n, s in zip(shape, strides, strict=True))
    return not contiguous and reach >= 2 * math.prod(shape)


def test_strides_in_dims_of_size_1_survive_inside_frame_0_and_in_buffers() -> None:
    """A C-contiguous view whose strides differ from the canonical ones in a dim of size 1 (e.g. a
    transposed row) comes back with its own strides, however it travels."""
    small, large = torch.arange(8.0)[None].t(), torch.arange(100_000.0)[None].t()
    array = np.arange(8, dtype=np.float32)[None].T
    assert small.is_contiguous() and small.stride() == (1, 8) and array.flags.c_contiguous
    for mode in ("inline", "inline-frames", "shm-copy"):
        out = roundtrip(diffusion.Output(output=[small, large, array]), mode).output
        assert out[0].stride() == (1, 8) and out[1].stride() == (1, 100_000), mode
        assert out[2].strides == array.strides, mode
        assert torch.equal(out[0], small) and torch.equal(out[1], large) and np.array_equal(out[2], array)


def test_bf16_fp8_and_nan_payloads_are_never_widened() -> None:
    payload = (
        torch.tensor([0x7FC1, 0xFFFF, 0x7F81, 0x0001, 0x8000], dtype=torch.int32).to(torch.uint16).view(torch.int16)
    )
    bf16 = payload.view(torch.bfloat16)  # NaNs with payloads, a subnormal, -0
    fp8 = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    fp8b = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e5m2)
    nan32 = torch.tensor([0x7FC00001, 0x7F800001, -1], dtype=torch.int64).to(torch.int32).view(torch.float32)
    for mode in MODES:
        out = roundtrip(diffusion.Output(output=[bf16, fp8, fp8b, nan32]), mode).output
        for sent, got in zip([bf16, fp8, fp8b, nan32], out, strict=True):
            assert got.dtype == sent.dtype and bits(got) == bits(sent), mode


def test_views_of_one_storage_travel_as_one_buffer_and_stay_aliased() -> None:
    storage = torch.arange(1000, dtype=torch.float32)
    a, b = storage[100:200], storage[150:400].view(25, 10)[:, ::3]
    encoder, decoder = MODES["inline"]
    frames = encoder.encode(diffusion.Output(output=[a, b, a]))
    assert len(frames) == 2  # header + one buffer for both views
    assert len(frames[1]) <= (400 - 96) * 4  # only the bytes the views cover (aligned to 16 bytes)
    out = decoder.decode(frames).output
    assert out[0] is out[2]  # the same object sent twice is one object
    assert out[0].untyped_storage().data_ptr() == out[1].untyped_storage().data_ptr()
    out[0][60] = -1.0  # element 160 of the storage, which b also sees
    assert out[1][1, 0].item() == -1.0 and b[1, 0].item() == 160.0
    assert a[60].item() == 160.0  # the sender's tensor is untouched


def test_numpy_views_of_one_array_share_one_buffer() -> None:
    base = np.arange(64, dtype=np.int32).reshape(8, 8)
    out = roundtrip(diffusion.Output(output=(base[2:4], base[:, ::-2], base.T))).output
    assert out[0].base is not None and np.shares_memory(out[0], out[2])
    assert np.array_equal(out[1], base[:, ::-2]) and np.array_equal(out[2], base.T)


def test_a_small_view_of_a_huge_storage_sends_only_its_bytes_and_goes_inline() -> None:
    huge = torch.zeros(4 * 2**20, dtype=torch.float32)  # 16 MiB
    view = huge[1000:1064]
    encoder = tw.Encoder(transport=SHM)  # 256 KiB threshold
    frames = encoder.encode(diffusion.Output(output=view))
    assert len(frames) == 1 and len(frames[0]) < 64 * 4 + 256  # inside frame 0, with only its own bytes
    (ext,) = tensor_exts(head_of(frames[0])[4])
    assert ext.code == EXT_INLINE and unpack_descriptor(ext.code, ext_data(ext)).nbytes == 64 * 4
    assert torch.equal(MODES["shm-copy"][1].decode(frames).output, view)
    frames = tw.Encoder(transport=SHM, options=FRAMES).encode(diffusion.Output(output=view))
    assert len(frames) == 2 and len(frames[1]) == 64 * 4  # in a buffer: an inline frame of its bytes
    assert torch.equal(MODES["shm-copy"][1].decode(frames).output, view)


@pytest.mark.parametrize("count", [1, 40])  # frame 0 under and over the size counted at once
def test_tensors_inside_frame_0_share_its_data_and_the_decode_keeps_no_view_of_it(count: int) -> None:
    floats = [torch.arange(4, dtype=torch.float32) + i for i in range(count)]
    ints = np.arange(3, dtype=np.int16)
    tensors = [*floats, ints]
    frames = tw.Encoder().encode(diffusion.Output(output=tensors))
    head = head_of(frames[0])
    descs = [unpack_descriptor(e.code, ext_data(e)) for e in tensor_exts(head[4])]
    assert len(frames) == 1 and [d.offset for d in descs] == [16 * i for i in range(count + 1)]
    assert len(head[2]) == 16 * count + 6  # frame 0's data: every tensor's bytes, back to back
    blob = bytearray(tw.join(frames))
    out = tw.Decoder(REGISTRY).decode(tw.split(blob)).output
    assert all(torch.equal(a, b) for a, b in zip(out[:-1], floats, strict=True))
    assert np.array_equal(out[-1], ints)
    blob[:] = bytes(len(blob))  # the decoded tensors are private copies ...
    blob.extend(b"more")  # ... and no view of the blob is left behind to pin it
    assert torch.equal(out[0], floats[0])


def test_a_small_tensor_s_bytes_are_copied_into_frame_0_by_the_encode() -> None:
    tensor = torch.arange(16, dtype=torch.float32)
    frames = tw.Encoder().encode(diffusion.Output(output=[tensor]))
    tensor.fill_(-1.0)  # after the encode: frame 0 holds its own copy
    (desc,) = [unpack_descriptor(e.code, ext_data(e)) for e in tensor_exts(head_of(frames[0])[4])]
    assert len(frames) == 1 and type(frames[0]) is bytes and desc.buffer == -1
    assert tw.Decoder(REGISTRY).decode(frames).output[0].tolist() == list(range(16))


@pytest.mark.parametrize("view", ["conj", "neg"])
def test_conjugate_and_negative_views_travel_as_their_values(view: str) -> None:
    """Their values are made into tensors of their own during the encode; two of the same size,
    one after the other, each arrive with their own values (the first one's memory is not reused
    for the second before frame 0 is joined)."""
    first = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    second = torch.tensor([5 + 6j, 7 - 8j], dtype=torch.complex64)
    if view == "conj":
        sent, want = [first.conj(), second.conj()], [first.conj().resolve_conj(), second.conj().resolve_conj()]
    else:
        sent = [first.conj().imag, second.conj().imag]  # real views with the negative bit set
        want = [-first.imag, -second.imag]  # (their memory holds the imaginary parts unnegated)
    assert all(t.is_conj() or t.is_neg() for t in sent)
    out = tw.Decoder(REGISTRY).decode(tw.Encoder().encode(diffusion.Output(output=sent))).output
    assert all(torch.equal(a, b) for a, b in zip(out, want, strict=True))


def test_the_quick_copy_keeps_the_types_of_a_bounded_number_of_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorwire import _tensors
    from tensorwire._memory import Chars

    monkeypatch.setattr(_tensors, "_CHARS", Chars(kept=3))
    tensors = [torch.arange(n, dtype=torch.float32) for n in range(2, 8)]
    out = tw.Decoder(REGISTRY).decode(tw.Encoder().encode(diffusion.Output(output=tensors))).output
    assert all(torch.equal(a, b) for a, b in zip(out, tensors, strict=True))
    assert sorted(_tensors._CHARS.types) == [8, 12, 16]  # the first three sizes, in bytes (the others: through numpy)


def test_a_zero_byte_buffer_never_creates_a_segment() -> None:
    encoder = tw.Encoder(transport=SHM, options=tw.EncodeOptions(inline_threshold=0))
    before = set(os.listdir("/dev/shm"))
    frames = encoder.encode(diffusion.Output(output=[torch.zeros(0, 3), np.zeros((2, 0))]))
    assert set(os.listdir("/dev/shm")) == before
    out = MODES["shm-copy"][1].decode(frames).output
    assert out[0].shape == (0, 3) and out[1].shape == (2, 0)


def test_threshold_decides_on_bytes_sent() -> None:
    encoder = tw.Encoder(transport=SHM, options=tw.EncodeOptions(inline_threshold=4096, embed_threshold=0))
    small, large = torch.zeros(1023), torch.zeros(1024)
    from tensorwire.inspection import describe

    for tensor, via in ((small, "inline"), (large, "shm")):
        frames = encoder.encode(diffusion.Output(output=tensor))
        assert [b["transport"] for b in describe(frames[0])["buffers"]] == [via]
        MODES["shm-copy"][1].decode(frames)


# -- typed messages ------------------------------------------------------------------------------


def _video() -> Any:
    return media.Video(
        tensor=torch.randn(1, 3, 2, 8, 8).to(torch.bfloat16),
        layout=media.VideoTensorLayout.BCTHW,
        encoding=media.VideoTensorEncoding.NORMALIZED_FLOAT,
        value_range=media.VideoValueRange.ZERO_TO_ONE,
        pending_float_consumers=frozenset(media.FloatVideoConsumer),
        preserve_input_dtype=True,
    )


def builtin_messages() -> list[Any]:
    item = media.Media(video=_video(), prepared_for_transport=True, metadata={"fps": 8.0, "tags": ["a", {"b": None}]})
    legacy = diffusion.Output(
        output=(torch.ones(2, 2), {"audio": np.arange(4, dtype=np.int16), "meta": ("x", 1, b"raw")}, [1.5, None]),
        trajectory_latents={"step": torch.zeros(3)},
        trajectory_timesteps=torch.arange(5),
        trajectory_log_probs=torch.full((2,), float("nan")),
        trajectory_decoded=[np.zeros((4, 4, 3), dtype=np.uint8)],
        video_output_index=0,
        async_output_id="a1",
        error="boom",
        error_status_code=503,
        error_type="Overloaded",
        aborted=True,
        abort_message="stop",
        finished=False,
        chunk_index=2,
        total_chunks=3,
        started_event_ids=["s"],
        active_event_ids=["a"],
        completed_event_ids=["c"],
        stage_durations={"vae": 0.5},
        peak_memory_mb=12.5,
        kv_recv_ms=1.25,
        request_started=True,
    )
    runner = diffusion.RunnerOutput(request_id="r", step_index=3, finished=True, result=legacy)
    batch = diffusion.RunnerBatch(runner_outputs=[runner, diffusion.RunnerOutput(request_id="s")])
    tagged = diffusion.DpTagged(dp_rank=3, output=diffusion.Output(media=item))
    request = rpc.Request(
        method="add_lora",
        args=(1, ("nested", 2)),
        kwargs={"tensor": torch.ones(2)},
        rpc_id="x",
        unique_reply_rank=1,
        exec_all_ranks=True,
        collect_rank_status=True,
        wave_id="w",
        wave_request_ids=["a", "b"],
    )
    statuses = [
        rpc.RankStatus(rank=0, ok=True, bool_result=True),
        rpc.RankStatus(rank=1, ok=False, error="e", traceback="t"),
    ]
    results = [
        rpc.Result(method="m", ok=True, payload=p, rank_statuses=statuses, rpc_id="1", wave_id="w")
        for p in (legacy, runner, batch, tagged, rpc.Value(value=(True, torch.zeros(1))))
    ]
    failed = rpc.Result(method="m", ok=False, error="bad", error_type="ValueError", traceback="tb")
    return [_video(), item, legacy, runner, batch, tagged, request, *results, failed]


@pytest.mark.parametrize("mode", list(MODES))
def test_every_builtin_type_round_trips_with_all_its_fields(mode: str) -> None:
    for message in builtin_messages():
        out = roundtrip(message, mode)
        assert same(out, message), type(message).__name__


@pytest.mark.parametrize("mode", [mode for mode in MODES if mode != "queue"])  # the queue's own channel pickles
def test_no_pickle_is_written_or_read_and_frame_0_is_plain_msgpack(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pickle used")

    for name in ("dumps", "loads", "dump", "load", "Pickler", "Unpickler"):
        monkeypatch.setattr(pickle, name, refused)
    exts = {1, 2, 3}  # a tensor in a buffer, a tuple, a tensor in frame 0's data

    def plain_ext(code: int, data: memoryview) -> Any:
        assert code in exts, code
        return code

    encoder, decoder = MODES[mode]
    for message in builtin_messages():
        frames = encoder.encode(message)
        head = msgspec.msgpack.Decoder(ext_hook=plain_ext).decode(frames[0])
        assert isinstance(head, list) and len(head) == 5 and head[0].startswith("tensorwire:3:")
        assert same(decoder.decode(frames), message), type(message).__name__


def test_tuples_stay_tuples_and_dict_keys_are_kept() -> None:
    out = roundtrip(diffusion.Output(output={"video": (1, (2, [3, (4,)])), "": [], "é": ()})).output
    assert out == {"video": (1, (2, [3, (4,)])), "": [], "é": ()}
    assert type(out["video"][1]) is tuple and type(out["video"][1][1]) is list


def test_a_dict_that_looks_like_a_handle_is_just_data() -> None:
    lookalikes = [
        {"transport": "shm", "name": "tw-1-" + "0" * 32 + "-1"},
        {"__tensor_shm__": True, "name": "psm_x", "shape": [1], "numpy_dtype": "float32", "nbytes": 4},
        {"$tensor": 0},
    ]
    for mode in MODES:
        out = roundtrip(diffusion.Output(output=lookalikes), mode).output
        assert out == lookalikes


def test_the_callers_message_is_never_mutated() -> None:
    tree = (1, [2, (3,)], {"t": (torch.ones(1),)})
    message = diffusion.Output(output=tree)
    roundtrip(message, "shm-copy")
    assert message.output is tree and type(tree[1][1]) is tuple and type(tree[2]["t"]) is tuple


def test_unknown_type_or_version_names_what_the_decoder_knows() -> None:
    frames = tw.Encoder().encode(rpc.Value(value=1))
    only_requests = tw.Decoder(tw.Registry([rpc.Request]))
    with pytest.raises(tw.DecodeError, match=r"unknown type id 'rpc.Value'; known types: rpc.Request - at `\$\[0\]`"):
        only_requests.decode(frames)
    registry = tw.load_schemas(REPO_SCHEMAS)
    head = head_of(frames[0])
    assert head[0] == "tensorwire:3:rpc.Value:1"
    head[0] = "tensorwire:3:rpc.Value:7"
    with pytest.raises(tw.DecodeError, match=r"unknown version 7 of rpc.Value; known versions: v1 - at `\$\[0\]`"):
        tw.Decoder(registry).decode([frame_of(head)])


def test_the_run_time_back_end_reads_what_the_generated_one_wrote() -> None:
    runtime = tw.load_schemas(REPO_SCHEMAS)
    for message in builtin_messages():
        out = tw.Decoder(runtime).decode(tw.Encoder().encode(message))
        assert type(out).__tw_type__ == type(message).__tw_type__
        assert tw.Encoder().encode(out)[0] == tw.Encoder().encode(message)[0]


def test_join_and_split() -> None:
    message = builtin_messages()[2]
    frames = tw.Encoder(options=FRAMES).encode(message)
    assert len(frames) > 2
    blob = tw.join(frames)
    parts = tw.split(blob)
    assert [bytes(p) for p in parts] == [bytes(memoryview(f)) for f in frames]
    assert all(p.obj is blob for p in parts)  # zero-copy views of the blob
    start = memoryview(blob)
    assert all(
        (
            p.tobytes() == b""
            or (np.frombuffer(p, np.uint8).ctypes.data - np.frombuffer(start, np.uint8).ctypes.data) % 64 == 0
        )
        for p in parts[1:]
    )
    writable = tw.split(bytearray(blob))
    assert not writable[1].readonly
    assert same(tw.Decoder(REGISTRY).decode(parts), message)


def test_join_and_split_of_one_frame() -> None:
    # a message of frame 0 alone: preamble (magic, count, length), zeros up to byte 64, the frame
    message = builtin_messages()[0]
    (head,) = tw.Encoder().encode(message)
    for frame in (head, memoryview(head), bytearray(head)):
        blob = tw.join([frame])
        assert blob == b"TWB1" + (1).to_bytes(4, "little") + len(head).to_bytes(8, "little") + bytes(48) + head
        (part,) = tw.split(blob)
        assert part.obj is blob and part.tobytes() == head
        assert same(tw.Decoder(REGISTRY).decode([part]), message)
    writable = bytearray(tw.join([head]))
    (part,) = tw.split(writable)
    assert not part.readonly and part.obj is writable


def test_encoder_and_decoder_are_immutable() -> None:
    encoder, decoder = MODES["inline"]
    with pytest.raises(AttributeError, match="immutable"):
        encoder.options = tw.EncodeOptions()  # type: ignore[misc]  # mypy refuses it too (Final)
    with pytest.raises(AttributeError, match="immutable"):
        decoder.registry = REGISTRY  # type: ignore[misc]


def test_a_copy_of_an_encoder_or_decoder_is_itself_and_pickling_is_refused() -> None:
    """Nothing in them can change: a copy of one, or of what holds one, is the same object (it
    raised "immutable"); what they hold is this process's, so pickling is a clear ``TypeError``."""
    encoder, decoder = MODES["shm-copy"]
    for codec in (encoder, decoder):
        assert copy.copy(codec) is codec
        assert copy.deepcopy({"codec": codec})["codec"] is codec
        name = type(codec).__name__
        with pytest.raises(TypeError, match=rf"^cannot pickle '{name}' object: build one in each process$"):
            pickle.dumps(codec)


def test_encoders_are_safe_to_share_between_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    encoder, decoder = MODES["shm-copy"]
    messages = [diffusion.Output(output=torch.full((300,), float(i))) for i in range(40)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda m: decoder.decode(encoder.encode(m)), messages))
    assert all(torch.equal(o.output, m.output) for o, m in zip(outs, messages, strict=True))


from tests.conftest import BUILTIN_SCHEMAS as REPO_SCHEMAS  # noqa: E402


def test_equal_messages_give_equal_bytes_whatever_the_hash_seed() -> None:
    """Sets (pending float consumers) are written sorted: the header does not depend on PYTHONHASHSEED."""
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "import tensorwire as tw\n"
        "from tensorwire.builtins import media\n"
        "v = media.Video(tensor=torch.zeros(1, 3, 1, 2, 2), layout='bcthw', encoding='normalized_float',\n"
        "    value_range='zero_to_one', pending_float_consumers=frozenset(media.FloatVideoConsumer))\n"
        "sys.stdout.write(bytes(tw.Encoder().encode(v)[0]).hex())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in map(str, range(8))
    }
    assert len(outputs) == 1


def test_transports_are_found_by_name() -> None:
    assert set(transports.available()) >= {"inline", "shm", "cuda_shm", "queue"}
    assert transports.by_name("shm") is transports.ShmTransport
    assert transports.by_name("cuda_shm") is transports.CudaShmTransport
    with pytest.raises(KeyError, match=r"unknown transport 'carrier-pigeon'; available: cuda_shm, inline, queue, shm"):
        transports.by_name("carrier-pigeon")
    for cls in transports.available().values():
        assert isinstance(cls.handle_types, tuple) and cls.handle_types


class _Foreign:
    """Memory exposed only through ``__array_interface__`` (no buffer protocol)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.__array_interface__ = array.__array_interface__


def test_arrays_over_foreign_exporters_round_trip() -> None:
    src = np.arange(24, dtype=np.int32)
    contiguous = np.asarray(_Foreign(src)).reshape(4, 6)[:, 1:4]  # addressed in place
    strided = np.asarray(_Foreign(src[::2]))  # a strided foreign block: sent as a private copy
    for mode in ("inline", "shm-copy", "pool-borrow"):
        out = roundtrip(diffusion.Output(output=[contiguous, strided]), mode).output
        assert np.array_equal(out[0], contiguous) and np.array_equal(out[1], strided), mode


def test_arrays_cut_off_a_whole_element_round_trip() -> None:
    """An array at an offset that is not a whole number of its elements into its memory (which no
    decoder takes) travels from an aligned copy of its own: one cut at an odd byte, and one whose
    block itself starts off a 16-byte boundary (a memoryview cut at byte 1)."""
    raw = bytearray(range(80))
    cut = np.frombuffer(raw, dtype=np.uint8)[1:33].view(np.float32)
    in_odd_block = np.frombuffer(memoryview(raw)[1:], dtype=np.uint8)[7:39].view(np.complex64)  # at byte 8
    for value in (cut, in_odd_block):
        for mode in ("inline", "inline-frames", "shm-copy"):
            sent = [value, value[1:3], value[::2]]  # views of one block
            out = roundtrip(diffusion.Output(output=sent), mode).output
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(out, sent, strict=True)), mode
    assert bytes(raw) == bytes(range(80))  # the sender's memory is untouched


def test_views_of_a_block_that_is_not_one_run_of_bytes_travel_each_on_its_own() -> None:
    """``as_strided`` over a reversed array: its block (numpy's ``DummyArray``) has negative strides,
    so its views cannot share one buffer; the same view twice and a slice of it each arrive whole."""
    base = np.arange(24, dtype=np.float32)
    view = np.lib.stride_tricks.as_strided(base[::-1], shape=(4, 3), strides=(-8, -4))
    for mode in ("inline", "inline-frames", "shm-copy"):
        sent = [view, view, view[1:]]
        out = roundtrip(diffusion.Output(output=sent), mode).output
        assert all(np.array_equal(a, b) for a, b in zip(out, sent, strict=True)), mode


@pytest.mark.parametrize("options", [tw.EncodeOptions(), tw.EncodeOptions(embed_threshold=0)], ids=["embed", "frames"])
def test_one_sparse_view_given_several_times_sends_its_elements_once(options: tw.EncodeOptions) -> None:
    """The same view (one storage, offset, shape and strides: the same object or an equal view) is
    one view, not a shared storage: a lone column travels as its 4,000 bytes once, every occurrence
    points at them, and the decoded occurrences share memory as any repeated tensor does."""
    big = torch.arange(1000 * 1000, dtype=torch.float32).reshape(1000, 1000)
    array = big.numpy().copy()
    small = big[:4, 3]  # small enough to go inside frame 0 alone
    for sent in ([big[:, 3], big[:, 3]], [big[:, 3]] * 3, [array[:, 3], array[:, 3]], [small, small]):
        frames = tw.Encoder(options=options).encode(diffusion.Output(output=sent))
        assert sum(memoryview(f).nbytes for f in frames) < sent[0].nbytes + 1024
        out = tw.Decoder(REGISTRY).decode(frames).output
        assert all(same(a, b) for a, b in zip(out, sent, strict=True))
        assert all(o is out[0] for o in out)  # one descriptor: one tensor
    two = tw.Encoder(options=options).encode(diffusion.Output(output=[big[:, 3], big[:, 3], big[:, 5]]))
    assert sum(memoryview(f).nbytes for f in two) > 3_000_000  # two views of it: the storage's extent, shared


def teardown_module() -> None:
    """Leave /dev/shm as this module found it: its long-lived pool is closed."""
    POOL.close()
    NAMED_POOL.close()
    SHM.close()
    SHM_NAMED.close()


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.integers(0, 3).map(lambda n: torch.arange(n, dtype=torch.float32)),
    st.integers(0, 3).map(lambda n: np.arange(n, dtype=np.int16)),
)
_TREES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=2), inner, max_size=4),
    ),
    max_leaves=16,
)


def _shape(value: Any) -> Any:
    """The value with every container's exact type kept, for comparing trees (``==`` ignores tuple vs list)."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(v) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: _shape(v) for k, v in value.items()})
    if isinstance(value, torch.Tensor | np.ndarray):
        return (type(value).__name__, str(value.dtype), value.tolist())
    return (type(value).__name__, value)


@settings(max_examples=200, deadline=None)
@given(args=_TREES, kwargs=st.dictionaries(st.text(max_size=2), _TREES, max_size=3))
def test_any_tree_of_leaves_comes_back_with_its_tuples_lists_and_maps(args: Any, kwargs: dict[str, Any]) -> None:
    message = rpc.Request(method="m", args=args, kwargs=kwargs)
    out = tw.Decoder(REGISTRY).decode(tw.Encoder().encode(message))
    assert _shape(out.args) == _shape(args) and _shape(out.kwargs) == _shape(kwargs)
    assert message.args is args and message.kwargs is kwargs


@pytest.mark.parametrize("name", list(tw.dtypes.DTYPES))
def test_a_lone_tensor_read_from_a_writable_blob_is_exact_and_outlives_the_blob(name: str) -> None:
    dtype = getattr(torch, tw.dtypes.DTYPES[name].torch_name)
    raw = torch.arange(24 * 16, dtype=torch.int32).to(torch.uint8)[: 24 * torch.empty(0, dtype=dtype).element_size()]
    sent = raw.view(dtype).reshape(2, 3, -1)
    for options in (tw.EncodeOptions(), FRAMES):  # inside frame 0, and in a frame of its own
        blob = bytearray(tw.join(tw.Encoder(options=options).encode(diffusion.Output(output=sent))))
        got = tw.Decoder(REGISTRY).decode(tw.split(blob)).output
        del blob  # the tensor keeps the bytes it was read from alive
        assert got.dtype == dtype and got.shape == sent.shape and got.stride() == sent.stride()
        assert bits(got) == bits(sent)


def test_a_lone_sparse_view_sends_only_its_elements_and_a_shared_one_keeps_one_buffer() -> None:
    """``big[:, :10]`` of a 2 x 800,000 float32 tensor sends 80 bytes, not 6.4 MB; beside another view
    of the same storage it travels in their one shared buffer instead (aliasing kept)."""
    big = torch.randn(2, 800_000)
    column = big[:, :10]
    for options in (tw.EncodeOptions(), tw.EncodeOptions(embed_threshold=0)):
        frames = tw.Encoder(options=options).encode(diffusion.Output(output=column))
        assert sum(memoryview(f).nbytes for f in frames) < 1024
        got = tw.Decoder(REGISTRY).decode(frames).output
        assert torch.equal(got, column) and got.is_contiguous()
    row = big[1, 5:20]
    frames = tw.Encoder().encode(diffusion.Output(output=[column, row]))
    assert len(frames) == 2 and memoryview(frames[1]).nbytes >= 800_000 * 4  # one buffer reaching both
    a, b = tw.Decoder(REGISTRY).decode(frames).output
    assert torch.equal(a, column) and torch.equal(b, row)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.stride() == column.stride()
