"""Named tensorwire segments in /dev/shm: listing them, and removing those whose creator died.

Names are ``tw-<pid>-<token>-<seq>`` (``next_name``: the token is this process's secret, and each
seq ends in 32 random bits, so a neighbour that lists the directory and sees some of a process's
names still cannot guess its next ones and take them first). Anything else, a pid no process can have, and anything
that is not a regular file of this process's uid (FIFOs, symlinks, directories, other users'
files) is skipped, never fatal. memfd-backed segments have no name here: they disappear with
their last fd and mapping, so nothing of them is ever left to reap.

A pool slot's creator keeps a shared lock on one byte of its file (``_page_layout.CREATOR_BYTE``) while
it holds the slot: a named file whose creator's pid names no process here is opened (never
following a link, never blocking) to read that lock before it counts as its creator's leftover,
so a creator in another pid namespace is not taken for dead. A one-shot segment carries no lock:
its creator is judged by its pid alone, so one whose page says it is in flight before its claim
deadline is never removed (its creator may live in another pid namespace, and its receiver may
still claim it); past the deadline no claim can succeed. Either way a pid that now names a process
started later than the page says its creator did (the pid was reused) is no creator.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tensorwire.transports._one_shot_page import claimable, creator_started
from tensorwire.transports._page_layout import CREATOR_BYTE
from tensorwire.transports._page_lock import marked
from tensorwire.transports._segment import alive, started_as_said, valid_pid

__all__ = [
    "NAME",
    "SHM_DIR",
    "Segment",
    "creator_pid",
    "held_memfds",
    "list_segments",
    "next_name",
    "our_segments",
    "reap",
]

SHM_DIR = Path("/dev/shm")
NAME = re.compile(r"tw-([1-9][0-9]{0,9})-([0-9a-f]{32})-([0-9a-f]{1,16})")
_MEMFD = "/memfd:"
_token = secrets.token_hex(16)
_token_pid = os.getpid()
_lock = threading.Lock()
_counter = 0


def _new_lock_after_fork() -> None:
    """A forked child has none of its parent's threads: a lock one of them held stays held."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_after_fork)


def _process_token() -> str:
    """This process's token; a forked child draws its own."""
    global _token, _token_pid
    if _token_pid != os.getpid():
        _token, _token_pid = secrets.token_hex(16), os.getpid()
    return _token


def next_name() -> str:
    """A new segment name of this process: ``tw-<pid>-<token>-<seq>``, seq a count (unique) then 32
    random bits (not to be guessed from the names seen in the directory: a file a neighbour made at
    the next name would fail the create)."""
    global _counter
    with _lock:
        _counter = (_counter + 1) % 2**32
        count = _counter
    return f"tw-{os.getpid()}-{_process_token()}-{count:x}{secrets.randbits(32):08x}"


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


_CREATORS: dict[str, tuple[str, str]] = {}  # names already checked (pool slot names recur) -> (pid, token)


def _creator(name: str) -> tuple[str, str] | None:
    """(pid, token) of a segment name of our pattern (a pid a process can have); None for any other name."""
    known = _CREATORS.get(name)
    if known is not None:
        return known
    match = NAME.fullmatch(name)
    if match is None or not valid_pid(int(match.group(1))):
        return None
    if len(_CREATORS) >= 4096:
        _CREATORS.clear()
    known = _CREATORS[name] = (match.group(1), match.group(2))
    return known


def held_memfds(holder: int | str = "self") -> set[str]:
    """Names of the tensorwire memfds process ``holder`` has open or mapped (empty if it is gone):
    a memfd lives exactly as long as some process holds it."""
    return set(_held(holder))


