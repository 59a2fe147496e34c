"""In-process encode+decode of small RPC envelopes against a raw msgspec Struct and pickle.

Two floors say what no implementation of this wire format in Python goes below: the header and
body of an envelope written and read with msgspec, no checks; and a 16x16 tensor turned into
bytes and back into a tensor around a raw msgspec round trip (torch's own cost).
"""

from __future__ import annotations

import pickle
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec
import torch

__all__ = ["measure_small"]


class RawRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The same fields as rpc.Request, hand-written: the baseline."""

    method: str
    args: Any = []
    kwargs: dict[str, Any] = {}
    rpc_id: str | None = None
    unique_reply_rank: int | None = None
    exec_all_ranks: bool = False
    collect_rank_status: bool = False
    wave_id: str | None = None
    wave_request_ids: list[str] | None = None


class RawFrame(msgspec.Struct, array_like=True):
    """Frame 0 of a message without buffers, hand-written: tag, fingerprint, data, buffer table, body."""

    tag: str
    fingerprint: str
    data: bytes
    buffers: list[Any]
    body: RawRequest


def _time(fn: Callable[[], Any], rounds: int = 7, number: int = 2000) -> float:
    fn()
    best = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best.append((time.perf_counter() - start) / number)
    return statistics.median(best)


def measure_small() -> list[dict[str, Any]]:
    import tensorwire as tw
    from tensorwire._wire import EMPTY_DATA, prefix
    from tensorwire.builtins import REGISTRY, rpc

    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    fields: dict[str, Any] = {"method": "generate", "args": [1, 2], "kwargs": {"steps": 30}, "rpc_id": "r-1"}
    envelope = rpc.Request(**fields)
    raw = RawRequest(**fields)
    raw_decoder = msgspec.msgpack.Decoder(RawRequest)
    tensor = torch.randn(16, 16)
    with_tensor = rpc.Request(**{**fields, "kwargs": {"latents": tensor}})
    raw_bytes_fields = {**fields, "kwargs": {"latents": tensor.numpy().tobytes()}}
    raw_with_tensor = RawRequest(**raw_bytes_fields)
    info = rpc.Request.__tw_type__
    # frame 0 up to the body of a message with no tensor data and no buffers
    envelope_start = prefix(info.type_id, info.version, info.fingerprint) + EMPTY_DATA + b"\x90"
    frame_decoder = msgspec.msgpack.Decoder(RawFrame)

    def wire_floor() -> Any:
        head = envelope_start + msgspec.msgpack.encode(raw)
        return frame_decoder.decode(head).body

    assert envelope_start + msgspec.msgpack.encode(raw) == encoder.encode(envelope)[0]  # the same bytes

    def torch_floor() -> Any:
        blob = msgspec.msgpack.encode(RawRequest(**{**fields, "kwargs": {"latents": tensor.numpy().data}}))
        got = raw_decoder.decode(blob)
        return torch.frombuffer(bytearray(got.kwargs["latents"]), dtype=torch.float32).view(16, 16)

    assert torch.equal(torch_floor(), tensor)
    rows = [
        ("envelope: tensorwire encode+decode", lambda: decoder.decode(encoder.encode(envelope))),
        ("envelope: raw msgspec Struct round trip", lambda: raw_decoder.decode(msgspec.msgpack.encode(raw))),
        ("envelope: floor: header + body, no checks (msgspec)", wire_floor),
        ("envelope: pickle round trip", lambda: pickle.loads(pickle.dumps(envelope, protocol=5))),
        ("16x16 tensor: tensorwire encode+decode", lambda: decoder.decode(encoder.encode(with_tensor))),
        (
            "16x16 tensor: raw msgspec Struct (bytes) round trip",
            lambda: raw_decoder.decode(msgspec.msgpack.encode(raw_with_tensor)),
        ),
        ("16x16 tensor: floor: tensor to bytes, raw msgspec, bytes to tensor", torch_floor),
        ("16x16 tensor: pickle round trip", lambda: pickle.loads(pickle.dumps(with_tensor, protocol=5))),
    ]
    return [{"case": label, "us": _time(fn) * 1e6} for label, fn in rows]
