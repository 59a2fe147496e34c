"""Processes that fork while their transports are in use: a child never frees, claims or
unlinks what its parent holds, and never waits for a lock a thread of its parent held at the fork.

Each child runs a function under ``signal.alarm`` (a hang ends it with SIGALRM: the test fails
instead of hanging) and reports through its exit status. Children make their tensors from numpy
arrays: torch's OpenMP workers do not survive a fork.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import _janitor, _reaper
from tensorwire.transports._page_layout import CLAIMED, FREE

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through shared memory
HUNG = -signal.SIGALRM


def _full(count: int, value: float) -> torch.Tensor:
    return torch.from_numpy(np.full(count, value, dtype=np.float32))


def _fork(check: Callable[[], bool], seconds: int = 10) -> int:
    """Run ``check`` in a forked child; return its pid (``_exit_code`` waits for it)."""
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status, never return
        code = 1
        try:
            signal.alarm(seconds)
            code = 0 if check() else 3
        finally:
            os._exit(code)
    return pid


def _exit_code(pid: int) -> int:
    """The exit code of child ``pid`` (0: its check returned True; ``HUNG``: it hung)."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_dropping_an_unsent_empty_tensor_never_frees_its_parents_slot() -> None:
    """A child that inherited an ``empty()`` tensor its parent had not sent yet, and then used the
    pool itself, lets go of its copy: the parent's slot, sent since and claimed, is not freed (a
    send would then reuse it under the receiver's view)."""
    shm = transports.ShmTransport()
    encoder = tw.Encoder(transport=shm, options=OOB)
    decoder = tw.Decoder(REGISTRY, transports=[shm])
    unsent = [shm.empty((100_000,), torch.float32).fill_(1.0)]
    go_r, go_w = os.pipe()

    def child() -> bool:
        os.read(go_r, 1)  # the parent has sent the tensor and holds what it decoded
        encoder.encode(diffusion.Output(output=_full(50_000, 2.0)))  # the child's own pool
        unsent.clear()
        gc.collect()
        return True

    pid = _fork(child)
    held = decoder.decode(encoder.encode(diffusion.Output(output=unsent.pop()))).output
    os.write(go_w, b"1")
    assert _exit_code(pid) == 0
    encoder.encode(diffusion.Output(output=torch.full((100_000,), 7.0)))  # a send of the slot's size
    assert bool((held == 1.0).all())
    del held
    shm.close()
    for fd in (go_r, go_w):
        os.close(fd)


def _receiver(backing: transports.shm.Backing) -> tuple[transports.ShmTransport, tw.Encoder, tw.Decoder]:
    shm = transports.ShmTransport(backing=backing)
    return shm, tw.Encoder(transport=shm, options=OOB), tw.Decoder(REGISTRY, transports=[shm])


@pytest.mark.parametrize("backing", ["memfd", "named"])
@pytest.mark.parametrize("held", ["the reader's lock", "a mapped page's lock"])
def test_a_forked_child_never_waits_for_a_receiver_lock_a_parent_thread_held(backing: str, held: str) -> None:
    """A thread of the parent held the receiver's lock, or a lock of a page it has mapped (a
    decode, a claim, the janitor's prune) at the fork: the child decodes all the same."""
    shm, encoder, decoder = _receiver(backing)  # type: ignore[arg-type]
    kept = decoder.decode(encoder.encode(diffusion.Output(output=_full(50_000, 1.0)))).output
    del kept
    gc.collect()  # the reader alone maps the slot: the child lets go of it as it starts afresh
    [segment] = shm._reader._maps.values()
    lock = shm._reader._lock if held == "the reader's lock" else segment.page._mutex
    del segment

    def child() -> bool:
        try:
            frames = encoder.encode(diffusion.Output(output=_full(1000, 2.0)))
            return bool((decoder.decode(frames).output == 2.0).all())
        finally:
            shm.close()  # the child's own slot (a named one is a file in /dev/shm): it exits with os._exit

    with lock:
        pid = _fork(child)
    assert _exit_code(pid) == 0
    shm.close()


@pytest.mark.parametrize("module", [_reaper, _janitor], ids=["segment names", "janitor"])
def test_a_forked_child_never_waits_for_a_module_lock_a_parent_thread_held(module: Any) -> None:
    """A thread of the parent was naming a segment, or starting to watch a receiver, at the fork:
    the child's first one-shot segment, or its first receiver, waited forever for that lock."""
    shm = transports.ShmTransport(pool=False)
    encoder = tw.Encoder(transport=shm, options=OOB)

    def child() -> bool:
        child_shm = transports.ShmTransport(pool=False)  # its receiver is watched by the janitor
        frames = tw.Encoder(transport=child_shm, options=OOB).encode(diffusion.Output(output=_full(1000, 2.0)))
        decoded = tw.Decoder(REGISTRY, transports=[child_shm]).decode(frames).output
        return bool((decoded == 2.0).all())

    with module._lock:
        pid = _fork(child)
    assert _exit_code(pid) == 0
    decoder = tw.Decoder(REGISTRY, transports=[shm])
    assert (decoder.decode(encoder.encode(diffusion.Output(output=_full(1000, 3.0)))).output == 3.0).all()
    shm.close()


