"""The queue transport's handles and ids: the handle a message carries (``QueueHandle``: sender,
message, tensor), the sending thread's stream that numbers them (``_Stream``, ``_next_handle``),
the shape of an item on the queue (``_is_item``), and a tensor's place in its sender's stream as
written on the ack page (``_position``, within ``_TENSORS_PER_MESSAGE`` and ``_LAST_POSITION``).
"""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass
from typing import Any

import torch

from tensorwire.errors import TransportError
from tensorwire.transports._ack import InFlight
from tensorwire.transports.base import Handle

__all__ = ["QueueHandle"]


class QueueHandle(Handle, tag="queue", frozen=True):
    """Tensor ``tensor`` of message ``message`` from sender ``sender``."""

    sender: str
    message: int
    tensor: int


@dataclass
class _Stream:
    """One sending thread's stream: its sender id, its counters, its CUDA tensors in flight."""

    sender: str
    thread: threading.Thread
    acks: InFlight
    message: int = 0
    tensor: int = 0


_TENSORS_PER_MESSAGE = 1 << 20
_LAST_POSITION = (1 << 64) - 1  # the largest an ack page's word holds


def _next_handle(stream: _Stream) -> QueueHandle:
    if stream.tensor >= _TENSORS_PER_MESSAGE:
        raise TransportError(errno.E2BIG, f"more than {_TENSORS_PER_MESSAGE} queue tensors in one message")
    return QueueHandle(sender=stream.sender, message=stream.message, tensor=stream.tensor)


def _is_item(item: Any) -> bool:
    """Whether ``item`` has the shape of what ``_put`` or ``export_device`` sends: ``(sender id,
    message id, tensor id, tensor)``, or with the pickled CUDA tensor's bytes and its ack page's
    name instead of the tensor (anything else sharing the queue, a stop sentinel, is not)."""
    if type(item) is not tuple or len(item) not in (4, 5):
        return False
    sender, message, index, body = item[:4]
    ids = all(type(number) is int and number >= 0 for number in (message, index))
    return type(sender) is str and ids and isinstance(body, torch.Tensor if len(item) == 4 else bytes)


def _position(message: int, tensor: int) -> int:
    """A tensor's place in its sender's stream, as written on the ack page (0 means none)."""
    return message * _TENSORS_PER_MESSAGE + tensor + 1
