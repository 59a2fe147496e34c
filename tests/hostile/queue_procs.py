"""Helpers of the hostile queue tests, importable by spawned children as ``tests.hostile.queue_procs``.

Threads: ``encode_all`` / ``decode_all`` run one thread's side of a stream of messages whose two
out-of-band tensors name their thread and index. Full /dev/shm: ``full_shm_report`` runs inside a
private tmpfs (see ``test_full_shm_queue.py``) and prints what each failed queue export did.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tests.hostile.messages import check_message, make_message
from tests.wire_helpers import head_of

THREADS = 4
MESSAGES = 100
SHM = "/dev/shm"


def handle_ids(frames: list[Any]) -> list[tuple[str, int, int]]:
    """The ``(sender, message, tensor)`` ids of the queue handles in a message's header."""
    return [(h["sender"], h["message"], h["tensor"]) for _, h in head_of(frames[0])[3]]


def encode_all(encoder: Any, thread: int, send: Callable[[Any], Any]) -> None:
    """Encode ``thread``'s messages, handing ``(index, frames)`` to ``send``; an error as
    ``("error", text)``; ``None`` at the end."""
    try:
        for index in range(MESSAGES):
            frames = encoder.encode(make_message(thread, index))
            send((index, [bytes(memoryview(f)) for f in frames]))
    except Exception as exc:
        send(("error", f"thread {thread} encode: {exc!r}"))
    finally:
        send(None)


@dataclass
class Outcome:
    """What one decoding thread saw: message indexes decoded, problems, the handle ids it read."""

    decoded: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    ids: list[tuple[str, int, int]] = field(default_factory=list)


def decode_all(decoder: Any, thread: int, receive: Callable[[], Any]) -> Outcome:
    """Decode what ``receive`` hands over until ``None``. After the first problem the rest is only
    drained (so the producer never blocks), and the outcome says what went wrong first."""
    outcome = Outcome()
    while True:
        try:
            item = receive()
        except Exception as exc:
            outcome.problems.append(f"thread {thread} receive: {exc!r}")
            return outcome
        if item is None:
            return outcome
        index, frames = item
        if index == "error":
            outcome.problems.append(frames)
            continue
        if outcome.problems:
            continue
        outcome.ids.extend(handle_ids(frames))
        try:
            problem = check_message(thread, index, decoder.decode(frames))
        except Exception as exc:
            problem = f"thread {thread} message {index}: {exc!r}"
        if problem is not None:
            outcome.problems.append(problem)
        else:
            outcome.decoded.append(index)


def receiver(conn: Any, timeout: float) -> Callable[[], Any]:
    """``receive`` for ``decode_all`` reading a Pipe end: what comes next, or TimeoutError."""

    def receive() -> Any:
        if not conn.poll(timeout):
            raise TimeoutError(f"nothing from the producer in {timeout}s")
        return conn.recv()

    return receive


