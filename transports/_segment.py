"""Shared-memory files: created reserved, opened only after checking what they are.

Two kinds of backing:

- **memfd** (``memfd_create``): a file with no name in any directory, sealed against shrinking
  and growing (``F_SEAL_SHRINK | F_SEAL_GROW``), so no process can truncate it under a mapping
  (no SIGBUS); it disappears with its last fd and mapping. A receiver opens the creator's fd
  through ``/proc/<pid>/fd/<n>`` after checking that the link names exactly that memfd, then
  checks the file is sealed.
- **named** (a file in /dev/shm): outlives its creator and works across pid namespaces, but a
  same-uid process can truncate it.

Opening never follows a symlink, never opens a FIFO, device, directory or another uid's file
(each is refused from ``lstat`` before any open), uses ``O_NOATIME`` (a refused file keeps its
access time) and ``O_NONBLOCK``, and checks the real size before anything is mapped or read.
Creation reserves the space with ``posix_fallocate``: a full file system is a ``TransportError``
(ENOSPC) before any byte is written, never a SIGBUS later.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from tensorwire.errors import DecodeError, TransportError

__all__ = [
    "PID_MAX",
    "POPULATE",
    "SEALS",
    "alive",
    "create_file",
    "create_memfd",
    "create_named",
    "memfd_link",
    "open_memfd",
    "open_named",
    "own_start",
    "read_into",
    "identity",
    "remove_named",
    "remove_own",
    "started",
    "valid_pid",
]

POPULATE = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
PID_MAX = 2**22  # the kernel's PID_MAX_LIMIT: no pid is larger
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)


def valid_pid(pid: int) -> bool:
    """Whether ``pid`` can name a process at all (1 .. PID_MAX)."""
    return 0 < pid <= PID_MAX


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (ours or not); a number no pid can be is no process."""
    if not valid_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started(pid: int | str = "self") -> int:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``): a pid reused
    by a later process comes with a later start. 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            return int(stat_file.read().rsplit(b")", 1)[1].split()[19])  # field 22, after the name
    except (OSError, ValueError, IndexError):
        return 0


_OWN_START: tuple[int, int] = (0, 0)  # (pid, its start): this process's, read once (again in a forked child)
_STARTS: dict[int, tuple[int, float]] = {}  # pid -> (its start, when read): another process's, recently
_STARTS_FOR = 1.0  # seconds a start read is used again (a reused pid is told at most this much later)


def own_start() -> int:
    """When this process started (``started``), read once per process."""
    global _OWN_START
    pid = os.getpid()
    if _OWN_START[0] != pid:
        _OWN_START = (pid, started())
    return _OWN_START[1]


def started_as_said(pid: int, said: int) -> bool:
    """Whether process ``pid`` (one that exists) started when ``said`` says (``started``): a pid
    reused by a later process names another one. ``said`` 0 (not said), or a start that cannot be
    read, cannot tell them apart: True. Another process's start is read at most once a second."""
    if not said:
        return True
    if pid == os.getpid():
        return own_start() in (0, said)
    now = time.monotonic()
    seen = _STARTS.get(pid)
    if seen is None or now - seen[1] > _STARTS_FOR:
        if len(_STARTS) >= 1024:
            _STARTS.clear()
        seen = _STARTS[pid] = (started(pid), now)
    return seen[0] in (0, said)


def create_named(path: Path, size: int) -> tuple[int, mmap.mmap]:
    """A new file of ``size`` bytes at ``path`` (mode 0600, reserved, mapped pre-faulted): (fd, mapping).
    Nothing is left behind on failure."""
    fd = create_file(path, size)
    try:
        return fd, _map(fd, size, f"{path.parent} for {path.name}")
    except BaseException:
        remove_own(path, fd)
        os.close(fd)
        raise


