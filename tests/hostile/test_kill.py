"""SIGKILL of a sender or a receiver at each stage of a shared-memory hand-over.

Each case runs its peers (``kill_procs.serve``: a sender, a receiver, sometimes a later receiver)
as forkserver children, each the leader of a process group of its own, and kills one of them with
``os.killpg(pgid, SIGKILL)``: a sender in the middle of a 256 MiB copy (after forking a helper that
holds all it holds, so the whole group must die), after the hand-over, or while a receiver holds a
borrowed view; a receiver before claiming, while holding a borrowed view, or in the middle of a
256 MiB copy-receive. For memfd slots, named slots and one-shot segments alike, the survivor goes
on (bit-exact) or gets a precise ``CodecError``, never crashes, and ends with the fds it started
with; once every process of the case is dead no live process holds a memfd of theirs, and
``transports.reap`` removes what named segments they left (in a private directory), leaving none.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tensorwire as tw
from tensorwire import transports
from tensorwire.transports._page_layout import CLAIMED, FREE, IN_FLIGHT, MAGIC, SENDER
from tests.hostile import kill_procs
from tests.wire_helpers import head_of, memfds_held

BIG = 256 * 1024 * 1024  # the buffer of the mid-copy kills
SMALL = 1024 * 1024
CLAIM = 1.0  # seconds: the claim timeout of a sender whose receiver dies before claiming
START, CALL, JOIN = 120.0, 120.0, 60.0  # bounds for a hung peer, never speed requirements
BACKINGS: dict[str, dict[str, Any]] = {
    "memfd": {"backing": "memfd", "pool": True},
    "named": {"backing": "named", "pool": True},
    "one-shot": {"backing": "memfd", "pool": False},
}
CTX = mp.get_context("forkserver")
PRELOAD = ["pytest", "torch", "tensorwire", "tensorwire.builtins", "tensorwire.transports", "tests.hostile.kill_procs"]


@pytest.fixture(scope="module", autouse=True)
def _preloaded_forkserver() -> None:
    """Peers fork from a server that has imported torch and tensorwire already (no start-up cost).
    pytest too: each forkserver child re-runs the main script (pytest's), whose import is then free."""
    CTX.set_forkserver_preload(PRELOAD)


class Peer:
    """A child process running ``kill_procs.serve``, leader of its own process group."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.conn, child = CTX.Pipe()
        self.process = CTX.Process(target=kill_procs.serve, args=(child,), name=name, daemon=True)
        self.process.start()
        child.close()
        try:
            self.pid, self.pgid = self._reply("start", START)
        except BaseException:
            self.process.kill()
            self.process.join(JOIN)
            raise
        assert self.pgid == self.pid

    def call(self, command: str, *args: Any) -> Any:
        """Run ``command`` in the peer: its result, or the ``CodecError`` it raised, raised here."""
        self.conn.send((command, args))
        return self._reply(command, CALL)

    def _reply(self, command: str, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            raise AssertionError(f"{self.name}: no answer to {command!r} in {timeout}s")
        try:
            kind, value = self.conn.recv()
        except EOFError:
            raise AssertionError(f"{self.name} died during {command!r} (exit code {self.process.exitcode})") from None
        if kind == "error":
            raise value
        if kind == "crash":
            raise AssertionError(f"{self.name} crashed during {command!r}:\n{value}")
        return value

    def kill(self) -> None:
        """SIGKILL the peer's whole process group and wait for the peer to be gone."""
        os.killpg(self.pgid, signal.SIGKILL)
        self.process.join(JOIN)
        assert self.process.exitcode == -signal.SIGKILL

    def exit(self) -> None:
        """Let the peer end normally: it must exit 0."""
        self.call("exit")
        self.process.join(JOIN)
        assert self.process.exitcode == 0, f"{self.name} exited with {self.process.exitcode}"

    def cleanup(self) -> None:
        """Whatever happened: the group killed if the peer still runs, the process joined."""
        if self.process.exitcode is None:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.join(JOIN)
        self.conn.close()


@dataclass
class Case:
    """The peers of one case and where their named segments live."""

    directory: Path
    config: dict[str, Any]
    peers: list[Peer] = field(default_factory=list)
    pids: set[int] = field(default_factory=set)  # every process of the case, helpers included
    helpers: set[int] = field(default_factory=set)  # processes a peer forked (in the peer's group)

    def peer(self, name: str, *, claim_timeout: float = 60.0, borrow: bool | None = None) -> Peer:
        peer = Peer(name)
        self.peers.append(peer)
        self.pids.add(peer.pid)
        peer.call("setup", str(self.directory), self.config["backing"], self.config["pool"], claim_timeout, borrow)
        return peer

    @property
    def pooled(self) -> bool:
        return bool(self.config["pool"])

    @property
    def memfd(self) -> bool:
        """Whether the sender's buffers go to memfd slots (nothing named)."""
        return self.pooled and self.config["backing"] == "memfd"

    def segments(self) -> list[str]:
        """Named segments in the case's directory made by one of its processes."""
        return sorted(n for n in transports.our_segments(self.directory) if _creator(n) in self.pids)

    def settle(self, *survivors: Peer) -> list[str]:
        """The end of every case: the survivors let go (back to their fds), no live process holds a
        memfd of the case, the survivors exit 0, and once all are gone ``reap`` removes what named
        segments are left (returned) and nothing stays."""
        for survivor in survivors:
            assert survivor.call("finish") == 0, f"{survivor.name} holds more fds than it started with"
        assert _memfds_of(self.pids) == {}
        for survivor in survivors:
            survivor.exit()
        for pid in self.pids:
            _wait_gone(pid)
        assert _memfds_of(self.pids) == {}
        left = self.segments()
        reaped = sorted(n for n in transports.reap(self.directory) if _creator(n) in self.pids)
        assert reaped == left and self.segments() == []
        return reaped


@pytest.fixture(params=list(BACKINGS))
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="twtest-"))
    made = Case(directory, BACKINGS[request.param])
    try:
        yield made
    finally:
        for peer in made.peers:
            peer.cleanup()
        for helper in made.helpers:
            if not _gone(helper):  # its peer's group was killed, or it would be gone already
                os.kill(helper, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)


