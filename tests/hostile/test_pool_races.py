"""A pool slot let go of by one thread (``close``, ``trim``) while another sends through it or
undoes a send: a ``TransportError`` or nothing, never the ``ValueError`` of the released page.

Each test stops the threads where the race needs them, as a scheduler can: the thread that sends
or undoes after it found its slot, the other (a real thread) between letting go of the slot's
page and closing its fd where that matters. Pool slots are memfds: nothing in /dev/shm.
"""

from __future__ import annotations

import bisect
import errno
import gc
import inspect
import os
import re
import sys
import threading
import time
from typing import Any, Literal

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import diffusion
from tensorwire.transports import _pool as pool_module
from tensorwire.transports import _pool_growth as growth_module
from tensorwire.transports import shm as shm_module
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CONTROL_BYTES, FREE, SENDER
from tensorwire.transports._parallel_copy import copy_into
from tensorwire.transports._pool import Pool
from tensorwire.transports._reaper import next_name

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


class _InterruptedAsLetGo:
    """The pool's lock, but the first time it is let go with a slot taken by the sender (``taken``),
    a ``KeyboardInterrupt`` is raised as a signal handler's would be: on the call's return."""

    def __init__(self, lock: Any, taken: Any) -> None:
        self._lock, self._taken, self.raised = lock, taken, False

    def __enter__(self) -> Any:
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)
        if not self.raised and self._taken():
            self.raised = True
            raise KeyboardInterrupt


@pytest.mark.parametrize("grown", [True, False], ids=["a-new-slot", "a-free-one"])
def test_an_interrupt_landing_as_a_send_takes_its_slot_gives_the_slot_back(grown: bool) -> None:
    """An interrupt that lands as ``Pool.acquire`` returns the slot it took (as it lets go of the
    pool's lock) came before the send held the slot: it was left taken by the sender until close,
    and the next send took another slot. It is given back at once."""
    with transports.ShmTransport() as shm:
        encoder = tw.Encoder(transport=shm, options=OOB)
        pool = shm.pool
        assert pool is not None
        if not grown:  # a free slot of the class, which the send takes
            free = pool.acquire(4000, SENDER)
            assert free is not None
            pool.give_back(free)
        lock = pool._lock
        pool._lock = _InterruptedAsLetGo(lock, lambda: any(s.sending for g in pool._slots.values() for s in g))  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            encoder.encode(diffusion.Output(output=torch.ones(1000)))
        assert pool._lock.raised  # type: ignore[attr-defined]
        pool._lock = lock
        [slot] = pool.slots()
        assert slot.state == FREE and not slot.sending
        encoder.encode(diffusion.Output(output=torch.ones(1000)))
        assert pool.slots() == [slot]  # the same slot, sent again


