"""The sender against receivers and neighbours that lock its pages, write garbage in them or plant
files at its names: its housekeeping never waits for a page another process holds, a slot it is
writing is never taken from it, and a name it no longer owns is never removed or fatal.

A receiver's lock is another open file description's OFD lock on byte 0 of the page's file,
taken through ``/proc/self/fd`` as a receiver in another process takes it; ``time.sleep`` is
counted instead of timing the wall clock.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion, rpc
from tensorwire.transports._page_layout import _W_STATE, FREE, IN_FLIGHT, SENDER
from tensorwire.transports.base import Buffer, Handle
from tests.hostile import sender_procs
from tests.hostile.children import spawned
from tests.wire_helpers import head_of

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through shared memory
_LOCK = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)


def _lock_page(fd: int) -> int:
    """Another description of the page's file, holding its page lock (as a receiver would)."""
    other = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
    fcntl.fcntl(other, fcntl.F_OFD_SETLK, _LOCK)
    return other


def test_in_flight_slots_a_receiver_keeps_locked_never_hold_up_expiry_or_sends(slept: list[float]) -> None:
    """Eight unclaimed slots past their claim timeout, each page locked by a receiver: the pool's
    expiry (its trimmer's call) and the walk of a send for a free slot skip them at once instead
    of waiting for each (8 x 0.25 s per pass before); once the locks go, they come back."""
    shm = transports.ShmTransport(claim_timeout=0.05, idle_seconds=0)
    encoder = tw.Encoder(transport=shm, options=OOB)
    for i in range(8):
        encoder.encode(diffusion.Output(output=torch.full((1024,), float(i))))
    pool = shm.pool
    assert pool is not None
    held = [_lock_page(slot.fd) for slot in pool.slots()]
    try:
        time.sleep(0.1)  # every one past its claim timeout
        slept.clear()
        assert pool.expire() == 0  # none could be locked: none brought back
        frames = encoder.encode(diffusion.Output(output=torch.ones(1024)))  # walks the class: none free
        assert sum(slept) < 0.05, slept
        assert len(pool.slots()) == 9 and sum(s.state == IN_FLIGHT for s in pool.slots()) == 9
    finally:
        for fd in held:
            os.close(fd)
    time.sleep(0.1)  # the new one past its claim timeout too
    pool.expire()  # (or the pool's trimmer, first): the locks gone, every slot comes back
    assert [s.state for s in pool.slots()] == [FREE] * 9
    with pytest.raises(tw.DecodeError, match="expired"):
        tw.Decoder(REGISTRY, transports=[transports.ShmTransport()]).decode(frames)
    shm.close()


def test_a_broadcast_withdrawn_from_many_receivers_waits_for_a_locked_page_once(slept: list[float]) -> None:
    """A broadcast to 64 receivers that reached one: withdrawing it from the other 63 is one
    transition of its page, so a page a receiver keeps locked holds the sender up one wait, not
    63 (~16 s before)."""
    shm = transports.ShmTransport()
    fan = shm.fan_out(64)
    frames = tw.Encoder(transport=fan, options=OOB).encode(diffusion.Output(output=torch.ones(1024)))
    handle = transports.SlotHandle(**{k: v for k, v in head_of(frames[0])[3][0][1].items() if k != "transport"})
    pool = shm.pool
    assert pool is not None
    [slot] = pool.slots()
    other = _lock_page(slot.fd)
    try:
        fan.withdraw(handle, 63)
        assert sum(slept) <= 0.25 + 0.01, sum(slept)
    finally:
        os.close(other)
    fan.withdraw(handle, 63)  # unlocked: the 63 are counted in one go
    assert slot.page.words[13] == 63  # the claims word: 63 of 64 counted, the page still in flight for one
    assert slot.state == IN_FLIGHT
    shm.close()


def test_a_slot_this_process_is_writing_is_never_dropped_for_what_a_receiver_writes_in_its_page() -> None:
    """A receiver writes a garbage state (then FREE) in the page of a slot the sender holds between
    taking it and handing it over: another send's walk neither drops it (its views let go under
    the writer: a ValueError from encode before) nor takes it; the hand-over then goes through."""
    shm = transports.ShmTransport()
    pool = shm.pool
    assert pool is not None
    first = pool.acquire(4096, SENDER)
    assert first is not None
    for written in (9, FREE):
        first.page.words[_W_STATE] = written  # as a receiver mapping it would write it
        second = pool.acquire(4096, SENDER)  # walks the class (first is not free, or looks free)
        assert second is not None and second is not first
        assert first in pool.slots()
        pool.give_back(second)
        assert pool.acquire(4096, SENDER) is second  # the one given back, not the one being written
        pool.give_back(second)
    generation, capability = pool.hand_over(first)
    assert first.state == IN_FLIGHT and len(capability) == 16 and generation == first.generation
    shm.close()


