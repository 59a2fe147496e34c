"""The messages the thread tests send: two tensors whose contents name their thread and index."""

from __future__ import annotations

from typing import Any

import torch


def make_message(thread: int, index: int, floats: int = 64, ints: int = 16) -> Any:
    """Message ``index`` of ``thread``: ``floats`` float32s and ``ints`` int32s that name both."""
    from tensorwire.builtins import diffusion

    tag = thread * 1000 + index
    values = torch.full((floats,), float(tag))
    counts = torch.arange(ints, dtype=torch.int32) + tag
    return diffusion.Output(output=(values, counts), chunk_index=index)


def check_message(thread: int, index: int, message: Any, floats: int = 64, ints: int = 16) -> str | None:
    """None when ``message`` is ``make_message(thread, index, floats, ints)``, else what is wrong."""
    tag = thread * 1000 + index
    values, counts = message.output
    if message.chunk_index != index:
        return f"thread {thread} message {index}: chunk_index {message.chunk_index}"
    if values.dtype != torch.float32 or values.shape != (floats,) or not bool((values == float(tag)).all()):
        return f"thread {thread} message {index}: floats {values[:4].tolist()}..."
    if counts.dtype != torch.int32 or not torch.equal(counts, torch.arange(ints, dtype=torch.int32) + tag):
        return f"thread {thread} message {index}: ints {counts[:4].tolist()}..."
    return None
