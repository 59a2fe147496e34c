"""Messages between the runner and its children: length-prefixed msgpack over pipes, with deadlines.

``Child`` starts ``python -m <module>`` (the repository on its path), talks to it over its stdin
and stdout, and reports its death (``ChildDied``: the exit status, negative for a signal, and the
tail of its stderr). ``Endpoint`` is the child's side.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

__all__ = ["REPO", "Child", "ChildDied", "Endpoint"]

REPO = Path(__file__).resolve().parents[2]
_LENGTH = struct.Struct("<I")


class ChildDied(Exception):
    """A child exited (or was killed) before answering."""

    def __init__(self, what: str, returncode: int | None, tail: str) -> None:
        super().__init__(f"{what} died (exit status {returncode})")
        self.returncode = returncode
        self.tail = tail


class Endpoint:
    """The child's side: blocking ``recv`` from stdin, ``send`` to the protocol stream."""

    def __init__(self, reader: BinaryIO, writer: BinaryIO) -> None:
        self._reader, self._writer = reader, writer

    def recv(self) -> Any:
        head = self._reader.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return {"op": "exit"}  # the runner went away
        (size,) = _LENGTH.unpack(head)
        return msgspec.msgpack.decode(self._reader.read(size))

    def send(self, message: Any) -> None:
        data = msgspec.msgpack.encode(message)
        self._writer.write(_LENGTH.pack(len(data)) + data)
        self._writer.flush()


class Child:
    """A child process speaking the protocol; ``stderr`` goes to ``log``."""

    def __init__(self, what: str, module: str, args: list[str], log: Path) -> None:
        self.what, self.log = what, log
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=REPO,
                env=env,
            )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout.fileno()
        self._buffer = bytearray()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: Any) -> None:
        data = msgspec.msgpack.encode(message)
        try:
            self._in.write(_LENGTH.pack(len(data)) + data)
            self._in.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None

    def recv(self, timeout: float) -> Any:
        """The next message, or ``ChildDied`` if the child dies (or is killed after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        head = self._read(_LENGTH.size, deadline)
        (size,) = _LENGTH.unpack(head)
        return msgspec.msgpack.decode(self._read(size, deadline))

    def ask(self, message: Any, timeout: float) -> Any:
        self.send(message)
        return self.recv(timeout)

    def _read(self, size: int, deadline: float) -> bytes:
        while len(self._buffer) < size:
            left = deadline - time.monotonic()
            ready = select.select([self._out], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.kill()
                raise ChildDied(f"{self.what} (killed: no answer in time)", self.proc.returncode, self.tail())
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                raise self._died()
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _died(self) -> ChildDied:
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        return ChildDied(self.what, self.proc.returncode, self.tail())

    def tail(self, lines: int = 80) -> str:
        """The last lines the child wrote to stderr."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> Any:
        """Ask the child to exit; its last message (None if it died or had to be killed)."""
        last = None
        try:
            if self.proc.poll() is None:
                last = self.ask({"op": "exit"}, timeout)
        except ChildDied:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close()
        return last

    def kill(self) -> None:
        """Kill the child and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self._close()

    def _close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
