"""The layout of a segment's control page: its words (little-endian u64 at fixed indices), states and
flags, the bytes of its file that are marks of who is alive, the digest a hand-over's capability is
kept as, and why a handle is refused against the page's words (``_refusal``: one judgment for the
mapped page, ``_page``, and for a one-shot segment's, ``_one_shot_page``); and the cross-process
protocol of hand-over, claim and release these words carry, below.

Every shared-memory segment starts with a 4 KiB control page (the data follows it). Its words
(little-endian u64): magic, state, generation, receiver pid, data capacity, claim deadline
(``CLOCK_MONOTONIC`` ns), the last expired generation, flags (one-shot, dropped by its creator);
then the 16-byte digest of the current hand-over's capability; when its creator started and when
its receiver did (a reused pid is told by them); then, for a hand-over to several receivers (a
broadcast), their number, the claims made, the receivers holding it, their pids and their starts.

A hand-over draws a fresh capability (128 random bits) that travels only in the message's handle;
the page keeps its BLAKE2b digest, never the capability itself. A receiver proves the capability
(constant-time comparison) before any side effect, and a claim clears the digest: a handle is good
for one claim. Transitions that race across processes (claim, discard, expiry, undo) happen under
an open-file-description lock on the page (``F_OFD_SETLK``, released by the kernel if its holder
dies) plus a thread lock; a lock held elsewhere for long is a ``TransportError``, never a hang.

States: FREE -> SENDER (the sender holds it) -> IN_FLIGHT (handed over) -> CLAIMED (a receiver
holds it) -> FREE; IN_FLIGHT -> FREE when it is discarded by a receiver that proved its
capability, undone by its sender, or not claimed before its deadline (expired); IN_FLIGHT ->
SENDER when its sender undoes the hand-over of a slot an ``empty`` tensor still lives in.

A broadcast to ``readers`` receivers stays IN_FLIGHT, its capability good, until ``readers``
claims (or discards) were made or its deadline passed; each claim records the receiver's pid, and
the page is FREE once the last receiver holding it has let go (a dead one is taken off by its
sender's reclaim). So one buffer is read by every receiver and freed when the last is done.

The page's lock is ``_page_lock``.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import time

__all__ = [
    "CAPABILITY_BYTES",
    "CLAIMED",
    "CONTROL_BYTES",
    "CREATOR_BYTE",
    "DROPPED",
    "FREE",
    "IN_FLIGHT",
    "MAGIC",
    "MAX_READERS",
    "ONE_SHOT",
    "RECEIVER_BYTE",
    "SENDER",
    "STATES",
    "digest",
]

CONTROL_BYTES = 4096
MAGIC = b"TWSLOT02"
FREE, SENDER, IN_FLIGHT, CLAIMED = 0, 1, 2, 3
STATES = frozenset({FREE, SENDER, IN_FLIGHT, CLAIMED})
ONE_SHOT, DROPPED = 1, 2  # flag bits
CAPABILITY_BYTES = 16
_MAGIC_WORD = int.from_bytes(MAGIC, "little")
_W_MAGIC, _W_STATE, _W_GENERATION, _W_RECEIVER, _W_CAPACITY, _W_DEADLINE, _W_EXPIRED, _W_FLAGS = range(8)
_DIGEST = 64  # byte offset of the capability digest
_W_STARTED = 10  # after the digest: when the creator started (``_segment.started``; 0: not said)
_W_RECEIVER_STARTED = 11  # when the receiver holding it started (0: not said)
_W_READERS, _W_CLAIMS, _W_HOLDERS, _W_PIDS = 12, 13, 14, 16  # a broadcast's words, after the digest
MAX_READERS = 64
"""The most receivers one hand-over can be broadcast to (their pids fill part of the control page)."""
_W_HOLDER_STARTS = _W_PIDS + MAX_READERS  # when each of a broadcast's holders started
_HEAD = struct.Struct("<8Q16s")  # the words and the digest, as one read
_NO_DIGEST = bytes(CAPABILITY_BYTES)
RECEIVER_BYTE, CREATOR_BYTE = 1, 2
"""Bytes of a named segment's file that a receiver holding a claim on it (``Page.marks_claims``),
and its creator while it has it open (``Page.mark``), keep shared-locked: who is alive, told across
pid namespaces, where a pid written by a process of another namespace names another process there,
or none."""


_HASH = hashlib.blake2b(digest_size=CAPABILITY_BYTES, person=b"tensorwire.cap")  # never updated: copied


def digest(capability: bytes) -> bytes:
    """What a page stores for ``capability``: its 16-byte keyed BLAKE2b digest."""
    h = _HASH.copy()  # (a copy of the keyed state costs less than parsing the keywords anew)
    h.update(capability)
    return h.digest()


def _refusal(
    what: str, state: int, generation: int, expired: int, stored: bytes, deadline: int, wanted: int, capability: bytes
) -> str | None:
    """Why a handle (``wanted`` generation, ``capability``) may not claim or discard the page, or None."""
    if generation != wanted or state != IN_FLIGHT:
        if expired == wanted:
            return f"{what} generation {wanted} expired: it was not claimed within its sender's claim timeout"
        return f"{what} generation {wanted} is no longer in flight (stale or replayed handle)"
    if stored == _NO_DIGEST or not hmac.compare_digest(stored, digest(capability)):
        return f"{what}: the handle's capability does not match (a forged or stale handle)"
    if time.monotonic_ns() > deadline:
        return f"{what} generation {wanted} expired: it was not claimed within its sender's claim timeout"
    return None
