"""The reaper against planted names: it removes only this uid's regular files of dead creators.

Unparseable and out-of-range names, pids that do not fit pid_t, FIFOs, symlinks, directories and
other users' files are skipped, never fatal; live creators' segments stay, those whose pid names no
process but whose creator holds its mark on the file too; ``--dry-run`` removes nothing. Each test
plants in a private directory, except the command-line test, which must use /dev/shm and plants
only names of its own.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import struct
import subprocess
import time
from pathlib import Path

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.cli import main
from tensorwire.transports import _reaper
from tensorwire.transports._one_shot_page import init_file
from tensorwire.transports._page_layout import CONTROL_BYTES, CREATOR_BYTE, RECEIVER_BYTE
from tensorwire.transports._reaper import _creator_lives
from tensorwire.transports.shm import SHM_DIR

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through shared memory


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _name(pid: int | str) -> str:
    return f"tw-{pid}-{secrets.token_hex(16)}-1"


def _plant(directory: Path) -> tuple[dict[str, Path], Path]:
    """Everything the reaper must skip, and the one file it must remove."""
    dead = _dead_pid()
    skip = {
        "pid 2**31": directory / _name(2**31),
        "pid 2**32 + 1": directory / _name(2**32 + 1),
        "pid past PID_MAX": directory / _name(4_194_305),
        "ten-digit pid": directory / _name(9_999_999_999),
        "live creator": directory / _name(os.getpid()),
        "not our pattern": directory / f"tw-{dead}-short-1",
        "fifo": directory / _name(dead),
        "symlink": directory / _name(dead),
        "directory": directory / _name(dead),
        "other uid": directory / _name(dead),
    }
    for kind, path in skip.items():
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":
            os.symlink("/etc/hostname", path)
        elif kind == "directory":
            path.mkdir()
        else:
            path.write_bytes(b"x" * 64)
    if os.geteuid() == 0:
        os.chown(skip["other uid"], 65534, 65534)
    else:
        del skip["other uid"]
    removable = directory / _name(dead)
    removable.write_bytes(b"x" * 64)
    return skip, removable


def test_planted_names_are_skipped_and_only_dead_creators_regular_files_go(directory: Path) -> None:
    skip, removable = _plant(directory)
    assert transports.reap(directory, dry_run=True) == [removable.name]
    assert removable.exists()
    assert transports.reap(directory) == [removable.name]
    assert not removable.exists()
    for kind, path in skip.items():
        assert os.path.lexists(path), f"{kind} was removed"
    assert Path("/etc/hostname").exists()


def test_the_command_line_reaper_survives_planted_names(capsys: pytest.CaptureFixture[str]) -> None:
    planted = [SHM_DIR / _name(2**31), SHM_DIR / _name(4_194_305)]
    fifo = SHM_DIR / _name(_dead_pid())
    dead = SHM_DIR / _name(_dead_pid())
    try:
        for path in planted:
            path.write_bytes(b"x")
        os.mkfifo(fifo)
        dead.write_bytes(b"x")
        assert main(["shm", "reap", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert f"would remove {dead.name}" in out and all(p.name not in out for p in [*planted, fifo])
        assert main(["shm", "reap"]) == 0
        out = capsys.readouterr().out
        assert f"removed {dead.name}" in out and not dead.exists()
        assert all(p.exists() for p in planted) and os.path.lexists(fifo)
    finally:
        for path in [*planted, fifo, dead]:
            path.unlink(missing_ok=True)


def _mark(path: Path, byte: int) -> int:
    """An fd of a description that holds a shared lock on ``byte`` of ``path`` (as a creator in
    another pid namespace holds ``CREATOR_BYTE`` of its pool slot's file)."""
    fd = os.open(path, os.O_RDWR)
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hh4xqqi4x", fcntl.F_RDLCK, os.SEEK_SET, byte, 1, 0))
    return fd


def test_a_file_whose_creator_holds_its_mark_is_not_reaped(directory: Path) -> None:
    """A dead-looking pid with the creator's lock held on the file (a creator in another pid
    namespace): spared, and listed as alive; a lock on another byte is no mark."""
    marked, other = directory / _name(_dead_pid()), directory / _name(_dead_pid())
    marked.write_bytes(b"x" * 64)
    other.write_bytes(b"x" * 64)
    held = [_mark(marked, CREATOR_BYTE), _mark(other, RECEIVER_BYTE)]
    try:
        alive = {s.name: s.alive for s in transports.list_segments(directory, memfds=False)}
        assert alive == {marked.name: True, other.name: False}
        assert transports.reap(directory) == [other.name]
        assert marked.exists() and not other.exists()
    finally:
        for fd in held:
            os.close(fd)
    assert transports.reap(directory) == [marked.name]


def test_the_mark_is_read_only_from_the_file_that_was_listed(directory: Path) -> None:
    """A marked file reached through a symlink, a FIFO (which must not block the open) and a file
    put in place of the one ``lstat`` saw all read as unmarked: nothing is followed or trusted."""
    dead = _dead_pid()
    target = directory / _name(dead)
    target.write_bytes(b"x" * 64)
    fd = _mark(target, CREATOR_BYTE)
    try:
        link = directory / _name(_dead_pid())
        link.symlink_to(target)
        assert not _creator_lives(link, os.stat(target), dead)
        fifo = directory / _name(_dead_pid())
        os.mkfifo(fifo)
        assert not _creator_lives(fifo, os.lstat(fifo), dead)
        stale = os.lstat(target)
        replacement = directory / "replacement"
        replacement.write_bytes(b"y" * 64)
        os.rename(replacement, target)  # the marked file's name now names another file
        other = _mark(target, CREATOR_BYTE)
        try:
            assert not _creator_lives(target, stale, dead)
            assert _creator_lives(target, os.lstat(target), dead)
        finally:
            os.close(other)
    finally:
        os.close(fd)


def _one_shot(directory: Path, pid: int, deadline_ns: int) -> Path:
    """A one-shot segment of ``pid``'s name, in flight until ``deadline_ns``, that no transport tracks."""
    path = directory / _name(pid)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.pwrite(fd, bytes(CONTROL_BYTES + 64), 0)
        init_file(fd, 64, deadline_ns, path.name)
    finally:
        os.close(fd)
    return path


def test_a_segment_whose_creators_pid_was_reused_is_reaped(directory: Path) -> None:
    """A one-shot segment (past its claim deadline: one in flight stays, see below) whose name's pid
    now names a process that started after its creator did (the page says when its creator started:
    the pid was reused) is reaped and listed as dead; the live creator's own segment, and a file
    whose page says nothing, stay."""
    encoder = tw.Encoder(transport=transports.ShmTransport(directory, pool=False), options=OOB)
    encoder.encode(diffusion.Output(output=torch.ones(1024)))
    [own] = os.listdir(directory)
    later = subprocess.Popen(["sleep", "60"])  # not the creator, whatever its pid
    try:
        reused = _one_shot(directory, later.pid, time.monotonic_ns() - 1).name  # made by this process
        unsaid = directory / _name(later.pid)
        unsaid.write_bytes(b"x" * 64)
        alive = {s.name: s.alive for s in transports.list_segments(directory, memfds=False)}
        assert alive == {own: True, reused: False, unsaid.name: True}
        assert transports.reap(directory) == [reused]
        assert sorted(os.listdir(directory)) == sorted([own, unsaid.name])
    finally:
        later.kill()
        later.wait()


def test_a_one_shot_in_flight_before_its_claim_deadline_is_never_reaped(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-shot segment carries no mark: the reaper took a live creator whose pid it cannot see (one
    in another pid namespace, as ``alive`` says here) for dead and removed a segment its receiver had
    not read yet. Whether its creator lives or not, a one-shot stays until its claim deadline; past
    it (no claim can succeed then), it goes."""
    shm = transports.ShmTransport(directory, pool=False)
    frames = tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=torch.ones(1024)))
    [live] = os.listdir(directory)
    dead, now = _dead_pid(), time.monotonic_ns()
    waiting, past = _one_shot(directory, dead, now + 60 * 10**9), _one_shot(directory, dead, now - 1)
    monkeypatch.setattr(_reaper, "alive", lambda pid: False)  # no creator's pid names a process here
    assert transports.reap(directory) == [past.name]
    assert sorted(os.listdir(directory)) == sorted([live, waiting.name])
    assert torch.equal(tw.Decoder(REGISTRY, transports=[shm]).decode(frames).output, torch.ones(1024))
    shm.close()
