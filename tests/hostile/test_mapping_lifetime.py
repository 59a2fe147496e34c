"""No signal from memory going away: mapped memory lives as long as anything points into it.

A pool-allocated tensor stays readable after ``close()``, ``trim()`` or the idle trimmer let go of
its slot (each run in a child, so a SIGSEGV fails the test instead of the run). A receiver holding
a borrowed view of a memfd slot survives a same-uid neighbour trying to shrink the memory: the
seals refuse it (EPERM), so there is no SIGBUS, then or when the slot is reused.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import _janitor as janitor
from tests.conftest import REPO
from tests.hostile import mapping_procs
from tests.hostile.children import spawned
from tests.wire_helpers import memfds_held

LET_GO = {
    "close": "shm.close()",
    "trim": "held = dec.decode(enc.encode(diffusion.Output(output=t))); del held; assert shm.trim(0) > 0",
    "trimmer": (
        "held = dec.decode(enc.encode(diffusion.Output(output=t))); del held; time.sleep(0.5); "
        "assert shm.pool.slots() == [], shm.pool.slots()"
    ),
}

CHILD = textwrap.dedent(
    """
    import gc, sys, time
    sys.path.insert(0, {repo!r})
    import torch
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion
    shm = transports.ShmTransport(backing={backing!r}, idle_seconds=0.05)
    enc = tw.Encoder(transport=shm, options=tw.EncodeOptions(inline_threshold=1))
    dec = tw.Decoder(REGISTRY, transports=[shm])
    t = shm.{allocate}
    t[...] = 3
    {let_go}
    gc.collect()
    total = float(t.sum(dtype=torch.float64) if isinstance(t, torch.Tensor) else t.sum(dtype="float64"))
    assert total == 3.0 * 512 * 512, total
    t[...] = 4  # still writable: its memory is still mapped
    print("read", total)
    """
)


@pytest.mark.parametrize("backing", ["memfd", "named"])
@pytest.mark.parametrize("let_go", sorted(LET_GO))
@pytest.mark.parametrize("allocate", ["empty((512, 512), torch.float32)", "empty_numpy((512, 512), 'float32')"])
def test_a_pool_tensor_outlives_its_slot(backing: str, let_go: str, allocate: str) -> None:
    script = CHILD.format(repo=str(REPO), backing=backing, allocate=allocate, let_go=LET_GO[let_go])
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, (
        f"child {'killed by ' + signal.Signals(-result.returncode).name if result.returncode < 0 else 'failed'}: "
        f"{result.stderr[-2000:]}"
    )
    assert "read 786432.0" in result.stdout


def _memfd_fds(pid: int | str) -> list[str]:
    """Paths under /proc/<pid>/fd of this process's tensorwire memfds that process ``pid`` holds."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith(f"/memfd:tw-{os.getpid()}-"):
            found.append(f"/proc/{pid}/fd/{fd}")
    return found


def test_a_neighbour_cannot_shrink_memory_a_receiver_has_mapped() -> None:
    shm = transports.ShmTransport()
    encoder = tw.Encoder(transport=shm, options=tw.EncodeOptions(inline_threshold=1))
    try:
        with spawned(mapping_procs.hold_and_read) as child:
            first = torch.arange(262_144, dtype=torch.float32)
            child.send([bytes(memoryview(f)) for f in encoder.encode(diffusion.Output(output=first))])
            assert child.recv() == "holding"
            targets = _memfd_fds(child.pid) + _memfd_fds("self")
            assert targets, "the receiver holds no memfd of ours"
            for path in targets:  # as a same-uid neighbour would, through any fd of the memory
                fd = os.open(path, os.O_RDWR)
                try:
                    for size in (0, 4096):
                        with pytest.raises(PermissionError) as info:
                            os.ftruncate(fd, size)
                        assert info.value.errno == errno.EPERM
                finally:
                    os.close(fd)
            child.send("tried")
            second = torch.full((262_144,), 2.0)
            child.send([bytes(memoryview(f)) for f in encoder.encode(diffusion.Output(output=second))])
            assert child.recv() == (float(first.double().sum()), 2.0 * 262_144)
            child.send("bye")
            assert child.join() == 0
    finally:
        shm.close()


def test_a_neighbour_that_cuts_a_one_shot_short_cannot_crash_its_sender() -> None:
    """A one-shot segment is a named file any same-uid process can truncate: its sender writes it
    with pwrite, never through a mapping, so a file cut short right after its space was reserved
    grows back as it is written (no SIGBUS, no ValueError from mmap) and its message decodes."""
    directory = tempfile.mkdtemp(dir="/dev/shm", prefix="tw-test-cut-")
    try:
        with spawned(mapping_procs.send_one_shots_cut_short, directory) as child:
            assert child.recv() == [True, True, True]
            assert child.join() == 0
        assert os.listdir(directory) == []  # each claimed and unlinked by its receiver
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_an_idle_receiver_lets_go_of_a_dead_senders_memory() -> None:
    """No import needs to happen: the janitor forgets the segment of a sender that died."""
    receiver = transports.ShmTransport()
    try:
        with spawned(mapping_procs.send_and_wait) as sender:
            frames = sender.recv()
            decoder = tw.Decoder(REGISTRY, transports=[receiver], options=tw.DecodeOptions(borrow=False))
            assert float(decoder.decode(frames).output.sum()) == float(1 << 20)
            prefix = f"tw-{sender.pid}-"
            assert any(n.startswith(prefix) for n in memfds_held())  # mapped, and kept for the next message
            sender.send("exit")
            assert sender.join() == 0
        deadline = time.monotonic() + 5 * janitor.PERIOD
        while any(n.startswith(prefix) for n in memfds_held()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(n.startswith(prefix) for n in memfds_held())
    finally:
        receiver.close()


@pytest.mark.parametrize("backing", ["memfd", "named"])
def test_a_killed_senders_memory_is_let_go_though_another_process_took_its_pid(backing: str) -> None:
    """A sender was killed (nothing marked its pages dropped) and another process took its pid: the
    receiver took that process for the sender and kept the sender's memory mapped as long as it
    lived, and a named slot's file too. The page says when its creator started: the janitor's look
    forgets the segment, and the receiver removes a named slot's file as it frees the slot."""
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="twtest-reuse-"))
    receiver = transports.ShmTransport(directory, backing=backing)  # type: ignore[arg-type]
    # the background janitor would forget the killed sender's segment as soon as it looked (every
    # ``PERIOD``), before the pid is given to another process below: this test prunes by hand
    janitor._watched.discard(receiver._reader)
    later: subprocess.Popen[bytes] | None = None
    try:
        with spawned(mapping_procs.send_and_wait, str(directory) if backing == "named" else None) as sender:
            kept = [tw.Decoder(REGISTRY, transports=[receiver]).decode(sender.recv()).output]
            prefix = f"tw-{sender.pid}-"
            sender.process.kill()
            assert sender.join() == -signal.SIGKILL
        later = subprocess.Popen(["sleep", "60"])  # started after the sender, whatever its pid
        [segment] = receiver._reader._maps.values()
        segment.creator = later.pid  # as if it had taken the sender's pid
        del segment
        receiver._reader.prune()
        assert receiver._reader.mapped == 0
        kept.clear()
        assert not any(n.startswith(prefix) for n in memfds_held())
        assert os.listdir(directory) == []
    finally:
        if later is not None:
            later.kill()
            later.wait()
        receiver.close()
        shutil.rmtree(directory, ignore_errors=True)
