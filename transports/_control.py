"""A segment's control page: the cross-process protocol of hand-over, claim and release.

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

The page's layout is ``_page_layout``, its lock ``_page_lock``, a mapped page ``_page`` and a
one-shot segment's page ``_one_shot_page``; this module gathers the names the transports use.
"""

from __future__ import annotations

from tensorwire.transports._one_shot_page import (
    claim_file,
    claimable,
    creator_started,
    discard_file,
    expire_file,
    init_file,
)
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import (
    _W_PIDS as _W_PIDS,
)
from tensorwire.transports._page_layout import (
    _W_STATE as _W_STATE,
)
from tensorwire.transports._page_layout import (
    CAPABILITY_BYTES,
    CLAIMED,
    CONTROL_BYTES,
    CREATOR_BYTE,
    DROPPED,
    FREE,
    IN_FLIGHT,
    MAGIC,
    MAX_READERS,
    ONE_SHOT,
    RECEIVER_BYTE,
    SENDER,
    STATES,
    digest,
)
from tensorwire.transports._page_lock import marked, one_wait

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
    "Page",
    "claim_file",
    "claimable",
    "creator_started",
    "digest",
    "discard_file",
    "expire_file",
    "init_file",
    "marked",
    "one_wait",
]
