"""The victim: a live process owning everything a forged handle may point at, and checking it stays so.

It sends messages nobody decodes (pool slots in flight, memfd and named backing, and one-shot
segments, all with an hour's claim timeout), makes decoys that carry its pid in our name pattern
but are no segments of ours (``tools.fuzz.targets.DECOYS``), and holds non-memfd fds (a pipe with
unread bytes, a regular file, a socket with unread bytes, /dev/null). It reports their names, fd
numbers and handles with the capabilities zeroed, except for one "leaked" message of its own,
which the fuzzer may decode legitimately. On ``check`` it compares every target with what it was:
control page and payload of each slot, size, content, atime, mtime and ctime of each file, seals
of each memfd, unread bytes of the pipe and the socket, and the set of its names in the directory.

Run as ``python -m tools.fuzz.victim DIR``; ``VictimProcess`` is the runner's handle on it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import stat
import struct
import sys
import termios
from pathlib import Path
from typing import Any

import msgspec
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import rpc
from tensorwire.transports._page_layout import CAPABILITY_BYTES, CONTROL_BYTES, IN_FLIGHT, MAGIC, ONE_SHOT, digest
from tools.fuzz import seeds, targets
from tools.fuzz.channel import Child, ChildDied, Endpoint

__all__ = ["Victim", "VictimProcess", "main"]

_HOUR = 3600.0
_PAST = 1_000_000_000 * 10**9  # September 2001, in ns: any read that updates atime shows
_PAGE = struct.Struct("<8Q16s")  # the control page's words and digest (transports._page_layout)
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)


_OUT_OF_BAND = tw.EncodeOptions(inline_threshold=0, embed_threshold=0)  # every tensor in a segment


def _entries(frames: list[Any]) -> list[dict[str, Any]]:
    """The out-of-band buffers of a message, as ``{"handle": ..., "nbytes": ...}`` (frame 0's buffer
    table, its item 3, holds ``[nbytes, handle]`` pairs)."""
    table: list[list[Any]] = msgspec.msgpack.decode(frames[0])[3]
    return [{"handle": handle, "nbytes": nbytes} for nbytes, handle in table if handle["transport"] != "inline"]


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    """A buffer entry as the fuzzer may know it: the capability zeroed."""
    handle = {**entry["handle"], "capability": bytes(CAPABILITY_BYTES)}
    return {"handle": handle, "nbytes": entry["nbytes"]}


def _file_print(path: Path, times: bool) -> tuple[Any, ...]:
    """What a file is: kind, inode, size, owner, content hash (read without touching its atime), times
    (a link's or a directory's atime left out)."""
    info = os.lstat(path)
    digest_ = ""
    if stat.S_ISREG(info.st_mode):
        fd = os.open(path, _OPEN)
        try:
            digest_ = hashlib.sha256(os.pread(fd, info.st_size, 0)).hexdigest()
        finally:
            os.close(fd)
    elif stat.S_ISLNK(info.st_mode):
        digest_ = os.readlink(path)
    elif stat.S_ISDIR(info.st_mode):
        digest_ = ",".join(sorted(os.listdir(path)))
    stamp: tuple[int, ...] = (info.st_atime_ns, info.st_mtime_ns, info.st_ctime_ns) if times else ()
    if times and not stat.S_ISREG(info.st_mode) and not stat.S_ISFIFO(info.st_mode):
        stamp = stamp[1:]  # reading a link or listing a directory (as this probe does) sets its atime
    return (info.st_mode, info.st_ino, info.st_size, info.st_uid, digest_, *stamp)


def _pending(fd: int) -> int:
    """Bytes waiting to be read on a pipe or socket (not consumed)."""
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    value: int = struct.unpack("i", buf)[0]
    return value


class Victim:
    """The targets, their table for the fuzzer, and the check that nothing changed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        kw: dict[str, Any] = {"claim_timeout": _HOUR}
        self._memfd = transports.ShmTransport(directory, backing="memfd", idle_seconds=_HOUR, **kw)
        self._named = transports.ShmTransport(directory, backing="named", idle_seconds=_HOUR, **kw)
        self._oneshot = transports.ShmTransport(directory, pool=False, **kw)
        self._keep: list[Any] = []  # objects whose life is the victim's (fds, sockets)
        memfd = self._send(self._memfd, targets.MEMFD_SLOTS, 1)
        named = self._send(self._named, targets.NAMED_SLOTS, 2)
        oneshots = self._send(self._oneshot, targets.ONE_SHOTS, 3)
        leaked_frames = tw.Encoder(self._memfd, _OUT_OF_BAND).encode(seeds.message(seeds.LEAKED))
        self.token = memfd[0]["handle"]["name"].split("-")[2]
        self._slots = {"memfd": memfd, "named": named}
        self._oneshots = oneshots
        decoys, sizes = self._decoys()
        self.table: dict[str, Any] = {
            "pid": self.pid,
            "token": self.token,
            "slots": {kind: [_public(e) for e in group] for kind, group in self._slots.items()},
            "oneshots": [_public(e) for e in oneshots],
            "decoys": decoys,
            "decoy_nbytes": sizes,
            "fds": self._fds(),
            "leaked": _entries(leaked_frames),
        }
        self._before = self._prints()

    def _send(self, transport: Any, count: int, seed: int) -> list[dict[str, Any]]:
        """Send one message of ``count`` out-of-band buffers that nobody will read."""
        gen = torch.Generator().manual_seed(seed)
        tensors = [torch.randn(500 + 37 * i, generator=gen) for i in range(count)]
        frames = tw.Encoder(transport, _OUT_OF_BAND).encode(rpc.Value(value=tensors))
        return _entries(frames)

    def _name(self, seq: int) -> str:
        return f"tw-{self.pid}-{self.token}-{0xD000 + seq:x}"

    def _regular(self, path: Path, data: bytes) -> None:
        path.write_bytes(data)
        os.utime(path, ns=(_PAST, _PAST))

    def _page(self, capacity: int, flags: int) -> bytes:
        magic = int.from_bytes(MAGIC, "little")
        secret = digest(os.urandom(CAPABILITY_BYTES))
        head = _PAGE.pack(magic, IN_FLIGHT, 1, 0, capacity, 2**63, 0, flags, secret)
        return head + bytes(CONTROL_BYTES - len(head)) + os.urandom(capacity)

    def _decoys(self) -> tuple[dict[str, str], dict[str, int]]:
        names = {kind: self._name(i) for i, kind in enumerate(targets.DECOYS)}
        paths = {kind: self.directory / name for kind, name in names.items()}
        exact = CONTROL_BYTES + targets.EXACT_NBYTES
        self._regular(paths["file"], os.urandom(5000))
        self._regular(paths["file_exact"], os.urandom(exact))
        os.mkfifo(paths["fifo"], 0o600)
        self._regular(self.directory / "link-target", os.urandom(exact))
        os.symlink("link-target", paths["symlink"])
        os.mkdir(paths["dir"], 0o700)
        self._regular(paths["slotlike"], self._page(65536, 0))
        self._regular(paths["oneshotlike"], self._page(targets.EXACT_NBYTES, ONE_SHOT))
        self._regular(paths["otheruid"], os.urandom(exact))
        if os.geteuid() == 0:
            os.chown(paths["otheruid"], 65534, 65534)
        else:
            os.chmod(paths["otheruid"], 0)
        for path in paths.values():  # a directory's and a FIFO's times too
            os.utime(path, ns=(_PAST, _PAST), follow_symlinks=False)
        sizes = {kind: max(os.lstat(p).st_size - CONTROL_BYTES, targets.EXACT_NBYTES) for kind, p in paths.items()}
        return names, sizes

    def _fds(self) -> dict[str, int]:
        read, write = os.pipe()
        os.write(write, b"victim pipe bytes")
        path = self.directory / "victim-fd-file"
        self._regular(path, os.urandom(3000))
        regular = os.open(path, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0))
        left, right = socket.socketpair()
        left.send(b"victim socket bytes")
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self._keep += [left, right]
        return {"pipe": read, "pipe_w": write, "file": regular, "socket": right.fileno(), "null": null}

    # -- the check -----------------------------------------------------------------------------------
    def _slot_print(self, entry: dict[str, Any]) -> tuple[Any, ...]:
        handle, nbytes = entry["handle"], entry["nbytes"]
        if handle.get("fd") is None:
            return _file_print(self.directory / handle["name"], times=False)
        fd = handle["fd"]
        head = os.pread(fd, _PAGE.size, 0)
        payload = os.pread(fd, nbytes, CONTROL_BYTES + handle["offset"])
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        return (head, hashlib.sha256(payload).hexdigest(), seals, os.fstat(fd).st_ino, os.fstat(fd).st_size)

    def _fd_print(self, kind: str, fd: int) -> tuple[Any, ...]:
        info = os.fstat(fd)
        base = (info.st_ino, info.st_mode, fcntl.fcntl(fd, fcntl.F_GETFL))
        if kind in ("pipe", "socket"):
            return (*base, _pending(fd))
        if kind == "file":
            data = hashlib.sha256(os.pread(fd, info.st_size, 0)).hexdigest()
            return (*base, info.st_size, info.st_atime_ns, info.st_mtime_ns, os.lseek(fd, 0, os.SEEK_CUR), data)
        return base

    def _prints(self) -> dict[str, Any]:
        prints: dict[str, Any] = {}
        for kind, group in self._slots.items():
            for i, entry in enumerate(group):
                prints[f"{kind} slot {i}"] = lambda e=entry: self._slot_print(e)
        for i, entry in enumerate(self._oneshots):
            prints[f"one-shot {i}"] = lambda e=entry: _file_print(self.directory / e["handle"]["name"], times=True)
        for kind, name in self.table["decoys"].items():
            prints[f"decoy {kind}"] = lambda n=name: _file_print(self.directory / n, times=True)
        prints["decoy link-target"] = lambda: _file_print(self.directory / "link-target", times=True)
        for kind, fd in self.table["fds"].items():
            prints[f"fd {kind}"] = lambda k=kind, f=fd: self._fd_print(k, f)
        prints["names"] = lambda: sorted(n for n in os.listdir(self.directory) if n.startswith(f"tw-{self.pid}-"))
        self._probes = prints
        return {target: self._take(probe) for target, probe in prints.items()}

    @staticmethod
    def _take(probe: Any) -> Any:
        try:
            return probe()
        except OSError as exc:
            return f"gone: {exc.strerror}"

    def check(self) -> list[str]:
        """Every target that is not exactly as it was, with what differs."""
        harmed = []
        for target, probe in self._probes.items():
            now = self._take(probe)
            if now != self._before[target]:
                harmed.append(f"{target}: was {self._before[target]!r:.160}, now {now!r:.160}")
        return harmed

    def close(self) -> None:
        for transport in (self._memfd, self._named, self._oneshot):
            transport.close()
        for fd in self.table["fds"].values():
            try:
                os.close(fd)
            except OSError:
                pass


