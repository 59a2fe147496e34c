"""Reading a file a user names or a directory holds: a regular file only, read to the size it had
when it was opened.

A FIFO would block the read, a device such as ``/dev/zero`` would never end it, and a file that
another process keeps growing would be followed for as long as it grows: none of these is read.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["as_text", "find", "open_regular", "read_at", "read_regular", "read_text"]

_CHUNK = 1 << 24  # bytes asked of one read


@contextmanager
def open_regular(
    path: str | os.PathLike[str], limit: int | None = None, *, follow: bool = True
) -> Iterator[tuple[int, int]]:
    """The open fd and size of the regular file ``path`` (a link is followed only with ``follow``),
    closed on exit. ``OSError`` (``strerror`` says why) if it cannot be opened, is a link and not
    ``follow`` (``ELOOP``), is not a regular file (``EINVAL``) or holds more than ``limit`` bytes
    (``EFBIG``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO opens without a writer
    if not follow:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise OSError(errno.ELOOP, "a symbolic link", os.fsdecode(path))
        flags |= os.O_NOFOLLOW  # nor one put there since
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fsdecode(path))
        if limit is not None and info.st_size > limit:
            raise OSError(errno.EFBIG, f"{info.st_size} bytes is over the limit of {limit}", os.fsdecode(path))
        yield fd, info.st_size
    finally:
        os.close(fd)


def read_at(fd: int, offset: int, size: int) -> bytearray:
    """``size`` bytes of ``fd`` from ``offset``, or fewer where the file ends first."""
    data = bytearray(size)
    view = memoryview(data)
    done = 0
    while done < size:
        got = os.preadv(fd, [view[done : done + _CHUNK]], offset + done)
        if got == 0:  # it ends (or shrank)
            break
        done += got
    view.release()
    del data[done:]
    return data


def read_regular(path: str | os.PathLike[str], limit: int | None = None, *, follow: bool = True) -> bytearray:
    """The bytes of the regular file ``path`` (a link is followed only with ``follow``): what it
    held when opened, or less if it shrank meanwhile. ``OSError`` as ``open_regular`` raises it."""
    with open_regular(path, limit, follow=follow) as (fd, size):
        return read_at(fd, 0, size)


def read_text(path: str | os.PathLike[str], limit: int | None = None, *, follow: bool = True) -> str:
    """``read_regular`` as ``as_text`` gives it."""
    return as_text(read_regular(path, limit, follow=follow))


def as_text(data: bytes | bytearray) -> str:
    """``data`` as UTF-8 text, newlines as a text-mode read gives them (``"\\r\\n"`` and ``"\\r"``
    are ``"\\n"``); ``UnicodeDecodeError`` if it is not UTF-8."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def find(root: Path, pattern: str = "*") -> list[Path]:
    """Every entry under ``root`` whose name matches ``pattern`` (``fnmatch``, case-sensitive), as
    ``root.rglob(pattern)`` finds them (directories entered, never through a link), sorted. Walked
    without recursion: a tree of any depth is no ``RecursionError``. ``OSError`` if a directory
    cannot be listed (a ``PermissionError`` is skipped, as ``rglob`` skips it); nothing if ``root``
    is not a directory."""
    found: list[Path] = []
    pending = [root] if root.is_dir() else []
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    path = directory / entry.name
                    if fnmatch.fnmatchcase(entry.name, pattern):
                        found.append(path)
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(path)
        except PermissionError:
            continue
    return sorted(found)
