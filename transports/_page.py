"""A mapped segment's control page (``Page``): its sender's transitions (take, hand over, undo,
expire, reclaim) and its receivers' (claim, discard, free), each made under the page's lock (the
``Hold`` of ``_page_hold``), with a broadcast's bookkeeping of its receivers' claims
(``_page_holders``); what the page says, read without a transition, is ``PageView``'s
(``_page_view``).
"""

from __future__ import annotations

import errno
import fcntl
import hmac
import mmap
import os
import threading
import time
from collections.abc import Callable

from tensorwire.errors import DecodeError, TransportError
from tensorwire.transports._page_holders import close_claims, count_claim, drop_holder, holders_started, lives, unhold
from tensorwire.transports._page_layout import (
    _DIGEST,
    _HEAD,
    _MAGIC_WORD,
    _NO_DIGEST,
    _W_CAPACITY,
    _W_CLAIMS,
    _W_DEADLINE,
    _W_EXPIRED,
    _W_FLAGS,
    _W_GENERATION,
    _W_HOLDER_STARTS,
    _W_HOLDERS,
    _W_MAGIC,
    _W_PIDS,
    _W_READERS,
    _W_RECEIVER,
    _W_RECEIVER_STARTED,
    _W_STARTED,
    _W_STATE,
    CAPABILITY_BYTES,
    CLAIMED,
    CONTROL_BYTES,
    DROPPED,
    FREE,
    IN_FLIGHT,
    MAX_READERS,
    RECEIVER_BYTE,
    _refusal,
    digest,
)
from tensorwire.transports._page_lock import _LOCK, _UNLOCK, _let_go_lock, _lock
from tensorwire.transports._page_view import PageView
from tensorwire.transports._segment import own_start

__all__ = ["Page"]


