"""A control page as it is read (``PageView``): its words and digest mapped, what they say (state,
generation, capacity, flags, who claimed it, whether a hand-over is due or how it ended) and whether
a live receiver of another process holds it. One look each, no lock: ``Page`` adds the transitions.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable

from tensorwire.transports._page_hold import Hold
from tensorwire.transports._page_holders import holders_started, lives
from tensorwire.transports._page_layout import (
    _DIGEST,
    _MAGIC_WORD,
    _NO_DIGEST,
    _W_CAPACITY,
    _W_DEADLINE,
    _W_EXPIRED,
    _W_FLAGS,
    _W_GENERATION,
    _W_MAGIC,
    _W_READERS,
    _W_RECEIVER,
    _W_RECEIVER_STARTED,
    _W_STARTED,
    _W_STATE,
    CAPABILITY_BYTES,
    CLAIMED,
    FREE,
    IN_FLIGHT,
    MAX_READERS,
    RECEIVER_BYTE,
    digest,
)

__all__ = ["PageView"]


class PageView(Hold):
    """The words (``words``) and bytes (``_raw``) of a mapped control page, read; ``marks_claims``:
    a receiver's page of a named segment (each claim also marks it); ``_deadline``: the claim
    deadline of this process's last hand-over."""

    __slots__ = ("_deadline", "_raw", "marks_claims", "words")

    _deadline: int
    _raw: memoryview
    marks_claims: bool
    words: memoryview

    # -- reading ----------------------------------------------------------------------------------
    @property
    def valid(self) -> bool:
        """Whether the page has the magic of this protocol."""
        return bool(self.words[_W_MAGIC] == _MAGIC_WORD)

    @property
    def state(self) -> int:
        return int(self.words[_W_STATE])

    @property
    def is_free(self) -> bool:
        """Whether the page is valid and free (one look, no lock: the sender's quick test)."""
        words = self.words
        return bool(words[_W_STATE] == FREE and words[_W_MAGIC] == _MAGIC_WORD)

    @property
    def generation(self) -> int:
        return int(self.words[_W_GENERATION])

    @property
    def receiver(self) -> int:
        return int(self.words[_W_RECEIVER])

    @property
    def capacity(self) -> int:
        return int(self.words[_W_CAPACITY])

    @property
    def flags(self) -> int:
        return int(self.words[_W_FLAGS])

    @property
    def creator_started(self) -> int:
        """When the segment's creator started, as the page says (``_segment.started``; 0: not said)."""
        return int(self.words[_W_STARTED])

    def due(self, now_ns: int) -> bool:
        """Whether the page is in flight past its claim deadline: the one its sender set, whatever a
        peer wrote on the page since (only an earlier one there counts)."""
        return self.words[_W_STATE] == IN_FLIGHT and now_ns > min(self.words[_W_DEADLINE], self._deadline)

    def outcome(self, generation: int, capability: bytes) -> bool | None:
        """What became of hand-over ``generation`` made under ``capability``, as its sender sees it
        (one look, no lock): None while it is in flight (past its deadline too, until it is brought
        back), True once a receiver of another process claimed it (``claimed_elsewhere``), False
        otherwise, or once the page moved on to another hand-over."""
        words = self.words
        if words[_W_GENERATION] != generation:
            return False
        if words[_W_STATE] == IN_FLIGHT:  # (a digest cleared: a transition under way, which the next look sees done)
            stored = bytes(self._raw[_DIGEST : _DIGEST + CAPABILITY_BYTES])
            if stored != _NO_DIGEST and not hmac.compare_digest(stored, digest(capability)):
                return False
            return None
        return self.claimed_elsewhere()

    def claimed_elsewhere(self) -> bool:
        """Whether the current hand-over, out of flight, was claimed by a receiver of another process
        (it holds the page, or held it and let go); not if it expired, was undone or given back, or
        was claimed by this process."""
        words = self.words
        if words[_W_RECEIVER] in (0, os.getpid()):
            return False
        state = words[_W_STATE]
        return state == CLAIMED or (state == FREE and words[_W_EXPIRED] != words[_W_GENERATION])

    def _readers(self) -> int:
        """The receivers of the current hand-over (1 for an ordinary one; whatever a receiver
        wrote there is bounded)."""
        readers = int(self.words[_W_READERS])
        return readers if 1 < readers <= MAX_READERS else 1

    def held_by_another(self, alive: Callable[[int], bool]) -> bool:
        """Whether a live process other than this one holds the claimed page."""
        if self.words[_W_STATE] != CLAIMED:
            return False
        if self._readers() == 1:
            holders = [(self.receiver, int(self.words[_W_RECEIVER_STARTED]))]
        else:
            holders = holders_started(self)
        others = [(pid, said) for pid, said in holders if pid != os.getpid()]
        return any(lives(pid, said, alive) for pid, said in others) or (
            bool(others) and self.marked_elsewhere(RECEIVER_BYTE)
        )