def test_a_directory_planted_at_a_named_slots_name_is_left_alone_and_never_stops_close() -> None:
    """A neighbour moves a named slot's file away and puts a directory, then a file of its own, at
    its name: trimming and closing leave both alone (they are not the slot's file), close every
    fd, and the pool's trimmer thread keeps running."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-plant-"))
    try:
        shm = transports.ShmTransport(directory, backing="named", idle_seconds=0.2)
        encoder = tw.Encoder(transport=shm, options=OOB)
        decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory, backing="named")])
        decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(1024))))
        pool = shm.pool
        assert pool is not None
        [slot] = pool.slots()
        name = slot.name
        os.rename(directory / name, directory / "moved")
        (directory / name).mkdir()
        assert pool.trim(0) > 0  # dropped: its name is a directory now, left alone
        assert (directory / name).is_dir() and (directory / "moved").exists()
        assert pool._trimmer is not None and pool._trimmer.is_alive()
        before = set(os.listdir("/proc/self/fd"))
        encoder.encode(diffusion.Output(output=torch.ones(1024)))  # a new slot, never claimed
        [slot] = pool.slots()
        os.rename(directory / slot.name, directory / "moved-too")
        (directory / slot.name).write_bytes(b"a neighbour's own file")
        shm.close()
        assert (directory / slot.name).read_bytes() == b"a neighbour's own file"
        assert set(os.listdir("/proc/self/fd")) <= before
    finally:
        for path in directory.iterdir():
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()
        directory.rmdir()


def test_an_unclaimed_one_shot_is_unlinked_after_its_claim_timeout_without_another_send() -> None:
    """The janitor sweeps a transport's one-shots: an idle sender, and one already closed, unlink
    a segment nobody claimed within a few seconds of its claim timeout (it stayed until the next
    send or the process's end before)."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-sweep-"))
    try:
        idle = transports.ShmTransport(directory, pool=False, claim_timeout=0.1)
        closed = transports.ShmTransport(directory, pool=False, claim_timeout=0.1)
        for shm in (idle, closed):
            tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=torch.ones(1024)))
        closed.close()  # before its segment is due
        assert len(os.listdir(directory)) == 2
        deadline = time.monotonic() + 30.0  # the janitor's period is 2 s: a bound, not a speed
        while os.listdir(directory) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.listdir(directory) == []
        idle.close()
    finally:
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


