"""tensorwire.transports._parallel_copy: large copies split across helper threads land every byte exactly once."""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from tensorwire.transports import _parallel_copy as bulk


@pytest.mark.parametrize("helpers", [0, 1, 3])
@pytest.mark.parametrize("nbytes", [1, 4095, 4096 * 3 + 17, 1 << 20])
def test_copy_into_is_exact(monkeypatch: pytest.MonkeyPatch, helpers: int, nbytes: int) -> None:
    monkeypatch.setattr(bulk, "PARALLEL_MIN", 1)  # every size takes the split path
    monkeypatch.setattr(bulk, "helper_count", lambda: helpers)
    source = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    target = mmap.mmap(-1, nbytes + 8)
    with memoryview(target) as area:
        bulk.copy_into(area[4 : 4 + nbytes], source.data)
        assert bytes(area[:4]) == b"\0" * 4 and bytes(area[4 + nbytes :]) == b"\0" * 4  # nothing outside
        assert np.array_equal(np.frombuffer(area[4 : 4 + nbytes], dtype=np.uint8), source)
    target.close()  # no view of the mapping is left behind


def test_copy_into_rejects_a_size_mismatch() -> None:
    with pytest.raises(ValueError, match="copy of 8 bytes into a 7-byte buffer"):
        bulk.copy_into(bytearray(7), bytes(8))


def test_copy_into_refuses_a_read_only_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "PARALLEL_MIN", 1)
    monkeypatch.setattr(bulk, "helper_count", lambda: 1)
    with pytest.raises(ValueError, match="read-only"):
        bulk.copy_into(bytes(1 << 16), bytearray(1 << 16))  # a read-only target


def test_a_write_whose_chunk_failed_returns_once_every_other_chunk_is_done(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``write_at`` raised the first helper's error as soon as it came, leaving later helpers
    writing to the fd its caller then closed (and whose number another file may take next)."""
    monkeypatch.setattr(bulk, "PARALLEL_MIN", 1)
    monkeypatch.setattr(bulk, "helper_count", lambda: 3)
    returned = threading.Event()
    seen: list[bool] = []

    def write_all(fd: int, offset: int, view: memoryview) -> None:
        if offset == 1 << 12:  # the first helper's chunk: fails at once (say, ENOSPC)
            raise OSError(errno.ENOSPC, "No space left on device")
        if offset > 1 << 12:  # the later helpers': still writing when it failed
            returned.wait(1.0)
            seen.append(returned.is_set())
        os.pwrite(fd, view, offset)

    monkeypatch.setattr(bulk, "_write_all", write_all)
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError) as info:
            bulk.write_at(fd, 0, bytes(4 << 12))
        returned.set()
        assert info.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    assert seen == [False, False]  # both were done before it returned


@pytest.mark.parametrize(("cpus", "helpers"), [(1, 0), (2, 1), (4, 3), (64, 3)])
def test_helper_count_leaves_one_cpu_to_the_caller(monkeypatch: pytest.MonkeyPatch, cpus: int, helpers: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert bulk.helper_count() == helpers  # the CPUs this process may use, less the caller's, at most 3


def test_a_forked_child_copies_with_its_own_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal

    monkeypatch.setattr(bulk, "PARALLEL_MIN", 1)
    monkeypatch.setattr(bulk, "helper_count", lambda: 1)
    bulk.copy_into(bytearray(1 << 16), bytes(1 << 16))  # the parent's helpers exist now
    bulk._lock.acquire()  # a parent thread holding the lock at fork time must not hang the child
    try:
        pid = os.fork()
        if pid == 0:  # the child: copy with fresh helpers and report through the exit status
            signal.alarm(10)  # a hang ends the child with SIGALRM: the test fails instead of hanging
            target = bytearray(1 << 16)
            bulk.copy_into(target, b"\x07" * (1 << 16))
            os._exit(0 if target == b"\x07" * (1 << 16) else 1)
    finally:
        bulk._lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
