"""Frame 0 stays within ``max_header_bytes``: small tensors fill at most half of it, the rest travel
in buffers, and a frame 0 over the limit is an ``EncodeError`` before anything is exported."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire._tensors import embed_room
from tensorwire._wire import DATA_MAX, EMPTY_DATA, data_header
from tensorwire.builtins import REGISTRY, diffusion, rpc
from tests.wire_helpers import frame_of, head_of, segments_of, tensor_exts

SHM = transports.ShmTransport(pool=False)
BENCH_SCHEMAS = Path(__file__).resolve().parents[1] / "tools" / "bench" / "schemas"


@pytest.fixture(autouse=True)
def no_segments_left() -> Any:
    before = set(segments_of(os.getpid()))
    yield
    assert set(segments_of(os.getpid())) <= before


def _limited(max_header_bytes: int, **options: Any) -> tuple[tw.Encoder, tw.Decoder]:
    limits = tw.Limits(max_header_bytes=max_header_bytes)
    encoder = tw.Encoder(transport=SHM, options=tw.EncodeOptions(limits=limits, **options))
    return encoder, tw.Decoder(REGISTRY, transports=[SHM], options=tw.DecodeOptions(limits=limits))


def _kinds(frame0: Any) -> list[int]:
    return [ext.code for ext in tensor_exts(head_of(frame0)[4])]


@pytest.mark.parametrize(
    "make",
    [
        lambda i: torch.full((1024,), float(i)),  # the quick path
        lambda i: torch.full((1, 1024), float(i)),  # a dim of size 1: the general path
        lambda i: np.full(1024, i, np.float32),  # an ndarray
    ],
    ids=["tensor", "tensor-with-unit-dim", "ndarray"],
)
def test_small_tensors_past_half_the_header_limit_travel_in_buffers(make: Any) -> None:
    encoder, decoder = _limited(64 * 1024)  # room for 32 KiB of tensors inside frame 0: eight of 4 KiB
    assert embed_room(encoder.options.limits) == 32 * 1024
    values = [make(i) for i in range(20)]
    frames = encoder.encode(diffusion.Output(output=values))
    assert _kinds(frames[0]) == [3] * 8 + [1] * 12  # eight inside frame 0, then one buffer each
    assert len(frames) == 1 + 12 and len(head_of(frames[0])[2]) == 8 * 4096
    assert len(frames[0]) <= 64 * 1024
    out = decoder.decode(frames).output
    assert len(out) == 20
    for got, sent in zip(out, values, strict=True):
        assert type(got) is type(sent)
        assert np.array_equal(np.asarray(got), np.asarray(sent))


def test_default_limits_never_make_a_frame_0_the_default_decoder_refuses() -> None:
    # 2,100 tensors just under the 32 KiB embed threshold: 68 MB, over the 64 MiB header limit if all embedded
    values = [torch.full((8191,), float(i)) for i in range(2100)]
    frames = tw.Encoder().encode(diffusion.Output(output=values))
    assert len(frames[0]) <= tw.Limits().max_header_bytes
    kinds = _kinds(frames[0])
    embedded = kinds.count(3)
    assert embedded == (32 * 1024 * 1024) // (8191 * 4) and kinds == [3] * embedded + [1] * (2100 - embedded)
    out = tw.Decoder(REGISTRY).decode(frames).output
    assert all(torch.equal(got, sent) for got, sent in zip(out, values, strict=True))


@pytest.mark.parametrize("tensor_free", [True, False], ids=["tensor-free type", "type that may hold tensors"])
def test_a_body_over_the_header_limit_is_an_encode_error(tensor_free: bool) -> None:
    encoder, decoder = _limited(1024)
    if tensor_free:  # the encoder's path for types that hold no tensor
        bench = tw.load_schemas(BENCH_SCHEMAS)
        envelope = bench.type("bench.Envelope")
        fields = {"request_id": "r", "model": "m", "priority": 0, "max_tokens": 1, "temperature": 0.0, "top_p": 0.0}
        big, fits, type_id = (
            envelope(prompt="x" * 2000, **fields),
            envelope(prompt="x" * 500, **fields),
            "bench.Envelope",
        )
        decoder = tw.Decoder(bench, options=decoder.options)
    else:
        big, fits, type_id = (
            rpc.Request(method="m", wave_request_ids=["x" * 200] * 10),
            rpc.Request(method="m"),
            "rpc.Request",
        )
    with pytest.raises(tw.EncodeError) as caught:
        encoder.encode(big)
    assert caught.value.type_id == type_id and caught.value.version == 1 and caught.value.path is None
    assert caught.value.message.startswith("frame 0 of ")
    assert caught.value.message.endswith(" bytes is over the limit of 1024 (limit max_header_bytes)")
    assert decoder.decode(encoder.encode(fits)) == fits  # within it


def test_a_body_over_the_header_limit_exports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    encoder, _ = _limited(1024, inline_threshold=1)  # the tensor through shared memory
    exported: list[Any] = []
    original = SHM.export

    def counting(*args: Any, **kwargs: Any) -> Any:
        exported.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(SHM, "export", counting)
    with pytest.raises(tw.EncodeError, match=r"^diffusion.Output: frame 0 of \d+ bytes is over the limit of 1024"):
        encoder.encode(diffusion.Output(output={"note": "x" * 2000, "t": torch.zeros(100_000)}))
    assert exported == []


def test_a_buffer_table_that_takes_frame_0_over_the_limit_releases_what_was_exported() -> None:
    message = diffusion.Output(output=[torch.zeros(100_000), torch.ones(100_000)])
    roomy, decoder = _limited(1 << 20, inline_threshold=1)
    frames = roomy.encode(message)
    size = len(frames[0])
    decoder.decode(frames)  # (which takes its segments back)
    tight, _ = _limited(size - 1, inline_threshold=1)  # the body alone fits; with the table it does not
    before = set(segments_of(os.getpid()))
    with pytest.raises(tw.EncodeError, match=rf"frame 0 of {size} bytes is over the limit of {size - 1}"):
        tight.encode(message)
    assert set(segments_of(os.getpid())) <= before


@pytest.mark.parametrize("total", [1, 255, 256, 65535, 65536, 70000])
def test_frame_0_data_headers_are_canonical_msgpack(total: int) -> None:
    encoder = tw.Encoder(options=tw.EncodeOptions(embed_threshold=40_000))
    sizes = [min(30_000, total - start) for start in range(0, total, 30_000)]
    values = [np.full(n, i, np.uint8) for i, n in enumerate(sizes)]
    frames = encoder.encode(diffusion.Output(output=values))
    assert len(frames) == 1 and len(head_of(frames[0])[2]) == total
    head = head_of(frames[0])
    opening = frame_of(head[:3])  # tag, fingerprint and data as msgspec itself writes them
    assert frames[0][1 : len(opening)] == opening[1:]
    assert data_header(total) == msgspec.msgpack.encode(bytes(total))[: len(data_header(total))]


def test_data_header_bounds() -> None:
    assert data_header(0) == EMPTY_DATA
    assert data_header(DATA_MAX) == b"\xc6\xff\xff\xff\xff"
    with pytest.raises(ValueError, match=r"4294967296 bytes of tensors inside frame 0 is over the 4294967295"):
        data_header(DATA_MAX + 1)
    assert embed_room(tw.Limits(max_header_bytes=1 << 40)) == DATA_MAX
