"""Child-process helpers of the hostile shared-memory tests, importable as ``tests.hostile.kill_procs``.

Kill tests (``test_kill.py``): ``serve`` is the body of every peer of a case, a sender or a
receiver. It moves itself into a process group of its own, reports ``(pid, pgid)``, then runs the
parent's commands (the methods of ``Worker`` named in ``COMMANDS``) until told to exit. The
``freeze_*`` commands stop the peer in the middle of a copy, after exactly half of the bytes, so
that the parent can SIGKILL its group there (and not a moment before or after).

Full /dev/shm (``test_full_shm.py``): ``full_shm_report`` runs inside a private 4 MiB tmpfs
mounted over /dev/shm and prints one JSON report of what each export did.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import torch

from tests.wire_helpers import head_of

if TYPE_CHECKING:
    from tensorwire.transports.shm import Backing

BLOCK = 64 * 1024  # payloads are whole blocks of a seeded pattern
COMMANDS = frozenset(
    {"setup", "encode", "take", "decode", "check_held", "states", "freeze_export", "freeze_receive", "finish"}
)


def payload(nbytes: int, seed: int) -> torch.Tensor:
    """``nbytes`` (whole 64 KiB blocks) of a pattern drawn from ``seed``: no two seeds agree."""
    generator = torch.Generator().manual_seed(seed)
    block = torch.randint(0, 256, (BLOCK,), generator=generator, dtype=torch.uint8)
    return block.repeat(nbytes // BLOCK)


def message(nbytes: int, seed: int) -> Any:
    """A message carrying ``payload(nbytes, seed)`` (out of band) and ``seed``."""
    from tensorwire.builtins import diffusion

    return diffusion.Output(output=payload(nbytes, seed), chunk_index=seed)


def intact(received: Any, nbytes: int, seed: int) -> bool:
    """Whether ``received`` is ``message(nbytes, seed)``, bit for bit."""
    tensor = received.output
    return bool(received.chunk_index == seed and torch.equal(tensor, payload(nbytes, seed)))


def patchable(name: str) -> Any:
    """Module ``name``, typed so that its globals can be swapped (the hooks below)."""
    return importlib.import_module(name)


def fd_count() -> int:
    """How many fds this process has open."""
    return len(os.listdir("/proc/self/fd"))


class Worker:
    """One peer's state: its transport, encoder and decoder, frames taken, messages held."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.transport: Any = None
        self.encoder: Any = None
        self.decoder: Any = None
        self.taken: list[list[bytes]] = []
        self.held: list[tuple[Any, int, int]] = []
        self.baseline = 0

    def setup(self, directory: str, backing: Backing, pool: bool, claim_timeout: float, borrow: bool | None) -> None:
        """A ``ShmTransport`` in ``directory`` and an encoder and decoder over it; fds counted after."""
        import tensorwire as tw
        from tensorwire import transports
        from tensorwire.builtins import REGISTRY

        self.transport = transports.ShmTransport(directory, pool=pool, backing=backing, claim_timeout=claim_timeout)
        self.encoder = tw.Encoder(
            transport=self.transport, options=tw.EncodeOptions(embed_threshold=0, inline_threshold=1)
        )
        options = tw.DecodeOptions(borrow=borrow)
        self.decoder = tw.Decoder(REGISTRY, transports=[self.transport], options=options)
        intact(message(BLOCK, 0), BLOCK, 0)  # whatever torch opens lazily is open before the count
        gc.collect()
        self.baseline = fd_count()

    def encode(self, nbytes: int, seed: int) -> list[bytes]:
        """The frames of ``message(nbytes, seed)`` (handed over: the sender keeps nothing else)."""
        return [bytes(memoryview(frame)) for frame in self.encoder.encode(message(nbytes, seed))]

    def take(self, frames: list[bytes]) -> None:
        """Keep ``frames`` without reading them."""
        self.taken.append(frames)

    def decode(self, frames: list[bytes], nbytes: int, seed: int, hold: bool) -> bool:
        """Decode ``frames``; whether they are ``message(nbytes, seed)``; ``hold``: keep the message."""
        received = self.decoder.decode(frames)
        if hold:
            self.held.append((received, nbytes, seed))
        return intact(received, nbytes, seed)

    def check_held(self) -> list[bool]:
        """Whether each held message is still bit-exact."""
        return [intact(received, nbytes, seed) for received, nbytes, seed in self.held]

    def states(self) -> list[int]:
        """The state of each slot of this peer's pool."""
        return [slot.state for slot in self.transport.pool.slots()]

    def freeze_export(self, nbytes: int, seed: int, fork_helper: bool) -> NoReturn:
        """Encode ``message(nbytes, seed)`` and freeze halfway through copying (or writing) it into
        shared memory (after forking a helper that holds everything the sender holds, with ``fork_helper``)."""
        shm = patchable("tensorwire.transports.shm")
        real = shm.copy_into

        def half_then_freeze(dst: Any, src: Any) -> None:
            target, source = np.frombuffer(dst, dtype=np.uint8), np.frombuffer(src, dtype=np.uint8)
            half = source.nbytes // 2
            real(target[:half], source[:half])
            helper = _fork_holder(self.conn) if fork_helper else None
            self._freeze({"copied": half, "helper": helper})

        real_write = shm.write_at

        def write_half_then_freeze(fd: int, offset: int, src: Any) -> None:  # a one-shot: written, not mapped
            source = memoryview(src).cast("B")
            half = source.nbytes // 2
            real_write(fd, offset, source[:half])
            helper = _fork_holder(self.conn) if fork_helper else None
            self._freeze({"copied": half, "helper": helper})

        shm.copy_into = half_then_freeze
        shm.write_at = write_half_then_freeze
        self.encoder.encode(message(nbytes, seed))
        raise AssertionError("the export finished: the copy hook never ran")

    def freeze_receive(self, frames: list[bytes]) -> NoReturn:
        """Decode ``frames`` (a copy-receive) and freeze halfway through copying the buffer out."""
        one_shots, slots = patchable("tensorwire.transports._one_shots"), patchable("tensorwire.transports._slots")
        real_read = one_shots.read_into

        def copy_half(source: Any) -> bytearray:  # stands in for ``bytearray(slot bytes)``
            data = np.frombuffer(source, dtype=np.uint8)
            out = bytearray(data.nbytes)
            np.frombuffer(out, dtype=np.uint8)[: data.nbytes // 2] = data[: data.nbytes // 2]
            self._freeze({"copied": data.nbytes // 2})

        def read_half(fd: int, target: memoryview, offset: int, what: str) -> None:
            real_read(fd, target[: target.nbytes // 2], offset, what)
            self._freeze({"copied": target.nbytes // 2})

        slots.bytearray = copy_half  # shadows the builtin in that module only
        one_shots.read_into = read_half
        self.decoder.decode(frames)
        raise AssertionError("the receive finished: the copy hooks never ran")

    def _freeze(self, report: dict[str, Any]) -> NoReturn:
        """Tell the parent where we stopped, then wait for SIGKILL (or exit once the parent is gone)."""
        self.conn.send(("ok", report))
        self.conn.poll(None)
        os._exit(3)

    def finish(self) -> int:
        """Let go of everything (held messages, the transport); return the fds open beyond the baseline."""
        self.held.clear()
        self.taken.clear()
        self.transport.close()
        gc.collect()
        return fd_count() - self.baseline


def _fork_holder(conn: Connection) -> int:
    """Fork a child that holds every fd and mapping of this process until it is killed (or the
    parent test process is gone); return its pid. It stays in our process group."""
    pid = os.fork()
    if pid == 0:
        try:
            conn.poll(None)
        finally:
            os._exit(0)
    return pid


def serve(conn: Connection) -> None:
    """A peer: a process group of its own, then the parent's commands until ``exit``."""
    os.setpgid(0, 0)
    worker = Worker(conn)
    conn.send(("ok", (os.getpid(), os.getpgid(0))))
    while True:
        try:
            command, args = conn.recv()
        except EOFError:
            return
        if command == "exit":
            conn.send(("ok", None))
            return
        conn.send(_run(worker, command, args))


def _run(worker: Worker, command: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """``("ok", result)``, ``("error", the CodecError)`` or ``("crash", traceback)``."""
    from tensorwire.errors import CodecError

    try:
        if command not in COMMANDS:
            raise ValueError(f"unknown command {command!r}")
        method: Callable[..., Any] = getattr(worker, command)
        return ("ok", method(*args))
    except CodecError as exc:
        return ("error", exc)
    except BaseException:
        return ("crash", traceback.format_exc())


# -- full /dev/shm (run inside a private 4 MiB tmpfs) ---------------------------------------------
SHM = "/dev/shm"
LEFT = 256 * 1024  # what the filler leaves free
SMALL = 64 * 1024  # fits what is left (in a slot of the smallest class, or a one-shot)
BIG = 1024 * 1024 + 64 * 1024  # does not
MIB16 = 16 * 1024 * 1024


def _fill(left: int, name: str) -> None:
    """Write ``name`` into /dev/shm so that ``left`` bytes stay free."""
    stats = os.statvfs(SHM)
    with open(os.path.join(SHM, name), "wb") as filler:
        filler.write(b"\1" * (stats.f_bavail * stats.f_frsize - left))


def _free() -> int:
    stats = os.statvfs(SHM)
    return stats.f_bavail * stats.f_frsize


@contextmanager
def _copies() -> Iterator[list[int]]:
    """The sizes of the buffers copied into shared memory while the block runs."""
    shm = patchable("tensorwire.transports.shm")
    real = shm.copy_into
    sizes: list[int] = []

    def counting(dst: Any, src: Any) -> None:
        sizes.append(np.frombuffer(src, dtype=np.uint8).nbytes)
        real(dst, src)

    shm.copy_into = counting
    try:
        yield sizes
    finally:
        shm.copy_into = real


def _tensors(*sizes: int) -> tuple[torch.Tensor, ...]:
    return tuple(payload(n, n) for n in sizes)


def _failed_encode(transport: Any, *sizes: int) -> dict[str, Any]:
    """Encode a message of buffers of ``sizes`` (which must fail): the error, what was copied, what
    /dev/shm gained, the pool's slot states; then what /dev/shm holds after ``close()``."""
    import tensorwire as tw
    from tensorwire.builtins import diffusion

    encoder = tw.Encoder(transport=transport, options=tw.EncodeOptions(embed_threshold=0, inline_threshold=1))
    before = set(os.listdir(SHM))
    report: dict[str, Any] = {"error": None}
    with _copies() as copied:
        try:
            encoder.encode(diffusion.Output(output=_tensors(*sizes)))
        except Exception as exc:
            report.update(error=type(exc).__name__, errno=getattr(exc, "errno", None), message=str(exc))
    slots = [] if transport.pool is None else transport.pool.slots()
    report.update(
        copied=copied,
        new=sorted(set(os.listdir(SHM)) - before),
        slots=[{"name": s.name, "state": s.state, "named": s.path is not None} for s in slots],
    )
    transport.close()
    report["left"] = sorted(set(os.listdir(SHM)) - before)
    return report


def _round_trip_16mib() -> dict[str, Any]:
    """A 16 MiB tensor through a default ``ShmTransport()`` (memfd pool), and /dev/shm meanwhile."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion

    transport = transports.ShmTransport()
    before, free = set(os.listdir(SHM)), _free()
    tensor = payload(MIB16, 16)
    frames = tw.Encoder(transport=transport).encode(diffusion.Output(output=tensor))
    handle = head_of(frames[0])[3][0][1]
    received = tw.Decoder(REGISTRY, transports=[transport]).decode(frames).output
    report = {
        "handle": {"transport": handle["transport"], "memfd": handle.get("fd") is not None},
        "ok": bool(torch.equal(received, tensor)),
        "new": sorted(set(os.listdir(SHM)) - before),
        "free_unchanged": _free() == free,
    }
    del received
    transport.close()
    return report


def _one_shots_then_read_when_full() -> dict[str, Any]:
    """Export two one-shots, fill /dev/shm to the last byte, then read them (a copy and a borrow)."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion

    sender = transports.ShmTransport(pool=False)
    encoder = tw.Encoder(transport=sender, options=tw.EncodeOptions(embed_threshold=0, inline_threshold=1))
    sent = [encoder.encode(diffusion.Output(output=payload(SMALL, seed))) for seed in (1, 2)]
    names = [head_of(frames[0])[3][0][1]["name"] for frames in sent]
    _fill(0, "filler-rest")
    report: dict[str, Any] = {"free": _free(), "read": []}
    reader = transports.ShmTransport(pool=False)
    for seed, frames, borrow in ((1, sent[0], False), (2, sent[1], True)):
        decoder = tw.Decoder(REGISTRY, transports=[reader], options=tw.DecodeOptions(borrow=borrow))
        try:
            ok = bool(torch.equal(decoder.decode(frames).output, payload(SMALL, seed)))
            report["read"].append({"borrow": borrow, "ok": ok})
        except Exception as exc:
            report["read"].append({"borrow": borrow, "error": f"{type(exc).__name__}: {exc}"})
    report["left"] = sorted(set(names) & set(os.listdir(SHM)))
    reader.close()
    sender.close()
    os.unlink(os.path.join(SHM, "filler-rest"))
    return report


def full_shm_report() -> None:
    """Inside a private 4 MiB tmpfs on /dev/shm: fill it, then print a JSON report of each case."""
    from tensorwire import transports
    from tensorwire.transports._pool import MIN_CLASS, size_class

    report: dict[str, Any] = {"size_class_big": size_class(BIG), "min_class": MIN_CLASS}
    report["read_when_full"] = _one_shots_then_read_when_full()  # before the filler: it fills the rest itself
    _fill(LEFT, "filler")
    report["free"] = _free()
    report["one_shot"] = _failed_encode(transports.ShmTransport(pool=False), BIG)
    report["named_past_budget"] = _failed_encode(transports.ShmTransport(backing="named"), BIG)
    stale = transports.ShmTransport(backing="named")
    assert stale.pool is not None
    from tensorwire.transports._retention import Retention

    stale.pool.retention = Retention(shm_fraction=None, max_bytes=1 << 30)  # as read before /dev/shm filled
    report["named_growth"] = _failed_encode(stale, BIG)
    budget = transports.ShmTransport(max_cached_bytes=4096 + MIN_CLASS)  # memfd slots for the small one only
    report["atomic_memfd"] = _failed_encode(budget, SMALL, BIG)
    report["atomic_named"] = _failed_encode(transports.ShmTransport(backing="named", cache_fraction=1.0), SMALL, BIG)
    report["memfd_16mib"] = _round_trip_16mib()
    print(json.dumps(report))
