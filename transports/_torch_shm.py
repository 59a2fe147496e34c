"""Moving torch storages into /dev/shm with ``share_memory_()``, as a ``TransportError`` on failure.

torch creates ``/dev/shm/torch_<pid>_<random>_<n>`` with ``O_EXCL``, sizes it, reserves it
(``posix_fallocate``), maps it and only then unlinks it (or, under the ``file_system`` strategy,
keeps it while the storage lives); a failure after the create leaves the file, named in torch's
error. ``share`` checks for room first, and removes exactly that file if torch fails anyway.
"""

from __future__ import annotations

import errno
import logging
import os
import re

import torch

from tensorwire.errors import TransportError
from tensorwire.transports._reaper import SHM_DIR

__all__ = ["share"]

log = logging.getLogger("tensorwire.queue")

_LEFT_BEHIND = re.compile(
    r"unable to (?:stat the file|resize file|stretch file|write to file|allocate shared memory\(shm\) for file"
    r"|mmap \d+ bytes from file) </(torch_(\d+)_\d+_\d+)>"
)


def share(tensor: torch.Tensor, nbytes: int) -> torch.Tensor:
    """Move ``tensor``'s storage (``nbytes``) into shared memory with torch's ``share_memory_()``: a
    ``TransportError`` if /dev/shm has no room (checked first) or torch fails, leaving no file."""
    free = _shm_free_bytes()
    if free is not None and free < nbytes:
        raise TransportError(
            errno.ENOSPC, f"no room in {SHM_DIR} for {nbytes} bytes of a queue tensor ({free} bytes free)"
        )
    try:
        tensor.share_memory_()  # type: ignore[no-untyped-call]
    except RuntimeError as exc:
        text = (str(exc) or repr(exc)).splitlines()[0]  # torch may append a C++ trace
        _remove_left_behind(text)
        codes = re.findall(r"\((\d+)\)", text)
        code = int(codes[-1]) if codes else errno.EINVAL
        raise TransportError(code, f"cannot put {nbytes} bytes of a queue tensor in {SHM_DIR}: {text}") from None
    return tensor


def _shm_free_bytes() -> int | None:
    """Bytes of /dev/shm free to us (None: cannot tell)."""
    try:
        stats = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _remove_left_behind(error: str) -> None:
    """Remove the file a failed torch allocation of this process names in ``error``: torch created
    it (exclusively) in the failed call, so it is no one else's."""
    match = _LEFT_BEHIND.search(error)
    if match is None or int(match.group(2)) != os.getpid():
        return
    try:
        (SHM_DIR / match.group(1)).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s left by a failed torch allocation: %s", match.group(1), exc)