def threaded_producer(data_queue: Any, conns: list[Any], done: Any) -> None:
    """Child process: ``THREADS`` threads share one Encoder over one QueueTransport, thread ``i``
    handing its frames to ``conns[i]``; stay alive until ``done`` (the receiver needs our fds)."""
    import tensorwire as tw
    from tensorwire import transports

    options = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through the queue
    encoder = tw.Encoder(transport=transports.QueueTransport(data_queue), options=options)
    threads = [threading.Thread(target=encode_all, args=(encoder, i, conn.send)) for i, conn in enumerate(conns)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.wait(300)


# -- full /dev/shm (run inside a private tmpfs) --------------------------------------------------
FREE = 256 * 1024  # what the filler leaves of the tmpfs
BIG = 1024 * 1024  # the buffer that does not fit
SMALL = 4096  # the buffer before it, which does


def _fill(free: int) -> None:
    """Write a file that leaves ``free`` bytes of /dev/shm."""
    stats = os.statvfs(SHM)
    with open(os.path.join(SHM, "filler"), "wb") as f:
        f.write(b"\1" * (stats.f_bavail * stats.f_frsize - free))


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def _torch_call_not_prechecked() -> Iterator[None]:
    """Let the export reach torch's own allocation, as when /dev/shm fills between check and call."""
    from tensorwire.transports import _torch_shm as torch_shm

    saved = torch_shm._shm_free_bytes
    torch_shm._shm_free_bytes = lambda: None
    try:
        yield
    finally:
        torch_shm._shm_free_bytes = saved


def _buffers(numpy: bool) -> tuple[Any, Any]:
    """A small buffer that fits in what is left of /dev/shm, then a big one that does not."""
    if numpy:
        return np.ones(SMALL, np.uint8), np.ones(BIG, np.uint8)
    return torch.ones(SMALL, dtype=torch.uint8), torch.ones(BIG, dtype=torch.uint8)


def _attempt(encoder: Any, message: Any, prechecked: bool, before: set[str]) -> dict[str, Any]:
    """Encode ``message`` (which must fail): the error, and what /dev/shm gained or lost meanwhile."""
    report: dict[str, Any] = {"error": None}
    try:
        with nullcontext() if prechecked else _torch_call_not_prechecked():
            encoder.encode(message)
    except Exception as exc:
        report.update(error=type(exc).__name__, errno=getattr(exc, "errno", None), message=str(exc))
    after = set(os.listdir(SHM))
    return {**report, "new_at_failure": sorted(after - before), "gone": sorted(before - after)}


def _case(data: Any, name: str, *, snapshot: bool, numpy: bool, prechecked: bool) -> dict[str, Any]:
    """A failed export of a message of a small and a big buffer; then the same sender's next
    message, decoded by a receiver on the same queue; then what /dev/shm holds once all is freed."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion

    lines = _Lines()
    logging.getLogger("tensorwire.queue").addHandler(lines)
    tx = transports.QueueTransport(data, snapshot=snapshot, timeout=5)
    rx = transports.QueueTransport(data, timeout=5)
    encoder = tw.Encoder(transport=tx, options=tw.EncodeOptions(embed_threshold=0, inline_threshold=1))
    small, big = _buffers(numpy)
    decoy = os.path.join(SHM, f"torch_{os.getpid()}_1_{name}")  # torch's pattern and our pid, not this call's
    open(decoy, "wb").close()
    live = torch.ones(10, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]  # file_system: a file
    before = set(os.listdir(SHM))
    report = {"case": name, **_attempt(encoder, diffusion.Output(output=(small, big)), prechecked, before)}
    report["big_intact"] = bool((big == 1).all()) and not (isinstance(big, torch.Tensor) and big.is_shared())  # type: ignore[no-untyped-call]
    out = tw.Decoder(REGISTRY, transports=[rx]).decode(encoder.encode(diffusion.Output(output=torch.full((8,), 5.0))))
    report.update(next_ok=out.output.tolist() == [5.0] * 8, buffered=rx.buffered(), log=lines.lines)
    logging.getLogger("tensorwire.queue").removeHandler(lines)
    tx.close()
    rx.close()
    del out, small, big
    gc.collect()
    report["left"] = sorted(set(os.listdir(SHM)) - before)
    del live
    os.unlink(decoy)
    return report


def full_shm_report() -> None:
    """Inside a private tmpfs on /dev/shm: fill it, then print one JSON report per failed export
    (three export paths, with and without the free-space check, both torch sharing strategies)."""
    import torch.multiprocessing as tmp

    data = tmp.get_context("spawn").Queue()
    _fill(FREE)
    reports = []
    for strategy in ("file_descriptor", "file_system"):
        tmp.set_sharing_strategy(strategy)  # type: ignore[no-untyped-call]
        for path in ("in_place", "snapshot", "numpy"):
            for prechecked in (True, False):
                name = f"{strategy}-{path}-{'prechecked' if prechecked else 'torch'}"
                snapshot, numpy = path == "snapshot", path == "numpy"
                reports.append(_case(data, name, snapshot=snapshot, numpy=numpy, prechecked=prechecked))
    tmp.set_sharing_strategy("file_descriptor")  # type: ignore[no-untyped-call]
    print(json.dumps(reports))