class Page(PageView):
    """The control page of a mapped segment: ``fd`` (for the lock) and the mapping's first page."""

    __slots__ = ()

    def __init__(self, fd: int, mapping: mmap.mmap, name: str) -> None:
        self.fd, self.name = fd, name
        self.marks_claims = False  # a receiver's page of a named segment: each claim also marks it
        self._raw = memoryview(mapping)[:CONTROL_BYTES]
        self.words = self._raw.cast("Q")  # native u64 stores: one aligned write each, never torn
        self._mutex = threading.RLock()
        self._later = []
        self._pid = os.getpid()
        self._deadline = 2**64  # the claim deadline of this process's last hand-over (``hand_over``)

    # -- the sender's transitions -------------------------------------------------------------------
    def init(self, capacity: int, flags: int = 0) -> None:
        """Lay out a new page: free, generation 0."""
        words = self.words
        words[_W_CAPACITY], words[_W_FLAGS], words[_W_STATE] = capacity, flags, FREE
        words[_W_STARTED] = own_start()
        words[_W_MAGIC] = _MAGIC_WORD

    def take(self, state: int) -> int:
        """Move a free page to ``state`` under a new generation; return it."""
        words = self.words
        generation = (int(words[_W_GENERATION]) + 1) % 2**63 or 1  # whatever a receiver wrote there
        words[_W_RECEIVER], words[_W_RECEIVER_STARTED] = 0, 0
        words[_W_GENERATION], words[_W_STATE] = generation, state
        return generation

    def hand_over(self, timeout: float, readers: int = 1) -> bytes:
        """Put the page in flight for ``timeout`` seconds under a fresh capability, for ``readers``
        receivers; return the capability."""
        if not 1 <= readers <= MAX_READERS:
            raise ValueError(f"a hand-over is for 1 to {MAX_READERS} receivers, not {readers}")
        capability = os.urandom(CAPABILITY_BYTES)  # what secrets.token_bytes draws, two calls fewer
        words = self.words
        self._raw[_DIGEST : _DIGEST + CAPABILITY_BYTES] = digest(capability)
        words[_W_READERS], words[_W_CLAIMS], words[_W_HOLDERS] = readers, 0, 0
        if readers > 1:
            for i in range(readers):
                words[_W_PIDS + i] = words[_W_HOLDER_STARTS + i] = 0
        words[_W_DEADLINE] = self._deadline = time.monotonic_ns() + int(timeout * 1e9)
        words[_W_STATE] = IN_FLIGHT
        return capability

    def give_back(self) -> None:
        """The sender's own page back to FREE (a pool tensor dropped unsent)."""
        self.words[_W_STATE] = FREE

    def undo(self, generation: int, capability: bytes, state: int = FREE) -> bool:
        """Take back a hand-over nobody claimed (a failed encode), if ``capability`` is the one it was
        made under, the page moving to ``state`` (``SENDER``: back to the sender's ``empty`` tensor);
        False if it was claimed, is gone, or the capability does not match."""

        def unclaimed() -> bool:
            if not self._proves(generation, capability, deadline=False) or self.words[_W_CLAIMS] > 0:
                return False
            if self.due(time.monotonic_ns()):
                self.words[_W_EXPIRED] = generation  # a late claim still says why it is refused
            return True

        return self._to_free(unclaimed, state)

    def expire(self, now_ns: int) -> bool:
        """Free the page if it is in flight past its deadline, remembering the expired generation."""
        if not self.due(now_ns):
            return False  # the common case, seen without taking the lock

        def due() -> bool:
            if not self.due(now_ns):
                return False
            self.words[_W_EXPIRED] = self.words[_W_GENERATION]
            if self._readers() > 1 and self.words[_W_HOLDERS] > 0:  # its holders free it when done
                close_claims(self)
                return False
            return True

        return self._to_free(due)

    def reclaim(self, alive: Callable[[int], bool]) -> bool:
        """Free a claimed page whose receivers are gone (``alive(pid)`` False); True if it is free now."""
        state = self.words[_W_STATE]
        if state == FREE:
            return True
        if state != CLAIMED:
            return False
        if self._readers() == 1:
            if lives(self.receiver, self.words[_W_RECEIVER_STARTED], alive):  # else maybe of another
                return False  # pid namespace: its mark, read with the page held (a receiver marks a
                # page it claims before it lets go of it)
            return self._to_free(lambda: self.words[_W_STATE] == CLAIMED and not self._marked(RECEIVER_BYTE))

        def none_alive() -> bool:
            if self.words[_W_STATE] != CLAIMED:
                return False
            dead = [pid for pid, said in holders_started(self) if not lives(pid, said, alive)]
            if dead and self._marked(RECEIVER_BYTE):  # a receiver holds it, in another pid
                return False  # namespace maybe: none is taken for dead while one does
            for pid in dead:
                drop_holder(self, pid)
            return self.words[_W_HOLDERS] == 0

        return self._to_free(none_alive)

    def mark_dropped(self) -> None:
        """Tell receivers the creator let go of this segment (they may unmap it once unused)."""
        self.words[_W_FLAGS] = self.words[_W_FLAGS] | DROPPED

    def _to_free(self, condition: Callable[[], bool], state: int = FREE) -> bool:
        """Void the capability and move the page to ``state`` if ``condition()`` holds under its lock."""
        try:
            with self._mutex:  # (a ``with``, not ``acquire()``: see ``Hold._enter``)
                try:
                    self._enter()
                except TransportError:
                    return False  # let go of, or locked by another process for long: not now
                try:
                    if not condition():
                        return False
                    self._raw[_DIGEST : _DIGEST + CAPABILITY_BYTES] = _NO_DIGEST
                    self.words[_W_STATE] = state
                    return True
                finally:  # the call into C itself, not a Python function around it: an interrupt lands
                    fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, _UNLOCK)  # at a function's entry, and would keep the lock
        finally:
            if self._later:  # views of the page collected inside the transition (``held_here``)
                self._give_back_later()

    # -- the receiver's transitions -----------------------------------------------------------------
    def claim(self, generation: int, capability: bytes) -> None:
        """Claim the hand-over the handle names (proving its capability) or raise ``DecodeError``
        naming the page.

        The common case runs in this one frame (``_enter``, the unlock and the proof inline: a
        receiver's per-message cost is mostly Python calls); anything else is judged and worded by
        ``_refusal``, as ``_check`` does."""
        claimed = marking = False  # ``claimed`` set right after this call's last write of its claim
        try:
            with self._mutex:  # (a ``with``, not ``acquire()``: an interrupt cannot land between the
                fd = self.fd  # mutex taken and the block entered, which would keep it held for good)
                try:
                    if fd < 0:
                        raise TransportError(errno.EBADF, f"{self.name} was let go")
                    try:
                        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _LOCK)  # a page nobody else holds: one call
                    except OSError:
                        _lock(fd, self.name)  # held by another process: wait for it a while (or the error)
                except BaseException:  # (an interrupt as the lock was taken, maybe: let go of it too)
                    if fd >= 0:
                        _let_go_lock(fd)
                    raise
                try:
                    head = _HEAD.unpack_from(self._raw)  # the words and the digest in one read (the page is held)
                    stored = head[8]
                    if (  # the common case proven here; anything else is judged (and worded) by ``_refusal``
                        head[_W_STATE] != IN_FLIGHT
                        or head[_W_GENERATION] != generation
                        or stored == _NO_DIGEST
                        or not hmac.compare_digest(stored, digest(capability))
                        or time.monotonic_ns() > head[_W_DEADLINE]
                    ):
                        reason = _refusal(
                            self.name,
                            head[_W_STATE],
                            head[_W_GENERATION],
                            head[_W_EXPIRED],
                            stored,
                            head[_W_DEADLINE],
                            generation,
                            capability,
                        )
                        if reason is not None:
                            raise DecodeError(reason)
                    if self.marks_claims:  # proven: held from now on, told to the sender by the mark (taken
                        marking = True  # before the claim is written, the page held: a sender never sees the
                        self._mark(RECEIVER_BYTE, True)  # claim without it)
                    words = self.words
                    readers = words[_W_READERS]
                    if not 1 < readers <= MAX_READERS:  # (``_readers``, inline)
                        pid, started = os.getpid(), own_start()  # (before the writes: all or none of them)
                        self._raw[_DIGEST : _DIGEST + CAPABILITY_BYTES] = _NO_DIGEST
                        words[_W_RECEIVER] = pid
                        words[_W_RECEIVER_STARTED] = started
                        words[_W_STATE] = CLAIMED
                    else:
                        holders = int(words[_W_HOLDERS])
                        if holders >= readers:
                            raise DecodeError(
                                f"{self.name} generation {generation} is no longer in flight "
                                "(every receiver claimed it)"
                            )
                        pid, started = os.getpid(), own_start()
                        claims = words[_W_CLAIMS] + 1  # (``count_claim``, inline: no call between the writes)
                        words[_W_PIDS + holders] = pid
                        words[_W_HOLDER_STARTS + holders] = started
                        words[_W_HOLDERS] = holders + 1
                        if claims >= readers:  # the last receiver: no more can claim (``close_claims``)
                            self._raw[_DIGEST : _DIGEST + CAPABILITY_BYTES] = _NO_DIGEST
                            words[_W_CLAIMS] = readers
                            words[_W_STATE] = CLAIMED
                        else:
                            words[_W_CLAIMS] = claims
                    claimed = True
                finally:  # (the unlock, as ``_to_free`` makes it; the mutex let go of as the ``with`` ends)
                    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _UNLOCK)
        except BaseException:  # (an interrupt as the page was let go): no view holds the claim to free it
            if claimed:  # this call's claim, given back
                if 1 < readers <= MAX_READERS:
                    self.unclaim(generation)  # one holder entry of this process, taken off under the lock
                else:
                    if words[_W_STATE] == CLAIMED and words[_W_RECEIVER] == pid and words[_W_GENERATION] == generation:
                        words[_W_STATE] = FREE  # (no call before it: a second interrupt finds it free)
                    if self.marks_claims:
                        self.mark(RECEIVER_BYTE, False)
            elif marking:  # marked (or about to be) for a claim that never took effect
                self.mark(RECEIVER_BYTE, False)
            raise
        finally:
            if self._later:  # views of the page collected inside the claim (``held_here``)
                self._give_back_later()

    def unclaim(self, generation: int) -> None:
        """Give back a claim of ``generation`` this process made that no view will hold (the claim, or
        the read after it, raised): an ordinary one is freed, a broadcast's holder entry taken off
        (``unhold``); a named segment's mark goes too (after the page is free: never a claim without it)."""
        if 1 < self.words[_W_READERS] <= MAX_READERS:
            self._to_free(lambda: unhold(self, generation, os.getpid()))
        else:
            self.free(generation)
        if self.marks_claims:
            self.mark(RECEIVER_BYTE, False)

    def discard(self, generation: int, capability: bytes, readers: int = 1) -> bool:
        """Give back a hand-over this receiver (or ``readers`` of a broadcast's receivers, in one
        transition) will not read, if the handle proves its capability."""
        if self._readers() == 1:
            return self._to_free(lambda: self._proves(generation, capability))

        def last() -> bool:  # of a broadcast: ``readers`` receivers fewer to wait for
            for _ in range(min(readers, self._readers())):
                if not self._proves(generation, capability):
                    break
                count_claim(self)
            return self.words[_W_STATE] == CLAIMED and self.words[_W_HOLDERS] == 0

        return self._to_free(last)

    def free(self, generation: int) -> bool:
        """Hand back a page this process claimed as ``generation`` (its last view died)."""
        words = self.words
        if words[_W_GENERATION] != generation:
            return False
        readers = words[_W_READERS]
        if not 1 < readers <= MAX_READERS:  # (``_readers``, inline)
            if words[_W_STATE] != CLAIMED or words[_W_RECEIVER] != os.getpid():
                return False
            words[_W_STATE] = FREE
            return True

        def done() -> bool:  # of a broadcast: free once its last holder let go of it
            if words[_W_GENERATION] != generation or not drop_holder(self, os.getpid()):
                return False
            return words[_W_STATE] == CLAIMED and words[_W_HOLDERS] == 0

        return self._to_free(done)

    def _proves(self, generation: int, capability: bytes, *, deadline: bool = True) -> bool:
        """Whether the handle may act on the page now (``_check`` without the error)."""
        try:
            self._check(generation, capability, self.name, deadline=deadline)
        except DecodeError:
            return False
        return True

    def _check(self, generation: int, capability: bytes, what: str, *, deadline: bool = True) -> None:
        head = _HEAD.unpack_from(self._raw)  # the words and the digest in one read (the page is held)
        reason = _refusal(
            what,
            head[_W_STATE],
            head[_W_GENERATION],
            head[_W_EXPIRED],
            head[8],
            head[_W_DEADLINE] if deadline else 2**64,
            generation,
            capability,
        )
        if reason is not None:
            raise DecodeError(reason)

    def release(self) -> None:
        """Let go of the views of the mapping (before it is closed)."""
        self.words.release()
        self._raw.release()
