"""A worker process: runs cases against real decoders, reports outcomes, errors and what it holds.

Per case: export the case's own buffers through this worker's senders (a memfd pool, a named
pool, one-shot segments, all in the run's private directory; a torch queue of its own; the
registered pool of a ``CudaShmTransport`` over ``host_cuda.HostRuntime``), materialize the input against the
victim's table, read its frame 0 as ``tensorwire inspect`` does (a description, or a
``DecodeError``), decode it with the configuration the case names, read every element of what came
back, then undo the exports a decode did not consume (as their sender would; what is left on the
queue or in its receiver's buffer is dropped). A ``CodecError`` is
the expected refusal; any other exception is recorded with its type and where it was raised.

Before reporting ready it warms up (every seed in every backing), so its senders' pools are at
their steady size; what it holds after a batch beyond that (its receivers' bounded mapping caches
let go first) is a leak. Its address space is capped: an input that runs into the cap is a
``MemoryError``, after which the worker ends its batch there and the runner replaces it. Run as
``python -m tools.fuzz.worker`` (the runner sends ``init`` first: the directory, the victim's
table, the seed or a corpus, an optional sabotage).
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import json
import os
import queue as stdlib_queue
import random
import resource
import sys
import traceback
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY
from tensorwire.inspection import describe, tensor_paths
from tensorwire.transports.base import Handle
from tools.fuzz import decoders, probe, sabotage, seeds
from tools.fuzz.case import Case, Export, dump, load
from tools.fuzz.cases import generate
from tools.fuzz.channel import REPO, Endpoint
from tools.fuzz.draft import finish, start
from tools.fuzz.host_cuda import HostRuntime
from tools.fuzz.materialize import materialize

__all__ = ["Worker", "main"]

_HOUR = 3600.0
_HEADROOM = 4 << 30  # address space a worker may use past what it has after start-up
_LIBC = ctypes.CDLL(None)  # the C library this process runs on (``malloc_trim`` where it is glibc)


def _where(exc: BaseException) -> str:
    """The innermost frames of ``exc``'s traceback, as ``path:line function``."""
    frames = traceback.extract_tb(exc.__traceback__)[-4:]
    root = f"{REPO}/"
    return " < ".join(f"{f.filename.removeprefix(root)}:{f.lineno} {f.name}" for f in reversed(frames))


def _touch(message: Any) -> None:
    """Read every element of every tensor in ``message`` (iteratively)."""
    stack = [message]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            value.clone()
        elif isinstance(value, np.ndarray):
            value.copy()
        elif isinstance(value, msgspec.Struct):
            stack.extend(getattr(value, f) for f in value.__struct_fields__)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            stack.extend(value)


def _description_problem(frames: Sequence[Any]) -> dict[str, Any] | None:
    """What reading frame 0 as ``tensorwire inspect`` does got wrong (``describe``, its JSON, and
    ``tensor_paths`` with the built-in types): None where it described the frame or refused it with
    a ``DecodeError``, as it promises for any bytes."""
    if not frames or not isinstance(frames[0], bytes | bytearray | memoryview):
        return None  # (what is not bytes is no blob's frame 0: the decoder's own input checks)
    try:
        json.dumps(describe(frames[0]), allow_nan=False)
        tensor_paths(frames[0], REGISTRY)
    except tw.DecodeError:
        return None
    except Exception as exc:  # MemoryError included: a description of a small frame must stay small
        name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return {"type": f"inspect: {name}", "message": str(exc)[:300], "where": _where(exc)}
    return None


