"""Device placement on receive: decoded torch tensors land on a device instead of the host.

``Decoder(registry, ..., device="cuda:0")`` places every torch tensor of a message on that device;
a mapping places them per body path (``{"$.media.video.tensor": "cuda:0", "*": "cpu"}``: exact
paths as ``tensorwire inspect`` prints them, ``"*"`` for every other tensor; a tensor with no
entry stays where it arrived). ``"cpu"`` also brings tensors a transport delivered on a device
(CUDA IPC through the queue) to the host. numpy arrays always stay on the host.

Each received buffer that holds a placed tensor is copied to the device once (views and aliases
survive, as on the host): the host memory is page-locked for the copy when it can be (a pool
slot's whole mapping is registered with the runtime once and stays so while the receiver maps
it; other memory is registered for the copy and unregistered once it has finished; if
registration fails the copy reads pageable memory), a new device buffer is allocated (on
out-of-memory the allocator's cache is flushed once and the allocation retried), and the copy
runs on a side stream that the current stream then waits on. Any failure releases everything of
the message. A copy whose cleanup is uncertain (its synchronize or unregistration failed) keeps
its host memory for good; the placement then turns unhealthy and refuses further device copies
(``healthy``, ``reason``), like ``CudaShmTransport``.
"""

from __future__ import annotations

import errno
import threading
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeAlias

import torch

from tensorwire.errors import TransportError
from tensorwire.transports.cuda_runtime import CudaCallError, CudaRuntime, TorchCudaRuntime, keep_forever

__all__ = ["DeviceSpec", "Placement"]

DeviceSpec: TypeAlias = "str | torch.device | Mapping[str, str | torch.device]"

REGISTER_MIN_BYTES = 1024 * 1024  # below this a pageable copy costs less than page-locking


class Placement:
    """Where a decoder puts torch tensors, and the device copies that put them there."""

    def __init__(self, device: DeviceSpec, runtime: CudaRuntime | None = None, *, register_host: bool = True) -> None:
        self.runtime: CudaRuntime = runtime if runtime is not None else TorchCudaRuntime()
        spec = device if isinstance(device, Mapping) else {"*": device}
        self.by_path: dict[str, torch.device] = {}
        for path, target in spec.items():
            if not isinstance(path, str):
                raise TypeError(f"device mapping keys are body paths (str), got {type(path).__name__}")
            try:
                self.by_path[path] = torch.device(target)
            except (RuntimeError, TypeError) as exc:
                raise ValueError(f"device for {path!r}: {exc}") from None
        for path, target in self.by_path.items():
            if target.type not in ("cpu", "cuda"):
                raise ValueError(f"device for {path!r}: only cpu and cuda devices are supported, got {target}")
        if any(d.type != "cpu" for d in self.by_path.values()):
            reason = self.runtime.unavailable_reason()
            if reason is not None and not torch.cuda.is_available():
                raise ValueError(f"cannot place tensors on a device: {reason}")
            self.register_host = register_host and reason is None
        else:
            self.register_host = False
        self._lock = threading.Lock()
        self._kept: list[tuple[str, Any]] = []  # (reason, host memory a copy may still read)

    @property
    def healthy(self) -> bool:
        return not self._kept

    @property
    def reason(self) -> str | None:
        return self._kept[0][0] if self._kept else None

    def upload_one(self, index: int, buffer: Any, device: torch.device) -> torch.Tensor:
        """A uint8 copy on ``device`` of received buffer ``index`` (-1: a tensor carried in frame 0)."""
        if not self.healthy:
            raise TransportError(errno.EIO, f"device placement refused: {self.reason}")
        if isinstance(buffer, torch.Tensor) and not buffer.is_cpu:  # already on a device (CUDA IPC)
            try:
                return buffer.to(device)  # the same tensor when it is there already
            except RuntimeError as exc:
                raise TransportError(errno.EIO, f"placing buffer {index} on {device}: {exc}") from None
        nbytes = memoryview(buffer).nbytes
        with warnings.catch_warnings():  # a read-only buffer is only read here (copied to the device)
            warnings.simplefilter("ignore", UserWarning)
            host = torch.frombuffer(buffer, dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
        label = "a frame-0 tensor" if index < 0 else f"buffer {index}"
        what = f"{label} ({nbytes} bytes) to {device}"
        address: int | None = None
        if self.register_host and nbytes >= REGISTER_MIN_BYTES and not _pinned(buffer, self.runtime):
            address = host.data_ptr()
            try:
                self.runtime.register(address, nbytes)
            except CudaCallError:
                address = None  # the runtime cleared its error; copy from pageable memory instead
        memory = (host, buffer)
        unregister = None if address is None else partial(self.runtime.unregister, address)
        try:
            target, token = self._copy(host, device)
        except CudaCallError as exc:
            # once nothing can still read the host memory (the copy stream drained), it may be unregistered
            if exc.oom or self._cleanup(partial(self.runtime.drain, device), memory, f"while copying {what}") is None:
                self._cleanup(unregister, memory, f"after copying {what}")
            raise _error(exc, what) from None
        try:
            self.runtime.synchronize(token)
        except CudaCallError as exc:
            self._keep(f"{exc} while copying {what}", memory)  # never unregistered or released
            raise _error(exc, what) from None
        failure = self._cleanup(unregister, memory, f"after copying {what}")
        if failure is not None:
            raise TransportError(errno.EIO, f"placing {what}: {failure}")
        return target

    def _copy(self, host: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, Any]:
        """Allocate and fill a device copy of ``host``; one flush-and-retry when the device is out of memory."""
        try:
            return self.runtime.copy_to_device(host, device)
        except CudaCallError as exc:
            if not exc.oom:
                raise
        self.runtime.empty_cache()
        return self.runtime.copy_to_device(host, device)

    def _cleanup(self, call: Callable[[], None] | None, memory: Any, when: str) -> str | None:
        """Run a cleanup ``call``; if it fails, keep ``memory`` for good and return why (None: it went well)."""
        if call is None:
            return None
        try:
            call()
        except CudaCallError as exc:
            reason = f"{exc} {when}"
            self._keep(reason, memory)
            return reason
        return None

    def _keep(self, reason: str, memory: Any) -> None:
        keep_forever(memory)
        with self._lock:
            self._kept.append((reason, memory))


def _pinned(buffer: Any, runtime: CudaRuntime) -> bool:
    """Whether ``buffer`` lies in host memory its transport keeps page-locked (``pin_host`` on the
    object that owns it: a pool slot's mapping, registered once for as long as it is mapped)."""
    pin = getattr(getattr(buffer, "base", None), "pin_host", None)
    return pin is not None and bool(pin(runtime))


def _error(exc: CudaCallError, what: str) -> TransportError:
    if exc.oom:
        return TransportError(errno.ENOMEM, f"placing {what}: {exc} (after flushing the allocator cache once)")
    return TransportError(errno.EIO, f"placing {what}: {exc}")