def _creator(name: str) -> int:
    return int(name.split("-")[1])


def _name(frames: list[bytes]) -> str:
    """The segment name of a one-buffer message."""
    ((_, handle),) = head_of(frames[0])[3]
    name: str = handle["name"]
    return name


def _memfds_of(pids: set[int]) -> dict[str, set[str]]:
    """Live processes holding (open or mapped) a memfd created by one of ``pids``: holder -> names."""
    prefixes = tuple(f"tw-{pid}-" for pid in pids)
    found: dict[str, set[str]] = {}
    for holder in os.listdir("/proc"):
        if holder.isdigit():
            names = {n for n in memfds_held(holder) if n.startswith(prefixes)}
            if names:
                found[holder] = names
    return found


def _fd_targets(pid: int) -> list[str]:
    """What the fds of process ``pid`` point at."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return targets


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie holds no fd and no mapping)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + JOIN
    while not _gone(pid):
        assert time.monotonic() < deadline, f"process {pid} of the case is still alive"
        time.sleep(0.01)


def _expired(case: Case, sender: Peer) -> str:
    what = "pool slot" if case.pooled else "shared memory segment"
    name = rf"tw-{sender.pid}-[0-9a-f]{{32}}-[0-9a-f]+"
    expired = rf"{what} {name} generation 1 expired: it was not claimed within its sender's claim timeout"
    return rf"^diffusion\.Output v1: {expired}$"


# -- the sender dies ------------------------------------------------------------------------------
def test_sender_killed_in_the_middle_of_a_large_copy_with_a_forked_helper(case: Case) -> None:
    receiver = case.peer("receiver")
    sender = case.peer("sender")
    frozen = sender.call("freeze_export", BIG, 1, True)
    helper = frozen["helper"]
    case.pids.add(helper)
    case.helpers.add(helper)
    assert frozen["copied"] == BIG // 2
    if case.memfd:
        held = {n for n in memfds_held(str(helper)) if n.startswith(f"tw-{sender.pid}-")}
        assert len(held) == 1  # the helper holds the slot too: only killing the group frees it
    else:
        (name,) = case.segments()
        assert str(case.directory / name) in _fd_targets(helper)
        with open(case.directory / name, "rb") as segment:
            head = segment.read(16)
        # a named slot is the sender's (not handed over); a one-shot's page is written after the copy
        assert head == (MAGIC + SENDER.to_bytes(8, "little") if case.pooled else bytes(16))
    sender.kill()
    _wait_gone(helper)
    reaped = case.settle(receiver)
    assert len(reaped) == (0 if case.memfd else 1)


def test_sender_killed_after_the_hand_over_before_the_claim(case: Case) -> None:
    receiver = case.peer("receiver")
    sender = case.peer("sender")
    frames = sender.call("encode", SMALL, 2)
    sender.kill()
    if case.memfd:  # a memfd goes with its sender
        message = (
            rf"cannot open pool segment tw-{sender.pid}-[0-9a-f]{{32}}-[0-9a-f]+ through /proc/{sender.pid}/fd/\d+: "
            r"No such file or directory \(is its sender alive, in this pid namespace\?\)$"
        )
        with pytest.raises(tw.TransportError, match=message) as failure:
            receiver.call("decode", frames, SMALL, 2, False)
        assert failure.value.errno == errno.ENOENT
    else:  # a named segment outlives its sender; the receiver unlinks it once read
        assert receiver.call("decode", frames, SMALL, 2, False)
        assert case.segments() == []
    assert case.settle(receiver) == []


def test_sender_killed_while_the_receiver_holds_a_borrowed_view(case: Case) -> None:
    receiver = case.peer("receiver", borrow=True)
    sender = case.peer("sender")
    frames = sender.call("encode", SMALL, 3)
    assert receiver.call("decode", frames, SMALL, 3, True)
    sender.kill()
    if not case.memfd:
        assert case.segments() == ([_name(frames)] if case.pooled else [])  # a one-shot went as it was claimed
    assert receiver.call("check_held") == [True]  # the mapping outlives its sender, unchanged
    assert case.settle(receiver) == []  # a named slot was unlinked by its receiver, once let go


# -- the receiver dies ----------------------------------------------------------------------------
def test_receiver_killed_before_claiming(case: Case) -> None:
    sender = case.peer("sender", claim_timeout=CLAIM)
    receiver = case.peer("receiver")
    late = case.peer("late receiver", borrow=False)
    frames = sender.call("encode", SMALL, 4)
    receiver.call("take", frames)
    receiver.kill()
    time.sleep(CLAIM)  # let the claim deadline pass
    with pytest.raises(tw.DecodeError, match=_expired(case, sender)):
        late.call("decode", frames, SMALL, 4, False)
    if case.pooled:
        again = sender.call("encode", SMALL, 5)
        assert sender.call("states") == [IN_FLIGHT]  # the expired slot came back and was reused
        assert _name(again) == _name(frames)
    else:
        assert case.segments() == [_name(frames)]  # the late claim changed nothing
        again = sender.call("encode", SMALL, 5)
        assert case.segments() == [_name(again)]  # the sender's next export unlinked the unclaimed one
    assert late.call("decode", again, SMALL, 5, False)
    assert case.settle(sender, late) == []


def test_receiver_killed_holding_a_borrowed_view_the_sender_reclaims_the_slot(case: Case) -> None:
    sender = case.peer("sender")
    receiver = case.peer("receiver", borrow=True)
    following = case.peer("next receiver", borrow=False)
    frames = sender.call("encode", SMALL, 6)
    assert receiver.call("decode", frames, SMALL, 6, True)
    if case.pooled:
        assert sender.call("states") == [CLAIMED]
    receiver.kill()
    again = sender.call("encode", SMALL, 7)
    if case.pooled:
        assert sender.call("states") == [IN_FLIGHT] and _name(again) == _name(frames)  # reclaimed, no growth
    else:
        assert case.segments() == [_name(again)]  # the first one was unlinked as it was claimed
    assert following.call("decode", again, SMALL, 7, False)
    if case.pooled:
        assert sender.call("states") == [FREE]
    assert case.settle(sender, following) == []


def test_receiver_killed_in_the_middle_of_a_large_copy_receive(case: Case) -> None:
    sender = case.peer("sender")
    receiver = case.peer("receiver", borrow=False)
    following = case.peer("next receiver", borrow=False)
    frames = sender.call("encode", BIG, 8)
    assert receiver.call("freeze_receive", frames) == {"copied": BIG // 2}
    if case.pooled:
        assert sender.call("states") == [CLAIMED]
    else:
        assert case.segments() == []  # claimed and unlinked before it was read
    receiver.kill()
    again = sender.call("encode", BIG, 9)
    if case.pooled:
        assert sender.call("states") == [IN_FLIGHT] and _name(again) == _name(frames)  # reclaimed, no growth
    assert following.call("decode", again, BIG, 9, False)
    if case.pooled:
        assert sender.call("states") == [FREE]
    assert case.settle(sender, following) == []
