"""Valid seed messages of the built-in types, and their encoded templates.

Every seed is built deterministically (fixed generators), so every process gets the same bytes.
A template is a seed encoded by the real ``tw.Encoder`` through a recording transport, in one
of the ``LAYOUTS`` (small tensors inside frame 0, their bytes in its data and an ``ext(3)`` in the
body, the others in inline frames or out of band, each described by an ``ext(1)``): frame 0 holds
a placeholder handle for each out-of-band buffer, whose bytes the template keeps; a case exports
those bytes through the decoding worker's own sender and binds the real handles in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import numpy as np
import torch

import tensorwire as tw
from tensorwire.builtins import diffusion, media, rpc
from tensorwire.transports.base import Buffer, Handle, Transport
from tensorwire.transports.shm import ShmHandle, SlotHandle

__all__ = [
    "ALL_INLINE",
    "EMBED",
    "EMBEDDED",
    "LAYOUTS",
    "LEAKED",
    "OUT_OF_BAND",
    "PLAIN",
    "SEEDS",
    "Layout",
    "Template",
    "message",
    "template",
]

ALL_INLINE = 2**62
EMBED = tw.EncodeOptions().embed_threshold  # the encoder's default: tensors below it travel in frame 0
Layout = tuple[int, int]  # (inline_threshold, embed_threshold) of the encoder
LAYOUTS: tuple[Layout, ...] = (
    (0, 0),  # every tensor in a buffer of its own, every buffer out of band
    (1024, 0),  # the larger buffers out of band, the others inline frames
    (ALL_INLINE, 0),  # every buffer an inline frame
    (0, 1024),  # the smallest tensors inside frame 0, the others out of band
    (ALL_INLINE, EMBED),  # the encoder's defaults for small messages: tensors inside frame 0
    (0, EMBED),  # small tensors inside frame 0, the others out of band
)
OUT_OF_BAND: tuple[Layout, ...] = ((0, 0), (1024, 0), (0, 1024))  # layouts whose seeds have out-of-band buffers
EMBEDDED: tuple[Layout, ...] = ((0, 1024), (ALL_INLINE, EMBED), (0, EMBED))  # layouts with tensor bytes in frame 0


PLAIN = tw.load_schemas(Path(__file__).parent / "schemas")
"""Types that hold no tensor, tree or untyped value (``plain.*`` open, ``closed.*`` rejecting unknown
fields): the decoder reads their bodies alone (``tensorwire._plain``): a closed type uncounted, an open
one with no struct inside as its closed twin, an open one with structs through its closed mirror."""


def _g(n: int) -> torch.Generator:
    return torch.Generator().manual_seed(n)


def _float_video() -> Any:
    return media.Video(
        tensor=torch.randn(1, 3, 2, 8, 8, generator=_g(4)).to(torch.bfloat16),
        layout=media.VideoTensorLayout.BCTHW,
        encoding=media.VideoTensorEncoding.NORMALIZED_FLOAT,
        value_range=media.VideoValueRange.ZERO_TO_ONE,
        pending_float_consumers=frozenset(media.FloatVideoConsumer),
        preserve_input_dtype=True,
    )


def _frames_video() -> Any:
    return media.Media(
        video=media.Video(
            tensor=torch.randint(0, 255, (1, 2, 4, 6, 3), dtype=torch.uint8, generator=_g(5)),
            layout=media.VideoTensorLayout.BTHWC,
            encoding=media.VideoTensorEncoding.UINT8_FRAMES,
            value_range=media.VideoValueRange.ZERO_TO_255,
        ),
        metadata={"fps": 24},
    )


def _views() -> Any:
    base = torch.arange(240, dtype=torch.float32).reshape(4, 60)
    return diffusion.Output(output=(base, base[1:, ::2], {"k": torch.ones(3, dtype=torch.bfloat16)}))


def _golden(type_id: str, case: str) -> Callable[[], Any]:
    """A builder of the golden fixtures (``tensorwire.builtins.golden``): the full field set of a built-in type."""
    from tensorwire.builtins.golden import cases

    return dict(cases()[type_id])[case]


def _batch() -> Any:
    step = diffusion.RunnerOutput(
        request_id="a", step_index=1, result=diffusion.Output(output=torch.randn(3, 4, generator=_g(14)))
    )
    return diffusion.RunnerBatch(runner_outputs=[step, diffusion.RunnerOutput(request_id="b", finished=True)])


def _result() -> Any:
    tagged = diffusion.DpTagged(dp_rank=1, output=diffusion.Output(output=[torch.arange(6, dtype=torch.int32)]))
    status = [rpc.RankStatus(rank=0, ok=True, bool_result=True)]
    return rpc.Result(method="generate", ok=True, payload=tagged, rank_statuses=status, rpc_id="r7")


def _dtypes() -> Any:
    g = _g(9)
    values = [
        torch.randn(4, generator=g).to(torch.float8_e4m3fn),
        torch.randn(4, generator=g).to(torch.float8_e5m2),
        torch.randn(3, generator=g, dtype=torch.complex64),
        np.arange(3, dtype=np.uint64),
        torch.tensor([True, False, True]),
        np.linspace(0, 1, 5, dtype=np.float16),
        np.arange(4, dtype=np.complex128),
        torch.arange(4, dtype=torch.int8),
    ]
    return rpc.Value(value=values)


def _strided() -> Any:
    value = {
        "t": torch.arange(60, dtype=torch.float32).reshape(3, 4, 5).permute(2, 0, 1),
        "rev": np.arange(10, dtype=np.float64)[::-1],
        "step": np.arange(24, dtype=np.int32).reshape(4, 6)[::2, ::3],
        "rank8": torch.zeros((1, 2, 1, 2, 1, 2, 1, 2)),
        "scalar": torch.tensor(3.5),
        "np0": np.array(7, dtype=np.int64),
    }
    return rpc.Value(value=value)


def _rpc_tensors() -> Any:
    kwargs = {"x": torch.randn(16, 16, generator=_g(1)), "a": np.arange(5, dtype=np.int16)}
    return rpc.Request(method="m", kwargs=kwargs, exec_all_ranks=True)


def _tree() -> Any:
    value: Any = torch.ones(2)
    for i in range(20):
        value = (value, i, None) if i % 2 else [value, {"k": i, "s": "x" * i}]
    return rpc.Value(value=value)


def _flat(ns: str, tags: int = 2) -> Any:
    grid = [[1.5, -0.0], [float("inf")]]
    return PLAIN.type(f"{ns}.Flat")(id="f-1", count=3, tags=[f"t{i}" for i in range(tags)], grid=grid, attrs={"k": 1})


def _ticket(ns: str, items: int = 2) -> Any:
    inner = PLAIN.type(f"{ns}.Inner")
    rows = [inner(level=i, rows=[[i, 2], []]) for i in range(items)]
    return PLAIN.type(f"{ns}.Ticket")(id="t-1", inner=inner(level=0, rows=[[1]]), items=rows)


SEEDS: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("rpc-plain", lambda: rpc.Request(method="generate", args=[1, (2.5, "x")], kwargs={"t": (None, b"b")}, rpc_id="r")),
    ("rpc-tensors", _rpc_tensors),
    ("views", _views),
    ("empty", lambda: diffusion.Output(output=[torch.zeros(0), np.ones((2, 3)), True, torch.zeros(3, 0, 2)])),
    ("video", lambda: diffusion.Output(media=media.Media(video=_float_video(), metadata={"tags": ["a", {"b": None}]}))),
    ("frames-u8", _frames_video),
    ("legacy", _golden("diffusion.Output", "tree_output")),
    ("batch", _batch),
    ("result", _result),
    ("dtypes", _dtypes),
    ("strided", _strided),
    ("tree", _tree),
    ("leaked", lambda: diffusion.Output(output=[torch.randn(32, 32, generator=_g(12)), torch.arange(100)])),
    ("big", lambda: diffusion.Output(output=torch.randn(70_000, generator=_g(13)), stage_durations={"a": 1.0})),
    ("plain-flat", lambda: _flat("plain")),  # read as its closed twin
    ("plain-flat-large", lambda: _flat("plain", 400)),  # frame 0 past the size a count reads whole
    ("plain-ticket", lambda: _ticket("plain")),  # counted; read through its closed mirror past the count
    ("plain-many", lambda: _ticket("plain", 40)),  # more level openers than the count lets through
    ("closed-flat", lambda: _flat("closed")),  # bounded by its type: uncounted
    ("closed-ticket", lambda: _ticket("closed", 40)),
)
LEAKED = 12  # the seed the victim sends itself and leaks (its handles carry real capabilities)


def message(index: int) -> Any:
    """A fresh copy of seed ``index``."""
    return SEEDS[index][1]()


_PLACEHOLDER = "tw-1-" + "0" * 32 + "-0"


class _Recorder(Transport):
    """A transport that keeps the bytes of every export and hands out a placeholder handle."""

    name: ClassVar[str] = "shm"
    handle_types: ClassVar[tuple[type[Handle], ...]] = (ShmHandle, SlotHandle)

    def __init__(self) -> None:
        self.data: list[bytes] = []

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        self.data.append(bytes(data))
        return SlotHandle(name=_PLACEHOLDER, offset=0, generation=1, capability=bytes(16))

    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        """Never reads."""

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        raise NotImplementedError

    def release(self, handle: Handle) -> None:
        """Holds nothing."""

    def close(self) -> None:
        """Holds nothing."""


@dataclass(frozen=True)
class Template:
    """A seed encoded: frames (placeholder handles in frame 0), each out-of-band buffer as
    ``(buffer table index, bytes)``, and the size of frame 0's data."""

    name: str
    frames: tuple[bytes, ...]
    oob: tuple[tuple[int, bytes], ...]
    data: int = 0


@cache
def template(index: int, layout: Layout) -> Template:
    """Seed ``index`` encoded with ``inline_threshold, embed_threshold = layout``."""
    recorder = _Recorder()
    options = tw.EncodeOptions(inline_threshold=layout[0], embed_threshold=layout[1])
    frames = tw.Encoder(recorder, options).encode(message(index))
    head = msgspec.msgpack.decode(frames[0])  # [tag, fingerprint, data, [[nbytes, handle], ...], body]
    entries = head[3]
    slots = [i for i, entry in enumerate(entries) if entry[1]["transport"] != "inline"]
    if len(slots) != len(recorder.data):
        raise AssertionError(f"seed {SEEDS[index][0]}: {len(slots)} out-of-band entries, {len(recorder.data)} exports")
    oob = tuple(zip(slots, recorder.data, strict=True))
    return Template(SEEDS[index][0], tuple(bytes(f) for f in frames), oob, len(head[2]))