def test_a_receiver_that_never_claims_cannot_use_up_the_senders_fds() -> None:
    """Under a soft fd limit of 512, 200 unclaimed 256 KiB messages: the pool stops at 32 slots (a
    sixteenth of the limit, each slot two fds) and the rest travel in one-shot segments, which keep
    no fd; every encode succeeds and the process can still open files (at 254 slots all 512 fds
    were gone: every later encode and open failed with EMFILE)."""
    directory = tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-fds-")
    try:
        with spawned(sender_procs.send_unclaimed_under_a_low_fd_limit, 512, 200) as child:
            child.send(directory)
            kinds, errors, slots, opens = child.recv()
            assert (kinds, errors, slots, opens) == ({"slot": 32, "one-shot": 168}, [], 32, True)
            assert child.join() == 0
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _swept_within(directory: Path, seconds: float) -> bool:
    """Whether ``directory`` is empty within ``seconds`` (the janitor's period is 2 s)."""
    deadline = time.monotonic() + seconds
    while os.listdir(directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not os.listdir(directory)


def test_one_shots_of_a_dropped_transport_and_of_a_forked_child_are_swept_too() -> None:
    """A transport dropped without ``close()`` keeps its unclaimed one-shots swept; a forked child
    that sends on a transport it inherited sweeps its own (and never its parent's), with the
    parent's sweep lock held by a parent thread at the fork."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-sweep-"))
    try:
        dropped = transports.ShmTransport(directory, pool=False, claim_timeout=0.1)
        tw.Encoder(transport=dropped, options=OOB).encode(diffusion.Output(output=torch.ones(1024)))
        del dropped
        gc.collect()
        assert _swept_within(directory, 30.0)
        inherited = transports.ShmTransport(directory, pool=False, claim_timeout=0.1)
        encoder = tw.Encoder(transport=inherited, options=OOB)
        encoder.encode(diffusion.Output(output=torch.ones(1024)))  # the parent's, pending
        parents = os.listdir(directory)
        inherited._one_shots._lock.acquire()  # as the parent's janitor may hold it at the fork
        try:
            pid = os.fork()
            if pid == 0:  # the child: report through its exit status
                signal.alarm(60)  # a hang ends the child with SIGALRM: the test fails instead of hanging
                encoder.encode(diffusion.Output(output=torch.zeros(1024)))
                mine = [n for n in os.listdir(directory) if n.startswith(f"tw-{os.getpid()}-")]
                deadline = time.monotonic() + 30.0
                while (directory / mine[0]).exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
                os._exit(0 if len(mine) == 1 and not (directory / mine[0]).exists() else 1)
        finally:
            inherited._one_shots._lock.release()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _swept_within(directory, 30.0)  # the parent's, by the parent
        assert parents
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_one_shot_locked_when_it_fell_due_is_swept_first_once_free(slept: list[float]) -> None:
    """A one-shot whose page a receiver held locked when a sweep found it due stays first in line:
    the next sweep unlinks it, not only once the segments sent after it fall due too."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-sweep-"))
    try:
        shm = transports.ShmTransport(directory, pool=False, claim_timeout=1.0)
        shm._one_shots.prune = lambda: None  # type: ignore[method-assign]  # only this test's sweeps
        encoder = tw.Encoder(transport=shm, options=OOB)
        encoder.encode(diffusion.Output(output=torch.ones(1024)))
        [first] = os.listdir(directory)
        time.sleep(0.5)
        encoder.encode(diffusion.Output(output=torch.ones(1024)))  # due 0.5 s after the first
        time.sleep(0.6)  # the first is due, the later one is not
        slept.clear()
        held = os.open(directory / first, os.O_RDWR)
        fcntl.fcntl(held, fcntl.F_OFD_SETLK, _LOCK)
        try:
            assert shm._one_shots.sweep() == 0 and sum(slept) < 0.05  # never waited for
        finally:
            os.close(held)
        assert shm._one_shots.sweep() == 1 and not (directory / first).exists()
        assert len(os.listdir(directory)) == 1  # the later one, not due yet
        shm.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_an_empty_tensor_sent_again_never_hands_over_the_copy_now_in_its_slot() -> None:
    """A tensor from ``empty`` is sent, its slot freed and taken by a copying send that has not
    handed it over yet: sending the tensor again sends a copy of it instead of handing over the
    slot under the other send (which had its capability replaced and its bytes sent half-written)."""
    shm = transports.ShmTransport()
    pool = shm.pool
    assert pool is not None
    tensor = shm.empty((1024,), torch.float32)
    address = tensor.data_ptr()
    sent = pool.hand_over_allocated(address, 4096)
    assert sent is not None
    slot = sent[0]
    slot.page.words[_W_STATE] = FREE  # its receiver let go of it
    assert pool.acquire(4096, SENDER) is slot  # a copying send takes it (and writes into it)
    assert pool.hand_over_allocated(address, 4096) is None  # the tensor travels as a copy
    assert slot.state == SENDER
    pool.give_back(slot)
    shm.close()


def test_a_named_slot_cut_short_before_its_sender_maps_it_is_a_transport_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A neighbour truncates a new named pool slot between its reservation and its mapping: the
    send is a ``TransportError`` (mmap's ``ValueError`` before), and neither the file nor an fd
    is left behind."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-cut-"))
    reserve = os.posix_fallocate

    def reserve_then_cut(fd: int, offset: int, length: int) -> None:
        reserve(fd, offset, length)
        os.truncate(os.readlink(f"/proc/self/fd/{fd}"), 100)  # by name, as a neighbour would

    try:
        shm = transports.ShmTransport(directory, backing="named")
        encoder = tw.Encoder(transport=shm, options=OOB)
        before = set(os.listdir("/proc/self/fd"))
        monkeypatch.setattr(os, "posix_fallocate", reserve_then_cut)
        with pytest.raises(tw.TransportError, match=r"^\[Errno 5\] cannot map 69632 bytes in .*: mmap length") as info:
            encoder.encode(diffusion.Output(output=torch.ones(1024)))
        monkeypatch.undo()
        assert info.value.errno == errno.EIO
        assert os.listdir(directory) == [] and set(os.listdir("/proc/self/fd")) <= before
        assert shm.pool is not None and shm.pool.slots() == []
        shm.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