class Worker:
    """The decoders, the senders and the context of one worker process."""

    def __init__(self, init: dict[str, Any]) -> None:
        self.directory = Path(init["directory"])
        self.table: dict[str, Any] = init["victim"]
        self.seed: int = init.get("seed", 0)
        self.corpus: list[bytes] = init.get("corpus") or []
        kw: dict[str, Any] = {"claim_timeout": _HOUR}
        self.queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()  # the queue transport's, in this process
        self.senders: dict[str, Any] = {
            "memfd": transports.ShmTransport(self.directory, backing="memfd", idle_seconds=_HOUR, **kw),
            "named": transports.ShmTransport(self.directory, backing="named", idle_seconds=_HOUR, **kw),
            "oneshot": transports.ShmTransport(self.directory, pool=False, **kw),
            "queue": transports.QueueTransport(self.queue),
            "cuda": transports.CudaShmTransport(
                self.directory, runtime=HostRuntime(), pool=False, idle_seconds=_HOUR, **kw
            ),
        }
        self.spent = False  # an input of this batch ran into the memory cap: the batch stops there
        self.sabotage: str = init.get("sabotage") or ""
        self.armed = False  # the sabotage (if any) applies once the warm-up is over
        self.key = 0  # the case being decoded, as a number (what a sabotage's triggers read)
        self.receivers: list[transports.Transport] = []
        self.decode: list[Callable[[Sequence[Any]], Any]] = []
        self._fresh_receivers()
        self.names = {
            "victim_pid": self.table["pid"],
            "victim_token": self.table["token"],
            "self_pid": os.getpid(),
            "self_token": self._token(),
            "queue_sender": self.senders["queue"].sender_id,
        }

    def _fresh_receivers(self) -> None:
        """New receiving transports and decoders (the old ones closed: their mapping caches let go)."""
        for receiver in self.receivers:
            receiver.close()
        built, self.receivers = decoders.build(self.directory, self.queue)
        kinds = self.sabotage if self.armed else ""
        key = self._case_key
        self.decode = [sabotage.install(kinds, d.decode, key) if kinds else d.decode for d in built]

    def _case_key(self) -> int:
        return self.key

    def _token(self) -> str:
        sender = self.senders["memfd"]
        handle = sender.export(memoryview(b"token"), [])
        sender.release(handle)
        return str(getattr(handle, "name", "tw-0-x-0")).split("-")[2]

    # -- one case ------------------------------------------------------------------------------------
    def case(self, index: int) -> Case:
        """Case ``index`` of this worker's source (the generator, or the corpus)."""
        if self.corpus:
            return load(self.corpus[index])[0]
        return generate(self.seed, index)

    def _export(self, export: Export) -> tuple[Any, Handle]:
        sender = self.senders[export.mode]
        if export.mode == "cuda":  # the bytes as a "device" tensor, into a registered slot
            handle = sender.export_device(
                torch.frombuffer(bytearray(export.data), dtype=torch.uint8), 0, len(export.data), []
            )
            if handle is None:
                raise RuntimeError("the registered pool took no buffer")
            return sender, handle
        if export.mode == "oneshot" or export.mode == "queue" or not export.pad:
            return sender, sender.export(memoryview(export.data), [])
        raw = sender.empty_numpy((export.pad + len(export.data),), np.uint8)
        raw[export.pad :] = np.frombuffer(export.data, dtype=np.uint8)
        handle = sender.export(raw[export.pad :].data, [])
        del raw
        return sender, handle

    def run(self, case: Case) -> tuple[str, dict[str, Any] | None]:
        """Decode one case: ``("message" | "codec" | "error" | "harness", details or None)``."""
        exported: list[tuple[Any, Handle]] = []
        try:
            self.senders["queue"].begin_message()  # the case's queue tensors: one message
            for export in case.exports:
                exported.append(self._export(export))
            own = [
                {"handle": msgspec.msgpack.decode(msgspec.msgpack.encode(h)), "nbytes": len(e.data)}
                for (_, h), e in zip(exported, case.exports, strict=True)
            ]
            delivery = materialize(case, {"victim": self.table, "own": own, "names": self.names})
        except Exception as exc:
            self._undo(exported)
            return "harness", {"type": type(exc).__name__, "message": str(exc)[:300], "where": _where(exc)}
        decode = self.decode[case.decoder % len(self.decode)]
        self.key = zlib.crc32(dump(case))
        exhausted = False
        described: dict[str, Any] | None = None  # what ``tensorwire inspect``'s reading got wrong
        try:
            frames = tw.split(delivery.blob) if delivery.blob is not None else delivery.frames
            described = _description_problem(frames)
            message = decode(frames)
            _touch(message)
            del message
            return ("error", described) if described else ("message", None)
        except tw.CodecError as exc:
            if described:
                return "error", described
            if case.family == "legit":
                return "rejected", {"type": type(exc).__name__, "message": str(exc)[:300], "where": _where(exc)}
            return "codec", None
        except Exception as exc:  # MemoryError included: a tiny input must not exhaust memory
            exhausted = isinstance(exc, MemoryError)
            name = f"{type(exc).__module__}.{type(exc).__qualname__}"
            return "error", {"type": name, "message": str(exc)[:300], "where": _where(exc)}
        finally:
            self._undo(exported)
            gc.collect()
            if exhausted:
                _recover_memory()
                self.spent = True

    def _undo(self, exported: list[tuple[Any, Handle]]) -> None:
        for sender, handle in exported:
            sender.release(handle)
        while True:  # queue tensors no decode took, on the queue or in a receiver's buffer
            try:
                self.queue.get_nowait()
            except stdlib_queue.Empty:
                break
        for receiver in self.receivers:
            if isinstance(receiver, transports.QueueTransport):
                receiver.close()

    # -- batches and stats -------------------------------------------------------------------------
    def batch(self, start: int, count: int, each: bool = False) -> dict[str, Any]:
        """Run cases ``start .. start + count`` (``ran`` of them: the batch stops after a case that ran
        into the memory cap); with ``each``, stats after every case."""
        families: dict[str, list[int]] = {}
        slots = {"message": 1, "codec": 2, "rejected": 2, "error": 3, "harness": 3}
        errors, per_case = [], []
        ran = 0
        self.spent = False
        for index in range(start, start + count):
            if self.spent:
                break
            ran += 1
            try:
                case = self.case(index)
            except Exception as exc:  # a bug of the generator (or a corrupt case file)
                failed = {"type": type(exc).__name__, "message": str(exc)[:300], "where": _where(exc)}
                errors.append({"index": index, "outcome": "harness", "family": "?", **failed})
                continue
            outcome, details = self.run(case)
            row = families.setdefault(case.family, [0, 0, 0, 0])
            row[0] += 1
            row[slots[outcome]] += 1
            if details is not None:
                errors.append({"index": index, "outcome": outcome, "family": case.family, **details})
            if each:
                per_case.append(self.stats())
        result = {"op": "done", "families": families, "errors": errors, "stats": self.stats(), "each": per_case}
        return {**result, "ran": ran}

    def stats(self) -> dict[str, Any]:
        """fds and segments held now (the receivers' bounded caches of mapped segments let go first:
        what is left is held by no one on purpose), peak memory."""
        self._fresh_receivers()
        gc.collect()
        pid = os.getpid()
        held = probe.held_segments(self.directory, [pid, self.table["pid"]])
        return {
            "fds": probe.fd_count(),
            "segments": len(held | probe.named_segments(self.directory, pid)),
            "rss": probe.max_rss_mib(),
        }

    def warm_up(self) -> None:
        """Grow the senders' pools to their steady size: every seed's buffers in every backing."""
        rng = random.Random(0)
        for index in range(len(seeds.SEEDS)):
            for layout in seeds.OUT_OF_BAND:
                tpl = seeds.template(index, layout)
                for mode in ("memfd", "named", "oneshot", "queue", "cuda"):
                    pad = 8192 if mode in ("memfd", "named") else 0
                    d = start(rng, "warm-up", tpl, [Export(mode, data, pad) for _, data in tpl.oob])
                    d.decoder = decoders.NAMED[0]
                    self.run(finish(d, "warm-up"))

    def arm(self) -> None:
        """From now on, decode through the sabotaged decoders (if the run asked for any)."""
        self.armed = True
        self._fresh_receivers()

    def close(self) -> None:
        for transport in [*self.senders.values(), *self.receivers]:
            transport.close()


