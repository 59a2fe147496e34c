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
  every wait is bounded by ``timeout``. The stale rule below holds per stream, so a stream's
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
import logging
import os
import queue as stdlib_queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.multiprocessing  # registers torch's tensor reductions (CUDA IPC included) with ForkingPickler

from tensorwire._timeouts import LONGEST_WAIT, check_number, check_seconds
from tensorwire.errors import DecodeError, TransportError
from tensorwire.transports._ack import AckPage, InFlight
from tensorwire.transports._reaper import NAME, SHM_DIR, next_name
from tensorwire.transports._torch_shm import share
from tensorwire.transports.base import Buffer, Handle, Transport, not_read_by
from tensorwire.transports.cuda_runtime import CudaRuntime, TorchCudaRuntime

__all__ = ["QueueHandle", "QueueTransport"]

log = logging.getLogger("tensorwire.queue")

_POLL = 0.1  # seconds a draining thread waits on the queue before it looks at the buffer again


class QueueHandle(Handle, tag="queue", frozen=True):
    """Tensor ``tensor`` of message ``message`` from sender ``sender``."""

    sender: str
    message: int
    tensor: int


@dataclass
class _Sender:
    """What one producer has in the receiver's buffer."""

    newest_consumed: int = -1
    taken: set[int] = field(default_factory=set)  # tensor ids of message ``newest_consumed`` taken out
    messages: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)


@dataclass
class _Stream:
    """One sending thread's stream: its sender id, its counters, its CUDA tensors in flight."""

    sender: str
    thread: threading.Thread
    acks: InFlight
    message: int = 0
    tensor: int = 0


