"""The incumbent engine RPC codec style, as a benchmark peer: a msgspec Struct plus hooks.

This is the style of vLLM V1's msgpack encoder, written here from its description: plain
``msgspec.Struct`` messages, an ``enc_hook`` that turns a (CPU) ``torch.Tensor`` into
``(dtype name, shape, data)``, a ``dec_hook`` that rebuilds it for fields annotated
``torch.Tensor`` and an ``ext_hook`` for the inline bytes. ``data`` is the tensor's raw bytes
inline (a msgpack ext) when the tensor has fewer than ``inline_below`` bytes, and otherwise the
index of a side frame holding them: a memoryview of a contiguous uint8 view of the tensor, so a
contiguous tensor is not copied on encode. Decoding rebuilds the tensor with ``torch.frombuffer``
over the side frame (over a ``bytearray`` copy when that frame is read-only) or over a copy of the
inline bytes.

There are no schema checks, no type ids, no versions: the receiver must know the type. A tensor at
an untyped (``Any``) position comes back as the bare ``[dtype, shape, data]`` list.

In process, a side frame is a writable view of the source tensor, so ``decode(encode(x))`` gives
tensors that share memory with ``x``; frames that went through a pipe or socket arrive as new
(read-only) bytes and are copied once.

``join_frames``/``split_frames`` put the frames into one blob (a frame count and the frame lengths,
little-endian u32, then the frames back to back) for transports that carry a single message.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, TypeAlias, TypeVar

import msgspec
import torch

__all__ = ["INLINE_EXT_CODE", "Buffer", "HooksCodec", "join_frames", "split_frames"]

Buffer: TypeAlias = bytes | bytearray | memoryview
T = TypeVar("T")

INLINE_EXT_CODE = 3
"""The msgpack ext code of a small tensor's inline raw bytes."""

_U32 = struct.Struct("<I")


class HooksCodec:
    """Encode msgspec messages holding CPU tensors to frames, and decode them back.

    ``encode(obj)`` returns ``[msgpack body, side frame 0, side frame 1, ...]``;
    ``decode(frames, type)`` decodes ``frames[0]`` as ``type`` and takes the large tensors' bytes
    from the side frames. One instance keeps per-call state: do not share it between threads.
    """

    def __init__(self, inline_below: int = 256) -> None:
        """``inline_below``: tensors with fewer bytes than this travel inline in the body."""
        self.inline_below = inline_below
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)
        self._decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}
        self._writing: list[Buffer] | None = None
        self._reading: Sequence[Buffer] = ()

    def encode(self, obj: object) -> list[Buffer]:
        """The frames of ``obj``: the msgpack body first, then one frame per large tensor."""
        frames: list[Buffer] = [b""]
        self._writing = frames
        try:
            frames[0] = self._encoder.encode(obj)
        finally:
            self._writing = None
        return frames

    def decode(self, frames: Sequence[Buffer], type: type[T]) -> T:
        """Decode frames made by ``encode`` as ``type`` (a Struct class, or any msgspec type)."""
        decoder = self._decoders.get(type)
        if decoder is None:
            decoder = msgspec.msgpack.Decoder(type, dec_hook=self._dec_hook, ext_hook=self._ext_hook)
            self._decoders[type] = decoder
        self._reading = frames
        try:
            result: T = decoder.decode(frames[0])
        finally:
            self._reading = ()
        return result

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._encode_tensor(obj)
        raise TypeError(f"cannot encode objects of type {type(obj).__name__}")

    def _encode_tensor(self, tensor: torch.Tensor) -> tuple[str, tuple[int, ...], Any]:
        if tensor.device.type != "cpu":
            raise ValueError(f"only CPU tensors are supported, got one on {tensor.device}")
        # reshape(-1) and contiguous() are views for a contiguous tensor: no copy
        raw = tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy().data
        data: Any
        if raw.nbytes < self.inline_below:
            data = msgspec.msgpack.Ext(INLINE_EXT_CODE, raw)
        else:
            assert self._writing is not None
            data = len(self._writing)
            self._writing.append(raw)
        return str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), data

    def _dec_hook(self, type: Any, obj: Any) -> Any:
        if type is torch.Tensor:
            return self._decode_tensor(obj)
        raise NotImplementedError(f"cannot decode objects of type {type!r}")

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code == INLINE_EXT_CODE:
            return data
        raise NotImplementedError(f"unknown msgpack ext code {code}")

    def _decode_tensor(self, obj: Any) -> torch.Tensor:
        name, shape, data = obj
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {name!r}")
        buffer: Buffer
        if isinstance(data, int):
            buffer = self._reading[data]
            if memoryview(buffer).readonly:  # torch.frombuffer wants a writable buffer
                buffer = bytearray(buffer)
        else:  # inline: copy out of the message body
            buffer = bytearray(data)
        if len(buffer) == 0:  # torch.frombuffer refuses empty buffers
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).view(shape)


def join_frames(frames: Sequence[Buffer]) -> bytes:
    """One blob: the frame count, each frame's length (little-endian u32), then the frames."""
    head = [_U32.pack(len(frames))]
    head.extend(_U32.pack(memoryview(frame).nbytes) for frame in frames)
    return b"".join([*head, *frames])


def split_frames(blob: Buffer) -> list[memoryview]:
    """The frames of a blob made by ``join_frames``, as memoryviews into it (no copy)."""
    view = memoryview(blob).cast("B")
    (count,) = _U32.unpack_from(view, 0)
    pos = _U32.size * (1 + count)
    frames = []
    for i in range(count):
        (length,) = _U32.unpack_from(view, _U32.size * (1 + i))
        frames.append(view[pos : pos + length])
        pos += length
    if pos != view.nbytes:
        raise ValueError(f"blob of {view.nbytes} bytes, its frame table says {pos}")
    return frames
