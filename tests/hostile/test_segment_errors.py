"""Error paths of opening, reading and locking segments: each a precise CodecError, nothing left behind.

A memfd that cannot be reserved, a file swapped between ``lstat`` and ``open``, a one-shot segment
cut short while it is read, and a control page another process keeps locked (never a hang); and
handles never show their capability.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import os
import struct
import sys
import time
from typing import Any

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import _one_shots, _segment, _slots
from tensorwire.transports._one_shot_page import claim_file
from tensorwire.transports._page_layout import IN_FLIGHT
from tensorwire.transports._segment import open_named
from tests.wire_helpers import head_of, memfds_held

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor out of band
MESSAGE = diffusion.Output(output=torch.arange(4096, dtype=torch.float32))


def test_a_memfd_that_cannot_be_reserved_is_a_transport_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    shm = transports.ShmTransport()
    before = memfds_held()
    monkeypatch.setattr(os, "posix_fallocate", no_memory)
    with pytest.raises(
        tw.TransportError,
        match=r"^\[Errno 28\] cannot reserve 69632 bytes in memory for memfd tw-\d+-\w+-\w+: No space",
    ) as info:
        tw.Encoder(transport=shm, options=OOB).encode(MESSAGE)
    assert info.value.errno == errno.ENOSPC
    assert shm.pool is not None and shm.pool.slots() == []
    assert memfds_held() <= before  # the memfd that could not be reserved is closed
    shm.close()


def _one_shot() -> tuple[transports.ShmTransport, list[Any], str]:
    shm = transports.ShmTransport(pool=False)
    frames = tw.Encoder(transport=shm, options=OOB).encode(MESSAGE)
    return shm, frames, head_of(frames[0])[3][0][1]["name"]


def test_a_file_swapped_between_lstat_and_open_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    shm, frames, name = _one_shot()
    real_lstat = os.lstat

    def other_file(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        info = real_lstat(path, *args, **kwargs)
        if str(path).endswith(name):  # what a rename in between would look like: another inode
            return os.stat_result((info.st_mode, info.st_ino + 1, *tuple(info)[2:]))
        return info

    monkeypatch.setattr(os, "lstat", other_file)
    receiver = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(pool=False)])
    with pytest.raises(tw.DecodeError, match=rf"shared memory segment {name} was replaced while it was opened"):
        receiver.decode(frames)
    monkeypatch.undo()
    assert torch.equal(receiver.decode(frames).output, MESSAGE.output)  # left as it was: still receivable
    shm.close()


def test_a_one_shot_cut_short_while_it_is_read_is_a_decode_error(monkeypatch: pytest.MonkeyPatch) -> None:
    shm, frames, name = _one_shot()
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset: 0)  # the file ends here now
    receiver = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(pool=False)])
    with pytest.raises(tw.DecodeError, match=rf"shared memory segment {name} ended after 0 of 16384 bytes"):
        receiver.decode(frames)
    assert not (shm.directory / name).exists()  # claimed, so unlinked: read once, never twice
    shm.close()


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("size", [16, 100, 4095])
def test_a_named_slot_cut_short_between_its_check_and_its_mapping_is_a_decode_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, size: int
) -> None:
    """A same-uid peer truncates its named slot after the receiver checked its size: the receiver
    maps nothing, says why, and keeps no fd of it."""
    sender = transports.ShmTransport(tmp_path, backing="named")
    frames = tw.Encoder(transport=sender, options=OOB).encode(MESSAGE)
    name = head_of(frames[0])[3][0][1]["name"]
    real = open_named

    def cut_short(path: Any, what: str, **kwargs: Any) -> int:
        fd = real(path, what, **kwargs)  # its checks pass; the peer's truncate lands now
        os.truncate(path, size)
        return fd

    monkeypatch.setattr(_slots, "open_named", cut_short)
    receiver = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(tmp_path, backing="named")])
    before = _open_fds()
    with pytest.raises(tw.DecodeError) as info:
        receiver.decode(frames)
    assert info.value.message == (
        f"pool segment {name} cannot be mapped: it holds {size} bytes, less than its 4096-byte header"
    )
    gc.collect()
    assert _open_fds() <= before
    sender.close()


def test_a_borrowed_one_shot_cut_short_after_its_claim_is_a_decode_error(monkeypatch: pytest.MonkeyPatch) -> None:
    shm, frames, name = _one_shot()
    real = claim_file

    def cut_short(fd: int, capability: bytes, what: str) -> None:
        real(fd, capability, what)  # claimed; the peer's truncate lands now
        os.ftruncate(fd, 4096 + 100)

    monkeypatch.setattr(_one_shots, "claim_file", cut_short)
    receiver = tw.Decoder(
        REGISTRY,  # a receiver that maps one-shots
        transports=[transports.ShmTransport(pool=False, backing="named")],
        options=tw.DecodeOptions(borrow=True),
    )
    before = _open_fds()
    with pytest.raises(tw.DecodeError) as info:
        receiver.decode(frames)
    assert info.value.message == f"shared memory segment {name} cannot be mapped: mmap length is greater than file size"
    assert not (shm.directory / name).exists()  # claimed, so unlinked: read once, never twice
    assert _open_fds() <= before
    shm.close()


def test_a_page_locked_elsewhere_is_an_error_after_a_bounded_wait_never_a_hang() -> None:
    shm = transports.ShmTransport()
    frames = tw.Encoder(transport=shm, options=OOB).encode(MESSAGE)
    handle = head_of(frames[0])[3][0][1]
    other = os.open(f"/proc/self/fd/{handle['fd']}", os.O_RDWR)  # another open file description
    lock = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    fcntl.fcntl(other, fcntl.F_OFD_SETLK, lock)  # as a stuck (or hostile) process would hold it
    receiver = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(pool=False)])
    try:
        with pytest.raises(tw.TransportError, match=r"has been locked by another process for over 0.25s") as info:
            receiver.decode(frames)
        assert info.value.errno == errno.EAGAIN
        assert shm.pool is not None and [s.state for s in shm.pool.slots()] == [IN_FLIGHT]  # untouched
    finally:
        os.close(other)  # the kernel drops the lock with its last fd
    assert torch.equal(receiver.decode(frames).output, MESSAGE.output)
    shm.close()


def test_pages_a_peer_keeps_locked_hold_a_failed_decode_up_once_not_once_per_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every one-shot segment of a message locked by its peer: the claim of the first waits its
    while and fails; the give-backs of the other 15 then wait that long again in all, not each."""
    shm = transports.ShmTransport(pool=False)
    sent = [torch.full((1024,), float(i)) for i in range(16)]
    frames = tw.Encoder(transport=shm, options=OOB).encode(diffusion.Output(output=sent))
    names = [entry[1]["name"] for entry in head_of(frames[0])[3]]
    lock = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    held = [os.open(shm.directory / name, os.O_RDWR) for name in names]  # the peer's own descriptions
    for fd in held:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, lock)
    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)  # (_page_lock calls time.sleep)
    receiver = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(pool=False)])
    try:
        with pytest.raises(tw.TransportError, match=r"has been locked by another process for over 0.25s") as info:
            receiver.decode(frames)
        assert info.value.errno == errno.EAGAIN
        assert sum(slept) <= 2 * 0.25 + 0.01  # the claim's wait, then the give-backs' one wait (16 x 0.25 s before)
        assert all((shm.directory / name).exists() for name in names)  # nothing given back or read
    finally:
        for fd in held:
            os.close(fd)  # the kernel drops the locks with their last fds
    monkeypatch.undo()
    got = receiver.decode(frames).output
    assert all(torch.equal(g, s) for g, s in zip(got, sent, strict=True))
    shm.close()