_REWRITE = """
import os, struct, sys
directory, names = sys.argv[1], sys.argv[2:]
for name, (word, value) in zip(names, [(5, 2**64 - 1), (1, 3), (0, 0)]):  # deadline, state CLAIMED, magic
    fd = os.open(os.path.join(directory, name), os.O_RDWR)
    os.pwrite(fd, struct.pack("<Q", value), word * 8)
    os.close(fd)
for name in names[3:]:  # a file of the neighbour's own put at the sender's names
    with open(os.path.join(directory, "mine"), "wb") as mine:
        mine.write(b"not yours")
    os.rename(os.path.join(directory, "mine"), os.path.join(directory, name))
"""


def test_unclaimed_one_shots_are_unlinked_whatever_a_neighbour_wrote_in_their_pages() -> None:
    """A neighbour that knows one-shot names (listed in the directory) rewrites their pages' deadline,
    state or magic: the sender still unlinks each at the claim timeout it set. A file the neighbour
    put at one of its names is never removed, neither by the sweep nor by a release."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-rewrite-"))
    try:
        shm = transports.ShmTransport(directory, pool=False, claim_timeout=0.2)
        shm._one_shots.prune = lambda: None  # type: ignore[method-assign]  # only this test's sweeps
        handles = [shm.export(memoryview(bytes(4096)), []) for _ in range(5)]
        names = [h.name for h in handles if isinstance(h, transports.ShmHandle)]
        subprocess.run([sys.executable, "-c", _REWRITE, str(directory), *names], check=True, timeout=60)
        shm.release(handles[4])  # a failed encode gives back its one-shot: the file there is not it
        time.sleep(0.3)
        assert shm._one_shots.sweep() == 3
        assert sorted(os.listdir(directory)) == sorted(names[3:])
        assert all((directory / name).read_bytes() == b"not yours" for name in names[3:])
        shm.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


_PLANT = """
import os, sys
directory = sys.argv[1]
[name] = os.listdir(directory)
stem, seq = name.rsplit("-", 1)
for later in range(int(seq, 16) + 1, int(seq, 16) + 1001):  # the names that would come next in a count
    open(os.path.join(directory, f"{stem}-{later:x}"), "w").close()
"""


def test_a_neighbour_that_saw_a_senders_name_cannot_take_its_next_ones() -> None:
    """A neighbour lists the directory, reads a one-shot's name and makes files at the names that
    follow it: the sender's next one-shots are made all the same (an ``EEXIST`` before)."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-plant-"))
    try:
        shm = transports.ShmTransport(directory, pool=False, claim_timeout=30.0)
        shm.export(memoryview(bytes(4096)), [])
        subprocess.run([sys.executable, "-c", _PLANT, str(directory)], check=True, timeout=60)
        for _ in range(3):
            assert isinstance(shm.export(memoryview(bytes(4096)), []), transports.ShmHandle)
        assert len(os.listdir(directory)) == 1 + 1000 + 3
        shm.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


_LIE = """
import os, struct, sys
link, word, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(link, os.O_RDWR)  # as a receiver given the slot's handle opens it
os.pwrite(fd, struct.pack("<Q", value), word * 8)
"""


@pytest.mark.parametrize(("word", "value"), [(5, 2**64 - 1), (_W_STATE, SENDER)], ids=["deadline", "state"])
def test_a_slot_whose_receiver_wrote_a_later_deadline_or_the_senders_state_comes_back(word: int, value: int) -> None:
    """A receiver of an unclaimed slot writes a claim deadline far off, or the state only its sender
    writes for a slot it holds, and exits: the slot still comes back after the claim timeout the
    sender set (it stayed out of the pool for as long as the sender lived before)."""
    shm = transports.ShmTransport(claim_timeout=0.1)
    pool = shm.pool
    assert pool is not None
    pool.max_slots = 1
    try:
        handle = shm.export(memoryview(bytes(4096)), [])
        assert isinstance(handle, transports.SlotHandle)
        link = f"/proc/{os.getpid()}/fd/{handle.fd}"
        subprocess.run([sys.executable, "-c", _LIE, link, str(word), str(value)], check=True, timeout=60)
        time.sleep(0.2)
        pool.expire()
        assert isinstance(shm.export(memoryview(bytes(4096)), []), transports.SlotHandle)
        assert len(pool.slots()) == 1
    finally:
        shm.close()