class QueueTransport(Transport):
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
        finally:
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
        threads sending at once take one each, never more than ``max_in_flight`` in all."""
        deadline = time.monotonic() + self.timeout
        while True:
            self._own()
            with self._streams_lock:
                if sum(stream.acks.count() for stream in self._streams) + self._sending < self.max_in_flight:
                    self._sending += 1
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
                raise DecodeError(f"queue tensor {key} is named twice in one message")
            if handle.message < 0 or handle.tensor < 0:
                raise DecodeError(f"queue handle {key}: ids must not be negative")
            seen.add(key)

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        if not isinstance(handle, QueueHandle):
            raise not_read_by(self, handle)
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
        """The tensor ``handle`` names: from the buffer, or drained into it (by this thread or another)."""
        self._own()
        deadline = time.monotonic() + self.timeout
        with self._ready:
            while True:
                tensor = self._pop(handle)
                if tensor is not None:
                    return tensor
                self._refuse_stale(handle)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransportError(
                        errno.ETIMEDOUT,
                        f"no tensor {handle.tensor} of message {handle.message} from sender {handle.sender} "
                        f"after waiting {self.timeout}s",
                    )
                if self._draining:
                    # another thread drains; it wakes us when it stored something (a wait longer
                    # than ``LONGEST_WAIT`` overflows: the loop waits again)
                    self._ready.wait(min(left, LONGEST_WAIT))
                else:
                    self._drain_one(min(left, _POLL), handle)

    def _pop(self, handle: QueueHandle) -> torch.Tensor | None:
        """Take ``handle``'s tensor out of the buffer, if it is there (the lock held)."""
        sender = self._senders.get(handle.sender)
        if sender is None:
            return None
        tensor = sender.messages.get(handle.message, {}).pop(handle.tensor, None)
        if tensor is not None:
            self._let_go(tensor)
            self._consumed(handle.sender, sender, handle.message)
            sender.taken.add(handle.tensor)
        return tensor

    def _refuse_stale(self, handle: QueueHandle) -> None:
        """``DecodeError`` for a tensor of a message older than one its sender has had read (it was
        discarded, or would be as it arrives), or one already taken out of the newest one read (a
        message decoded twice): neither ever comes (the lock held)."""
        sender = self._senders.get(handle.sender)
        if sender is None:
            return
        if handle.message < sender.newest_consumed:
            raise DecodeError(
                f"queue tensor {handle.tensor} of message {handle.message} from sender {handle.sender} is stale: "
                f"message {sender.newest_consumed} of that sender was read already"
            )
        if handle.message == sender.newest_consumed and handle.tensor in sender.taken:
            raise DecodeError(
                f"queue tensor {handle.tensor} of message {handle.message} from sender {handle.sender} "
                "was taken already: that message was read"
            )

    def _drain_one(self, timeout: float, wanted: QueueHandle) -> None:
        """Take at most one item off the queue into the buffer (``wanted``, the tensor this thread
        asks for, whatever room the buffer has), the lock released while waiting for it (the lock
        held on entry and on return); then wake every waiting thread."""
        self._draining = True
        try:
            self._ready.release()
            try:
                item = self._receive(timeout)
            finally:
                self._ready.acquire()
            if item is not None:
                self._store(*item, wanted=wanted)
        finally:
            self._draining = False
            self._ready.notify_all()

    def _receive(self, timeout: float) -> tuple[str, int, int, torch.Tensor | None, Any] | None:
        """The next item of the queue as ``(sender, message, tensor id, tensor, ack page name or
        None)``; the tensor is None for a CUDA item that could not be opened (still acknowledged:
        nothing here holds it); None if nothing came within ``timeout`` or the item is no item."""
        try:
            item = self.queue.get(timeout=timeout)
        except stdlib_queue.Empty:
            return None
        except (OSError, EOFError, RuntimeError) as exc:  # e.g. its producer died before we took its fds
            log.warning("dropping a queue item that could not be received: %s", exc)
            return None
        except Exception as exc:  # an item that does not unpickle here (it is gone), or a closed queue
            raise TransportError(errno.EIO, f"cannot take an item off the queue: {exc!r}") from None
        if not _is_item(item):
            log.warning("dropping a queue item that is not a tensorwire item: %.200r", item)
            return None
        if len(item) != 5:
            sender_id, message, index, tensor = item
            return sender_id, message, index, tensor, None
        sender_id, message, index, payload, ack_name = item  # a CUDA tensor, pickled on export, and its ack page
        if index >= _TENSORS_PER_MESSAGE or _position(message, index) > _LAST_POSITION:
            log.warning(
                "dropping a CUDA item from sender %s whose ids no ack page holds: %d/%d",
                sender_id,
                message,
                index,
            )
            return None
        try:
            tensor = ForkingPickler.loads(payload)
        except Exception as exc:  # any item that cannot be opened (bad pickle, IPC failure) is dropped, not fatal
            log.warning("dropping a CUDA tensor from sender %s that could not be opened: %r", sender_id, exc)
            return sender_id, message, index, None, ack_name
        if not isinstance(tensor, torch.Tensor):
            log.warning("dropping a CUDA item from sender %s that is no tensor: %.200r", sender_id, tensor)
            return sender_id, message, index, None, ack_name
        return sender_id, message, index, tensor, ack_name

    def _store(
        self,
        sender_id: str,
        message: int,
        index: int,
        tensor: torch.Tensor | None,
        ack_name: Any,
        *,
        wanted: QueueHandle,
    ) -> None:
        """Buffer a received tensor (the lock held), acknowledging a CUDA one first (one that could
        not be opened too, so that its sender lets go of it; it is not buffered, but its sender is
        seen: evicted once silent for ``ttl``, its ack page with it). Past the buffer's bounds only
        ``wanted`` is taken: its caller takes it out again at once."""
        if ack_name is not None:
            self._acknowledge(sender_id, ack_name, message, index)
        now = time.monotonic()
        self._evict_silent(now)
        sender = self._senders.setdefault(sender_id, _Sender())
        sender.last_seen = now
        self._senders.move_to_end(sender_id)  # kept in the order last seen: ``_evict_silent`` stops early
        if tensor is None:
            return
        if message < sender.newest_consumed:
            log.warning(
                "ignoring a stale tensor from sender %s (message %d is older than the one consumed)", sender_id, message
            )
            return
        full = self._held >= self.max_buffered or self._held_bytes + tensor.nbytes > self.max_buffered_bytes
        if full and (sender_id, message, index) != (wanted.sender, wanted.message, wanted.tensor):
            raise TransportError(
                errno.ENOBUFS,
                f"receive buffer full ({self._held} tensors, {self._held_bytes} bytes; "
                f"limits {self.max_buffered} and {self.max_buffered_bytes}) taking a tensor from {sender_id}",
            )
        tensors = sender.messages.setdefault(message, {})
        self._let_go(tensors.get(index))  # a tensor sent twice: the second replaces the first
        tensors[index] = tensor
        self._held += 1
        self._held_bytes += tensor.nbytes

    def _let_go(self, *tensors: torch.Tensor | None) -> None:
        """Take ``tensors``, just removed from the buffer (None: nothing was), off its counts."""
        for tensor in tensors:
            if tensor is not None:
                self._held -= 1
                self._held_bytes -= tensor.nbytes

    def _consumed(self, sender_id: str, sender: _Sender, message: int) -> None:
        """The sender's ``message`` is being read: everything older it still has here is stale."""
        if message <= sender.newest_consumed:
            return
        sender.newest_consumed = message
        sender.taken.clear()
        stale = [m for m in sender.messages if m < message]
        count = 0
        for old in stale:
            dropped = sender.messages.pop(old)
            count += len(dropped)
            self._let_go(*dropped.values())
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
            if not isinstance(ack_name, str) or not NAME.fullmatch(ack_name):
                log.warning("sender %s names an ack page %r that is not a tensorwire name", sender_id, ack_name)
                return
            try:
                page = self._peer_acks[sender_id] = AckPage.open(self.directory / ack_name)
            except (TransportError, DecodeError) as exc:
                log.warning("cannot acknowledge sender %s: %s", sender_id, exc)
                return
        page.acknowledge(_position(message, index))

    def _evict_silent(self, now: float) -> None:
        """Drop the senders silent for over ``ttl``: the first ones of ``_senders`` (longest silent
        first), so that only those and one more are looked at."""
        silent = []
        for sender_id, sender in self._senders.items():
            if now - sender.last_seen <= self.ttl:
                break
            silent.append(sender_id)
        for sender_id in silent:
            page = self._peer_acks.pop(sender_id, None)
            if page is not None:
                page.close()
            messages = self._senders.pop(sender_id).messages.values()
            dropped = sum(len(t) for t in messages)
            for tensors in messages:
                self._let_go(*tensors.values())
            log.warning(
                "evicting sender %s, silent for over %ss (%d buffered tensor(s) dropped)", sender_id, self.ttl, dropped
            )

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
