"""CUDA tensors to another process: a device-to-host copy straight into registered shared memory.

``CudaShmTransport`` is a ``ShmTransport`` (host buffers go through its plain pool, and any
shared-memory reader decodes its messages: the receiver needs no GPU) with one more path, taken
by the encoder for buffers that live on a CUDA device (``export_device``):

1. take a slot from a second pool whose segments are reserved with ``posix_fallocate`` and
   registered once (portable) with ``cudaHostRegister`` when created (registration is expensive, so slots
   are reused; they are unregistered when the pool gives them back, before they are unmapped, also
   by the pool's finalizer when the transport is dropped without ``close()``);
2. copy device -> slot on a side stream that first waits on the producer's current stream (an
   event), so unfinished producer work is never read; wait for that copy to finish;
3. hand the slot over like any pool slot.

The registered pool's bytes are bounded by a retention policy (a fraction of /dev/shm, a
fraction of available host memory, and a minimum of free host memory); idle slots are given
back; ``release_cache()`` gives back every free slot now.

Failures: every CUDA error is a ``TransportError`` naming the call and its code (the adapter has
cleared the thread's error state). If a copy may still be running when its cleanup fails (the
synchronize after a queued copy failed, or an unregistration failed), the slot is quarantined:
its mapping and the source tensor are kept, never unmapped under the device, and the transport
turns unhealthy (``healthy`` False, ``reason`` says why) and refuses further device transfers.
The quarantine is the transport's (visible, and bounded by the transfers in flight when it turned
unhealthy); what it holds is kept alive until the process exits, even if the transport is dropped.
A forked child starts with neither registrations nor quarantine: they are its parent's (its
registered pool starts empty, as the plain one does).
A send interrupted during the copy or its wait (``KeyboardInterrupt``) gives its slot back once
the side stream is drained, as a failed enqueue does.

Where the runtime is unusable (torch without CUDA, a ROCm build, no device) ``available`` is
False and ``export_device`` returns None: the encoder then stages the tensor itself (a pinned
side-stream copy, ``transports.cuda_runtime.stage_to_host``) and sends the host copy through the plain pool.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from tensorwire.errors import TransportError
from tensorwire.transports._page_layout import CONTROL_BYTES, SENDER
from tensorwire.transports._pool import Pool, Slot
from tensorwire.transports._reaper import next_name
from tensorwire.transports._retention import Retention
from tensorwire.transports.base import Buffer, Handle
from tensorwire.transports.cuda_runtime import CudaCallError, CudaRuntime, TorchCudaRuntime, keep_forever
from tensorwire.transports.shm import SHM_DIR, Backing, ShmHandle, ShmTransport, SlotHandle, check_options

__all__ = ["CudaShmTransport", "Quarantined"]


@dataclass(frozen=True)
class Quarantined:
    """A registered slot whose cleanup is uncertain: kept mapped (and its source alive) for good."""

    name: str
    nbytes: int
    reason: str
    mapping: Any
    source: torch.Tensor | None


class CudaShmTransport(ShmTransport):
    """``ShmTransport`` plus direct device-to-registered-shared-memory copies for CUDA tensors.

    ``runtime``: the CUDA adapter (default: ``TorchCudaRuntime``). ``registered_shm_fraction``,
    ``registered_host_fraction``, ``min_free_fraction``, ``max_registered_bytes``: the retention
    policy of the registered pool (``registered_shm_fraction`` bounds named pools only: memfds
    live outside /dev/shm). The other arguments are ``ShmTransport``'s.
    """

    name: ClassVar[str] = "cuda_shm"
    handle_types: ClassVar[tuple[type[Handle], ...]] = (ShmHandle, SlotHandle)

    def __init__(
        self,
        directory: str | os.PathLike[str] = SHM_DIR,
        *,
        runtime: CudaRuntime | None = None,
        pool: bool = True,
        backing: Backing = "memfd",
        cache_fraction: float = 0.25,
        max_cached_bytes: int | None = None,
        idle_seconds: float = 30.0,
        claim_timeout: float = 60.0,
        registered_shm_fraction: float = 0.25,
        registered_host_fraction: float = 0.25,
        min_free_fraction: float = 0.05,
        max_registered_bytes: int | None = None,
    ) -> None:
        check_options(
            registered_shm_fraction=registered_shm_fraction,
            registered_host_fraction=registered_host_fraction,
            min_free_fraction=min_free_fraction,
            max_registered_bytes=max_registered_bytes,
        )
        super().__init__(
            directory,
            pool=pool,
            backing=backing,
            cache_fraction=cache_fraction,
            max_cached_bytes=max_cached_bytes,
            idle_seconds=idle_seconds,
            claim_timeout=claim_timeout,
        )
        self.runtime: CudaRuntime = runtime if runtime is not None else TorchCudaRuntime()
        self.unavailable_reason = self.runtime.unavailable_reason()
        registrations = self._registrations = _Registrations(self.runtime)
        self._quarantine = registrations.quarantine
        self._registered_slots = registrations.slots
        self.registered: Pool | None = None
        if self.unavailable_reason is None:
            retention = Retention(
                shm_fraction=registered_shm_fraction if backing == "named" else None,
                host_fraction=registered_host_fraction,
                min_free_fraction=min_free_fraction,
                max_bytes=max_registered_bytes,
            )
            self.registered = Pool(
                self.directory,
                next_name,
                memfd=backing == "memfd",
                retention=retention,
                idle_seconds=idle_seconds,
                claim_timeout=claim_timeout,
                prepare=registrations.register,
                retire=registrations.unregister,
            )

    # -- state ------------------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """Whether device buffers can take the registered path in this process."""
        return self.registered is not None

    @property
    def healthy(self) -> bool:
        """False once a transfer's cleanup was uncertain; device transfers are then refused."""
        return not self._quarantine

    @property
    def reason(self) -> str | None:
        """Why the transport is unhealthy (the first quarantined transfer), or None."""
        return self._quarantine[0].reason if self._quarantine else None

    @property
    def quarantined(self) -> tuple[Quarantined, ...]:
        return tuple(self._quarantine)

    def device_runtime(self) -> CudaRuntime:
        """The CUDA adapter this transport copies with (the encoder stages what it declines with it)."""
        return self.runtime

    @property
    def registrations(self) -> int:
        """Host ranges currently registered with the device runtime by this transport."""
        return len(self._registered_slots)

    @property
    def registered_bytes(self) -> int:
        """Bytes of host memory currently registered with the device runtime by this transport."""
        return sum(self._registered_slots.values())

    # -- sending ----------------------------------------------------------------------------------
    def export_device(self, storage: torch.Tensor, start: int, nbytes: int, frames: list[Buffer]) -> Handle | None:
        """Send bytes ``[start, start + nbytes)`` of a uint8 device tensor over a whole storage.

        None when this transport does not take the buffer (runtime unavailable, not a device the
        runtime copies from, or the registered pool's budget is spent): the caller stages it.
        """
        if self.registered is None or not self.runtime.is_device(storage):
            return None
        if not self.healthy:
            raise TransportError(errno.EIO, f"cuda_shm refuses device transfers: {self.reason}")
        if nbytes == 0:
            raise TransportError(errno.EINVAL, "a 0-byte buffer is never registered; send it inline")
        source = storage[start : start + nbytes]
        slot = self.registered.acquire(nbytes, SENDER)
        if slot is None:
            return None
        try:  # over a view of the mapping, which the target keeps: a close meanwhile cannot unmap it
            target = torch.frombuffer(memoryview(slot.mapping), dtype=torch.uint8, count=nbytes, offset=CONTROL_BYTES)
        except BaseException as exc:  # (an interrupt too: nothing is copied yet)
            self.registered.give_back(slot)
            if isinstance(exc, ValueError):  # its mapping closed under this thread: the transport was closed meanwhile
                raise TransportError(errno.EBADF, "the shared-memory pool was closed during a copy") from None
            raise
        try:
            token = self.runtime.copy_to_host(target, source)
        except BaseException as exc:  # (an interrupt, or a runtime's other error, too)
            del target
            self._settle(slot, source, exc)
            if isinstance(exc, CudaCallError):
                raise _error(exc) from None
            raise
        try:
            self.runtime.synchronize(token)
        except CudaCallError as exc:
            del target
            self._quarantine_slot(slot, source, f"{exc} after a copy into {slot.name} was queued")
            raise _error(exc) from None
        except BaseException as exc:  # interrupted waiting for the copy: the slot comes back once it is done
            del target
            self._settle(slot, source, exc)
            raise
        del target
        try:  # (an interrupt up to the handle's making: no receiver can know the slot)
            generation, capability = self.registered.hand_over(slot)
        except BaseException:
            self.registered.give_back(slot)
            raise
        number = slot.fd if self.registered.memfd else None
        return SlotHandle(name=slot.name, offset=0, generation=generation, capability=capability, fd=number)

    def release(self, handle: Handle) -> None:
        if isinstance(handle, SlotHandle) and self.registered is not None:
            if self.registered.release(handle.name, handle.generation, handle.capability):
                return
        super().release(handle)

    def claimed(self, handle: Handle) -> bool | None:
        """``Transport.claimed``: a registered slot's hand-over is read from the registered pool's
        control page, any other handle's as ``ShmTransport`` reads it."""
        if isinstance(handle, SlotHandle) and self.registered is not None and self.registered.owns(handle.name):
            return self.registered.claimed(handle.name, handle.generation, handle.capability)
        return super().claimed(handle)

    def _settle(self, slot: Slot, source: torch.Tensor, failure: BaseException) -> None:
        """After a failed enqueue (or an interrupted wait for a copy): once the side stream is
        drained nothing writes the slot and it goes back to the pool; if draining fails too, the
        slot is quarantined."""
        assert self.registered is not None
        try:
            self.runtime.drain(source.device)
        except CudaCallError as exc:
            why = str(failure) or type(failure).__name__
            self._quarantine_slot(slot, source, f"{why}; draining the copy stream then: {exc}")
            return
        self.registered.give_back(slot)

    def _quarantine_slot(self, slot: Slot, source: torch.Tensor | None, reason: str) -> None:
        assert self.registered is not None
        keep_forever(slot.mapping, source)  # outlives this transport too
        with self._registrations.lock:
            self._quarantine.append(Quarantined(slot.name, slot.capacity, reason, slot.mapping, source))
        self.registered.forget(slot)

    # -- retention ------------------------------------------------------------------------------
    def trim(self, idle_seconds: float | None = None) -> int:
        freed = super().trim(idle_seconds)
        return freed + (0 if self.registered is None else self.registered.trim(idle_seconds))

    def release_cache(self) -> int:
        """Give back every free slot of both pools now (unregistering them); return the bytes freed."""
        return self.trim(0.0)

    def close(self) -> None:
        """Unregister and unlink every slot; quarantined mappings stay mapped (never unmapped under the device)."""
        if self.registered is not None:
            self.registered.close()
        super().close()


