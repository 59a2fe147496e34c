"""Small messages: tensorwire against raw msgspec and the hooks style, in process and over a Pipe.

    python -m tools.bench.small [--rounds 15] [--number 300] [--blocks 15] [--messages 300] [--seed 0]
                                [--no-pipe] [--json]

In process, each case is an encode+decode round trip, timed in thread CPU time
(``time.thread_time_ns``) over blocks of ``number`` calls with the garbage collector off. Rounds
are interleaved: each round runs every implementation of the case once, in an order shuffled by a
seeded ``random.Random``. A row gives the median over rounds, the min and max, and the ratio to
the case's reference:

- envelope (``bench.Envelope``, ten scalar fields) and list of 50 small structs (``bench.Batch``):
  against a hand-written msgspec Struct of the same fields (raw msgspec), with the same round trip
  without the encoder's schema check (``EncodeOptions(validate=False)``; the decoder checks as
  ever) and two floors: that of tensorwire's design, the C steps of its shorter path back to back
  (body encode, schema-check decode, frame 0 joined, the body taken out, the nesting count, the
  body's typed decode as the decoder reads it: see ``_floor``), and that of the
  checks alone, what any wire format keeping them costs (body encode, the encoder's schema-check
  decode, the nesting count over the body, the receiver's typed decode of the body: no frame 0
  around it), no Python between the steps of either; and the same round trip and checks-alone
  floor for a closed copy of the type (``bench.ClosedEnvelope``, ``bench.ClosedBatch``:
  ``additionalProperties: false``, so msgspec skips nothing and the decoder counts nothing). The
  decoder reads ``bench.Envelope`` as its closed twin (it holds no struct), uncounted: neither of
  its floors counts;
- a list of 200 small structs (``bench.Batch``), more structs than levels allowed: the decoder's
  count of level openers refuses the body, which the type's closed mirror then bounds before the
  class decodes it; against raw msgspec, with the round trip without the encoder's check, the
  closed copy's, and the round trip a decoder without the mirror makes (its full decode walks
  frame 0 value by value in Python); no floors;
- a 1 MiB float32 tensor allocated in a pool slot (``bench.One``, ``ShmTransport.empty``) and handed
  over as it is: the allocation, encode and decode of one message (the receiver's tensor dropped at
  once, its slot back in the pool), against the least a zero-copy hand-over does in Python, an
  element count packed and unpacked and ``torch.frombuffer`` over memory mapped beforehand (no
  checks, no slot lifetime: ``tools.bench``'s ``floor: bare zero-copy`` in one process);
- one 16x16 float32 tensor (``bench.One``), eight 64x64 float32 tensors (``bench.Step``) and an
  ``rpc.Request`` with a 16x16 tensor in its kwargs: against the hooks style
  (``tools.bench.hooks_style``) carrying the same fields. The raw msgspec row of ``bench.One``
  carries the tensor as bytes (turned into bytes and back into a tensor of known shape); its
  floor is tensorwire's design for it, the C steps of its full path (body encode, schema-check
  decode, frame 0 joined, the nesting count of what follows its data, frame 0's typed decode)
  with the one hook call per tensor each needs (its descriptor and a view of its bytes on encode,
  the caller's tensor in the schema check, the tensor built from frame 0's data on decode);
- an ``rpc.Request`` carrying no tensor (a control call: ``CALL``, a list inside its ``kwargs``):
  against the hooks style carrying the same fields (``tools.bench.inprocess.RawRequest``, its
  ``args`` and ``kwargs`` untyped as rpc.Request's: with no tensor, no hook is called).

In process, the hooks style's side frames are writable views of the source tensor, so its decode
does not copy them, while tensorwire's frames are read-only and its decode copies: 1 KiB for one
16x16 tensor, 128 KiB for eight 64x64 ones.

Then the Python-level calls (``tools.bench.calls.count_calls``) of one ``bench.One`` 16x16 round
trip, and a 4 KiB ``bench.One`` (1024 float32) echoed by a spawned child over
``multiprocessing.Pipe``: encode, ``send_bytes`` of the joined frames, the child's ``recv_bytes``,
decode, encode and send back, decode; wall time per round trip, interleaved blocks of ``messages``
round trips, the ratio to the hooks style. With two CPUs or more, the parent runs on one and every
echo child on another (the same two for every implementation, so no row gains or loses from where
the scheduler happens to place its child: each wake-up crosses between the two). Over
``recv_bytes`` both copy the tensor out of the read-only bytes they receive; the row
``tensorwire, pipe.Receiver`` reads each message with ``tensorwire.pipe`` instead
(``recv_bytes_into`` a reused writable buffer, the tensor built on it), on both ends.

The message types of the tensorwire side are ``tools/bench/schemas/bench/*.json``, loaded at run
time with ``tw.load_schemas``; ``rpc.Request`` is ``tensorwire.builtins.rpc.Request``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import torch

from tools.bench.calls import count_calls
from tools.bench.cpus import two_cpus
from tools.bench.hooks_style import HooksCodec, join_frames, split_frames
from tools.bench.inprocess import RawRequest

if TYPE_CHECKING:
    from tensorwire import Registry

__all__ = [
    "BARE",
    "CHECKS",
    "CLOSED",
    "CLOSED_CHECKS",
    "FLOOR",
    "HOOKS",
    "RAW",
    "SCHEMAS",
    "TENSORWIRE",
    "TENSORWIRE_PIPE",
    "UNCHECKED",
    "WALKED",
    "Case",
    "batch_case",
    "bench_registry",
    "case_builders",
    "envelope_case",
    "main",
    "measure",
    "measure_calls",
    "measure_pipe",
    "one_case",
    "pooled_case",
    "render",
    "rpc_case",
    "step_case",
]

SCHEMAS = Path(__file__).resolve().parent / "schemas"
"""The schema directory of the benchmark's message types (namespace ``bench``)."""