def test_a_failed_encode_gives_back_buffers_whose_pages_a_receiver_keeps_locked_with_one_wait(
    slept: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver keeps locked the page of every slot it has mapped; an encode whose last export
    fails gives back the twenty before it with one wait for those pages, not one per buffer (5 s
    before)."""
    shm = transports.ShmTransport()
    encoder = tw.Encoder(transport=shm, options=OOB)
    pool = shm.pool
    assert pool is not None
    tensors = {f"t{i}": torch.full((1024,), float(i)) for i in range(21)}
    for slot in [pool.acquire(4096, SENDER) for _ in range(20)]:  # twenty warm slots, free again
        assert slot is not None
        pool.give_back(slot)
    held = [_lock_page(slot.fd) for slot in pool.slots()]
    export, calls = shm.export, [0]

    def export_but_the_last(data: memoryview, frames: list[Buffer]) -> Handle:
        calls[0] += 1
        if calls[0] == 21:
            raise tw.TransportError(errno.ENOSPC, "no room for the last one")
        return export(data, frames)

    monkeypatch.setattr(shm, "export", export_but_the_last)
    try:
        slept.clear()
        with pytest.raises(tw.TransportError, match="no room for the last one"):
            encoder.encode(rpc.Request(method="load", kwargs=tensors))
        assert sum(slept) <= 0.25 + 0.01, sum(slept)
    finally:
        for fd in held:
            os.close(fd)
    shm.close()


@pytest.mark.parametrize("pooled", [False, True], ids=["one-shot", "named-slot"])
def test_a_create_that_fails_leaves_a_file_a_neighbour_moved_onto_its_name(
    pooled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A neighbour moves a file of its own onto a new segment's name before its reservation fails
    (a /dev/shm it filled): the sender's clean-up leaves that file (it removed it before)."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-swap-"))

    def swap_then_full(fd: int, offset: int, length: int) -> None:
        theirs = directory / "theirs"
        theirs.write_bytes(b"not yours")
        os.rename(theirs, os.readlink(f"/proc/self/fd/{fd}"))  # by name, as the neighbour would
        raise OSError(errno.ENOSPC, "No space left on device")

    try:
        shm = transports.ShmTransport(directory, pool=pooled, backing="named")
        monkeypatch.setattr(os, "posix_fallocate", swap_then_full)
        with pytest.raises(tw.TransportError, match=r"^\[Errno 28\] cannot reserve"):
            shm.export(memoryview(bytes(4096)), [])
        monkeypatch.undo()
        [name] = os.listdir(directory)
        assert (directory / name).read_bytes() == b"not yours"
        shm.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_sender_that_lets_go_of_its_pages_one_by_one_holds_a_decode_up_once(slept: list[float]) -> None:
    """A sender keeps every page of a twenty-buffer message locked and lets go of one every 0.2 s,
    under the 0.25 s a claim waits: each claim waited afresh, so one small message held the
    receiver up ~4 s (and ~14 minutes at 4,096 buffers). A message's claims now share one wait:
    the decode fails after it (and its give-back after one more), holding nothing."""
    import threading

    shm = transports.ShmTransport(claim_timeout=0.5)
    frames = tw.Encoder(transport=shm, options=OOB).encode(
        rpc.Request(method="load", kwargs={f"t{i}": torch.full((1024,), float(i)) for i in range(20)})
    )
    pool = shm.pool
    assert pool is not None and len(pool.slots()) == 20
    held = [_lock_page(slot.fd) for slot in pool.slots()]
    done = threading.Event()

    def let_go_one_by_one() -> None:
        for fd in held:
            done.wait(0.2)  # (not time.sleep: only the receiver's waits are counted)
            os.close(fd)

    thread = threading.Thread(target=let_go_one_by_one, daemon=True)
    receiver = transports.ShmTransport()
    slept.clear()
    thread.start()
    try:
        with pytest.raises(tw.TransportError, match=r"has been locked by another process for over 0\.25s") as caught:
            tw.Decoder(REGISTRY, transports=[receiver]).decode(frames)
        assert caught.value.errno == errno.EAGAIN
        assert sum(slept) <= 2 * 0.25 + 0.01, sum(slept)  # the claims' one wait, the give-back's one
    finally:
        done.set()
        thread.join(10)
    time.sleep(0.6)  # past the claim timeout: what was not given back comes back to the sender
    pool.expire()
    assert [slot.state for slot in pool.slots()] == [FREE] * 20  # nothing is held by the receiver
    receiver.close()
    shm.close()