def test_handles_never_show_their_capability() -> None:
    capability = b"\xab" * 16
    for handle in (
        transports.ShmHandle(name="tw-1-" + "0" * 32 + "-1", capability=capability),
        transports.SlotHandle(name="tw-1-" + "0" * 32 + "-1", offset=0, generation=1, capability=capability, fd=4),
    ):
        for text in (repr(handle), str(handle), f"{handle}"):
            assert "capability=<16 bytes>" in text and "\\xab" not in text and "abab" not in text


@pytest.mark.parametrize("where", ["before-its-guard", "as-it-is-registered", "as-its-fd-is-closed"])
def test_an_interrupt_landing_as_a_one_shot_segment_is_made_leaves_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``) that landed after a one-shot segment
    was created, before its send's guard (where its claim deadline was read), left the file and its
    fd for the process's life; one that landed as it was registered left the file until its claim
    timeout. No receiver can know it before the handle is made: the file is removed at once. One
    that lands as the call closing its fd returns removes it too (by the identity recorded as it
    was made) and closes nothing twice."""
    from tensorwire.transports import shm as shm_module

    shm = transports.ShmTransport(pool=False, directory=tmp_path)
    if where == "before-its-guard":  # at the send's first call (of C: where a signal lands) after the file's creation
        create_file, send = _segment.create_file, shm_module.ShmTransport._export_segment.__code__
        created: list[int] = []

        def creating(*args: Any) -> int:
            fd: int = create_file(*args)
            created.append(fd)
            return fd

        def interrupting(frame: Any, event: str, arg: object) -> None:
            if event == "c_call" and created and frame.f_code is send:
                sys.setprofile(None)
                raise KeyboardInterrupt

        monkeypatch.setattr(shm_module, "create_file", creating)
        sys.setprofile(interrupting)
    elif where == "as-its-fd-is-closed":  # right after that call into C returns
        send = shm_module.ShmTransport._export_segment.__code__

        def interrupting(frame: Any, event: str, arg: object) -> None:
            if event == "c_return" and arg is os.close and frame.f_code is send:
                sys.setprofile(None)
                raise KeyboardInterrupt

        sys.setprofile(interrupting)
    else:  # as the segment is registered to be swept at its deadline
        add = shm._one_shots.add

        def interrupted(*args: Any) -> None:
            add(*args)
            raise KeyboardInterrupt

        monkeypatch.setattr(shm._one_shots, "add", interrupted)
    gc.collect()  # (what earlier tests dropped goes now, not during this one: it counts its own only)
    fds = len(os.listdir("/proc/self/fd"))
    try:
        with pytest.raises(KeyboardInterrupt):
            tw.Encoder(transport=shm, options=OOB).encode(MESSAGE)
    finally:
        sys.setprofile(None)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == [] and shm._one_shots._pending == {}
    assert len(os.listdir("/proc/self/fd")) == fds
    shm.close()
