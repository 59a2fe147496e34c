"""Buffers through a ``torch.multiprocessing`` queue: CPU storages as shared memory, CUDA ones by CUDA IPC.

The sender puts ``(sender id, message id, tensor id, tensor)`` on the queue and returns a typed
handle; message ids grow per sender and tensor ids restart with each message. The receiver
drains the queue, buffering what arrives from any number of producers (arrival order between
producers is free, each producer's order is kept), until the tensor it was asked for is there.

Threads. One transport (and so one ``Encoder`` or ``Decoder`` over it) may be shared by any
number of threads on either side:

- sending: each thread that sends is a stream of its own, a sender id drawn under a lock the
  first time it sends (the first thread's is ``sender_id``, a later one's ``<sender_id>-<n>``),
  with its own message and tensor numbering and, for CUDA tensors, its own ack page and
  bookkeeping; a stream's order is its thread's order. ``in_flight`` counts over every stream and
  ``max_in_flight`` bounds that sum. Streams of threads that have ended are dropped (their ack
  page removed) once nothing of theirs is in flight.
- receiving: ``import_``, ``release``, ``buffered()`` and ``buffered_bytes()`` may be called from
  any thread. One thread at a time drains the queue (without holding the buffer's lock while it
  waits on the queue), stores what it takes and wakes the others, which look again in the buffer;
  every wait is bounded by ``timeout``, but for one inside torch: taking a CPU tensor from the
  queue asks its sender's process for the storage's fd (torch's ``file_descriptor`` sharing), with
  no limit, so a sender that lives but does not run (stopped, frozen) holds the draining thread
  until it runs again. The stale rule below holds per stream, so a stream's
  messages must be decoded in the order they were encoded: two threads decoding two messages of
  one sending thread at once may find the older one discarded.
- ``close()`` must not run while other threads use the transport. A forked child makes its own.
  Sharing a CPU tensor (``share_memory_()``, and the copy ``snapshot=True`` makes) runs torch's
  own CPU copy, on its thread pool: in a child forked after its parent used that pool it waits for
  threads the child does not have, for ever (torch's own behaviour, any parallel op of it too).
  Start senders with ``spawn`` or ``forkserver``, or call ``torch.set_num_threads(1)`` in a
  forked child before its first send.

Aliasing is explicit. By default a tensor's storage is moved into shared memory in place
(``share_memory_()``): the sender's tensor now lives there, and writes it makes after encoding
are visible to the receiver (a tensor from ``torch.from_numpy`` leaves its array behind: the array
keeps the old memory, no longer shared with the tensor). ``snapshot=True`` copies each buffer on export instead, so the
sender may go on writing. The queue keeps a shared tensor alive only while it is in the queue:
the producer must outlive the hand-over. A storage that /dev/shm has no room for is a
``TransportError`` (ENOSPC, or the errno of torch's failure) naming the bytes, checked before
torch is asked; if torch fails anyway, the file its failed allocation left is removed. An earlier
tensor of that message may already be on the queue: the receiver buffers it until the stream's
next consumed message discards it as stale (or the stream's ``ttl`` runs out), never delivering it.

CUDA buffers (``export_device``) travel by CUDA IPC: the tensor is pickled on export, so a tensor
that cannot be shared fails ``export`` itself, and the receiver gets a view of the sender's device
memory (no copy; ``snapshot=True`` sends a device copy instead). The sender keeps each CUDA tensor
alive until the receiver acknowledges it through a small shared-memory ack page (written when the
tensor arrives, whether it is then read, discarded as stale, or cannot be opened);
``max_in_flight`` bounds the unacknowledged ones (an export past it waits up to ``timeout``, then
fails). After the ack, torch's IPC reference count keeps the memory while any receiver view lives:
the producer process must outlive every receiver view of its CUDA tensors.

Trust: a ``torch.multiprocessing`` queue carries pickles (torch's tensor reductions, as any such
queue does), so this transport is for processes that trust each other, like an engine and its
workers; the message frames themselves never carry a pickle.

Buffered tensors are bounded in count and bytes (going over is a ``TransportError``; the tensor a
thread waits for is taken whatever room is left); when a sender's newer message is consumed its
older buffered tensors are discarded (with one log line that counts them), and asking for one of
them, or again for one already taken (a message decoded twice), is a ``DecodeError`` at once; a
sender silent for ``ttl`` seconds is evicted; every wait is bounded.
"""

