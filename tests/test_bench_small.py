"""The small-message benchmark: its rows, the hooks-style peer and the call counter."""

from __future__ import annotations

import gc
import math
import os
import warnings
from typing import Any

import msgspec
import pytest
import torch

from tools.bench.calls import count_calls
from tools.bench.hooks_style import Buffer, HooksCodec, join_frames, split_frames
from tools.bench.small import (
    BARE,
    CHECKS,
    CLOSED,
    CLOSED_CHECKS,
    FLOOR,
    HOOKS,
    RAW,
    TENSORWIRE,
    TENSORWIRE_PIPE,
    UNCHECKED,
    WALKED,
    measure,
    measure_calls,
    measure_pipe,
    render,
)


class Holder(msgspec.Struct):
    name: str
    tensor: torch.Tensor
    more: list[torch.Tensor] = []


def random_bits(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    """A tensor of random bit patterns (NaNs and infinities included), so equality is bit equality."""
    size = torch.empty(0, dtype=dtype).element_size()
    count = math.prod(shape) * size
    return torch.randint(0, 256, (count,), dtype=torch.uint8).view(dtype).view(shape)


def same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    return torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))


def check_rows(rows: list[dict[str, Any]], expected: dict[str, set[str]]) -> None:
    assert {row["case"] for row in rows} == set(expected)
    for case, implementations in expected.items():
        mine = [row for row in rows if row["case"] == case]
        assert {row["implementation"] for row in mine} == implementations
        for row in mine:
            assert row["reference"] in implementations
            assert math.isfinite(row["ratio"]) and row["ratio"] > 0
            assert 0 < row["min"] <= row["median"] <= row["max"]
            if row["implementation"] == row["reference"]:
                assert row["ratio"] == 1