def main() -> None:
    """The victim process: report the table, answer checks until told to exit."""
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing the libraries print can corrupt the protocol stream
    endpoint = Endpoint(sys.stdin.buffer, protocol)
    victim = Victim(Path(sys.argv[1]))
    endpoint.send({"op": "ready", "table": victim.table})
    while True:
        message = endpoint.recv()
        if message["op"] == "check":
            endpoint.send({"harmed": victim.check()})
        else:
            victim.close()
            endpoint.send({"op": "bye"})
            return


class VictimProcess:
    """The runner's handle on a victim process."""

    def __init__(self, directory: Path, log: Path, timeout: float = 120.0) -> None:
        self.child = Child("victim", "tools.fuzz.victim", [str(directory)], log)
        try:
            self.table: dict[str, Any] = self.child.recv(timeout)["table"]
        except BaseException:
            self.child.kill()
            raise

    def check(self) -> list[str]:
        """What was harmed since it started (everything, if it died)."""
        try:
            harmed: list[str] = self.child.ask({"op": "check"}, 60.0)["harmed"]
        except ChildDied as exc:
            return [f"the victim died: {exc}; {exc.tail[-300:]}"]
        return harmed

    def stop(self) -> None:
        self.child.stop()


if __name__ == "__main__":
    main()
