"""Buffers through a ``torch.multiprocessing`` queue: CPU storages travel as shared memory by fd.

The sender puts ``(sender id, message id, tensor id, tensor)`` on the queue and returns a typed
handle; message ids grow per sender and tensor ids restart with each message. The receiver
drains the queue, buffering what arrives from any number of producers (arrival order between
producers is free, each producer's order is kept), until the tensor it was asked for is there.

Aliasing is explicit. By default a tensor's storage is moved into shared memory in place
(``share_memory_()``): the sender's tensor now lives there, and writes it makes after encoding
are visible to the receiver. ``snapshot=True`` copies each buffer on export instead, so the
sender may go on writing. The queue keeps a shared tensor alive only while it is in the queue:
the producer must outlive the hand-over (for CUDA tensors, which would travel by CUDA IPC, until
the receiver has them; this transport currently sends CPU buffers only: the encoder moves CUDA
tensors to the host first).

Buffered tensors are bounded in count and bytes (going over is a ``TransportError``); when a
sender's newer message is consumed its older buffered tensors are discarded (with one log line
that counts them); a sender silent for ``ttl`` seconds is evicted; every wait is bounded.
"""

from __future__ import annotations

import errno
import logging
import os
import queue as stdlib_queue
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from codec.errors import DecodeError, TransportError
from transports.base import Buffer, Handle

__all__ = ["QueueHandle", "QueueTransport"]

log = logging.getLogger("tensorwire.queue")


class QueueHandle(Handle, tag="queue", frozen=True):
    """Tensor ``tensor`` of message ``message`` from sender ``sender``."""

    sender: str
    message: int
    tensor: int


@dataclass
class _Sender:
    """What one producer has in the receiver's buffer."""

    newest_consumed: int = -1
    messages: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)