_DESCRIPTION = "Small messages: tensorwire against raw msgspec and the hooks style, in process and over a Pipe."

TENSORWIRE = "tensorwire"
TENSORWIRE_PIPE = "tensorwire, pipe.Receiver"
HOOKS = "hooks style"
RAW = "raw msgspec"
UNCHECKED = "tensorwire, validate=False"
CLOSED = "tensorwire, closed schema"
CLOSED_CHECKS = "floor: the checks alone, closed schema"
FLOOR = "floor: tensorwire's C steps"
CHECKS = "floor: the checks alone"
WALKED = "tensorwire, walked (no mirror)"
BARE = "floor: bare zero-copy (a count, torch.frombuffer)"


@cache
def bench_registry() -> Registry:
    """The ``bench`` message types, compiled from ``SCHEMAS`` (once per process)."""
    import tensorwire as tw

    return tw.load_schemas(SCHEMAS)


# Hand-written peers: the same fields as the bench schemas and rpc.Request, no checks.


class RawEnvelope(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fields of bench.Envelope."""

    request_id: str
    model: str
    prompt: str
    priority: int
    max_tokens: int
    temperature: float
    top_p: float
    stream: bool = False
    finished: bool = False
    trace_id: str | None = None


class RawOne(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fields of bench.One, the tensor as its raw bytes (dtype and shape known to both ends)."""

    request_id: str
    tensor: bytes


class RawItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fields of bench.Item."""

    index: int
    name: str
    score: float
    done: bool = False


class RawBatch(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fields of bench.Batch."""

    items: list[RawItem]


class HooksOne(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fields of bench.One, for the hooks style."""

    request_id: str
    tensor: torch.Tensor


class HooksStep(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fields of bench.Step, for the hooks style."""

    request_id: str
    step: int
    finished: bool = False
    tensors: list[torch.Tensor] = []


class HooksRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fields of rpc.Request, for the hooks style.

    ``kwargs`` is typed ``dict[str, torch.Tensor]`` (rpc.Request: ``dict[str, Any]``): the hooks
    style rebuilds tensors only where the static type says so, and an ``Any`` value would come
    back as a bare ``[dtype, shape, data]`` list.
    """

    method: str
    args: Any = []
    kwargs: dict[str, torch.Tensor] = {}
    rpc_id: str | None = None
    unique_reply_rank: int | None = None
    exec_all_ranks: bool = False
    collect_rank_status: bool = False
    wave_id: str | None = None
    wave_request_ids: list[str] | None = None


@dataclass(frozen=True)
class Case:
    """One in-process case: its implementations, each a callable doing one encode+decode round trip,
    and the one its ratios are to."""

    name: str
    reference: str
    implementations: dict[str, Callable[[], Any]]  # each one encode+decode round trip


def _same_tensors(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> bool:
    return len(got) == len(want) and all(
        g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want, strict=True)
    )


def _tensorwire() -> tuple[Any, Any]:
    import tensorwire as tw

    return tw.Encoder(), tw.Decoder(bench_registry())


def envelope_case() -> Case:
    """bench.Envelope (ten scalar fields) against raw msgspec, with its floors."""
    encoder, decoder = _tensorwire()
    fields: dict[str, Any] = {
        "request_id": "req-000123",
        "model": "example/model-7b",
        "prompt": "A cat sitting on a windowsill at dusk.",
        "priority": 2,
        "max_tokens": 256,
        "temperature": 0.7,
        "top_p": 0.95,
        "stream": True,
        "finished": False,
        "trace_id": "trace-9f2c",
    }
    registry = bench_registry()
    message, closed = (registry.type(name)(**fields) for name in ("bench.Envelope", "bench.ClosedEnvelope"))
    raw = RawEnvelope(**fields)
    return _against_raw("envelope (10 fields)", encoder, decoder, message, raw, closed)


def one_case(tensor: torch.Tensor, label: str) -> Case:
    """bench.One carrying ``tensor`` against the hooks style, raw msgspec (its bytes) and its floor."""
    encoder, decoder = _tensorwire()
    hooks = HooksCodec()
    message = bench_registry().type("bench.One")(request_id="req-1", tensor=tensor)
    hooks_message = HooksOne(request_id="req-1", tensor=tensor)
    raw_encoder, raw_decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(RawOne)
    shape = tuple(tensor.shape)

    def raw() -> torch.Tensor:
        got = raw_decoder.decode(raw_encoder.encode(RawOne(request_id="req-1", tensor=tensor.numpy().tobytes())))
        return torch.frombuffer(bytearray(got.tensor), dtype=torch.float32).view(shape)

    floor = _tensor_floor(message)
    assert _same_tensors([decoder.decode(encoder.encode(message)).tensor], [tensor])
    assert _same_tensors([hooks.decode(hooks.encode(hooks_message), HooksOne).tensor], [tensor])
    assert _same_tensors([raw()], [tensor])
    assert _same_tensors([floor().tensor], [tensor]) and floor().request_id == message.request_id
    return Case(
        label,
        HOOKS,
        {
            TENSORWIRE: lambda: decoder.decode(encoder.encode(message)),
            HOOKS: lambda: hooks.decode(hooks.encode(hooks_message), HooksOne),
            RAW: raw,
            FLOOR: floor,
        },
    )


def pooled_case() -> Case:
    """bench.One carrying a 1 MiB float32 tensor allocated in a pool slot and handed over as it is
    (each round trip allocates: a slot tensor is handed over once), against a bare zero-copy hand-over."""
    import struct

    import tensorwire as tw
    from tensorwire import transports

    sender, receiver = transports.ShmTransport(), transports.ShmTransport()
    encoder, decoder = tw.Encoder(sender), tw.Decoder(bench_registry(), transports=[receiver])
    one = bench_registry().type("bench.One")
    numel = 1 << 18
    area = bytearray(4 * numel)  # the floor's memory, made before any message
    count = struct.Struct("<Q")

    def pooled() -> Any:
        return decoder.decode(encoder.encode(one(request_id="req-1", tensor=sender.empty((numel,), torch.float32))))

    def bare() -> torch.Tensor:
        (n,) = count.unpack(count.pack(numel))
        return torch.frombuffer(area, dtype=torch.float32, count=n)

    for _ in range(3):
        got = pooled()
        assert got.request_id == "req-1" and got.tensor.shape == (numel,) and got.tensor.dtype == torch.float32
        del got
    assert sender.pool is not None and len(sender.pool.slots()) == 1  # one slot, handed over and back each time
    assert bare().shape == (numel,)
    return Case("a pool-allocated 1 MiB tensor (bench.One, shared memory)", BARE, {TENSORWIRE: pooled, BARE: bare})


def step_case() -> Case:
    """bench.Step (eight 64x64 float32 tensors) against the hooks style."""
    encoder, decoder = _tensorwire()
    hooks = HooksCodec()
    tensors = [torch.randn(64, 64) for _ in range(8)]
    message = bench_registry().type("bench.Step")(request_id="req-1", step=7, tensors=tensors)
    hooks_message = HooksStep(request_id="req-1", step=7, tensors=tensors)
    assert _same_tensors(decoder.decode(encoder.encode(message)).tensors, tensors)
    assert _same_tensors(hooks.decode(hooks.encode(hooks_message), HooksStep).tensors, tensors)
    return Case(
        "eight 64x64 float32 tensors (bench.Step)",
        HOOKS,
        {
            TENSORWIRE: lambda: decoder.decode(encoder.encode(message)),
            HOOKS: lambda: hooks.decode(hooks.encode(hooks_message), HooksStep),
        },
    )


def _batches(count: int) -> tuple[Any, Any, RawBatch]:
    """A bench.Batch, bench.ClosedBatch and raw msgspec batch of the same ``count`` items."""
    registry = bench_registry()
    item, batch = registry.type("bench.Item"), registry.type("bench.Batch")
    fields: list[dict[str, Any]] = [
        {"index": i, "name": f"item-{i}", "score": i * 0.5, "done": i % 2 == 0} for i in range(count)
    ]
    closed_item = registry.type("bench.ClosedItem")
    closed = registry.type("bench.ClosedBatch")(items=[closed_item(**f) for f in fields])
    return batch(items=[item(**f) for f in fields]), closed, RawBatch(items=[RawItem(**f) for f in fields])


def batch_case() -> Case:
    """bench.Batch (a list of 50 small structs) against raw msgspec, with its floors."""
    encoder, decoder = _tensorwire()
    message, closed, raw = _batches(50)
    return _against_raw("list of 50 small structs (bench.Batch)", encoder, decoder, message, raw, closed)


def long_batch_case() -> Case:
    """bench.Batch of 200 small structs, more than levels allowed (the decoder's count of level
    openers refuses the body, which its type's closed mirror then bounds), against raw msgspec;
    with the round trip without the encoder's check, that of the closed type (no count) and that
    of a decoder without the mirror (its full decode walks frame 0)."""
    import tensorwire as tw

    encoder, decoder = _tensorwire()
    unchecked = tw.Encoder(encoder.transport, options=dataclasses.replace(encoder.options, validate=False))
    walked = tw.Decoder(decoder.registry)  # what the decode costs without the mirror: its full decode
    unguarded = {bare: (*entry[:3], None) for bare, entry in walked._plain.items()}
    object.__setattr__(walked, "_plain", unguarded)
    if walked._native is not None:  # its compiled path reads the same table
        object.__setattr__(walked, "_native", (unguarded, *walked._native[1:]))
    message, closed, raw = _batches(200)
    raw_encoder, raw_decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(RawBatch)
    assert decoder.decode(encoder.encode(message)) == message == walked.decode(encoder.encode(message))
    assert decoder.decode(encoder.encode(closed)) == closed
    assert not decoder._free and walked._free  # the mirror read it, not the full decode; the other, walked
    return Case(
        "list of 200 small structs (bench.Batch)",
        RAW,
        {
            TENSORWIRE: lambda: decoder.decode(encoder.encode(message)),
            UNCHECKED: lambda: decoder.decode(unchecked.encode(message)),
            RAW: lambda: raw_decoder.decode(raw_encoder.encode(raw)),
            CLOSED: lambda: decoder.decode(encoder.encode(closed)),
            WALKED: lambda: walked.decode(encoder.encode(message)),
        },
    )


def _floor(message: Any) -> Callable[[], Any]:
    """The C steps of a tensorwire round trip of ``message`` (no tensors) on its shorter path, with
    no Python between them: the body's encode, the schema check (a typed decode of the body), frame
    0 joined, the body taken back out of it, the count that bounds its nesting (none where the
    decoder reads the body uncounted) and the body's typed decode as the decoder reads it (as its
    closed twin where it has one, whose instance the decoder then makes the class's own: a swap of
    its type, not counted here)."""
    from tensorwire._plain import plain_bodies
    from tensorwire._plan import type_plan

    plan = type_plan(type(message))
    body_encoder = msgspec.msgpack.Encoder()
    check, bare = plan.check.plain, plan.bare
    read = plain_bodies(bench_registry())[0][bare].read
    count = _counter(len(body_encoder.encode(message)))
    at = len(bare)

    def floor() -> Any:
        body = body_encoder.encode(message)
        check(body)
        body = (bare + body)[at:]
        count(body)
        return read(body)

    def uncounted_floor() -> Any:
        body = body_encoder.encode(message)
        check(body)
        return read((bare + body)[at:])

    return uncounted_floor if _uncounted(message) else floor


def _tensor_floor(message: Any) -> Callable[[], Any]:
    """The steps of a tensorwire round trip of ``message`` whose tensors (small, contiguous, on the
    host) all travel inside frame 0, with no Python between them but one hook call per tensor in
    each step that meets it: the body's encode (each tensor's descriptor, its bytes viewed for the
    join), the encoder's schema check (its checking decode, given the caller's tensors, rules
    included), frame 0 joined, the nesting count of what follows the data, and frame 0's typed
    decode (each tensor copied out of the data and built as the decoder builds it)."""
    import ctypes

    import numpy as np

    from tensorwire._body import Checking
    from tensorwire._descriptors import BUILD
    from tensorwire._frame_types import frame_type
    from tensorwire._plan import type_plan
    from tensorwire._tensors import _TORCH
    from tensorwire._wire import DIMS, EXT_INLINE, INLINE, INLINE_DIMS, data_header, data_span
    from tensorwire.dtypes import DTYPE_NAMES

    prefix = type_plan(type(message)).prefix
    checking = Checking(type(message))
    data: list[Any] = []  # this round trip's tensor bytes, in body order
    values: list[Any] = []  # this round trip's tensors, in body order
    chars: dict[int, Any] = {}  # nbytes -> ctypes.c_char * nbytes
    frame_data = memoryview(b"")
    total = 0

    def describe(tensor: Any) -> msgspec.msgpack.Ext:
        nonlocal total
        code, itemsize = _TORCH[tensor.dtype]
        shape, rank = tensor.shape, tensor.dim()
        nbytes = tensor.numel() * itemsize
        kind = chars.get(nbytes) or chars.setdefault(nbytes, ctypes.c_char * nbytes)
        data.append(kind.from_address(tensor.data_ptr()))
        values.append(tensor)
        total += nbytes
        return msgspec.msgpack.Ext(EXT_INLINE, INLINE_DIMS[rank].pack(0, code, rank, 0, total - nbytes, nbytes, *shape))

    def build(code: int, payload: memoryview) -> Any:
        _, dtype, rank, _, offset, nbytes = INLINE.unpack_from(payload)
        shape = DIMS[rank].unpack_from(payload, INLINE.size)
        numpy_dtype = BUILD[DTYPE_NAMES[dtype]][1]
        return torch.from_numpy(np.ndarray(shape, numpy_dtype, bytearray(frame_data[offset : offset + nbytes])))

    body_encoder = msgspec.msgpack.Encoder(enc_hook=describe)
    frame_decoder = msgspec.msgpack.Decoder(frame_type(bench_registry(), False), ext_hook=build)

    def floor() -> Any:
        nonlocal total, frame_data
        data.clear()
        values.clear()
        total = 0
        body = body_encoder.encode(message)
        checking.values, checking.index = values, 0
        checking.decode(body)
        head = b"".join([prefix, data_header(total), *data, b"\x90", body])
        span = data_span(head)
        assert span is not None
        rest = head[span[1] :]
        _counter(len(rest))(rest)
        frame_data = memoryview(head)[span[0] : span[1]]
        return frame_decoder.decode(head).body

    return floor


def _checks(message: Any) -> Callable[[], Any]:
    """What keeping every check costs a round trip of ``message`` (no tensors) in any wire format,
    with no Python between the steps: the body's encode, the encoder's schema check (a typed decode
    of the body), the count that bounds the body's nesting (none where the type, or the closed twin
    the decoder reads it as, bounds it) and the receiver's typed decode of the body (no frame 0
    around it: no type tag, fingerprint or buffer table)."""
    from tensorwire._plan import type_plan

    body_encoder = msgspec.msgpack.Encoder()
    plan = type_plan(type(message))
    typed = plan.check.plain  # a typed decode of the body: the check and the receiver's
    count = _counter(len(body_encoder.encode(message)))

    def checks() -> Any:
        body = body_encoder.encode(message)
        typed(body)
        count(body)
        return typed(body)

    def closed_checks() -> Any:
        body = body_encoder.encode(message)
        typed(body)
        return typed(body)

    return closed_checks if _uncounted(message) else checks


def _uncounted(message: Any) -> bool:
    """Whether the decoder reads the body of ``message`` (as encoders write it) without counting
    its nesting: its type, or the closed twin it is read as, bounds its depth."""
    from tensorwire._plain import plain_bodies
    from tensorwire._plan import type_plan

    found = plain_bodies(bench_registry())[0].get(type_plan(type(message)).bare)
    return found is not None and found.depth is not None


def _counter(size: int) -> Callable[[bytes], Any]:
    """The count of the level openers of ``size`` bytes the decoder makes: compiled
    (``tensorwire._native``) where it is built, else the bytes deleted the quickest way at that
    size (the openers themselves up to 512 bytes, else all the others)."""
    from tensorwire._native import SPEEDUPS
    from tensorwire._scan import OPENERS, OTHERS

    if SPEEDUPS is not None:
        return SPEEDUPS.count_openers  # type: ignore[no-any-return]
    table = OPENERS if size <= 512 else OTHERS
    return lambda data: data.translate(None, table)


def _against_raw(label: str, encoder: Any, decoder: Any, message: Any, raw: Any, closed: Any) -> Case:
    """A case of a tensorwire message against a raw msgspec Struct of the same fields, with the
    same round trip without the encoder's schema check, the floors of tensorwire's design and of
    its checks alone for it, and the round trip and checks alone of ``closed``, the same message
    of a closed copy of its type."""
    import tensorwire as tw

    unchecked = tw.Encoder(encoder.transport, options=dataclasses.replace(encoder.options, validate=False))
    raw_encoder, raw_decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(type(raw))
    floor, checks, closed_checks = _floor(message), _checks(message), _checks(closed)
    assert decoder.decode(encoder.encode(message)) == message == checks()
    assert msgspec.to_builtins(floor()) == msgspec.to_builtins(message)  # (a closed twin's instance, for one)
    assert decoder.decode(encoder.encode(closed)) == closed == closed_checks()
    assert decoder.decode(unchecked.encode(message)) == message
    assert raw_decoder.decode(raw_encoder.encode(raw)) == raw
    return Case(
        label,
        RAW,
        {
            TENSORWIRE: lambda: decoder.decode(encoder.encode(message)),
            UNCHECKED: lambda: decoder.decode(unchecked.encode(message)),
            RAW: lambda: raw_decoder.decode(raw_encoder.encode(raw)),
            FLOOR: floor,
            CHECKS: checks,
            CLOSED: lambda: decoder.decode(encoder.encode(closed)),
            CLOSED_CHECKS: closed_checks,
        },
    )


def rpc_case() -> Case:
    """rpc.Request with a 16x16 tensor in its kwargs against the hooks style."""
    import tensorwire as tw
    from tensorwire.builtins import REGISTRY, rpc

    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    hooks = HooksCodec()
    tensor = torch.randn(16, 16)
    message = rpc.Request(method="load_adapter", kwargs={"x": tensor})
    hooks_message = HooksRequest(method="load_adapter", kwargs={"x": tensor})
    assert _same_tensors([decoder.decode(encoder.encode(message)).kwargs["x"]], [tensor])
    assert _same_tensors([hooks.decode(hooks.encode(hooks_message), HooksRequest).kwargs["x"]], [tensor])
    return Case(
        "rpc.Request, a 16x16 tensor in kwargs",
        HOOKS,
        {
            TENSORWIRE: lambda: decoder.decode(encoder.encode(message)),
            HOOKS: lambda: hooks.decode(hooks.encode(hooks_message), HooksRequest),
        },
    )


CALL: dict[str, Any] = {"method": "sleep", "args": [1], "kwargs": {"tags": ["weights", "kv_cache"]}, "rpc_id": "r-42"}
"""The control call of ``rpc_call_case``: no tensor, a list inside ``kwargs``."""


def rpc_call_case() -> Case:
    """rpc.Request carrying no tensor (``CALL``) against the hooks style."""
    import tensorwire as tw
    from tensorwire.builtins import REGISTRY, rpc

    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    hooks = HooksCodec()
    message, hooks_message = rpc.Request(**CALL), RawRequest(**CALL)
    assert decoder.decode(encoder.encode(message)) == message
    assert hooks.decode(hooks.encode(hooks_message), RawRequest) == hooks_message
    return Case(
        "rpc.Request, no tensor (a list in kwargs)",
        HOOKS,
        {
            TENSORWIRE: lambda: decoder.decode(encoder.encode(message)),
            HOOKS: lambda: hooks.decode(hooks.encode(hooks_message), RawRequest),
        },
    )


def case_builders() -> dict[str, Callable[[], Case]]:
    """The in-process cases by short name, in the order they run, each built when called."""
    return {
        "envelope": envelope_case,
        "one": lambda: one_case(torch.randn(16, 16), "one 16x16 float32 tensor (bench.One)"),
        "step": step_case,
        "batch": batch_case,
        "long": long_batch_case,
        "rpc": rpc_case,
        "call": rpc_call_case,
        "pooled": pooled_case,
    }


def _cases() -> list[Case]:
    return [build() for build in case_builders().values()]


def _block_us(fn: Callable[[], Any], number: int) -> float:
    """Thread CPU microseconds per call over ``number`` calls, the garbage collector off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.thread_time_ns()
        for _ in range(number):
            fn()
        return (time.thread_time_ns() - start) / number / 1e3
    finally:
        if enabled:
            gc.enable()