def _held(holder: int | str) -> dict[str, str | None]:
    """The tensorwire memfds ``holder`` holds: name -> a ``/proc`` path of one of its descriptors
    (None for one only mapped), from one read of its descriptors and of its mappings."""
    root = f"/proc/{holder}"
    found: dict[str, str | None] = {}
    try:
        fds = os.listdir(f"{root}/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            link = os.readlink(f"{root}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith(_MEMFD):
            found.setdefault(link[len(_MEMFD) :].removesuffix(" (deleted)"), f"{root}/fd/{fd}")
    try:
        with open(f"{root}/maps", encoding="ascii", errors="replace") as maps:
            mapped = [line.split(None, 5)[-1].strip() for line in maps if _MEMFD in line]
    except OSError:
        mapped = []
    for link in mapped:
        if link.startswith(_MEMFD):
            found.setdefault(link[len(_MEMFD) :].removesuffix(" (deleted)"), None)
    return {name: path for name, path in found.items() if NAME.fullmatch(name)}


@dataclass(frozen=True, slots=True)
class Segment:
    """One tensorwire segment of this uid: a named file, or a memfd some process of ours holds."""

    name: str
    creator: int  # the pid its name says created it
    alive: bool  # whether that process exists
    size: int | None  # bytes (None where it cannot be read)
    age: float | None  # seconds since it was last written (None where it cannot be read)
    backing: str  # "named" or "memfd"
    holders: tuple[int, ...] = ()  # the pids holding a memfd


def list_segments(directory: str | os.PathLike[str] = SHM_DIR, *, memfds: bool = True) -> list[Segment]:
    """This uid's segments: the regular files of ``directory`` named like ours (never followed;
    opened only to read the creator's mark where its pid names no process), and with ``memfds``
    the memfds this uid's processes hold; sorted by name."""
    now = time.time()
    me = os.geteuid()
    found: list[Segment] = []
    root = Path(directory)
    for name in our_segments(root):
        try:
            info = os.lstat(root / name)
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISREG(info.st_mode) and info.st_uid == me:
            pid = creator_pid(name)
            live = _creator_lives(root / name, info, pid)
            found.append(Segment(name, pid, live, info.st_size, max(0.0, now - info.st_mtime), "named"))
    if memfds:
        found += _memfds(now, me)
    return sorted(found, key=lambda s: (s.name, s.backing))


def _memfds(now: float, me: int) -> list[Segment]:
    """The tensorwire memfds held by processes of uid ``me``, each once with every holder."""
    holders: dict[str, list[int]] = {}
    sizes: dict[str, tuple[int, float]] = {}  # from a descriptor (a mapping alone does not say)
    for entry in os.listdir("/proc"):
        try:
            if not entry.isdigit() or os.stat(f"/proc/{entry}").st_uid != me:
                continue
        except OSError:
            continue  # gone meanwhile
        for name, path in _held(int(entry)).items():
            holders.setdefault(name, []).append(int(entry))
            if path is not None and name not in sizes:
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                sizes[name] = (info.st_size, info.st_mtime)
    out = []
    for name, pids in holders.items():
        pid = creator_pid(name)
        known = sizes.get(name)
        size, age = (None, None) if known is None else (known[0], max(0.0, now - known[1]))
        out.append(Segment(name, pid, alive(pid), size, age, "memfd", tuple(sorted(pids))))
    return out


def _reapable(directory: Path, name: str) -> bool:
    """Whether ``name`` is a regular file of ours whose creator (a valid pid) is gone: its pid names
    no process (or one that started after its creator did), and no process holds its mark; and not a
    one-shot a receiver may still claim (``_claimable``)."""
    pid = creator_pid(name)
    if not valid_pid(pid):
        return False
    try:
        info = os.lstat(directory / name)
    except OSError:
        return False
    ours = stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    path = directory / name
    return ours and not _creator_lives(path, info, pid) and not _claimable(path, info)


def _open_listed(path: Path, info: os.stat_result) -> int | None:
    """A read-only fd of the regular file at ``path`` if it is still the one ``info`` describes; None
    otherwise. Never follows a link, blocks or takes a terminal."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino) and stat.S_ISREG(now.st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _claimable(path: Path, info: os.stat_result) -> bool:
    """Whether the file at ``path`` (that ``info`` describes) is a one-shot segment in flight before
    its claim deadline (``_one_shot_page.claimable``): a message on its way, whether its creator lives or not."""
    fd = _open_listed(path, info)
    if fd is None:
        return False
    try:
        return claimable(fd)
    finally:
        os.close(fd)


def _creator_lives(path: Path, info: os.stat_result, pid: int) -> bool:
    """Whether the creator of the regular file at ``path`` (that ``info`` describes) lives: ``pid``
    names a process that started when the file's page says its creator did (where it says: a pid
    reused since is not the creator), or some process holds the creator's mark (``CREATOR_BYTE``).
    A file that is no longer the one ``info`` describes (``_open_listed``), or that cannot be read,
    is judged by ``pid`` alone."""
    living = alive(pid)
    fd = _open_listed(path, info)
    if fd is None:
        return living
    try:
        return (living and started_as_said(pid, creator_started(fd))) or marked(fd, CREATOR_BYTE)
    except OSError:
        return living
    finally:
        os.close(fd)


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