from __future__ import annotations

import errno
import os
import queue as stdlib_queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.multiprocessing  # registers torch's tensor reductions (CUDA IPC included) with ForkingPickler

from tensorwire._timeouts import LONGEST_WAIT, check_number, check_seconds
from tensorwire.errors import DecodeError, TransportError, quoted
from tensorwire.transports._ack import AckPage, InFlight
from tensorwire.transports._queue_buffer import _ReceiveBuffer, _Sender
from tensorwire.transports._queue_ids import QueueHandle, _next_handle, _position, _Stream
from tensorwire.transports._reaper import SHM_DIR, next_name
from tensorwire.transports._torch_shm import share
from tensorwire.transports.base import Buffer, Handle, Transport, not_read_by
from tensorwire.transports.cuda_runtime import CudaRuntime, TorchCudaRuntime

__all__ = ["QueueHandle", "QueueTransport"]


class QueueTransport(_ReceiveBuffer, Transport):
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
        check_seconds("timeout", timeout)
        check_seconds("ttl", ttl, infinite=True)
        for name, count in (
            ("max_buffered", max_buffered),
            ("max_buffered_bytes", max_buffered_bytes),
            ("max_in_flight", max_in_flight),
        ):
            check_number(name, count)
            if not count >= 1:
                raise ValueError(f"{name} must be at least 1, got {count!r}")
        self.queue = queue
        self.snapshot = snapshot
        self.timeout = timeout
        self.ttl = ttl
        self.max_buffered = max_buffered
        self.max_buffered_bytes = max_buffered_bytes
        self.max_in_flight = max_in_flight
        self.runtime: CudaRuntime = runtime if runtime is not None else TorchCudaRuntime()
        self.directory = Path(directory)
        self._reset()

    def _reset(self) -> None:
        """A new sender id and empty state: at construction, and in a forked child (``_own``)."""
        self._pid = os.getpid()
        self.sender_id = f"{self._pid}-{uuid.uuid4().hex[:12]}"
        # sending: a stream per thread
        self._local = threading.local()
        self._streams: list[_Stream] = []
        self._streams_drawn = 0
        self._sending = 0  # CUDA tensors being sent, with room taken for them (``_wait_for_room``)
        self._streams_lock = threading.Lock()
        # receiving: the buffer, its lock, and whether a thread is draining the queue
        self._senders: OrderedDict[str, _Sender] = OrderedDict()  # the longest silent first
        self._held = self._held_bytes = 0  # tensors and bytes in ``_senders``, kept as they come and go
        self._peer_acks: dict[str, AckPage] = {}  # senders' pages
        self._ready = threading.Condition(threading.Lock())
        self._draining = False

    def _own(self) -> None:
        """In a forked child: a sender of its own (the parent's id and numbering, streams, ack pages
        and buffer stay the parent's) with fresh locks (a thread of the parent may have held one)."""
        if self._pid != os.getpid():
            self._reset()

    # -- sending ------------------------------------------------------------------------------
    def begin_message(self) -> None:
        """A new message of the calling thread's stream: its id grows, tensor ids start again at 0."""
        stream = self._stream()
        stream.message += 1
        stream.tensor = 0

    def export_storage(self, storage: torch.Tensor, start: int, nbytes: int, frames: list[Buffer]) -> Handle:
        """Send bytes ``[start, start + nbytes)`` of a uint8 tensor over a whole torch storage."""
        if self.snapshot:
            part = share(torch.empty(nbytes, dtype=torch.uint8), nbytes)
            part.copy_(storage[start : start + nbytes])
            return self._put(part)
        if not storage.is_shared():  # type: ignore[no-untyped-call]
            share(storage, storage.numel())  # the sender's own storage moves there
        return self._put(storage[start : start + nbytes])

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        """Send a byte view that is not a torch storage (a numpy array): one copy into shared memory."""
        part = share(torch.empty(data.nbytes, dtype=torch.uint8), data.nbytes)
        part.numpy()[:] = memoryview(data).cast("B")
        return self._put(part)

    def _put(self, tensor: torch.Tensor) -> Handle:
        if not tensor.is_shared():  # type: ignore[no-untyped-call]
            raise TransportError(errno.EINVAL, "the tensor is not in shared memory and cannot be sent")
        stream = self._stream()
        handle = _next_handle(stream)
        self._send(stream, (handle.sender, handle.message, handle.tensor, tensor), handle)
        return handle

    def export_device(self, storage: torch.Tensor, start: int, nbytes: int, frames: list[Buffer]) -> Handle | None:
        """Send bytes ``[start, start + nbytes)`` of a CUDA storage by CUDA IPC (None for other devices)."""
        if not self.runtime.is_device(storage):
            return None
        part = storage[start : start + nbytes]
        if self.snapshot:
            part = part.clone()
        self._wait_for_room()
        try:
            stream = self._stream()
            handle = _next_handle(stream)
            try:
                payload = bytes(ForkingPickler.dumps(part))  # now, so that a failure to share fails this call
            except (RuntimeError, TypeError, ValueError, OSError) as exc:
                raise TransportError(
                    errno.EINVAL, f"cannot share a {nbytes}-byte buffer on {part.device}: {exc}"
                ) from None
            page = stream.acks.page_name()
            self._send(stream, (handle.sender, handle.message, handle.tensor, payload, page), handle)
            stream.acks.keep(_position(handle.message, handle.tensor), part)
        finally:  # (inline: a call would be one more place for an interrupt to land first)
            with self._streams_lock:
                self._sending -= 1  # kept (counted in flight now), or not sent
        return handle

    @property
    def in_flight(self) -> int:
        """CUDA tensors sent by any thread and not yet acknowledged by the receiver (kept alive until then)."""
        self._own()
        with self._streams_lock:
            return sum(stream.acks.count() for stream in self._streams)

    def _wait_for_room(self) -> None:
        """Take room for one more CUDA tensor in flight, counted in ``_sending`` until it is kept:
        threads sending at once take one each, never more than ``max_in_flight`` in all. An
        interrupt that lands once the room is taken (as the lock is let go) gives it back; from
        this return to the caller's ``try`` nothing is called, so none lands there."""
        deadline = time.monotonic() + self.timeout
        while True:
            self._own()
            taken = False
            try:
                with self._streams_lock:
                    if sum(stream.acks.count() for stream in self._streams) + self._sending < self.max_in_flight:
                        self._sending += 1
                        taken = True
            except BaseException:
                if taken:
                    with self._streams_lock:
                        self._sending -= 1
                raise
            if taken:
                return
            if time.monotonic() >= deadline:
                raise TransportError(
                    errno.EAGAIN,
                    f"{self.in_flight} CUDA tensor(s) from sender {self.sender_id} not acknowledged by the receiver "
                    f"after {self.timeout}s (max_in_flight {self.max_in_flight})",
                )
            time.sleep(0.001)

    def _stream(self) -> _Stream:
        """The calling thread's stream, drawn the first time it sends."""
        self._own()
        stream: _Stream | None = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = self._new_stream()
        return stream

    def _new_stream(self) -> _Stream:
        with self._streams_lock:
            self._drop_ended_streams()
            n = self._streams_drawn
            self._streams_drawn += 1
            sender = self.sender_id if n == 0 else f"{self.sender_id}-{n}"
            stream = _Stream(sender, threading.current_thread(), InFlight(self.directory, next_name))
            self._streams.append(stream)
        return stream

    def _drop_ended_streams(self) -> None:
        """Forget the streams of threads that have ended and have nothing in flight (the lock held)."""
        for stream in [s for s in self._streams if not s.thread.is_alive() and s.acks.count() == 0]:
            stream.acks.close()
            self._streams.remove(stream)

    def _send(self, stream: _Stream, item: tuple[Any, ...], handle: QueueHandle) -> None:
        """Put ``item`` on the queue within ``timeout``, in waits of at most ``LONGEST_WAIT`` (a
        queue's semaphore or lock fails on a longer one: EINVAL, or ``OverflowError``)."""
        left = self.timeout
        while True:
            try:
                self.queue.put(item, timeout=min(left, LONGEST_WAIT))
                break
            except stdlib_queue.Full:
                left -= LONGEST_WAIT  # a put that found the queue full waited its whole timeout
                if left <= 0:
                    raise TransportError(errno.EAGAIN, f"queue full for {self.timeout}s sending {handle}") from None
        stream.tensor += 1

    def release(self, handle: Handle) -> None:
        """A sent tensor cannot be recalled; a receiver drops a buffered one it will not read (a
        handle of another kind names nothing here)."""
        if not isinstance(handle, QueueHandle):
            return
        self._own()
        with self._ready:
            sender = self._senders.get(handle.sender)
            if sender is not None:
                self._let_go(sender.messages.get(handle.message, {}).pop(handle.tensor, None))

    # -- receiving ----------------------------------------------------------------------------
    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        seen = set()
        for handle in handles:
            if not isinstance(handle, QueueHandle):
                raise not_read_by(self, handle)
            key = (handle.sender, handle.message, handle.tensor)
            if key in seen:
                raise DecodeError(f"queue tensor {_shown(handle)} is named twice in one message")
            if handle.message < 0 or handle.tensor < 0:
                raise DecodeError(f"queue handle {_shown(handle)}: ids must not be negative")
            seen.add(key)

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        if not isinstance(handle, QueueHandle):
            raise not_read_by(self, handle)
        tensor = self._take(handle)
        if tensor.dtype != torch.uint8 or tensor.dim() != 1 or tensor.numel() != nbytes:
            raise DecodeError(
                f"queue tensor {_shown(handle)} is {tensor.dtype} of shape "
                f"{tuple(tensor.shape)}, the buffer entry says {nbytes} bytes"
            )
        if not tensor.is_cpu:  # a view of the sender's device memory (CUDA IPC)
            return tensor if borrow is not False else tensor.clone()
        array = tensor.numpy()
        return array if borrow is not False else array.copy()

    def buffered(self) -> int:
        """Tensors waiting in the receive buffer."""
        self._own()
        with self._ready:
            return self._held

    def buffered_bytes(self) -> int:
        """Bytes of the tensors waiting in the receive buffer."""
        self._own()
        with self._ready:
            return self._held_bytes

    def close(self) -> None:
        """Drop everything buffered, and (as a sender) every stream: the CUDA tensors kept for the
        receiver and the ack pages. Threads that send afterwards get new streams."""
        self._own()
        with self._ready:
            self._senders.clear()
            self._held = self._held_bytes = 0
            for page in self._peer_acks.values():
                page.close()
            self._peer_acks.clear()
        with self._streams_lock:
            for stream in self._streams:
                stream.acks.close()
            self._streams.clear()
            self._local = threading.local()


def _shown(handle: QueueHandle) -> str:
    """``handle``'s ids as an error names them, its sender's (a peer's string) quoted: ``('id', 1, 0)``."""
    return f"({quoted(handle.sender)}, {handle.message}, {handle.tensor})"