@pytest.mark.parametrize("shape", [(4, 4), (16, 16), (3, 0), (), (7,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
def test_hooks_codec_round_trips_tensors_bit_exactly(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    codec = HooksCodec()
    tensor = random_bits(dtype, *shape)
    frames = codec.encode(Holder("x", tensor, [tensor, tensor.t() if tensor.dim() == 2 else tensor]))
    side = tensor.nbytes >= codec.inline_below
    assert len(frames) == 1 + 3 * side
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's warning about a non-writable buffer
        for received in (frames, [bytes(f) for f in frames], split_frames(join_frames(frames))):
            got = codec.decode(received, Holder)
            assert got.name == "x" and same_bits(got.tensor, tensor) and same_bits(got.more[0], tensor)
            assert same_bits(got.more[1], tensor.t() if tensor.dim() == 2 else tensor)


def test_hooks_codec_inlines_small_tensors_and_sends_large_ones_aside() -> None:
    codec = HooksCodec(inline_below=256)
    small, large = random_bits(torch.float32, 63), random_bits(torch.float32, 64)  # 252 and 256 bytes
    assert len(codec.encode(Holder("s", small))) == 1
    frames = codec.encode(Holder("l", large))
    assert len(frames) == 2 and bytes(frames[1]) == large.numpy().tobytes()
    assert len(HooksCodec(inline_below=1 << 20).encode(Holder("l", large))) == 1


def test_hooks_codec_copies_read_only_frames_and_shares_writable_ones() -> None:
    codec = HooksCodec()
    tensor = random_bits(torch.float32, 32, 32)
    frames = codec.encode(Holder("x", tensor))
    from_bytes = codec.decode([bytes(f) for f in frames], Holder).tensor
    from_bytes.add_(1)  # writable, and not the source's memory
    assert same_bits(codec.decode(frames, Holder).tensor, tensor)
    shared = codec.decode(frames, Holder).tensor  # in process: a view of the source tensor
    assert shared.data_ptr() == tensor.data_ptr()


def test_hooks_codec_refuses_other_devices_and_unknown_types() -> None:
    codec = HooksCodec()
    with pytest.raises(TypeError):
        codec.encode({"x": object()})
    with pytest.raises(ValueError, match="only CPU tensors"):
        codec.encode(Holder("x", torch.empty(2, device="meta")))
    frames = codec.encode(Holder("x", torch.ones(2)))
    body = msgspec.msgpack.encode({"name": "x", "tensor": ["not_a_dtype", [2], 0]})
    with pytest.raises(msgspec.ValidationError):
        codec.decode([body, *frames[1:]], Holder)


def test_join_and_split_frames() -> None:
    frames: list[Buffer] = [b"head", b"", bytearray(b"xyz"), memoryview(b"0123456789")[2:5]]
    assert [bytes(f) for f in split_frames(join_frames(frames))] == [b"head", b"", b"xyz", b"234"]
    with pytest.raises(ValueError):
        split_frames(join_frames(frames) + b"extra")


def helper(n: int) -> int:
    return n + 1


def three_helpers() -> int:
    return helper(1) + helper(2) + helper(3)


def test_count_calls_counts_python_calls_but_not_fn_itself() -> None:
    assert count_calls(three_helpers) == 3
    assert count_calls(lambda: three_helpers()) == 4
    assert count_calls(lambda: None) == 0
    assert count_calls(lambda: sorted([3, 1, 2])) == 0  # C calls are not counted
    assert count_calls(lambda: sorted([3, 1, 2], key=helper)) == 3  # ... what they call back is


class _Cycle:
    """Garbage only the collector frees; its finalizer makes two Python calls."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        helper(helper(0))


def test_count_calls_does_not_count_finalizers_the_collector_runs() -> None:
    """A collection that falls inside ``fn`` would run other objects' finalizers there: the count
    is of ``fn``'s own calls, whatever garbage earlier code left."""

    def fn() -> None:  # three Python calls, and enough lists (made in C) to start a collection
        helper(1), helper(2), helper(3), list(map(list, [()] * (5 * gc.get_threshold()[0])))

    gc.collect()
    gc.disable()  # garbage left for the next collection
    try:
        for _ in range(50):
            _Cycle()
    finally:
        gc.enable()
    assert count_calls(fn) == 3  # (a comprehension would be a call of its own before Python 3.12, not after)
    gc.collect()
    assert gc.isenabled()


def test_measure_rows() -> None:
    rows = measure(rounds=2, number=3)
    check_rows(
        rows,
        {
            "envelope (10 fields)": {TENSORWIRE, UNCHECKED, RAW, FLOOR, CHECKS, CLOSED, CLOSED_CHECKS},
            "one 16x16 float32 tensor (bench.One)": {TENSORWIRE, HOOKS, RAW, FLOOR},
            "eight 64x64 float32 tensors (bench.Step)": {TENSORWIRE, HOOKS},
            "list of 50 small structs (bench.Batch)": {
                TENSORWIRE,
                UNCHECKED,
                RAW,
                FLOOR,
                CHECKS,
                CLOSED,
                CLOSED_CHECKS,
            },
            "list of 200 small structs (bench.Batch)": {TENSORWIRE, UNCHECKED, RAW, CLOSED, WALKED},
            "rpc.Request, a 16x16 tensor in kwargs": {TENSORWIRE, HOOKS},
            "rpc.Request, no tensor (a list in kwargs)": {TENSORWIRE, HOOKS},
            "a pool-allocated 1 MiB tensor (bench.One, shared memory)": {TENSORWIRE, BARE},
        },
    )
    references = {row["case"]: row["reference"] for row in rows}
    assert references["envelope (10 fields)"] == references["list of 50 small structs (bench.Batch)"] == RAW
    assert references["a pool-allocated 1 MiB tensor (bench.One, shared memory)"] == BARE
    assert references["rpc.Request, a 16x16 tensor in kwargs"] == HOOKS
    assert references["rpc.Request, no tensor (a list in kwargs)"] == HOOKS
    calls = measure_calls()
    check_rows(calls, {calls[0]["case"]: {TENSORWIRE, HOOKS}})
    assert all(row["unit"] == "calls" and row["median"] == int(row["median"]) for row in calls)
    counted = {row["implementation"]: row["median"] for row in calls}
    assert counted[TENSORWIRE] <= 11  # a count, the same on every machine (the bound: 15)
    assert counted[HOOKS] < counted[TENSORWIRE]
    text = render(rows + calls)
    assert text.startswith("| case |") and "1 (reference)" in text and " calls |" in text


def test_measure_pipe_rows() -> None:
    before = os.sched_getaffinity(0)
    rows = measure_pipe(blocks=2, messages=5)
    check_rows(rows, {rows[0]["case"]: {TENSORWIRE, TENSORWIRE_PIPE, HOOKS}})
    assert os.sched_getaffinity(0) == before  # the parent is put back where it may run


def test_the_pipe_case_runs_parent_and_children_on_two_cpus() -> None:
    from tools.bench.cpus import two_cpus

    allowed = os.sched_getaffinity(0)
    placement = two_cpus()
    if len(allowed) < 2:
        assert placement is None
    else:
        assert placement is not None
        parent, children = placement
        assert len(parent) == len(children) == 1 and parent != children and parent | children <= allowed


def test_the_floors_check_the_schema() -> None:
    """Both floors run the schema check: a message that breaks its schema fails in each."""
    from tools.bench.small import _checks, _floor, bench_registry

    envelope = bench_registry().type("bench.Envelope")
    fields: dict[str, Any] = {"request_id": "r", "model": "m", "prompt": "p", "max_tokens": 1, "temperature": 0.5}
    good, bad = envelope(priority=0, top_p=0.5, **fields), envelope(priority=0, top_p=1.5, **fields)
    closed = bench_registry().type("bench.ClosedEnvelope")
    closed_good, closed_bad = closed(priority=0, top_p=0.5, **fields), closed(priority=0, top_p=1.5, **fields)
    for floor, message, broken in ((_floor, good, bad), (_checks, good, bad), (_checks, closed_good, closed_bad)):
        assert msgspec.to_builtins(floor(message)()) == msgspec.to_builtins(message)  # (the design's floor:
        # a closed twin's instance, as the decoder reads it before making it the class's own)
        with pytest.raises(msgspec.ValidationError, match=r"Expected `float` <= 1.0 - at `\$.top_p`"):
            floor(broken)()