def _rows(case: str, reference: str, samples: dict[str, list[float]], unit: str) -> list[dict[str, Any]]:
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return [
        {
            "case": case,
            "implementation": name,
            "unit": unit,
            "median": medians[name],
            "min": min(values),
            "max": max(values),
            "reference": reference,
            "ratio": medians[name] / medians[reference],
        }
        for name, values in samples.items()
    ]


def measure(rounds: int = 15, number: int = 300, seed: int = 0) -> list[dict[str, Any]]:
    """Every in-process case: one row per implementation (see the module docstring).

    A row: ``case``, ``implementation``, ``unit`` (``"us"``), ``median``, ``min``, ``max`` (thread
    CPU microseconds per round trip, over ``rounds`` rounds of ``number`` round trips),
    ``reference`` (the implementation the case compares with) and ``ratio`` (median / the
    reference's median).
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for case in _cases():
        names = list(case.implementations)
        for name in names:  # warm up: caches, lazy imports, first allocations
            _block_us(case.implementations[name], max(1, number // 10))
        samples: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(rounds):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                samples[name].append(_block_us(case.implementations[name], number))
        rows.extend(_rows(case.name, case.reference, samples, "us"))
    return rows


def measure_calls() -> list[dict[str, Any]]:
    """Python-level calls of one ``bench.One`` 16x16 round trip, tensorwire and the hooks style.

    Rows as ``measure``'s, ``unit`` ``"calls"`` (median, min and max are the one count).
    """
    case = one_case(torch.randn(16, 16), "Python calls, one 16x16 tensor round trip (bench.One)")
    counts: dict[str, list[float]] = {}
    for name in (TENSORWIRE, HOOKS):
        fn = case.implementations[name]
        for _ in range(3):
            fn()
        counts[name] = [float(count_calls(fn))]
    return _rows(case.name, HOOKS, counts, "calls")


# Cross-process: a child echoes bench.One over a multiprocessing Pipe.


_PIPE_BUFFER = 8192  # the receiver's buffer: a 4 KiB message and its header fit


class _PipeCodec:
    """One implementation's end of a Pipe: ``send(message)`` and ``recv() -> message`` on ``conn``.

    ``tensorwire`` and the hooks style send a joined blob with ``send_bytes`` and read one with
    ``recv_bytes`` (read-only bytes, so both copy the tensor out of it); ``tensorwire, pipe.Receiver``
    uses ``tensorwire.pipe``: the blob is read into a reused writable buffer and the tensor is
    built on it, not copied.
    """

    send: Callable[[Any], None]
    recv: Callable[[], Any]

    def __init__(self, implementation: str, conn: Connection) -> None:
        if implementation in (TENSORWIRE, TENSORWIRE_PIPE):
            import tensorwire as tw
            from tensorwire import pipe

            encoder, decoder = _tensorwire()
            if implementation == TENSORWIRE:
                self.send = lambda message: conn.send_bytes(tw.join(encoder.encode(message)))
                self.recv = lambda: decoder.decode(tw.split(conn.recv_bytes()))
            else:
                receiver = pipe.Receiver(conn, initial=_PIPE_BUFFER)
                self.send = lambda message: pipe.send(conn, encoder.encode(message))
                self.recv = lambda: decoder.decode(receiver.recv())
        else:
            hooks = HooksCodec()
            self.send = lambda message: conn.send_bytes(join_frames(hooks.encode(message)))
            self.recv = lambda: hooks.decode(split_frames(conn.recv_bytes()), HooksOne)


def _echo(conn: Connection, implementation: str, cpus: set[int] | None = None) -> None:
    """The child: decode each message, encode it again and send it back, until the parent closes its end."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    pipe_codec = _PipeCodec(implementation, conn)
    conn.send_bytes(b"ready")
    try:
        while True:
            pipe_codec.send(pipe_codec.recv())  # the message is let go of before the next
    except EOFError:
        pass
    conn.close()


