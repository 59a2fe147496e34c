"""Helpers shared by the encoder/decoder tests: deep equality with tensors, and segment counting."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import torch

from transports.shm import our_segments


def bits(value: Any) -> Any:
    """Raw bytes of a tensor/array in logical order (bit-exact comparison; NaNs compare equal)."""
    if isinstance(value, torch.Tensor):
        flat = torch.empty(value.numel(), dtype=value.dtype).copy_(value.detach().reshape(-1))
        return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return np.ascontiguousarray(value).tobytes()


def same(a: Any, b: Any) -> bool:
    """Deep equality of messages: same types, tuples stay tuples, tensors equal bit for bit."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor | np.ndarray):
        return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and bits(a) == bits(b)
    if isinstance(a, msgspec.Struct):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__struct_fields__)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def segments_of(pid: int) -> list[str]:
    """tensorwire segments in /dev/shm created by ``pid``."""
    return [n for n in our_segments() if n.startswith(f"tw-{pid}-")]
