"""POSIX shared memory, with lifetime owned by tensorwire (never by Python's resource tracker).

Segments live in ``/dev/shm`` and are named ``tw-<pid>-<token>-<seq>``: the creator's pid, a
random 128-bit token drawn once per process, and a counter. The sender reserves the space with
``posix_fallocate`` (a full /dev/shm is a ``TransportError`` before any byte is copied, never a
SIGBUS), copies the buffer in, and closes it. The receiver accepts only names of this exact
pattern, with one pid and token per message and no name twice; it opens the segment, checks its
real size, maps it, unlinks it, and returns a private copy or (``borrow``) the mapping itself,
which stays alive until the last numpy or torch view of it dies. ``reap()`` removes segments
whose creator has died.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from codec.errors import DecodeError, TransportError
from transports.base import Buffer, Handle

__all__ = ["SHM_DIR", "ShmHandle", "ShmTransport", "our_segments", "reap"]

SHM_DIR = Path("/dev/shm")
_NAME = re.compile(r"tw-([1-9][0-9]{0,9})-([0-9a-f]{32})-([0-9a-f]{1,16})")
_TOKEN = secrets.token_hex(16)
_TOKEN_PID = os.getpid()
_POPULATE = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # pre-fault in bulk where Linux offers it
_lock = threading.Lock()
_counter = 0


def _process_token() -> str:
    """This process's token; a forked child draws its own."""
    global _TOKEN, _TOKEN_PID
    if _TOKEN_PID != os.getpid():
        _TOKEN, _TOKEN_PID = secrets.token_hex(16), os.getpid()
    return _TOKEN


def _next_name() -> str:
    global _counter
    with _lock:
        _counter += 1
        seq = _counter
    return f"tw-{os.getpid()}-{_process_token()}-{seq:x}"


class ShmHandle(Handle, tag="shm", frozen=True):
    """A segment in /dev/shm holding exactly the buffer."""

    name: str


class ShmTransport:
    """Out-of-band buffers in POSIX shared memory segments, one per buffer."""

    name: ClassVar[str] = "shm"
    handle_type: ClassVar[type[Handle]] = ShmHandle

    def __init__(self, directory: str | os.PathLike[str] = SHM_DIR) -> None:
        self.directory = Path(directory)

    # -- sending ------------------------------------------------------------------------------
    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        nbytes = data.nbytes
        if nbytes == 0:
            raise TransportError(errno.EINVAL, "a 0-byte buffer never gets a segment; send it inline")
        name = _next_name()
        path = self.directory / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise TransportError(exc.errno, f"cannot create shared memory segment {name}: {exc.strerror}") from None
        try:
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except OSError as exc:
                raise TransportError(
                    exc.errno, f"cannot reserve {nbytes} bytes in {self.directory} for {name}: {exc.strerror}"
                ) from None
            with mmap.mmap(fd, nbytes, flags=_POPULATE) as mapping:  # map every page in one call
                mapping[:] = data
        except BaseException:
            os.close(fd)
            _unlink(path)
            raise
        os.close(fd)
        return ShmHandle(name=name)

    def release(self, handle: Handle) -> None:
        assert isinstance(handle, ShmHandle)
        if _NAME.fullmatch(handle.name):
            _unlink(self.directory / handle.name)

    # -- receiving ----------------------------------------------------------------------------
    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        owner: tuple[str, str] | None = None
        seen: set[str] = set()
        for handle in handles:
            assert isinstance(handle, ShmHandle)
            match = _NAME.fullmatch(handle.name)
            if match is None:
                raise DecodeError(f"shm segment name {handle.name!r} is not a tensorwire name (tw-<pid>-<token>-<seq>)")
            sender = (match.group(1), match.group(2))
            if owner is None:
                owner = sender
            elif sender != owner:
                raise DecodeError(f"shm segment {handle.name!r} names a different creator than the message's others")
            if handle.name in seen:
                raise DecodeError(f"shm segment {handle.name!r} is named twice in one message")
            seen.add(handle.name)

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool) -> Buffer:
        assert isinstance(handle, ShmHandle)
        path = self.directory / handle.name
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError as exc:
            raise TransportError(
                exc.errno, f"cannot open shared memory segment {handle.name}: {exc.strerror}"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if size != nbytes:
                raise DecodeError(f"shm segment {handle.name} holds {size} bytes, its buffer entry says {nbytes}")
            mapping = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED if borrow else _POPULATE)
        finally:
            os.close(fd)
            _unlink(path)
        if borrow:
            return mapping  # the mapping lives as long as any view of it
        try:
            return bytearray(mapping)
        finally:
            mapping.close()

    def close(self) -> None:
        """Holds nothing between calls: every segment belongs to a message in flight."""


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def our_segments(directory: str | os.PathLike[str] = SHM_DIR) -> list[str]:
    """Names of tensorwire segments in ``directory``."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if _NAME.fullmatch(n))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(directory: str | os.PathLike[str] = SHM_DIR) -> list[str]:
    """Remove tensorwire segments whose creator process is gone; return their names."""
    removed = []
    for name in our_segments(directory):
        match = _NAME.fullmatch(name)
        assert match is not None
        if not _alive(int(match.group(1))):
            _unlink(Path(directory) / name)
            removed.append(name)
    return removed