def measure_pipe(blocks: int = 15, messages: int = 300, seed: int = 0) -> list[dict[str, Any]]:
    """A 4 KiB ``bench.One`` (1024 float32) echoed by a spawned child over a Pipe, per implementation.

    Rows as ``measure``'s: wall-clock microseconds per round trip (median, min and max over
    ``blocks`` interleaved blocks of ``messages`` round trips), ratio to the hooks style.
    """
    context = mp.get_context("spawn")
    tensor = torch.randn(1024)
    ours_message = bench_registry().type("bench.One")(request_id="req-1", tensor=tensor)
    messages_of = {
        TENSORWIRE: ours_message,
        TENSORWIRE_PIPE: ours_message,
        HOOKS: HooksOne(request_id="req-1", tensor=tensor),
    }
    children: dict[str, tuple[Any, Connection]] = {}
    cpus = two_cpus()
    placed = os.sched_getaffinity(0) if cpus is not None else None
    try:
        for name in messages_of:
            ours, theirs = context.Pipe()
            child = context.Process(target=_echo, args=(theirs, name, None if cpus is None else cpus[1]), daemon=True)
            child.start()
            theirs.close()
            children[name] = (child, ours)
        for name, (_, ours) in children.items():  # the children start (import torch) together
            if not ours.poll(120) or ours.recv_bytes() != b"ready":
                raise RuntimeError(f"{name}: the echo child did not start")
        codecs = {name: _PipeCodec(name, children[name][1]) for name in messages_of}
        if cpus is not None:
            os.sched_setaffinity(0, cpus[0])

        def block(name: str, count: int) -> float:
            send, recv = codecs[name].send, codecs[name].recv
            message = messages_of[name]
            reply = None
            start = time.perf_counter_ns()
            for _ in range(count):
                reply = None  # a consumer lets go of one reply before it asks for the next
                send(message)
                reply = recv()
            elapsed = time.perf_counter_ns() - start
            if reply is None or not _same_tensors([reply.tensor], [tensor]):
                raise AssertionError(f"{name}: the echo came back different")
            return elapsed / count / 1e3

        rng = random.Random(seed)
        names = list(messages_of)
        for name in names:
            block(name, max(1, messages // 10))
        samples: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(blocks):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                samples[name].append(block(name, messages))
    finally:
        if placed is not None:
            os.sched_setaffinity(0, placed)
        for _, conn in children.values():
            conn.close()  # the child reads EOF and ends
        for child, _ in children.values():
            child.join(timeout=10)
            if child.is_alive():
                child.terminate()
                child.join()
    return _rows("4 KiB tensor (bench.One) echoed over a Pipe, wall time", HOOKS, samples, "us")


def _number(value: float, unit: str) -> str:
    if unit == "calls":
        return f"{value:.0f} calls"
    return f"{value:.2f} us" if value < 100 else f"{value:.1f} us"


def render(rows: Sequence[dict[str, Any]]) -> str:
    """A markdown table of rows from ``measure``, ``measure_calls`` and ``measure_pipe``."""
    lines = [
        "| case | implementation | median | min - max | x reference |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        unit = row["unit"]
        spread = "-" if row["min"] == row["max"] else f"{_number(row['min'], unit)} - {_number(row['max'], unit)}"
        ratio = "1 (reference)" if row["implementation"] == row["reference"] else f"{row['ratio']:.2f}"
        if not math.isfinite(row["ratio"]):
            ratio = "n/a"
        lines.append(
            f"| {row['case']} | {row['implementation']} | {_number(row['median'], unit)} | {spread} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.bench.small``: measure, print a markdown table (or JSON)."""
    parser = argparse.ArgumentParser(prog="python -m tools.bench.small", description=_DESCRIPTION)
    parser.add_argument("--rounds", type=int, default=15, help="in-process rounds (default 15)")
    parser.add_argument("--number", type=int, default=300, help="round trips per in-process sample (default 300)")
    parser.add_argument("--blocks", type=int, default=15, help="Pipe blocks per implementation (default 15)")
    parser.add_argument("--messages", type=int, default=300, help="round trips per Pipe block (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled order (default 0)")
    parser.add_argument("--no-pipe", action="store_true", help="skip the cross-process case")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = measure(args.rounds, args.number, args.seed) + measure_calls()
    if not args.no_pipe:
        rows += measure_pipe(args.blocks, args.messages, args.seed)
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
