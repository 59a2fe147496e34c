"""Readable descriptions of a message's header: ``tensorwire inspect`` and the demo's table."""

from __future__ import annotations

from typing import Any

import msgspec

from codec.errors import DecodeError
from codec.scan import check_depth
from codec.wire import EXT_TENSOR, EXT_TUPLE, Buffer

__all__ = ["describe"]


class _Ref:
    def __init__(self, index: int) -> None:
        self.index = index


def describe(header_frame: Buffer, max_depth: int = 66) -> dict[str, Any]:
    """Type, version, fingerprint, each buffer (transport, size, handle) and each tensor with its body path."""
    check_depth(memoryview(header_frame).cast("B"), max_depth)

    def ext_hook(code: int, data: memoryview) -> Any:
        if code == EXT_TENSOR:
            return _Ref(int.from_bytes(data, "little"))
        if code == EXT_TUPLE:
            return tuple(msgspec.msgpack.decode(data, ext_hook=ext_hook))
        return {"$ext": code}

    try:
        header = msgspec.msgpack.decode(header_frame, ext_hook=ext_hook)
    except msgspec.MsgspecError as exc:
        raise DecodeError(f"invalid header: {exc}") from None
    if not isinstance(header, dict):
        raise DecodeError("invalid header: frame 0 is not a msgpack map")
    paths: dict[int, str] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, _Ref):
            paths.setdefault(value.index, path)
            return {"$tensor": value.index}
        if isinstance(value, dict):
            return {k: walk(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, bytes):
            return {"$bytes": len(value)}
        return value

    body = walk(header.get("body"), "$")
    buffers = [
        {
            "index": i,
            "transport": entry["handle"].get("transport"),
            "nbytes": entry["nbytes"],
            "handle": entry["handle"],
        }
        for i, entry in enumerate(header.get("buffers", []))
        if isinstance(entry, dict) and isinstance(entry.get("handle"), dict)
    ]
    tensors = []
    for i, desc in enumerate(header.get("tensors", [])):
        kind, dtype, shape, strides, offset, buffer, nbytes = (list(desc) + [None] * 7)[:7]
        tensors.append(
            {
                "index": i,
                "path": paths.get(i),
                "kind": kind,
                "dtype": dtype,
                "shape": shape,
                "strides": strides,
                "offset": offset,
                "buffer": buffer,
                "nbytes": nbytes,
            }
        )
    return {
        "type": header.get("type"),
        "version": header.get("version"),
        "fingerprint": header.get("fingerprint"),
        "wire": header.get("wire"),
        "buffers": buffers,
        "tensors": tensors,
        "body": body,
    }
