"""A spawned child process on the other end of a pipe: every wait bounded, the child always reaped."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

WAIT = 120.0  # seconds: a bound for a child that died or hangs, never a speed requirement


class Child:
    """The test's end: ``send``, ``recv`` (an ``AssertionError`` when the child does not answer)."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process, self._conn = process, conn

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return int(self.process.pid)

    def send(self, value: Any) -> None:
        self._conn.send(value)

    def recv(self) -> Any:
        if not self._conn.poll(WAIT):
            raise AssertionError(f"the child did not answer within {WAIT}s (exit code {self.process.exitcode})")
        return self._conn.recv()

    def join(self) -> int | None:
        """Wait for the child to exit; its exit code."""
        self.process.join(WAIT)
        return self.process.exitcode


@contextmanager
def spawned(target: Callable[..., None], *args: Any) -> Iterator[Child]:
    """Run ``target(conn, *args)`` in a spawned child; killed at the end if it is still running."""
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=target, args=(theirs, *args), daemon=True)
    process.start()
    try:
        yield Child(process, ours)
    finally:
        if process.is_alive():
            process.kill()
            process.join(10)
