"""Named pool slots between processes of different pid namespaces (what ``backing="named"`` is for).

A pid one side writes names another process, or none, on the other side; who is alive is told by
the locks each side keeps on the slot's file (``_page_layout.RECEIVER_BYTE``, ``CREATOR_BYTE``). The
peer runs under ``unshare -p`` (root only) with a pid no process of this namespace has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports._reaper import creator_pid
from tests.hostile.namespace_peer import OOB, frames_line, read_frames

REPO = Path(__file__).resolve().parents[2]
PEER = Path(__file__).with_name("namespace_peer.py")

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare (a pid namespace)"
)


def _unused_pid() -> int:
    """A pid no process of this namespace has (the peer takes it in its own)."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    return next(p for p in range(pid_max - 1, 300, -1) if not os.path.exists(f"/proc/{p}"))


class Peer:
    """``namespace_peer.py`` in a new pid namespace, where its pid is one this namespace lacks."""

    def __init__(self, role: str, directory: Path) -> None:
        pid = _unused_pid()
        script = f"echo {pid - 1} > /proc/sys/kernel/ns_last_pid; {sys.executable} {PEER} {role} {directory}"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            ["unshare", "-p", "-f", "--mount-proc", "sh", "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        self.pid = int(self._line().split()[1])

    def _line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def ask(self, line: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self._line()

    def exit(self) -> None:
        """End the peer at once, closing nothing (as if it were killed)."""
        assert self.process.stdin is not None
        self.process.stdin.write("exit\n")
        self.process.stdin.flush()
        self.process.wait(30)

    def close(self) -> None:
        assert self.process.stdin is not None
        if self.process.poll() is not None:
            return
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait(30)


def test_a_receiver_keeps_a_live_senders_slot_of_another_pid_namespace(directory: Path) -> None:
    """The sender's pid names no process here: the receiver, its view dead, frees the slot but does
    not take the sender for dead (it would unlink its slot), and the next message on it decodes."""
    sender = Peer("sender", directory)
    try:
        assert not os.path.exists(f"/proc/{sender.pid}")
        decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory, backing="named")])
        output = decoder.decode(read_frames(sender.ask("send"))).output
        assert torch.equal(output, torch.arange(1024.0))
        files = sorted(os.listdir(directory))
        del output  # its lease dies: the slot is freed
        assert sorted(os.listdir(directory)) == files
        assert sender.ask("slots") == "slots 1\n"
        again = decoder.decode(read_frames(sender.ask("send"))).output  # on the same slot
        assert torch.equal(again, torch.arange(1024.0))
        assert sender.ask("slots") == "slots 1\n"
    finally:
        sender.close()


def test_a_sender_never_reuses_a_slot_a_receiver_of_another_pid_namespace_holds(directory: Path) -> None:
    """The receiver's pid names no process here: the sender does not take its claim for a dead one's,
    so the tensor it keeps is never written over by the next message."""
    receiver = Peer("receiver", directory)
    sender = transports.ShmTransport(directory, backing="named")
    encoder = tw.Encoder(transport=sender, options=OOB)
    try:
        assert not os.path.exists(f"/proc/{receiver.pid}")
        for value, held in ((1.0, "held [1.0]"), (2.0, "held [1.0, 2.0]")):
            frames = encoder.encode(diffusion.Output(output=torch.full((1024,), value)))
            assert receiver.ask(frames_line(frames)) == held + "\n"
        assert sender.pool is not None and len(sender.pool.slots()) == 2  # a second slot, the first held
    finally:
        receiver.close()
        sender.close()


def test_reap_spares_a_live_creators_slot_of_another_pid_namespace(directory: Path) -> None:
    """The slot's creator has a pid no process here has, but it holds the slot: ``reap`` leaves its
    file and ``list_segments`` says its creator lives, and the next message on the slot decodes;
    once the creator is gone without closing anything, both take the file for its leftover."""
    sender = Peer("sender", directory)
    try:
        decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory, backing="named")])
        assert torch.equal(decoder.decode(read_frames(sender.ask("send"))).output, torch.arange(1024.0))
        names = sorted(os.listdir(directory))
        assert len(names) == 1 and creator_pid(names[0]) == sender.pid
        assert not os.path.exists(f"/proc/{sender.pid}")
        assert transports.reap(directory) == []
        assert sorted(os.listdir(directory)) == names
        assert [(s.name, s.creator, s.alive) for s in transports.list_segments(directory, memfds=False)] == [
            (names[0], sender.pid, True)
        ]
        assert torch.equal(decoder.decode(read_frames(sender.ask("send"))).output, torch.arange(1024.0))
        sender.exit()
        assert [(s.name, s.alive) for s in transports.list_segments(directory, memfds=False)] == [(names[0], False)]
        assert transports.reap(directory, dry_run=True) == names
        assert sorted(os.listdir(directory)) == names
        assert transports.reap(directory) == names
        assert os.listdir(directory) == []
    finally:
        sender.close()


def test_reap_spares_a_live_creators_one_shot_of_another_pid_namespace(directory: Path) -> None:
    """A one-shot segment carries no mark, and its creator's pid names no process here (or another
    one): ``reap`` took the live creator for dead and removed the segment before its receiver read
    it. A segment in flight before its claim deadline stays, and decodes."""
    sender = Peer("one-shots", directory)
    try:
        frames = read_frames(sender.ask("send"))
        names = os.listdir(directory)
        assert len(names) == 1 and creator_pid(names[0]) == sender.pid
        assert transports.reap(directory) == []
        decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory, backing="named")])
        assert torch.equal(decoder.decode(frames).output, torch.arange(1024.0))
    finally:
        sender.close()