def test_an_interrupt_landing_as_an_empty_tensor_is_made_gives_its_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt that lands after ``empty`` took its slot, before the tensor's hold on it was
    made, left the slot taken by the sender until close: no tensor was there to free it."""

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    with transports.ShmTransport() as shm:
        assert shm.pool is not None
        monkeypatch.setattr(pool_module, "_SenderLease", interrupted)
        with pytest.raises(KeyboardInterrupt):
            shm.empty((1000,), torch.float32)
        monkeypatch.undo()
        [slot] = shm.pool.slots()
        assert slot.state == FREE and not slot.sending
        tensor = shm.empty((1000,), torch.float32)
        assert shm.pool.slots() == [slot]  # the same slot, taken again
        del tensor


def test_an_interrupt_landing_as_a_send_stores_its_slot_gives_the_slot_back() -> None:
    """An interrupt that lands between ``Pool.acquire``'s return and the send's guard (here a
    trace function's, on the line after the call) left the slot taken by the sender until close."""
    code = shm_module.ShmTransport._export_pooled.__code__
    lines = inspect.getsourcelines(code)
    after = lines[1] + next(i for i, text in enumerate(lines[0]) if "pool.acquire(" in text) + 1

    def interrupting(frame: Any, event: str, arg: object) -> Any:
        if event == "line" and frame.f_lineno == after:
            sys.settrace(None)
            raise KeyboardInterrupt
        return interrupting

    def calls(frame: Any, event: str, arg: object) -> Any:
        return interrupting if frame.f_code is code else None

    with transports.ShmTransport() as shm:
        encoder = tw.Encoder(transport=shm, options=OOB)
        sys.settrace(calls)
        try:
            with pytest.raises(KeyboardInterrupt):
                encoder.encode(diffusion.Output(output=torch.ones(1000)))
        finally:
            sys.settrace(None)
        assert shm.pool is not None
        [slot] = shm.pool.slots()
        assert slot.state == FREE and not slot.sending


class _InsortInterrupted:
    """``bisect``, but ``insort`` raises ``KeyboardInterrupt`` once it returns (a signal handler's)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(bisect, name)

    @staticmethod
    def insort(*args: Any) -> None:
        bisect.insort(*args)
        raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["as-its-page-is-made", "as-it-is-indexed"])
@pytest.mark.parametrize("backing", ["memfd", "named"])
def test_an_interrupt_landing_as_the_pool_grows_leaves_no_segment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, backing: Literal["memfd", "named"], where: str
) -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``) that landed after ``_pool_growth.grow``
    created a segment, before the slot was registered, left its fd, its memory and (named) its file
    for the life of the process, ``close()`` included; one in the middle of the registration left
    the pool's indexes disagreeing. No send can know the slot yet: it is unmade at once."""

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    gc.collect()  # (what earlier tests dropped goes now, not during this one: it counts its own only)
    memfds, fds = transports.held_memfds(), len(os.listdir("/proc/self/fd"))
    with transports.ShmTransport(tmp_path, backing=backing) as shm:
        pool = shm.pool
        assert pool is not None
        if where == "as-its-page-is-made":
            monkeypatch.setattr(growth_module, "Page", interrupted)
        else:
            monkeypatch.setattr(growth_module, "bisect", _InsortInterrupted())
        with pytest.raises(KeyboardInterrupt):
            tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=torch.ones(1000)))
        monkeypatch.undo()
        assert pool.slots() == [] and pool._by_name == {} and pool._starts == [] and pool._by_start == {}
        assert pool.cached_bytes == 0 and list(tmp_path.iterdir()) == []
        assert transports.held_memfds() - memfds == set() and len(os.listdir("/proc/self/fd")) == fds
        tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=torch.ones(1000)))
        [slot] = pool.slots()
        assert pool._by_name == {slot.name: slot} and pool._starts == [slot.address] and pool.cached_bytes > 0


@pytest.mark.parametrize("call", ["bisect_left", "remove", "retire"])
def test_an_interrupt_landing_as_a_slot_is_dropped_leaves_it_in_the_pool_or_let_go(tmp_path: Any, call: str) -> None:
    """An interrupt that landed as ``_pool_growth.drop`` took a slot out of the pool's indexes (as a call
    into C returned) or as its owner's ``retire`` was called left it out of some of them and never
    let go: its fd and memory stayed for the life of the process, ``close()`` included. The slot
    is now in every index or in none, and one in none is let go."""
    gc.collect()  # (what earlier tests dropped goes now, not during this one: it counts its own only)
    memfds = transports.held_memfds()
    code = growth_module.remove.__code__

    def interrupting(frame: Any, event: str, arg: Any) -> None:
        if event == "c_return" and frame.f_code is code and arg.__name__ == call:
            sys.setprofile(None)
            raise KeyboardInterrupt

    def retire(slot: Any) -> bool:
        raise KeyboardInterrupt

    pool = Pool(tmp_path, next_name, retire=retire if call == "retire" else None)
    try:
        slot = pool.acquire(4000, SENDER)
        assert slot is not None
        pool.give_back(slot)
        sys.setprofile(interrupting)
        try:
            with pytest.raises(KeyboardInterrupt):
                pool.trim(0)
        finally:
            sys.setprofile(None)
        kept = pool.slots() == [slot]
        assert kept == (call == "bisect_left")  # (the first call into C changes nothing; the others, all)
        assert pool._by_name == ({slot.name: slot} if kept else {}) and pool._by_start.keys() == set(pool._starts)
        assert pool.cached_bytes == (slot.capacity + CONTROL_BYTES if kept else 0)
    finally:
        pool.close()
    assert not transports.held_memfds() - memfds or call == "retire"  # (a retire that did not answer keeps the mapping)
    assert slot.page.fd == -1


