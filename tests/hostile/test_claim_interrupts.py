"""An interrupt (a signal handler's ``KeyboardInterrupt``) landing as a receiver claims a pool slot.

A landing after the claim took effect (as the page's lock or mutex is let go, or as the claim is
marked on a named segment's page) gives this claim back and raises the interrupt; one before it
changes nothing on the page, which stays claimable. Each landing is a stand-in for the call into
C it lands after (``fcntl.fcntl``, the page mutex's ``release``, ``own_start``): the real call is
made, then ``KeyboardInterrupt`` raised, as CPython raises it once such a call returns.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import hmac
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import _page, _page_hold, _page_lock, _slots
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import (
    _W_CLAIMS,
    _W_HOLDERS,
    _W_PIDS,
    _W_RECEIVER,
    CLAIMED,
    CONTROL_BYTES,
    FREE,
    IN_FLIGHT,
    RECEIVER_BYTE,
    SENDER,
)
from tensorwire.transports._page_lock import _LOCK, _UNLOCK
from tensorwire.transports._segment import own_start
from tests.interrupts import locks_are_free, make_transition, memfd_page

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor out of band


class _Landing:
    """Where the next interrupt lands (``at``: "unlock", "release", "mark", "lock"; None: nowhere):
    once, as that call returns, in the thread that made this (never in a pool's trimmer)."""

    def __init__(self) -> None:
        self.at: str | None = None
        self.thread = threading.get_ident()

    def __getattr__(self, name: str) -> Any:  # (the rest of the ``fcntl`` module)
        return getattr(fcntl, name)

    def land(self, where: str) -> None:
        if self.at == where and threading.get_ident() == self.thread:
            self.at = None
            raise KeyboardInterrupt

    def fcntl(self, fd: int, cmd: int, arg: Any = 0) -> Any:
        result = fcntl.fcntl(fd, cmd, arg)
        if arg == _UNLOCK:
            self.land("unlock")
        elif arg == _LOCK:
            self.land("lock")
        elif cmd == fcntl.F_OFD_SETLK:
            self.land("mark")
        return result


class _Mutex:
    """A page mutex whose ``release`` lets go, then raises where the landing says so."""

    def __init__(self, landing: _Landing) -> None:
        self.lock, self.landing = threading.RLock(), landing

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()
        self.landing.land("release")

    def _is_owned(self) -> bool:  # (``Hold.held_here``)
        return bool(self.lock._is_owned())  # type: ignore[attr-defined]

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.fixture
def landing(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Landing]:
    """Pages mapped from now on take their locks through stand-ins that land where it says."""
    where = _Landing()
    monkeypatch.setattr(_page, "fcntl", where)
    monkeypatch.setattr(_page_hold, "fcntl", where)
    monkeypatch.setattr(_page, "threading", SimpleNamespace(RLock=lambda: _Mutex(where)))
    yield where
    gc.collect()


@pytest.fixture
def made() -> Iterator[list[tw.transports.ShmTransport]]:
    transports: list[tw.transports.ShmTransport] = []
    yield transports
    for transport in transports:
        transport.close()


def _shm(made: list[tw.transports.ShmTransport], **options: Any) -> tw.transports.ShmTransport:
    made.append(tw.transports.ShmTransport(**options))
    return made[-1]


def _message(i: int = 0) -> Any:
    return diffusion.Output(output=torch.full((20_000,), float(i)), chunk_index=i)


def _page_of(shm: tw.transports.ShmTransport) -> Page:
    assert shm.pool is not None
    (slot,) = shm.pool.slots()
    return slot.page


def _control(page: Page) -> bytes:
    return bytes(page._raw[:CONTROL_BYTES])


@pytest.mark.parametrize(
    ("backing", "where"),  # (only a named segment's claim is marked)
    [("memfd", "unlock"), ("memfd", "release"), ("named", "unlock"), ("named", "release"), ("named", "mark")],
)
@pytest.mark.parametrize("borrow", [True, False], ids=["borrowed", "copied"])
def test_an_interrupt_landing_once_a_receiver_claimed_its_slot_gives_the_slot_back(
    landing: _Landing, made: list[tw.transports.ShmTransport], backing: str, where: str, borrow: bool
) -> None:
    """The claim took effect, then the interrupt left ``claim`` before the receiver's hold on the
    slot was made: the slot stayed claimed by a live receiver, never reclaimed (the pool grew)."""
    shm, receiver = _shm(made, backing=backing), _shm(made, backing=backing, pool=False)
    encoder = tw.Encoder(transport=shm, options=OOB)
    decoder = tw.Decoder(REGISTRY, transports=[receiver], options=tw.DecodeOptions(borrow=borrow))
    frames = encoder.encode(_message())
    page = _page_of(shm)
    landing.at = where
    with pytest.raises(KeyboardInterrupt):
        decoder.decode(frames)
    assert landing.at is None  # it landed
    assert page.state == FREE
    assert not page.marked_elsewhere(RECEIVER_BYTE)  # (a named segment's receiver dropped its mark)
    out = decoder.decode(encoder.encode(_message(1)))
    assert float(out.output[0]) == 1.0
    assert _page_of(shm) is page  # the same slot, sent again


@pytest.mark.parametrize("where", ["unlock", "release"])
@pytest.mark.parametrize("first", [True, False], ids=["interrupted-first", "interrupted-second"])
@pytest.mark.parametrize("shared", [True, False], ids=["one-reader", "two-readers"])
def test_an_interrupted_claim_of_a_broadcast_takes_off_only_its_own_holder(
    landing: _Landing, made: list[tw.transports.ShmTransport], where: str, first: bool, shared: bool
) -> None:
    """Two receivers of one broadcast in this process (through one transport, or two): the claim
    an interrupt left once it took effect holds nothing; the other receiver's holds the slot until
    its view dies."""
    shm = _shm(made)
    receivers = [_shm(made, pool=False)]
    receivers.append(receivers[0] if shared else _shm(made, pool=False))
    decoders = [tw.Decoder(REGISTRY, transports=[r]) for r in receivers]
    frames = tw.Encoder(shm.fan_out(2), options=OOB).encode(_message(7))
    page = _page_of(shm)
    words = page.words

    def interrupted(decoder: tw.Decoder) -> None:
        landing.at = where
        with pytest.raises(KeyboardInterrupt):
            decoder.decode(frames)
        assert landing.at is None

    if first:
        interrupted(decoders[0])
        assert (page.state, words[_W_HOLDERS], words[_W_CLAIMS]) == (IN_FLIGHT, 0, 1)  # one claim, let go
        held = decoders[1].decode(frames)
    else:
        held = decoders[0].decode(frames)
        interrupted(decoders[1])
    assert (page.state, words[_W_HOLDERS], words[_W_PIDS]) == (CLAIMED, 1, os.getpid())
    assert float(held.output[0]) == 7.0
    del held
    gc.collect()
    assert page.state == FREE


@pytest.fixture
def page() -> Iterator[Page]:
    """A pool slot's page, for its sender and its receiver."""
    with memfd_page("tw-interrupted") as made:
        yield made


def _interrupting(real: Any) -> Any:
    def landed(*args: Any) -> Any:
        real(*args)
        raise KeyboardInterrupt

    return landed


@pytest.mark.parametrize("where", ["wait", "proof", "start"])
@pytest.mark.parametrize("readers", [1, 2], ids=["ordinary", "broadcast"])
def test_an_interrupt_landing_before_a_claim_took_effect_changes_nothing(
    page: Page, monkeypatch: pytest.MonkeyPatch, where: str, readers: int
) -> None:
    """In the wait for a page another process held, as the capability was proven, or as the
    receiver's start was read (``own_start``): there an ordinary claim had voided the page's
    capability and named its receiver already (nobody could claim, discard or undo it, until its
    claim deadline), and a broadcast's had named a holder."""
    generation = page.take(SENDER)
    capability = page.hand_over(60.0, readers)
    before = _control(page)
    if where == "wait":  # the page locked elsewhere: the claim waits for it (``_lock``)
        monkeypatch.setattr(_page, "fcntl", SimpleNamespace(fcntl=_refused_once, F_OFD_SETLK=fcntl.F_OFD_SETLK))
        monkeypatch.setattr(_page, "_lock", _interrupting(lambda fd, what: None))
    elif where == "proof":
        monkeypatch.setattr(_page, "hmac", SimpleNamespace(compare_digest=_interrupting(hmac.compare_digest)))
    else:
        monkeypatch.setattr(_page, "own_start", _interrupting(own_start))
    with pytest.raises(KeyboardInterrupt):
        page.claim(generation, capability)
    monkeypatch.undo()
    assert _control(page) == before
    assert locks_are_free(page)
    page.claim(generation, capability)  # still in flight: claimed now
    assert page.words[_W_HOLDERS] == (1 if readers > 1 else 0)


def _refused_once(fd: int, cmd: int, arg: Any = 0) -> Any:
    """The first ``F_OFD_SETLK`` of the page's lock refused, as for a page another process holds."""
    if arg == _LOCK:
        raise OSError(errno.EAGAIN, "locked elsewhere")
    return fcntl.fcntl(fd, cmd, arg)


@pytest.mark.parametrize("borrow", [True, False], ids=["borrowed", "copied"])
def test_a_broadcast_receiver_whose_read_failed_after_its_claim_counts_once(
    made: list[tw.transports.ShmTransport], monkeypatch: pytest.MonkeyPatch, borrow: bool
) -> None:
    """The read after the claim raised (an interrupt as its view's hold was made, or a copy that
    failed): the claim was freed, then the failed decode's discard of the unread buffer counted the
    same receiver again, so a broadcast to two closed before its other receiver came."""
    shm, receivers = _shm(made), [_shm(made, pool=False), _shm(made, pool=False)]
    frames = tw.Encoder(shm.fan_out(2), options=OOB).encode(_message(5))
    page = _page_of(shm)
    decoders = [tw.Decoder(REGISTRY, transports=[r], options=tw.DecodeOptions(borrow=borrow)) for r in receivers]

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(_slots, "_ReceiverLease" if borrow else "bytearray", interrupted, raising=borrow)
        with pytest.raises(KeyboardInterrupt):
            decoders[0].decode(frames)
    assert (page.state, page.words[_W_HOLDERS], page.words[_W_CLAIMS]) == (IN_FLIGHT, 0, 1)
    out = decoders[1].decode(frames)
    assert float(out.output[0]) == 5.0
    del out
    gc.collect()
    assert page.state == FREE


@pytest.mark.parametrize("how", ["claim", "claim-after-a-wait", "undo", "discard"])
def test_an_interrupt_landing_as_a_transition_locked_its_page_lets_go_of_the_lock(
    page: Page, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Once the page's lock was taken (a claim's first try, or one after the page was held
    elsewhere; a sender's undo, a receiver's discard): the transition let go of the page's mutex
    but kept the lock, and every other process's transition of the page was refused (`locked by
    another process`) until this one made another."""
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    before = _control(page)
    landing = _Landing()
    landing.at = "lock"
    if how == "claim":
        monkeypatch.setattr(_page, "fcntl", landing)
    else:
        monkeypatch.setattr(_page_lock, "fcntl", landing)  # (``_lock``'s)
        if how == "claim-after-a-wait":
            monkeypatch.setattr(_page, "fcntl", SimpleNamespace(fcntl=_refused_once, F_OFD_SETLK=fcntl.F_OFD_SETLK))
    with pytest.raises(KeyboardInterrupt):
        if how == "undo":
            page.undo(generation, capability)
        elif how == "discard":
            page.discard(generation, capability)
        else:
            page.claim(generation, capability)
    monkeypatch.undo()
    assert landing.at is None  # it landed
    assert _control(page) == before
    assert locks_are_free(page)
    page.claim(generation, capability)
    assert page.state == CLAIMED


def _lands_at_entry(*args: Any) -> None:
    raise KeyboardInterrupt  # (at a Python function's entry, before its first line: CPython checks there)


@pytest.mark.parametrize("how", ["undo", "discard", "expire", "broadcast-free", "reclaim"])
def test_an_interrupt_landing_as_a_transition_lets_go_of_its_page_still_lets_go_of_the_lock(
    page: Page, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Once a transition was made (a sender's undo, expiry or reclaim, a receiver's discard, a
    broadcast receiver's free): it let go of the page's lock through Python functions
    (``Hold._leave``, then ``_unlock``), and an interrupt at either one's entry kept the lock, so
    every other process's transition of the page was refused (`locked by another process`) for as
    long as this process kept the page mapped. The lock is now let go of by the call into C itself:
    the interrupt lands once it returns, the lock free and the transition made."""
    generation = page.take(SENDER)
    readers = 2 if how == "broadcast-free" else 1
    capability = page.hand_over(0.0 if how == "expire" else 60.0, readers)
    if how == "broadcast-free":
        page.claim(generation, capability)
        page.claim(generation, capability)
        page.free(generation)  # (the first of its two holders: the page stays claimed)
    elif how == "reclaim":
        page.claim(generation, capability)
        page.words[_W_RECEIVER] = 2**22 + 1  # (a pid no process has: the receiver is gone)
    elif how == "expire":
        time.sleep(0.001)
    landing = _Landing()
    landing.at = "unlock"
    monkeypatch.setattr(_page, "fcntl", landing)
    monkeypatch.setattr(_page_hold.Hold, "_leave", _lands_at_entry, raising=False)
    monkeypatch.setattr(_page_lock, "_unlock", _lands_at_entry)
    monkeypatch.setattr(_page_hold, "_unlock", _lands_at_entry, raising=False)
    with pytest.raises(KeyboardInterrupt):
        make_transition(page, how, generation, capability)
    monkeypatch.undo()
    assert landing.at is None  # it landed, once the lock was let go of
    assert page.state == FREE  # (the transition made)
    assert locks_are_free(page)
    generation = page.take(SENDER)  # the slot sent again
    page.claim(generation, page.hand_over(60.0))
    assert page.state == CLAIMED


@pytest.mark.parametrize("readers", [1, 2], ids=["ordinary", "broadcast"])
def test_a_named_segments_claim_is_marked_before_it_is_written(
    made: list[tw.transports.ShmTransport], monkeypatch: pytest.MonkeyPatch, readers: int
) -> None:
    """A sender reads the claim's state without the page's lock where it asks whether a receiver
    holds the page (``held_by_another``, at exit): a claim written before its mark looked, for that
    moment, like one of a receiver in another pid namespace that no longer holds it. The probe is
    the receiver's start, read just before the claim's writes: the mark is held by then."""
    shm, receiver = _shm(made, backing="named"), _shm(made, backing="named", pool=False)
    encoder = tw.Encoder(transport=shm if readers == 1 else shm.fan_out(readers), options=OOB)
    frames = encoder.encode(_message(3))
    page = _page_of(shm)
    seen: list[bool] = []

    def probed() -> int:
        seen.append(page.marked_elsewhere(RECEIVER_BYTE))  # (the sender's description asks)
        return own_start()

    monkeypatch.setattr(_page, "own_start", probed)
    out = tw.Decoder(REGISTRY, transports=[receiver]).decode(frames)
    assert float(out.output[0]) == 3.0
    assert seen == [True]


@pytest.mark.parametrize("readers", [1, 2], ids=["ordinary", "broadcast"])
def test_an_interrupt_landing_as_a_claim_is_marked_leaves_no_mark_and_no_claim(
    page: Page, monkeypatch: pytest.MonkeyPatch, readers: int
) -> None:
    """The mark taken (a named segment's receiver marks the page before it writes its claim), the
    interrupt lands before the claim is written: the mark goes, and the page stays in flight, as
    it was, for this receiver to claim."""
    generation = page.take(SENDER)
    capability = page.hand_over(60.0, readers)
    before = _control(page)
    page.marks_claims = True
    monkeypatch.setattr(Page, "_mark", _interrupting(_page_hold.Hold._mark))
    with pytest.raises(KeyboardInterrupt):
        page.claim(generation, capability)
    monkeypatch.undo()
    assert _control(page) == before
    assert not _marked_by(page)
    assert locks_are_free(page)
    page.claim(generation, capability)
    assert _marked_by(page)


def _marked_by(page: Page) -> bool:
    """Whether the page's own description holds its receiver mark (asked from another description)."""
    other = os.open(f"/proc/self/fd/{page.fd}", os.O_RDWR)
    try:
        return _page_lock.marked(other, RECEIVER_BYTE)
    finally:
        os.close(other)


class _FrombufferThenInterrupt:
    """``numpy`` for ``_slots``, whose ``frombuffer`` returns, then an interrupt lands (once)."""

    def __init__(self) -> None:
        import numpy

        self.numpy, self.armed = numpy, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.numpy, name)

    def frombuffer(self, *args: Any, **kwargs: Any) -> Any:
        result = self.numpy.frombuffer(*args, **kwargs)
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return result


def _memfds_open() -> int:
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
        except OSError:
            pass
    return found


def test_an_interrupt_as_a_receiver_maps_a_segment_leaves_its_fd_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt landing as the segment's mapping was viewed (while the receiver's record of it
    was being made) left the half-made record unable to close the sender's memfd (its ``__del__``
    failed first on an attribute not yet set): the fd, and the sender's memory with it, stayed open
    for as long as the receiver lived."""
    with tw.transports.ShmTransport() as sender, tw.transports.ShmTransport() as receiver:
        frames = tw.Encoder(transport=sender, options=OOB).encode(diffusion.Output(output=torch.ones(100_000)))
        before = _memfds_open()
        monkeypatch.setattr(_slots, "np", _FrombufferThenInterrupt())
        with pytest.raises(KeyboardInterrupt):
            tw.Decoder(REGISTRY, transports=[receiver]).decode(frames)
        gc.collect()
        assert _memfds_open() == before  # the sender's own, not a second one of the receiver's
        assert sender.pool is not None and [slot.state for slot in sender.pool.slots()] == [FREE]  # given back


class _CreateThenInterrupt:
    """``os`` for ``_segment``, whose creating calls (``memfd_create``, ``open`` with ``O_CREAT``)
    return, then an interrupt lands, as CPython raises it once such a call returns."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def memfd_create(self, *args: Any) -> int:
        os.memfd_create(*args)
        raise KeyboardInterrupt

    def open(self, path: Any, flags: int, *args: Any) -> int:
        fd = os.open(path, flags, *args)
        if flags & os.O_CREAT:
            raise KeyboardInterrupt
        return fd


@pytest.mark.parametrize("kind", ["memfd pool", "named pool", "one-shot"])
def test_an_interrupt_as_a_segment_is_created_leaves_neither_its_fd_nor_its_file(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new fd was not yet named when the interrupt landed, so nothing closed it: a memfd's
    memory, or a named segment's file in /dev/shm, stayed for as long as the process (the file:
    after it). Such an fd is found and closed, and the file it was made at removed."""
    from tensorwire.transports import _segment

    directory = tempfile.mkdtemp(dir="/dev/shm", prefix="twtest-create-")
    choices: dict[str, dict[str, Any]] = {
        "memfd pool": {},
        "named pool": {"backing": "named"},
        "one-shot": {"pool": False},
    }
    options = choices[kind]
    try:
        with tw.transports.ShmTransport(directory, **options) as shm:
            encoder = tw.Encoder(transport=shm, options=OOB)
            before = _memfds_open()
            monkeypatch.setattr(_segment, "os", _CreateThenInterrupt())
            for _ in range(3):
                with pytest.raises(KeyboardInterrupt):
                    encoder.encode(diffusion.Output(output=torch.ones(100_000)))
            monkeypatch.undo()
            assert _memfds_open() == before and os.listdir(directory) == []
            frames = encoder.encode(diffusion.Output(output=torch.ones(100_000)))  # and it goes on
            assert torch.equal(tw.Decoder(REGISTRY, transports=[shm]).decode(frames).output, torch.ones(100_000))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
