"""A pool slot let go of by one thread (``close``, ``trim``) while another sends through it or
undoes a send: a ``TransportError`` or nothing, never the ``ValueError`` of the released page.

Each test stops the threads where the race needs them, as a scheduler can: the thread that sends
or undoes after it found its slot, the other (a real thread) between letting go of the slot's
page and closing its fd where that matters. Pool slots are memfds: nothing in /dev/shm.
"""

from __future__ import annotations

import errno
import re
import threading
import time
from typing import Any

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import diffusion
from tensorwire.transports import shm as shm_module
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import FREE
from tensorwire.transports._parallel_copy import copy_into
from tensorwire.transports._pool import Pool

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through shared memory
JOIN = 60.0  # seconds: a bound for a stopped thread, never a speed requirement


def _in_a_thread(target: Any, *args: Any) -> None:
    """Run ``target`` in another thread, to its end."""
    thread = threading.Thread(target=target, args=args)
    thread.start()
    thread.join(JOIN)
    assert not thread.is_alive()


def test_a_send_whose_pool_another_thread_closes_during_its_copy_is_a_transport_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hand-over after the copy wrote the released page: ``encode`` raised ValueError."""
    shm = transports.ShmTransport()

    def copy_then_closed(target: memoryview, source: memoryview) -> None:
        copy_into(target, source)
        _in_a_thread(shm.close)  # (the copy's view keeps the mapping; the page's views go)

    monkeypatch.setattr(shm_module, "copy_into", copy_then_closed)
    with pytest.raises(tw.TransportError) as info:
        tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=torch.ones(1000)))
    assert info.value.errno == errno.EBADF
    assert re.fullmatch(
        r"\[Errno 9\] the shared-memory pool was closed before pool slot tw-\d+-[0-9a-f]+-[0-9a-f]+ was handed over",
        str(info.value),
    )
    assert shm.pool is not None and shm.pool.slots() == []


def test_undoing_a_send_while_another_thread_trims_its_slot_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """``release`` found the slot, then the trimmer let go of its page (but not yet of its fd):
    the undo read the released page, a ValueError out of ``release``."""
    shm = transports.ShmTransport(claim_timeout=0.01, idle_seconds=3600)
    pool = shm.pool
    assert pool is not None
    handle = shm.export(memoryview(bytearray(200_000)), [])
    time.sleep(0.05)  # past its claim timeout: a trim expires it and drops the slot
    dropped, resume = threading.Event(), threading.Event()
    real_undo, real_close_fd = Page.undo, Page.close_fd

    def close_fd(page: Page) -> None:  # the trimming thread: the page's views let go, its fd not yet
        dropped.set()
        resume.wait(JOIN)
        real_close_fd(page)

    def undo(page: Page, generation: int, capability: bytes, state: int) -> bool:  # the releasing thread, slot found
        trimmer = threading.Thread(target=pool.trim, args=(0,))
        trimmer.start()
        try:
            assert dropped.wait(JOIN)
            return real_undo(page, generation, capability, state)
        finally:
            resume.set()
            trimmer.join(JOIN)

    monkeypatch.setattr(Page, "close_fd", close_fd)
    monkeypatch.setattr(Page, "undo", undo)
    shm.release(handle)
    assert dropped.is_set() and pool.slots() == []
    monkeypatch.undo()
    shm.close()


def test_withdrawing_a_broadcast_whose_slot_another_thread_let_go_of_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``withdraw`` found the slot, then another thread closed the pool: the discard read the
    released page, a ValueError out of ``withdraw``."""
    shm = transports.ShmTransport()
    fan = shm.fan_out(3)
    handle = fan.export(memoryview(bytearray(200_000)), [])
    real_discard = Page.discard

    def discard(page: Page, generation: int, capability: bytes, readers: int = 1) -> bool:
        _in_a_thread(shm.close)
        return real_discard(page, generation, capability, readers)

    monkeypatch.setattr(Page, "discard", discard)
    fan.withdraw(handle, 2)
    assert shm.pool is not None and shm.pool.slots() == []


def test_an_interrupted_copy_whose_pool_another_thread_closed_raises_the_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copy was interrupted after another thread closed the pool: giving the slot back wrote
    the released page, and its ValueError replaced the interrupt."""

    def closed_then_interrupted(target: memoryview, source: memoryview) -> None:
        _in_a_thread(shm.close)
        raise KeyboardInterrupt

    shm = transports.ShmTransport()
    monkeypatch.setattr(shm_module, "copy_into", closed_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=torch.ones(1000)))
    assert shm.pool is not None and shm.pool.slots() == []


@pytest.mark.parametrize("after", [False, True], ids=["before-the-hand-over", "after-it"])
def test_an_interrupt_landing_in_a_slots_hand_over_gives_the_slot_back(
    monkeypatch: pytest.MonkeyPatch, after: bool
) -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``, an asynchronous exception) that lands
    in a slot's hand-over, before or after it puts the slot in flight, comes before any receiver
    can know the slot: it was left taken by the sender for ever (before) or in flight until its
    claim timeout (after), and the next send took another slot. It is given back at once."""
    hand_over = Pool.hand_over

    def interrupted(pool: Pool, slot: Any, readers: int = 1) -> tuple[int, bytes]:
        if after:
            hand_over(pool, slot, readers)
        raise KeyboardInterrupt

    with transports.ShmTransport() as shm:
        encoder = tw.Encoder(transport=shm, options=OOB)
        monkeypatch.setattr(Pool, "hand_over", interrupted)
        with pytest.raises(KeyboardInterrupt):
            encoder.encode(diffusion.Output(output=torch.ones(1000)))
        monkeypatch.undo()
        assert shm.pool is not None
        [slot] = shm.pool.slots()
        assert slot.state == FREE
        encoder.encode(diffusion.Output(output=torch.ones(1000)))
        assert shm.pool.slots() == [slot]  # the same slot, sent again