def _limit_memory() -> None:
    """Cap the address space: an input that makes the decoder allocate without bound fails here."""
    with open("/proc/self/status", encoding="ascii") as status:
        size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + _HEADROOM, resource.RLIM_INFINITY))


def _recover_memory() -> None:
    """After an input ran into the cap: the freed pages back to the system, and the cap moved to
    what the process holds now plus the same headroom (the allocator keeps the address space of
    the small blocks it freed, which would leave the worker none to report and exit with)."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)
    _limit_memory()


def main() -> None:
    """The worker process: ``init``, then ``run`` batches until ``exit``."""
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing the libraries print can corrupt the protocol stream
    faulthandler.enable()
    endpoint = Endpoint(sys.stdin.buffer, protocol)
    worker = Worker(endpoint.recv())
    gc.freeze()  # start-up objects out of the collector's way: a collection per case stays cheap
    worker.warm_up()
    worker.arm()
    gc.freeze()
    _limit_memory()
    endpoint.send({"op": "ready", "pid": os.getpid(), "stats": worker.stats()})
    while True:
        message = endpoint.recv()
        if message["op"] == "run":
            endpoint.send(worker.batch(message["start"], message["count"], bool(message.get("each"))))
        else:
            stats = worker.stats()
            worker.close()
            endpoint.send({"op": "bye", "stats": stats})
            return


if __name__ == "__main__":
    main()