@pytest.mark.parametrize("locked", [False, True])
def test_a_forked_child_dropping_a_received_tensor_leaves_its_parents_claim_and_mark(locked: bool) -> None:
    """A child lets go of its copy of a tensor its parent received from a named slot (``locked``:
    with that page's lock held by a parent thread at the fork): the parent's claim stays, and so
    does its mark on the file, by which a sender in another pid namespace tells the claim is alive."""
    shm, encoder, decoder = _receiver("named")
    received = [decoder.decode(encoder.encode(diffusion.Output(output=_full(50_000, 1.0)))).output]
    assert shm.pool is not None
    [slot] = shm.pool.slots()
    [segment] = shm._reader._maps.values()

    def child() -> bool:
        received.clear()
        gc.collect()
        return True

    with segment.page._mutex if locked else contextlib.nullcontext():
        pid = _fork(child)
    assert _exit_code(pid) == 0
    assert slot.state == CLAIMED
    assert not slot.page.reclaim(lambda pid: False)  # as a sender that cannot see the receiver's pid
    assert slot.state == CLAIMED
    received.clear()
    gc.collect()
    assert slot.state == FREE
    shm.close()


def test_a_queue_transports_forked_child_sends_as_a_sender_of_its_own() -> None:
    """A child forked (by multiprocessing's fork start method) after its parent sent on a queue
    transport sends under a sender id of its own: the consumer gives each message its own tensors,
    where the two processes' messages numbered alike took each other's."""
    context = torch.multiprocessing.get_context("fork")
    data = context.Queue()
    encoder = tw.Encoder(transport=transports.QueueTransport(data), options=OOB)
    first = encoder.encode(diffusion.Output(output=_full(64, 0.0)))
    parent_end, child_end = context.Pipe()

    def child() -> None:
        frames = encoder.encode(diffusion.Output(output=_full(64, 2.0)))
        child_end.send([bytes(memoryview(f)) for f in frames])
        child_end.recv()  # its tensor's fds come from it: alive until the consumer has taken them

    process = context.Process(target=child)
    process.start()
    try:
        from_child = parent_end.recv()
        second = encoder.encode(diffusion.Output(output=_full(64, 1.0)))
        decoder = tw.Decoder(REGISTRY, transports=[transports.QueueTransport(data, timeout=5.0)])
        got = [float(decoder.decode(frames).output[0]) for frames in (first, second, from_child)]
        assert got == [0.0, 1.0, 2.0]
    finally:
        parent_end.send(None)
        process.join(30)
    assert process.exitcode == 0


def test_a_forked_child_holds_none_of_its_parents_shared_memory() -> None:
    """A child forked after its parent sent and received through the pool holds none of the
    parent's memfds (no fd, no mapping: the parent's close frees their memory, however long the
    child lives), and sends and receives through its inherited transport all the same."""
    shm, encoder, decoder = _receiver("memfd")
    for count in (50_000, 300_000):
        assert bool((decoder.decode(encoder.encode(diffusion.Output(output=_full(count, 1.0)))).output == 1.0).all())
    gc.collect()
    assert shm.pool is not None
    names = {slot.name for slot in shm.pool.slots()}
    assert len(names) == 2 and names <= _reaper.held_memfds()  # the parent's, and mapped as their receiver

    def child() -> bool:
        if names & _reaper.held_memfds():
            return False
        frames = encoder.encode(diffusion.Output(output=_full(1000, 2.0)))
        return bool((decoder.decode(frames).output == 2.0).all())

    assert _exit_code(_fork(child)) == 0
    shm.close()


def test_a_forked_child_keeps_only_the_parents_memory_its_inherited_tensors_use() -> None:
    """A child that inherited an ``empty()`` tensor and a received one reads both, and holds the
    memory of those two slots only: not that of a slot its parent merely keeps in its pool."""
    shm, encoder, decoder = _receiver("memfd")
    unsent = shm.empty((100_000,), torch.float32).fill_(3.0)
    received = decoder.decode(encoder.encode(diffusion.Output(output=_full(50_000, 1.0)))).output
    idle = decoder.decode(encoder.encode(diffusion.Output(output=_full(300_000, 2.0)))).output
    del idle
    gc.collect()
    assert shm.pool is not None
    names = {slot.name for slot in shm.pool.slots()}
    assert len(names) == 3

    kept = [unsent, received]
    del unsent, received

    def child() -> bool:
        readable = bool((kept[0].numpy() == 3.0).all() and (kept[1].numpy() == 1.0).all())
        return readable and len(names & _reaper.held_memfds()) == 2

    assert _exit_code(_fork(child)) == 0
    kept.clear()
    shm.close()


def test_a_killed_senders_forked_child_leaves_its_named_slots_to_the_reaper() -> None:
    """A sender of named slots forked a child, then was killed: the child's copies of the slots'
    fds kept the sender's mark on their files, so ``reap`` took the sender for alive as long as
    the child lived. The child holds no copy: the sender's slot is reaped."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="twtest-fork-"))
    report_r, report_w = os.pipe()
    sender = os.fork()
    if sender == 0:  # the sender: a slot, a child that outlives it, then it waits to be killed
        try:
            signal.alarm(30)
            shm = transports.ShmTransport(directory, backing="named")
            tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=_full(50_000, 1.0)))
            if os.fork() == 0:  # the child reports itself once the fork's handlers have run in it
                signal.alarm(30)
                os.write(report_w, f"{os.getpid()}\n".encode())
                signal.pause()
            signal.pause()
        finally:
            os._exit(1)
    child = int(os.read(report_r, 64))
    try:
        [slot] = [name for name in os.listdir(directory) if _reaper.creator_pid(name) == sender]
        os.kill(sender, signal.SIGKILL)
        os.waitpid(sender, 0)
        assert transports.reap(directory) == [slot]
    finally:
        os.kill(child, signal.SIGKILL)
        for fd in (report_r, report_w):
            os.close(fd)
        shutil.rmtree(directory, ignore_errors=True)