def test_an_interrupt_landing_as_a_slot_is_forgotten_lets_it_go(tmp_path: Any) -> None:
    """An interrupt that landed as ``Pool.forget`` took a slot out of the pool's indexes, before it
    was let go, left its fd (and a named slot's file) for the life of the process."""
    code = growth_module.remove.__code__

    def interrupting(frame: Any, event: str, arg: Any) -> None:
        if event == "c_return" and frame.f_code is code and arg.__name__ == "remove":
            sys.setprofile(None)
            raise KeyboardInterrupt

    pool = Pool(tmp_path, next_name, memfd=False)
    try:
        slot = pool.acquire(4000, SENDER)
        assert slot is not None
        sys.setprofile(interrupting)
        try:
            with pytest.raises(KeyboardInterrupt):
                pool.forget(slot)
        finally:
            sys.setprofile(None)
        assert pool.slots() == [] and pool._by_name == {} and pool._starts == [] and pool.cached_bytes == 0
        assert slot.page.fd == -1 and list(tmp_path.iterdir()) == [] and not slot.mapping.closed  # the owner's
    finally:
        pool.close()
    slot.mapping.close()


def _moving(pool: Pool, scenario: str) -> Any:
    """A pool whose next ``acquire`` moves a slot within its class, and the function that moves it:
    ``first_free`` parks a slot held by the sender, or moves one in flight to the back of those in
    use; ``walk`` takes a free parked one back among them."""
    from tensorwire.transports import _pool_choice

    first, second = pool.acquire(4000, SENDER), pool.acquire(4000, SENDER)
    assert first is not None and second is not None
    if scenario == "unparked":
        group = pool._slots[first.capacity]
        group[:] = [second, first]
        first.parked, pool._parked[first.capacity] = True, 1
        pool.give_back(first)
        return _pool_choice.walk
    if scenario == "in-flight":
        pool.hand_over(first)
        pool.hand_over(second)
    first.passed = _pool_choice.PASSED - 1  # the next send that finds it busy moves it
    return _pool_choice.first_free


@pytest.mark.parametrize("scenario", ["parked", "in-flight", "unparked"])
def test_an_interrupt_landing_as_a_slot_moves_within_its_class_keeps_it_in_the_pool(
    tmp_path: Any, scenario: str
) -> None:
    """An interrupt that landed as a send moved a slot within its class (parked it, moved it to the
    back of those in use, or took a parked one back), between taking it out of the class's list and
    putting it back, left it out of the list (and the parked count wrong): the pool no longer saw
    it, and ``close()`` never let go of it. Wherever an interrupt lands, the slot stays."""
    gc.collect()  # (what earlier tests dropped goes now, not during this one: it counts its own only)
    memfds = transports.held_memfds()
    landing = 1
    while True:  # an interrupt as each call into C of the move's function returns, until none is left
        pool = Pool(tmp_path, next_name)
        code = _moving(pool, scenario).__code__
        returns = 0

        def interrupting(frame: Any, event: str, arg: Any, code: Any = code, landing: int = landing) -> None:
            nonlocal returns
            if event == "c_return" and frame.f_code is code:
                returns += 1
                if returns == landing:
                    sys.setprofile(None)
                    raise KeyboardInterrupt

        sys.setprofile(interrupting)
        try:
            pool.acquire(4000, SENDER)
        except KeyboardInterrupt:
            pass
        finally:
            sys.setprofile(None)
        try:
            slots = pool.slots()
            assert len(slots) == len(pool._by_name) and set(slots) == set(pool._by_name.values())
            for capacity, group in pool._slots.items():
                parked = pool._parked.get(capacity, 0)
                assert [slot.parked for slot in group] == [False] * (len(group) - parked) + [True] * parked
        finally:
            pool.close()
        assert transports.held_memfds() - memfds == set()
        if returns < landing:
            break
        landing += 1
    assert landing > 2
