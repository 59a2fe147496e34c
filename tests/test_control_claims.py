"""A receiver's claim of a control page: what a claim changes, what a refused one leaves as it was,
and that the page's locks are free again after either (the claim runs its steps in one frame)."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import time
from collections.abc import Iterator

import pytest

from tensorwire.errors import DecodeError, TransportError
from tensorwire.transports._one_shot_page import claim_file, init_file
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CLAIMED, CONTROL_BYTES, FREE, IN_FLIGHT, SENDER, digest
from tensorwire.transports._segment import create_memfd
from tests.interrupts import locks_are_free, memfd_page

_LOCK = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
_UNLOCK = struct.pack("hh4xqqi4x", fcntl.F_UNLCK, os.SEEK_SET, 0, 1, 0)


@pytest.fixture
def page() -> Iterator[Page]:
    with memfd_page("tw-claims") as made:
        yield made


def _control(page: Page) -> bytes:
    return bytes(page.words.cast("B")[:CONTROL_BYTES])


def test_a_claim_takes_the_page_and_voids_its_capability(page: Page) -> None:
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    assert page.state == IN_FLIGHT and page.words.cast("B")[64:80].tobytes() == digest(capability)
    page.claim(generation, capability)
    assert (page.state, page.receiver, page.generation) == (CLAIMED, os.getpid(), generation)
    assert page.words.cast("B")[64:80].tobytes() == bytes(16)
    assert locks_are_free(page)
    with pytest.raises(
        DecodeError, match=r"^pool slot tw-claims generation 1 is no longer in flight \(stale or replayed"
    ):
        page.claim(generation, capability)  # a handle is good for one claim
    assert locks_are_free(page)


def test_a_refused_claim_leaves_the_page_as_it_was_and_says_why(page: Page) -> None:
    name = "pool slot tw-claims"
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    before = _control(page)
    refusals = [
        (generation, os.urandom(16), f"{name}: the handle's capability does not match (a forged or stale handle)"),
        (generation, b"", f"{name}: the handle's capability does not match (a forged or stale handle)"),
        (generation + 1, capability, f"{name} generation {generation + 1} is no longer in flight (stale or replayed"),
        (generation + 7, capability, f"{name} generation {generation + 7} is no longer in flight (stale or replayed"),
    ]
    for wanted, proof, words in refusals:
        with pytest.raises(DecodeError) as info:
            page.claim(wanted, proof)
        assert info.value.message.startswith(words)
        assert _control(page) == before
        assert locks_are_free(page)
    page.claim(generation, capability)  # the right handle still claims it
    assert page.state == CLAIMED


def test_a_claim_past_the_deadline_is_refused_as_expired_and_changes_nothing(page: Page) -> None:
    generation = page.take(SENDER)
    capability = page.hand_over(1e-6)
    time.sleep(0.01)
    before = _control(page)
    with pytest.raises(DecodeError, match=r"^pool slot tw-claims generation 1 expired: it was not claimed within"):
        page.claim(generation, capability)
    assert _control(page) == before and locks_are_free(page)


def test_a_claim_of_a_page_let_go_is_a_transport_error_and_holds_no_lock(page: Page) -> None:
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    fd = os.dup(page.fd)  # (the fixture closes the page's own fd again: a no-op once it is -1)
    try:
        page.close_fd()
        with pytest.raises(TransportError, match=r"^\[Errno 9\] pool slot tw-claims was let go") as info:
            page.claim(generation, capability)
        assert info.value.errno == errno.EBADF
        assert page._mutex.acquire(blocking=False)
        page._mutex.release()
    finally:
        os.close(fd)


def test_a_page_another_process_holds_is_waited_for_then_refused_unchanged(page: Page) -> None:
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    before = _control(page)
    other = os.open(f"/proc/self/fd/{page.fd}", os.O_RDWR)  # another open file description: another holder
    try:
        fcntl.fcntl(other, fcntl.F_OFD_SETLK, _LOCK)
        start = time.monotonic()
        with pytest.raises(TransportError, match=r"has been locked by another process for over 0.25s") as info:
            page.claim(generation, capability)
        assert info.value.errno == errno.EAGAIN and time.monotonic() - start >= 0.25
        assert _control(page) == before
        fcntl.fcntl(other, fcntl.F_OFD_SETLK, _UNLOCK)
        page.claim(generation, capability)  # once it is let go, the claim goes through
        assert page.state == CLAIMED
    finally:
        os.close(other)


def test_each_receiver_of_a_broadcast_claims_once(page: Page) -> None:
    generation = page.take(SENDER)
    capability = page.hand_over(60.0, readers=2)
    page.claim(generation, capability)
    assert page.state == IN_FLIGHT  # one receiver still to come
    page.claim(generation, capability)
    assert page.state == CLAIMED and locks_are_free(page)
    with pytest.raises(DecodeError, match=r"generation 1 is no longer in flight"):
        page.claim(generation, capability)
    assert page.free(generation) is False  # one holder let go: the other still holds it
    assert page.free(generation) is True


def test_a_receivers_word_out_of_range_makes_an_ordinary_claim(page: Page) -> None:
    """The page is shared with the peer: a broadcast's words it wrote past their bounds index nothing."""
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    page.words[12], page.words[14] = 2**40, 1000  # receivers and holders, as no hand-over writes them
    page.claim(generation, capability)
    assert (page.state, page.receiver) == (CLAIMED, os.getpid())