class QueueTransport:
    """Out-of-band buffers through a ``torch.multiprocessing`` queue shared by producers and a consumer."""

    name: ClassVar[str] = "queue"
    handle_types: ClassVar[tuple[type[Handle], ...]] = (QueueHandle,)

    def __init__(
        self,
        queue: Any,
        *,
        snapshot: bool = False,
        timeout: float = 10.0,
        ttl: float = 300.0,
        max_buffered: int = 1024,
        max_buffered_bytes: int = 8 * 1024**3,
    ) -> None:
        self.queue = queue
        self.snapshot = snapshot
        self.timeout = timeout
        self.ttl = ttl
        self.max_buffered = max_buffered
        self.max_buffered_bytes = max_buffered_bytes
        self.sender_id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._message = 0
        self._tensor = 0
        self._senders: dict[str, _Sender] = {}

    # -- sending ------------------------------------------------------------------------------
    def begin_message(self) -> None:
        """A new message: its id grows, tensor ids start again at 0."""
        self._message += 1
        self._tensor = 0

    def export_storage(self, storage: torch.Tensor, start: int, nbytes: int, frames: list[Buffer]) -> Handle:
        """Send bytes ``[start, start + nbytes)`` of a uint8 tensor over a whole torch storage."""
        if self.snapshot:
            part = torch.empty(nbytes, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
            part.copy_(storage[start : start + nbytes])
            return self._put(part)
        try:
            storage.share_memory_()  # type: ignore[no-untyped-call]  # the sender's own storage moves there
        except RuntimeError as exc:
            raise TransportError(errno.EINVAL, f"cannot share a storage of {storage.numel()} bytes: {exc}") from None
        return self._put(storage[start : start + nbytes])

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        """Send a byte view that is not a torch storage (a numpy array): one copy into shared memory."""
        part = torch.empty(data.nbytes, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
        part.numpy()[:] = memoryview(data).cast("B")
        return self._put(part)

    def _put(self, tensor: torch.Tensor) -> Handle:
        if not tensor.is_shared():  # type: ignore[no-untyped-call]
            raise TransportError(errno.EINVAL, "the tensor is not in shared memory and cannot be sent")
        handle = QueueHandle(sender=self.sender_id, message=self._message, tensor=self._tensor)
        try:
            self.queue.put((handle.sender, handle.message, handle.tensor, tensor), timeout=self.timeout)
        except stdlib_queue.Full:
            raise TransportError(errno.EAGAIN, f"queue full for {self.timeout}s sending {handle}") from None
        self._tensor += 1
        return handle

    def release(self, handle: Handle) -> None:
        """A sent tensor cannot be recalled; a receiver drops a buffered one it will not read."""
        assert isinstance(handle, QueueHandle)
        sender = self._senders.get(handle.sender)
        if sender is not None:
            sender.messages.get(handle.message, {}).pop(handle.tensor, None)

    # -- receiving ----------------------------------------------------------------------------
    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        seen = set()
        for handle in handles:
            assert isinstance(handle, QueueHandle)
            key = (handle.sender, handle.message, handle.tensor)
            if key in seen:
                raise DecodeError(f"queue tensor {key} is named twice in one message")
            if handle.message < 0 or handle.tensor < 0:
                raise DecodeError(f"queue handle {key}: ids must not be negative")
            seen.add(key)

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        assert isinstance(handle, QueueHandle)
        tensor = self._take(handle)
        if tensor.dtype != torch.uint8 or tensor.dim() != 1 or tensor.numel() != nbytes:
            raise DecodeError(
                f"queue tensor {handle.sender}/{handle.message}/{handle.tensor} is {tensor.dtype} of shape "
                f"{tuple(tensor.shape)}, the buffer entry says {nbytes} bytes"
            )
        array = tensor.numpy()
        return array if borrow is not False else array.copy()

    def _take(self, handle: QueueHandle) -> torch.Tensor:
        deadline = time.monotonic() + self.timeout
        while True:
            sender = self._senders.get(handle.sender)
            if sender is not None:
                tensor = sender.messages.get(handle.message, {}).pop(handle.tensor, None)
                if tensor is not None:
                    self._consumed(handle.sender, sender, handle.message)
                    return tensor
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(
                    errno.ETIMEDOUT,
                    f"no tensor {handle.tensor} of message {handle.message} from sender {handle.sender} "
                    f"after waiting {self.timeout}s",
                )
            try:
                item = self.queue.get(timeout=left)
            except stdlib_queue.Empty:
                continue
            except (OSError, EOFError, RuntimeError) as exc:  # e.g. its producer died before we took its fds
                log.warning("dropping a queue item that could not be received: %s", exc)
                continue
            self._store(item)

    def _store(self, item: Any) -> None:
        sender_id, message, index, tensor = item
        now = time.monotonic()
        self._evict_silent(now)
        sender = self._senders.setdefault(sender_id, _Sender())
        sender.last_seen = now
        if message < sender.newest_consumed:
            log.warning(
                "ignoring a stale tensor from sender %s (message %d is older than the one consumed)", sender_id, message
            )
            return
        if self.buffered() >= self.max_buffered or self.buffered_bytes() + tensor.numel() > self.max_buffered_bytes:
            raise TransportError(
                errno.ENOBUFS,
                f"receive buffer full ({self.buffered()} tensors, {self.buffered_bytes()} bytes; "
                f"limits {self.max_buffered} and {self.max_buffered_bytes}) taking a tensor from {sender_id}",
            )
        sender.messages.setdefault(message, {})[index] = tensor

    def _consumed(self, sender_id: str, sender: _Sender, message: int) -> None:
        """The sender's ``message`` is being read: everything older it still has here is stale."""
        if message <= sender.newest_consumed:
            return
        sender.newest_consumed = message
        stale = [m for m in sender.messages if m < message]
        count = sum(len(sender.messages.pop(m)) for m in stale)
        if count:
            log.warning(
                "discarding %d stale tensor(s) of %d older message(s) from sender %s", count, len(stale), sender_id
            )
        if not sender.messages.get(message):
            sender.messages.pop(message, None)

    def _evict_silent(self, now: float) -> None:
        for sender_id in [s for s, v in self._senders.items() if now - v.last_seen > self.ttl]:
            dropped = sum(len(t) for t in self._senders.pop(sender_id).messages.values())
            log.warning(
                "evicting sender %s, silent for over %ss (%d buffered tensor(s) dropped)", sender_id, self.ttl, dropped
            )

    def buffered(self) -> int:
        """Tensors waiting in the receive buffer."""
        return sum(len(t) for s in self._senders.values() for t in s.messages.values())

    def buffered_bytes(self) -> int:
        return sum(x.numel() for s in self._senders.values() for t in s.messages.values() for x in t.values())

    def close(self) -> None:
        """Drop everything buffered."""
        self._senders.clear()