class _Registrations:
    """The registered pool's slots as the runtime knows them, and the quarantine: the pool's
    ``prepare`` and ``retire`` hooks are this object's, which refers to neither the pool nor the
    transport, so that the pool's finalizer (a transport dropped without ``close()``) can still
    unregister each slot before it is unmapped. A forked child starts with none of either (its
    pool starts empty; the parent's registrations and their uncertain cleanups stay the parent's)."""

    def __init__(self, runtime: CudaRuntime) -> None:
        self.runtime = runtime
        self.lock = threading.Lock()
        self.quarantine: list[Quarantined] = []
        self.slots: dict[str, int] = {}  # slot name -> registered bytes
        _REGISTRATIONS.add(self)

    def _forsake(self) -> None:
        """In a forked child, at the fork: forget the parent's (emptied in place: the transport
        holds these containers), with a fresh lock (a parent's thread may have held this one)."""
        self.lock = threading.Lock()
        self.quarantine.clear()
        self.slots.clear()

    def register(self, slot: Slot) -> None:
        """Register ``slot``'s data area; it is recorded first, as pending (0 bytes): an interrupt
        that lands as the runtime registers it (before or after) leaves ``unregister`` to undo it."""
        with self.lock:
            self.slots[slot.name] = 0
        try:
            self.runtime.register(slot.address, slot.capacity)
        except CudaCallError as exc:
            with self.lock:
                del self.slots[slot.name]
            raise TransportError(
                errno.EIO,
                f"cuda_shm: {exc.call} of {slot.capacity} bytes failed with CUDA error {exc.code} ({exc.text})",
            ) from None
        with self.lock:
            self.slots[slot.name] = slot.capacity

    def unregister(self, slot: Slot) -> bool:
        if slot.name not in self.slots:
            return True
        try:
            self.runtime.unregister(slot.address)
        except CudaCallError as exc:  # still registered: counted, and its mapping is kept
            with self.lock:  # (the mark read and cleared in one hold: one recorded meanwhile is not lost)
                if self.slots.get(slot.name) == 0:  # pending: an interrupt came before the runtime registered it
                    del self.slots[slot.name]
                    return True
            keep_forever(slot.mapping)
            with self.lock:
                self.quarantine.append(Quarantined(slot.name, slot.capacity, f"{exc}", slot.mapping, None))
            return False
        with self.lock:
            self.slots.pop(slot.name, None)
        return True


_REGISTRATIONS: weakref.WeakSet[_Registrations] = weakref.WeakSet()  # every live one, for a forked child


def _leave_parents_registrations() -> None:
    """In a forked child: every transport's registrations start empty (``_Registrations._forsake``)."""
    for registrations in list(_REGISTRATIONS):
        registrations._forsake()


os.register_at_fork(after_in_child=_leave_parents_registrations)


def _error(exc: CudaCallError) -> TransportError:
    return TransportError(errno.EIO, f"cuda_shm: {exc}")  # "<call> failed with CUDA error <code> (<text>)"