@pytest.mark.parametrize(("readers", "holders"), [(2**40, 1000), (2, 1000)])
def test_a_sender_reclaims_a_page_whose_broadcast_words_a_receiver_overwrote(
    page: Page, readers: int, holders: int
) -> None:
    """The receivers and holders words are bounded as the sender reads them too: a dead receiver's page comes back."""
    generation = page.take(SENDER)
    page.claim(generation, page.hand_over(60.0))
    page.words[12], page.words[14] = readers, holders  # what a hostile receiver may write there
    assert page.reclaim(lambda pid: False) is True
    assert page.state == FREE


def test_a_broadcast_claim_past_its_receivers_is_refused(page: Page) -> None:
    """A holders count a peer raised to the receivers word leaves no claim to make (no pid written past it)."""
    generation = page.take(SENDER)
    capability = page.hand_over(60.0, readers=2)
    page.words[14] = 2  # holders, though none claimed
    with pytest.raises(
        DecodeError, match=r"^pool slot tw-claims generation 1 is no longer in flight \(every receiver claimed it\)$"
    ):
        page.claim(generation, capability)
    assert page.words[16 + 2] == 0 and locks_are_free(page)


def test_a_page_another_receiver_holds_is_not_freed_by_this_one(page: Page) -> None:
    """A process frees only its own claim: a page whose receiver word names another process (a later
    claim of the same generation, or what a peer wrote) stays claimed for that process."""
    generation = page.take(SENDER)
    page.claim(generation, page.hand_over(60.0))
    page.words[3] = os.getpid() + 1  # the receiver word
    assert page.free(generation) is False
    assert (page.state, page.receiver) == (CLAIMED, os.getpid() + 1)


@pytest.mark.parametrize(("word", "value"), [(0, 0), (7, 0)], ids=["magic", "one-shot flag"])
def test_a_one_shot_file_without_the_protocols_magic_or_flag_is_not_claimed(word: int, value: int) -> None:
    """Its capability proves nothing on a page that is not a one-shot segment's: nothing is written."""
    fd, mapping = create_memfd("tw-one-shot", CONTROL_BYTES + 4096)
    try:
        capability = init_file(fd, 4096, time.monotonic_ns() + 60 * 10**9, "segment tw-one-shot")
        os.pwrite(fd, struct.pack("<Q", value), word * 8)
        before = os.pread(fd, CONTROL_BYTES, 0)
        with pytest.raises(DecodeError, match=r"^segment tw-one-shot has no valid control page$"):
            claim_file(fd, capability, "segment tw-one-shot")
        assert os.pread(fd, CONTROL_BYTES, 0) == before
    finally:
        mapping.close()
        os.close(fd)
