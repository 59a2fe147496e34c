"""Wire descriptors -> tensors and arrays: each descriptor checked against its buffer and the
limits (``verify_descriptor``) before a tensor or array is built on it (``build``, on a buffer;
``build_inline``, a private copy of bytes inside frame 0's data).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from tensorwire._shape import ALIGN, c_strides, extent, shape_problem
from tensorwire._wire import Descriptor
from tensorwire.dtypes import DTYPES
from tensorwire.options import Limits

__all__ = ["BUILD", "as_base", "build", "build_inline", "verify_descriptor"]

BUILD = {  # name -> (torch dtype, numpy dtype or None, itemsize), for building tensors quickly
    d.name: (getattr(torch, d.torch_name), np.dtype(d.numpy_name) if d.numpy_name else None, d.itemsize)
    for d in DTYPES.values()
}


def verify_descriptor(
    desc: Descriptor, buffer_sizes: list[int], limits: Limits, data_size: int = 0
) -> tuple[str, str] | None:
    """Why ``desc`` cannot be trusted, as ``(path suffix like ".shape[2]", reason)``; None if it is sound.

    ``buffer_sizes`` are the sizes of the message's buffers; an inline descriptor (``buffer`` -1)
    is checked against frame 0's data, of ``data_size`` bytes.
    """
    known = BUILD[desc.dtype]
    numpy_dtype, itemsize = known[1], known[2]
    kind = desc.kind
    if kind == "ndarray" and numpy_dtype is None:
        return ".dtype", f"numpy has no dtype {desc.dtype!r}"
    shape, strides = desc.shape, desc.strides
    rank = len(shape)
    if rank > limits.max_rank:
        return ".shape", f"rank {rank} is over the limit of {limits.max_rank}"
    numel = math.prod(shape)  # of at most 255 dims (the wire holds a rank in a byte): a bounded product
    if not 0 < numel * itemsize <= limits.max_tensor_bytes:  # else no dim can be over the limit either
        problem = shape_problem(list(shape), itemsize, limits.max_tensor_bytes)
        if problem is not None:
            return problem
    if desc.nbytes != numel * itemsize:
        return ".nbytes", f"{desc.nbytes} != prod(shape) * itemsize = {numel * itemsize}"
    if desc.buffer < 0:  # inside frame 0: its bytes are in frame 0's data
        if desc.offset + desc.nbytes > data_size:
            return ".offset", (
                f"bytes [{desc.offset}, {desc.offset + desc.nbytes}) are outside frame 0's {data_size} bytes of data"
            )
        if strides is not None:
            canonical = c_strides(shape)
            for axis, stride in enumerate(strides):
                if stride != canonical[axis] and shape[axis] != 1 and numel:
                    return f".strides[{axis}]", f"{stride} is not the stride of a contiguous tensor"
                if abs(stride) > limits.max_tensor_bytes:
                    return f".strides[{axis}]", f"{stride} is out of range"
                if stride < 0 and kind == "tensor":
                    return f".strides[{axis}]", f"torch tensors have no negative strides, got {stride}"
        return None
    if desc.buffer >= len(buffer_sizes):
        return ".buffer", f"{desc.buffer} names no buffer (the message has {len(buffer_sizes)})"
    size = buffer_sizes[desc.buffer]
    offset = desc.offset
    if offset % itemsize:
        return ".offset", f"{offset} is not a multiple of the itemsize {itemsize}"
    if strides is not None:
        for axis, stride in enumerate(strides):
            if abs(stride) > limits.max_tensor_bytes:
                return f".strides[{axis}]", f"{stride} is out of range"
            if stride < 0 and kind == "tensor":
                return f".strides[{axis}]", f"torch tensors have no negative strides, got {stride}"
    if numel == 0:
        return None if offset <= size else (".offset", f"{offset} is past the end of a {size}-byte buffer")
    lo, hi = (offset, offset + desc.nbytes) if strides is None else extent(offset, shape, strides, itemsize)
    if lo < 0 or hi > size:
        return ".strides", f"elements reach bytes [{lo}, {hi}) outside the {size}-byte buffer {desc.buffer}"
    return None


def build(desc: Descriptor, buffer: Any, base: torch.Tensor | None) -> Any:
    """The tensor or array ``desc`` (verified) describes on ``buffer``; ``base``: a uint8 torch tensor
    over the buffer shared by the message's tensors in it (None: the tensor is alone in it, or inline)."""
    torch_dtype, numpy_dtype, itemsize = BUILD[desc.dtype]
    shape, strides = desc.shape, desc.strides
    if desc.kind == "ndarray":
        byte_strides = None if strides is None else [s * itemsize for s in strides]
        return np.ndarray(shape, dtype=numpy_dtype, buffer=buffer, offset=desc.offset, strides=byte_strides)
    if base is None and strides is None and desc.nbytes and not memoryview(buffer).readonly:
        if numpy_dtype is not None and len(shape) != 1:  # faster than torch.frombuffer + view
            return torch.from_numpy(np.ndarray(shape, numpy_dtype, buffer, desc.offset))
        flat = torch.frombuffer(buffer, dtype=torch_dtype, count=desc.nbytes // itemsize, offset=desc.offset)
        return flat if len(shape) == 1 else flat.view(shape)
    if base is None:
        base = as_base(buffer)
    offset = base.storage_offset() + desc.offset  # a delivered tensor may start inside its storage
    out = torch.empty(0, dtype=torch_dtype, device=base.device)
    return out.set_(
        base.untyped_storage(), offset // itemsize, shape, strides if strides is not None else c_strides(shape)
    )


def as_base(buffer: Any) -> torch.Tensor:
    """A uint8 tensor over a received buffer (a tensor a transport delivered is used as it is)."""
    if isinstance(buffer, torch.Tensor):
        return buffer.clone() if buffer.storage_offset() % ALIGN else buffer
    if memoryview(buffer).nbytes:
        return torch.frombuffer(buffer, dtype=torch.uint8)
    return torch.empty(0, dtype=torch.uint8)


def build_inline(desc: Descriptor, data: memoryview) -> Any:
    """A private copy of the tensor or array carried inside frame 0 (``data``: frame 0's data, the
    descriptor verified against it)."""
    torch_dtype, numpy_dtype, itemsize = BUILD[desc.dtype]
    shape, strides = desc.shape, desc.strides
    own = data[desc.offset : desc.offset + desc.nbytes]
    if desc.kind == "ndarray":
        if not desc.nbytes:
            byte_strides = None if strides is None else [s * itemsize for s in strides]
            return np.ndarray(shape, dtype=numpy_dtype, strides=byte_strides)
        if strides is not None:
            byte_strides = [s * itemsize for s in strides]
            return np.ndarray(shape, numpy_dtype, bytearray(own), 0, byte_strides)
        return np.frombuffer(bytearray(own), dtype=numpy_dtype).reshape(shape)
    if not desc.nbytes:
        return torch.empty_strided(shape, strides if strides is not None else c_strides(shape), dtype=torch_dtype)
    if strides is None and numpy_dtype is not None:  # the quickest way to a private tensor
        return torch.from_numpy(np.ndarray(shape, numpy_dtype, bytearray(own)))
    flat = torch.frombuffer(bytearray(own), dtype=torch_dtype)
    if strides is not None:
        return flat.as_strided(shape, strides)
    return flat if len(shape) == 1 else flat.view(shape)