def create_file(path: Path, size: int) -> int:
    """A new file of ``size`` bytes at ``path`` (mode 0600, reserved, not mapped: written with
    ``pwrite``, so a neighbour that truncates it cannot raise a signal in its creator): its fd.
    Nothing is left behind on failure."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot create shared memory segment {path.name}: {exc.strerror}") from None
    except BaseException:  # an interrupt as the call returned: the file was made, its fd not yet named here
        try:
            made: tuple[int, int] | None = identity(os.lstat(path))
        except OSError:  # (none was made)
            made = None
        if made is not None:  # closed (and the name removed) only if this process holds an fd of it
            _close_made(lambda fd: identity(os.fstat(fd)) == made, path)
        raise
    try:
        _reserve(fd, size, f"{path.parent} for {path.name}")
    except BaseException:
        remove_own(path, fd)
        os.close(fd)
        raise
    return fd


def identity(info: os.stat_result) -> tuple[int, int]:
    """The file ``info`` describes, as (device, inode)."""
    return info.st_dev, info.st_ino


def remove_named(path: Path, made: tuple[int, int]) -> bool:
    """Remove ``path`` if it still names the file ``made`` (``identity``); True if it did. A name a
    neighbour gave to another file (or a directory) meanwhile, or that is gone, is left alone."""
    try:
        if identity(os.lstat(path)) != made:
            return False
        os.unlink(path)
    except OSError:
        return False
    return True


def remove_own(path: Path, fd: int) -> None:
    """``remove_named`` for the file ``fd`` is open on."""
    try:
        made = identity(os.fstat(fd))
    except OSError:
        return
    remove_named(path, made)


def create_memfd(name: str, size: int) -> tuple[int, mmap.mmap]:
    """A new sealed memfd of ``size`` bytes labelled ``name`` (reserved, mapped pre-faulted): (fd, mapping)."""
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot create memfd {name}: {exc.strerror}") from None
    except BaseException:  # an interrupt as the call returned: the memfd was made, its fd not yet named here
        link = f"/memfd:{name} (deleted)"  # (the name is this process's own: no other fd has it)
        _close_made(lambda fd: os.readlink(f"/proc/self/fd/{fd}") == link, None)
        raise
    try:
        where = f"memory for memfd {name}"
        _reserve(fd, size, where)
        mapping = _map(fd, size, where)
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
        except OSError as exc:
            mapping.close()
            raise TransportError(exc.errno, f"cannot seal memfd {name}: {exc.strerror}") from None
        return fd, mapping
    except BaseException:
        os.close(fd)
        raise


def _close_made(made: Callable[[int], bool], path: Path | None) -> None:
    """Close the fds of this process that ``made`` says are of a segment an interrupt kept the
    creating call from returning (and remove ``path``, the name it was made at, if any)."""
    try:
        fds = [int(entry) for entry in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        try:
            if not made(fd):
                continue
        except OSError:  # (the listing's own fd, or one closed since)
            continue
        if path is not None:
            remove_own(path, fd)
        os.close(fd)


def _reserve(fd: int, size: int, where: str) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot reserve {size} bytes in {where}: {exc.strerror}") from None


def _map(fd: int, size: int, where: str) -> mmap.mmap:
    """``size`` bytes of ``fd`` mapped pre-faulted (a file a neighbour cut short meanwhile is a
    ``TransportError``: mmap refuses a length past its end)."""
    try:
        return mmap.mmap(fd, size, flags=POPULATE)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot map {size} bytes in {where}: {exc.strerror}") from None
    except ValueError as exc:
        raise TransportError(errno.EIO, f"cannot map {size} bytes in {where}: {exc}") from None


def open_named(path: Path, what: str, *, exact: int | None = None, min_size: int = 0) -> int:
    """An fd of the regular file at ``path``, owned by this uid, of ``exact`` bytes (or at least
    ``min_size``). Special files, symlinks and other users' files are refused before any open."""
    try:
        before = os.lstat(path)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot open {what} {path.name}: {exc.strerror}") from None
    _check_file(before, what, path.name, exact, min_size)
    try:
        fd = os.open(path, _OPEN)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot open {what} {path.name}: {exc.strerror}") from None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise DecodeError(f"{what} {path.name} was replaced while it was opened")
        _check_file(now, what, path.name, exact, min_size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def memfd_link(name: str) -> str:
    """What ``/proc/<pid>/fd/<n>`` reads for a memfd labelled ``name``."""
    return f"/memfd:{name} (deleted)"


def open_memfd(pid: int, number: int, name: str, what: str, *, min_size: int) -> int:
    """An fd of memfd ``name`` that process ``pid`` holds as fd ``number``: the link must name exactly
    that memfd (before and after the open), and the file must be ours, sealed and large enough."""
    if not valid_pid(pid) or not 0 <= number < 2**31:
        raise DecodeError(f"{what} {name}: no process {pid} with an fd {number}")
    link = f"/proc/{pid}/fd/{number}"
    expected = memfd_link(name)
    try:
        target = os.readlink(link)
    except OSError as exc:
        raise TransportError(
            exc.errno,
            f"cannot open {what} {name} through {link}: {exc.strerror} (is its sender alive, in this pid namespace?)",
        ) from None
    if target != expected:
        raise DecodeError(f"{what} {name}: {link} is not that memfd")
    # The sender can point its fd at another file between the check above and the open: the link
    # is first taken as a path only (O_PATH opens nothing: no terminal becomes this process's, no
    # device or FUSE open runs), checked, and only that memfd is then opened for reading and writing.
    try:
        pinned = os.open(link, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot open {what} {name} through {link}: {exc.strerror}") from None
    try:
        if os.readlink(f"/proc/self/fd/{pinned}") != expected:
            raise DecodeError(f"{what} {name}: {link} changed while it was opened")
        _check_file(os.fstat(pinned), what, name, None, min_size)
        fd = os.open(f"/proc/self/fd/{pinned}", _OPEN & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise TransportError(exc.errno, f"cannot open {what} {name} through {link}: {exc.strerror}") from None
    finally:
        os.close(pinned)
    try:
        _check_file(os.fstat(fd), what, name, None, min_size)
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        if seals & SEALS != SEALS:
            raise DecodeError(f"{what} {name} is not sealed against resizing")
    except OSError as exc:
        os.close(fd)
        raise TransportError(exc.errno, f"cannot check {what} {name}: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_file(info: os.stat_result, what: str, name: str, exact: int | None, min_size: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise DecodeError(f"{what} {name} is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise DecodeError(f"{what} {name} is not a regular file")
    if info.st_uid != os.geteuid():
        raise DecodeError(f"{what} {name} belongs to uid {info.st_uid}, not to this process's uid {os.geteuid()}")
    if exact is not None and info.st_size != exact:
        raise DecodeError(f"{what} {name} holds {info.st_size} bytes, its handle names {exact}")
    if info.st_size < min_size:
        raise DecodeError(f"{what} {name} holds {info.st_size} bytes, less than its {min_size}-byte header")


def read_into(fd: int, target: memoryview, offset: int, what: str) -> None:
    """Fill ``target`` from ``fd`` at ``offset`` with ``pread`` (a file cut short is a ``DecodeError``,
    never a SIGBUS)."""
    done = 0
    total = target.nbytes
    while done < total:
        try:
            got = os.preadv(fd, [target[done:]], offset + done)
        except OSError as exc:
            raise TransportError(exc.errno, f"cannot read {what}: {exc.strerror}") from None
        if got == 0:
            raise DecodeError(f"{what} ended after {done} of {total} bytes (cut short while it was read)")
        done += got
