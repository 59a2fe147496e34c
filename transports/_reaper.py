"""Named tensorwire segments in /dev/shm: listing them, and removing those whose creator died.

Names are ``tw-<pid>-<token>-<seq>`` (``next_name``: the token is this process's secret, so no
neighbour can guess the names of its segments). Anything else, a pid no process can have, and anything
that is not a regular file of this process's uid (FIFOs, symlinks, directories, other users'
files) is skipped, never fatal. memfd-backed segments have no name here: they disappear with
their last fd and mapping, so nothing of them is ever left to reap.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import threading
from pathlib import Path

from tensorwire.transports._pool import alive
from tensorwire.transports._segment import valid_pid

__all__ = ["NAME", "SHM_DIR", "creator_pid", "held_memfds", "next_name", "our_segments", "reap"]

SHM_DIR = Path("/dev/shm")
NAME = re.compile(r"tw-([1-9][0-9]{0,9})-([0-9a-f]{32})-([0-9a-f]{1,16})")
_MEMFD = "/memfd:"
_token = secrets.token_hex(16)
_token_pid = os.getpid()
_lock = threading.Lock()
_counter = 0


def _process_token() -> str:
    """This process's token; a forked child draws its own."""
    global _token, _token_pid
    if _token_pid != os.getpid():
        _token, _token_pid = secrets.token_hex(16), os.getpid()
    return _token


def next_name() -> str:
    """A new segment name of this process: ``tw-<pid>-<token>-<seq>``."""
    global _counter
    with _lock:
        _counter += 1
        seq = _counter
    return f"tw-{os.getpid()}-{_process_token()}-{seq:x}"


def our_segments(directory: str | os.PathLike[str] = SHM_DIR) -> list[str]:
    """Names of tensorwire segments in ``directory`` (by name only: whatever kind of file they are)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if NAME.fullmatch(n))


def creator_pid(name: str) -> int:
    """The pid in a segment name ``tw-<pid>-<token>-<seq>`` (0 for any other name)."""
    match = NAME.fullmatch(name)
    return int(match.group(1)) if match is not None else 0


def held_memfds(holder: int | str = "self") -> set[str]:
    """Names of the tensorwire memfds process ``holder`` has open or mapped (empty if it is gone):
    a memfd lives exactly as long as some process holds it."""
    root = f"/proc/{holder}"
    links = []
    try:
        fds = os.listdir(f"{root}/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            links.append(os.readlink(f"{root}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    try:
        with open(f"{root}/maps", encoding="ascii", errors="replace") as maps:
            links += [line.split(None, 5)[-1].strip() for line in maps if _MEMFD in line]
    except OSError:
        pass
    names = (link[len(_MEMFD) :].removesuffix(" (deleted)") for link in links if link.startswith(_MEMFD))
    return {name for name in names if NAME.fullmatch(name)}


def _reapable(directory: Path, name: str) -> bool:
    """Whether ``name`` is a regular file of ours whose creator (a valid pid) is gone."""
    pid = creator_pid(name)
    if not valid_pid(pid) or alive(pid):
        return False
    try:
        info = os.lstat(directory / name)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()


def reap(directory: str | os.PathLike[str] = SHM_DIR, *, dry_run: bool = False) -> list[str]:
    """Remove this uid's tensorwire segments whose creator process is gone; return their names
    (with ``dry_run``, only say which)."""
    root = Path(directory)
    removed = []
    for name in our_segments(root):
        if not _reapable(root, name):
            continue
        if not dry_run:
            try:
                os.unlink(root / name)
            except FileNotFoundError:
                continue
            except OSError:
                continue
        removed.append(name)
    return removed
