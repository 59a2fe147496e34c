"""A one-shot segment's control page: the same words as a pool slot's, read and written with
pread/pwrite (a one-shot segment is never mapped before its page is checked): written in flight by
its sender (``init_file``), claimed or discarded by a receiver proving the capability, voided by a
sender that found it unclaimed past its deadline, and read without the lock (``claimable``,
``creator_started``).
"""

from __future__ import annotations

import errno
import os
import secrets
import struct
import time
from typing import Any

from tensorwire.errors import DecodeError, TransportError
from tensorwire.transports._page_layout import (
    _DIGEST,
    _HEAD,
    _MAGIC_WORD,
    _NO_DIGEST,
    _W_DEADLINE,
    _W_EXPIRED,
    _W_FLAGS,
    _W_GENERATION,
    _W_MAGIC,
    _W_RECEIVER,
    _W_STARTED,
    _W_STATE,
    CAPABILITY_BYTES,
    CLAIMED,
    FREE,
    IN_FLIGHT,
    MAGIC,
    ONE_SHOT,
    _refusal,
    digest,
)
from tensorwire.transports._page_lock import _lock, _unlock
from tensorwire.transports._segment import own_start

__all__ = ["claim_file", "claimable", "creator_started", "discard_file", "expire_file", "init_file"]


def init_file(fd: int, capacity: int, deadline_ns: int, what: str) -> bytes:
    """Write the page of a new one-shot segment, in flight until ``deadline_ns``; return its capability."""
    capability = secrets.token_bytes(CAPABILITY_BYTES)
    head = _HEAD.pack(_MAGIC_WORD, IN_FLIGHT, 1, 0, capacity, deadline_ns, 0, ONE_SHOT, digest(capability))
    head += struct.pack("<Q", own_start())  # (``_W_STARTED``, right after the digest)
    try:
        written = os.pwrite(fd, head, 0)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot write the control page of {what}: {exc.strerror}") from None
    if written != len(head):
        raise TransportError(errno.EIO, f"cannot write the control page of {what}: {written} of {len(head)} bytes")
    return capability


def _read_head(fd: int, what: str) -> tuple[Any, ...]:
    try:
        head = os.pread(fd, _HEAD.size, 0)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot read {what}: {exc.strerror}") from None
    if len(head) != _HEAD.size:
        raise DecodeError(f"{what} has no control page")
    values = _HEAD.unpack(head)
    if values[_W_MAGIC] != _MAGIC_WORD or not values[_W_FLAGS] & ONE_SHOT:
        raise DecodeError(f"{what} has no valid control page")
    return values


def _finish(fd: int, words: dict[int, int], what: str) -> None:
    """End a one-shot page's transition (the lock held): void its digest, then write ``words``."""
    writes = [(_NO_DIGEST, _DIGEST), *((struct.pack("<Q", value), index * 8) for index, value in words.items())]
    try:
        for data, offset in writes:
            os.pwrite(fd, data, offset)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot write the control page of {what}: {exc.strerror}") from None


def _transition(fd: int, capability: bytes, what: str, state: int) -> None:
    """Move a one-shot page from IN_FLIGHT to ``state`` once the capability proves, or raise ``DecodeError``."""
    _lock(fd, what)
    try:
        head = _read_head(fd, what)
        reason = _refusal(
            what, head[_W_STATE], head[_W_GENERATION], head[_W_EXPIRED], head[8], head[_W_DEADLINE], 1, capability
        )
        if reason is not None:
            raise DecodeError(reason)
        _finish(fd, {_W_RECEIVER: os.getpid(), _W_STATE: state}, what)
    finally:
        _unlock(fd)


def claim_file(fd: int, capability: bytes, what: str) -> None:
    """Claim the one-shot segment open as ``fd``, proving the capability (else ``DecodeError``)."""
    _transition(fd, capability, what, CLAIMED)


def expire_file(fd: int, what: str) -> None:
    """Void a one-shot segment its sender found unclaimed past the deadline it set (the sender then
    unlinks it): a page still in flight goes out of flight, whatever deadline it says now (a peer
    may have pushed it on); a page out of flight, or that is not a one-shot page any more, is left
    as it is. A page another process keeps locked is a ``TransportError`` (EAGAIN)."""
    _lock(fd, what)
    try:
        try:
            head = _read_head(fd, what)
        except DecodeError:
            return
        if head[_W_STATE] == IN_FLIGHT:
            _finish(fd, {_W_EXPIRED: 1, _W_STATE: FREE}, what)
    finally:
        _unlock(fd)


def discard_file(fd: int, capability: bytes, what: str) -> bool:
    """Mark a one-shot segment read-never (the caller unlinks it) if the capability proves it."""
    try:
        _transition(fd, capability, what, FREE)
    except DecodeError:
        return False
    return True


def claimable(fd: int) -> bool:
    """Whether the one-shot segment open as ``fd`` is in flight before its claim deadline, as its page
    says (one read, no lock: a claim past the deadline is refused, so a segment found past it stays
    unclaimable); False for any other file."""
    try:
        words = _read_head(fd, "a one-shot segment")
    except (DecodeError, TransportError):
        return False
    return bool(words[_W_STATE] == IN_FLIGHT and time.monotonic_ns() <= words[_W_DEADLINE])


def creator_started(fd: int) -> int:
    """When the creator of the segment open as ``fd`` started, as its page says (0: not said, or no page)."""
    try:
        head = os.pread(fd, 8 * (_W_STARTED + 1), 0)
    except OSError:
        return 0
    if len(head) != 8 * (_W_STARTED + 1) or head[:8] != MAGIC:
        return 0
    value: int = struct.unpack_from("<Q", head, 8 * _W_STARTED)[0]
    return value
