"""The queue transport's receive buffer: what each sender has in it (``_Sender``), and
``_ReceiveBuffer``, the receiving half of ``QueueTransport``: one thread at a time draining the queue
into the buffer while the others wait, taking a tensor out, refusing one that is stale or taken
already, acknowledging a CUDA tensor on its sender's ack page, and evicting senders silent for
over ``ttl``. Its state is made by ``QueueTransport._reset``.
"""

from __future__ import annotations

import errno
import logging
import queue as stdlib_queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tensorwire._timeouts import LONGEST_WAIT
from tensorwire.errors import DecodeError, TransportError, quoted
from tensorwire.transports._ack import AckPage
from tensorwire.transports._queue_ids import _LAST_POSITION, _TENSORS_PER_MESSAGE, QueueHandle, _is_item, _position
from tensorwire.transports._reaper import NAME

log = logging.getLogger("tensorwire.queue")

_POLL = 0.1  # seconds a draining thread waits on the queue before it looks at the buffer again


@dataclass
class _Sender:
    """What one producer has in the receiver's buffer."""

    newest_consumed: int = -1
    taken: set[int] = field(default_factory=set)  # tensor ids of message ``newest_consumed`` taken out
    messages: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)


class _ReceiveBuffer:
    """The receiving half of ``QueueTransport`` (the buffer, its lock, the senders' ack pages)."""

    queue: Any
    timeout: float
    ttl: float
    max_buffered: int
    max_buffered_bytes: int
    directory: Path
    _senders: OrderedDict[str, _Sender]
    _held: int
    _held_bytes: int
    _peer_acks: dict[str, AckPage]
    _ready: threading.Condition
    _draining: bool

    if TYPE_CHECKING:

        def _own(self) -> None: ...

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
                        f"no tensor {handle.tensor} of message {handle.message} from sender {quoted(handle.sender)} "
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
                f"queue tensor {handle.tensor} of message {handle.message} from sender {quoted(handle.sender)} "
                f"is stale: message {sender.newest_consumed} of that sender was read already"
            )
        if handle.message == sender.newest_consumed and handle.tensor in sender.taken:
            raise DecodeError(
                f"queue tensor {handle.tensor} of message {handle.message} from sender {quoted(handle.sender)} "
                "was taken already, by an earlier decode of that message (one that read it, or failed after taking it)"
            )

    def _drain_one(self, timeout: float, wanted: QueueHandle) -> None:
        """Take at most one item off the queue into the buffer (``wanted``, the tensor this thread
        asks for, whatever room the buffer has), the lock released while waiting for it (the lock
        held on entry and on return); then wake every waiting thread."""
        self._draining = True
        item = None
        try:
            try:
                self._ready.release()  # (in the ``try``: an interrupt landing as it returns is raised
                item = self._receive(timeout)  # with the lock taken again, as the caller's ``with`` needs)
            finally:
                self._ready.acquire()
            if item is not None:
                self._store(*item, wanted=wanted)
        except BaseException:  # (an interrupt, a full buffer): a CUDA item taken off the queue is acknowledged
            if item is not None and item[4] is not None:
                self._acknowledge_taken(item)
            raise
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
        try:
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
                    quoted(sender_id),
                    message,
                    index,
                )
                return None
            try:
                tensor = ForkingPickler.loads(payload)
            except Exception as exc:  # any item that cannot be opened (bad pickle, IPC failure) is dropped, not fatal
                log.warning(
                    "dropping a CUDA tensor from sender %s that could not be opened: %.200r", quoted(sender_id), exc
                )
                return sender_id, message, index, None, ack_name
            if not isinstance(tensor, torch.Tensor):
                log.warning("dropping a CUDA item from sender %s that is no tensor: %.200r", quoted(sender_id), tensor)
                return sender_id, message, index, None, ack_name
            return sender_id, message, index, tensor, ack_name
        except BaseException:  # (an interrupt) once the item left the queue: a CUDA one is acknowledged
            if _is_item(item) and len(item) == 5:
                with self._ready:
                    self._acknowledge_taken(item)
            raise

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
                "ignoring a stale tensor from sender %s (message %d is older than the one consumed)",
                quoted(sender_id),
                message,
            )
            return
        full = self._held >= self.max_buffered or self._held_bytes + tensor.nbytes > self.max_buffered_bytes
        if full and (sender_id, message, index) != (wanted.sender, wanted.message, wanted.tensor):
            raise TransportError(
                errno.ENOBUFS,
                f"receive buffer full ({self._held} tensors, {self._held_bytes} bytes; "
                f"limits {self.max_buffered} and {self.max_buffered_bytes}) "
                f"taking a tensor from sender {quoted(sender_id)}",
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
                "discarding %d stale tensor(s) of %d older message(s) from sender %s",
                count,
                len(stale),
                quoted(sender_id),
            )
        if not sender.messages.get(message):
            sender.messages.pop(message, None)

    def _acknowledge_taken(self, item: tuple[Any, ...]) -> None:
        """Acknowledge a CUDA item taken off the queue (as it came, or as ``_receive`` made it) that an
        exception kept from ``_store`` (the lock held): its sender lets go of the tensor. An item
        acknowledged already is not harmed (a page keeps its highest position); one whose ids no
        ack page holds is left, as ``_receive`` leaves it."""
        sender_id, message, index, _, ack_name = item
        if index < _TENSORS_PER_MESSAGE and _position(message, index) <= _LAST_POSITION:
            self._acknowledge(sender_id, ack_name, message, index)

    def _acknowledge(self, sender_id: str, ack_name: Any, message: int, index: int) -> None:
        """Tell the sender its tensor arrived (it may let go of it now)."""
        page = self._peer_acks.get(sender_id)
        if page is None:
            if not isinstance(ack_name, str) or not NAME.fullmatch(ack_name):
                shown = quoted(ack_name) if isinstance(ack_name, str) else f"of type {type(ack_name).__name__}"
                log.warning("sender %s names an ack page %s that is not a tensorwire name", quoted(sender_id), shown)
                return
            try:
                page = self._peer_acks[sender_id] = AckPage.open(self.directory / ack_name)
            except (TransportError, DecodeError) as exc:
                log.warning("cannot acknowledge sender %s: %s", quoted(sender_id), exc)
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
                "evicting sender %s, silent for over %ss (%d buffered tensor(s) dropped)",
                quoted(sender_id),
                self.ttl,
                dropped,
            )
