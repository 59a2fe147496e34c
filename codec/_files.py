"""Reading a file a user names or a directory holds: a regular file only, read to the size it had
when it was opened.

A FIFO would block the read, a device such as ``/dev/zero`` would never end it, and a file that
another process keeps growing would be followed for as long as it grows: none of these is read.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["read_regular", "read_text"]

_CHUNK = 1 << 24  # bytes asked of one read


def read_regular(path: str | os.PathLike[str], limit: int | None = None) -> bytearray:
    """The bytes of the regular file ``path`` (a link is followed): what it held when opened, or
    less if it shrank meanwhile. ``OSError`` (``strerror`` says why) if it cannot be opened, is
    not a regular file (``EINVAL``) or holds more than ``limit`` bytes (``EFBIG``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens without a writer
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fsdecode(path))
        size = info.st_size
        if limit is not None and size > limit:
            raise OSError(errno.EFBIG, f"{size} bytes is over the limit of {limit}", os.fsdecode(path))
        data = bytearray(size)
        view = memoryview(data)
        done = 0
        while done < size:
            got = os.readv(fd, [view[done : done + _CHUNK]])
            if got == 0:  # it shrank
                break
            done += got
        view.release()
        del data[done:]
        return data
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], limit: int | None = None) -> str:
    """``read_regular`` as UTF-8 text, newlines as a text-mode read gives them (``"\\r\\n"`` and
    ``"\\r"`` are ``"\\n"``); ``UnicodeDecodeError`` if it is not UTF-8."""
    return read_regular(path, limit).decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
