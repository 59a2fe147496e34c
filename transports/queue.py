"""Buffers through a ``torch.multiprocessing`` queue: CPU storages as shared memory, CUDA ones by CUDA IPC.

The sender puts ``(sender id, message id, tensor id, tensor)`` on the queue and returns a typed
handle; message ids grow per sender and tensor ids restart with each message. The receiver
drains the queue, buffering what arrives from any number of producers (arrival order between
producers is free, each producer's order is kept), until the tensor it was asked for is there.

Aliasing is explicit. By default a tensor's storage is moved into shared memory in place
(``share_memory_()``): the sender's tensor now lives there, and writes it makes after encoding
are visible to the receiver. ``snapshot=True`` copies each buffer on export instead, so the
sender may go on writing. The queue keeps a shared tensor alive only while it is in the queue:
the producer must outlive the hand-over.

CUDA buffers (``export_device``) travel by CUDA IPC: the tensor is pickled on export, so a tensor
that cannot be shared fails ``export`` itself, and the receiver gets a view of the sender's device
memory (no copy; ``snapshot=True`` sends a device copy instead). The sender keeps each CUDA tensor
alive until the receiver acknowledges it through a small shared-memory ack page (written when the
tensor arrives, whether it is then read or discarded as stale); ``max_in_flight`` bounds the
unacknowledged ones (an export past it waits up to ``timeout``, then fails). After the ack, torch's
IPC reference count keeps the memory while any receiver view lives: the producer process must
outlive every receiver view of its CUDA tensors.

Trust: a ``torch.multiprocessing`` queue carries pickles (torch's tensor reductions, as any such
queue does), so this transport is for processes that trust each other, like an engine and its
workers; the message frames themselves never carry a pickle.

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
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.multiprocessing  # registers torch's tensor reductions (CUDA IPC included) with ForkingPickler

from codec.errors import DecodeError, TransportError
from transports.ack import AckPage
from transports.base import Buffer, Handle
from transports.cuda_runtime import CudaRuntime, TorchCudaRuntime
from transports.shm import _NAME, SHM_DIR, _next_name

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
        max_in_flight: int = 64,
        runtime: CudaRuntime | None = None,
        directory: str | os.PathLike[str] = SHM_DIR,
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
        self.max_in_flight = max_in_flight
        self.runtime: CudaRuntime = runtime if runtime is not None else TorchCudaRuntime()
        self.directory = Path(directory)
        self._ack: AckPage | None = None  # ours, as a sender of CUDA tensors
        self._in_flight: deque[tuple[int, torch.Tensor]] = deque()  # (ack position, tensor) not yet acknowledged
        self._peer_acks: dict[str, AckPage] = {}  # senders' pages, as a receiver

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
        handle = self._next_handle()
        self._send((handle.sender, handle.message, handle.tensor, tensor), handle)
        return handle

    def export_device(self, storage: torch.Tensor, start: int, nbytes: int, frames: list[Buffer]) -> Handle | None:
        """Send bytes ``[start, start + nbytes)`` of a CUDA storage by CUDA IPC (None for other devices)."""
        if not self.runtime.is_device(storage):
            return None
        part = storage[start : start + nbytes]
        if self.snapshot:
            part = part.clone()
        self._wait_for_room()
        handle = self._next_handle()
        try:
            payload = bytes(ForkingPickler.dumps(part))  # now, so that a failure to share fails this call
        except (RuntimeError, TypeError, ValueError, OSError) as exc:
            raise TransportError(errno.EINVAL, f"cannot share a {nbytes}-byte buffer on {part.device}: {exc}") from None
        if self._ack is None:
            self._ack = AckPage.create(self.directory / _next_name())
        self._send((handle.sender, handle.message, handle.tensor, payload, self._ack.name), handle)
        self._in_flight.append((_position(handle.message, handle.tensor), part))
        return handle

    @property
    def in_flight(self) -> int:
        """CUDA tensors sent and not yet acknowledged by the receiver (kept alive until then)."""
        acked = 0 if self._ack is None else self._ack.position
        while self._in_flight and self._in_flight[0][0] <= acked:
            self._in_flight.popleft()
        return len(self._in_flight)

    def _wait_for_room(self) -> None:
        deadline = time.monotonic() + self.timeout
        while self.in_flight >= self.max_in_flight:
            if time.monotonic() >= deadline:
                raise TransportError(
                    errno.EAGAIN,
                    f"{self.in_flight} CUDA tensor(s) from sender {self.sender_id} not acknowledged by the receiver "
                    f"after {self.timeout}s (max_in_flight {self.max_in_flight})",
                )
            time.sleep(0.001)

    def _next_handle(self) -> QueueHandle:
        if self._tensor >= _TENSORS_PER_MESSAGE:
            raise TransportError(errno.E2BIG, f"more than {_TENSORS_PER_MESSAGE} queue tensors in one message")
        return QueueHandle(sender=self.sender_id, message=self._message, tensor=self._tensor)

    def _send(self, item: tuple[Any, ...], handle: QueueHandle) -> None:
        try:
            self.queue.put(item, timeout=self.timeout)
        except stdlib_queue.Full:
            raise TransportError(errno.EAGAIN, f"queue full for {self.timeout}s sending {handle}") from None
        self._tensor += 1

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
        if not tensor.is_cpu:  # a view of the sender's device memory (CUDA IPC)
            return tensor if borrow is not False else tensor.clone()
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
        if len(item) == 5:  # a CUDA tensor, pickled on export, and its sender's ack page
            sender_id, message, index, payload, ack_name = item
            try:
                tensor = ForkingPickler.loads(payload)
            except Exception as exc:  # any item that cannot be opened (bad pickle, IPC failure) is dropped, not fatal
                log.warning("dropping a CUDA tensor from sender %s that could not be opened: %r", sender_id, exc)
                return
            self._acknowledge(sender_id, ack_name, message, index)
        else:
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

    def _acknowledge(self, sender_id: str, ack_name: Any, message: int, index: int) -> None:
        """Tell the sender its tensor arrived (it may let go of it now)."""
        page = self._peer_acks.get(sender_id)
        if page is None:
            if not isinstance(ack_name, str) or not _NAME.fullmatch(ack_name):
                log.warning("sender %s names an ack page %r that is not a tensorwire name", sender_id, ack_name)
                return
            try:
                page = self._peer_acks[sender_id] = AckPage.open(self.directory / ack_name)
            except (TransportError, DecodeError) as exc:
                log.warning("cannot acknowledge sender %s: %s", sender_id, exc)
                return
        page.acknowledge(_position(message, index))

    def _evict_silent(self, now: float) -> None:
        for sender_id in [s for s, v in self._senders.items() if now - v.last_seen > self.ttl]:
            page = self._peer_acks.pop(sender_id, None)
            if page is not None:
                page.close()
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
        """Drop everything buffered, and (as a sender) the CUDA tensors kept for the receiver and the ack page."""
        self._senders.clear()
        self._in_flight.clear()
        for page in [*self._peer_acks.values(), *([self._ack] if self._ack is not None else [])]:
            page.close()
        self._peer_acks.clear()
        self._ack = None


_TENSORS_PER_MESSAGE = 1 << 20


def _position(message: int, tensor: int) -> int:
    """A tensor's place in its sender's stream, as written on the ack page (0 means none)."""
    return message * _TENSORS_PER_MESSAGE + tensor + 1
