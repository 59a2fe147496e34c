"""The few CUDA runtime calls tensorwire makes, behind one small adapter object.

``CudaShmTransport`` (device -> registered shared memory) and the decoder's device placement
(host -> device) call only the methods of ``CudaRuntime``. ``TorchCudaRuntime`` implements them
with torch and the CUDA runtime library torch loaded; tests substitute an object that fails on
chosen calls, to check cleanup, quarantine and error messages without a GPU.

Every failure is a ``CudaCallError`` naming the runtime call and its error code; the adapter
clears the thread's last-error state after it (``clear_error``), so a failed registration does
not surface later as an unrelated kernel-launch error.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "CudaCallError",
    "CudaRuntime",
    "TorchCudaRuntime",
    "cuda_unavailable_reason",
    "stage_to_host",
]


class CudaCallError(RuntimeError):
    """A CUDA runtime call failed: ``call`` (e.g. ``cudaHostRegister``), ``code`` (the cudaError
    number, -1 when the runtime did not say) and the runtime's ``text``; ``oom`` for allocations
    that ran out of device memory."""

    def __init__(self, call: str, code: int, text: str, *, oom: bool = False) -> None:
        super().__init__(f"{call} failed with CUDA error {code} ({text})")
        self.call, self.code, self.text, self.oom = call, code, text, oom


@runtime_checkable
class CudaRuntime(Protocol):
    """What the CUDA paths need from the device runtime."""

    def unavailable_reason(self) -> str | None:
        """Why the registered-memory path cannot run here (no CUDA, a ROCm build, no device); None if it can."""
        ...

    def is_device(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives in memory this runtime copies from (a CUDA device)."""
        ...

    def register(self, address: int, nbytes: int) -> None:
        """Page-lock host memory for direct device access (``cudaHostRegister``)."""
        ...

    def unregister(self, address: int) -> None:
        """Undo ``register`` (``cudaHostUnregister``)."""
        ...

    def copy_to_host(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        """Enqueue ``dst.copy_(src)`` on a side stream ordered after the producer's current stream;
        return a token for ``synchronize``."""
        ...

    def copy_to_device(self, src: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, Any]:
        """A new device tensor filled from host ``src`` on a copy stream that the current stream
        waits on; return it and a token for ``synchronize`` (the host memory must live until then)."""
        ...

    def synchronize(self, token: Any) -> None:
        """Wait until the copy behind ``token`` has finished."""
        ...

    def drain(self, device: torch.device) -> None:
        """Wait until everything queued on ``device``'s side stream has finished."""
        ...

    def clear_error(self) -> None:
        """Reset the thread's last CUDA error (``cudaGetLastError``)."""
        ...

    def empty_cache(self) -> None:
        """Give the caching allocator's unused device blocks back (before one retry after OOM)."""
        ...


def cuda_unavailable_reason() -> str | None:
    """Why torch cannot use CUDA's registered-host-memory calls in this process; None if it can."""
    if getattr(torch.version, "hip", None):
        return f"torch is a ROCm build (HIP {torch.version.hip}); the CUDA runtime calls are not used"
    if torch.version.cuda is None:
        return "torch was built without CUDA"
    if not torch.cuda.is_available():
        return "no CUDA device is visible"
    return None


_HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable


class TorchCudaRuntime:
    """``CudaRuntime`` on torch: ``torch.cuda.cudart()`` for (un)registration, one side stream per device."""

    def __init__(self) -> None:
        self._streams: dict[int, torch.cuda.Stream] = {}
        self._lock = threading.Lock()

    def unavailable_reason(self) -> str | None:
        return cuda_unavailable_reason()

    def is_device(self, tensor: torch.Tensor) -> bool:
        return bool(tensor.is_cuda)

    def register(self, address: int, nbytes: int) -> None:
        # portable: pinned for every device's context, whichever device copies and whichever
        # thread (e.g. the pool's idle trimmer) unregisters
        self._check("cudaHostRegister", _cudart().cudaHostRegister(address, nbytes, _HOST_REGISTER_PORTABLE))

    def unregister(self, address: int) -> None:
        self._check("cudaHostUnregister", _cudart().cudaHostUnregister(address))

    def copy_to_host(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        device = src.device
        side = self._stream(device)
        try:
            with torch.cuda.device(device):
                ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
                ready.record(torch.cuda.current_stream(device))  # the producer's pending work
                side.wait_event(ready)
                with torch.cuda.stream(side):
                    dst.copy_(src, non_blocking=True)
                done = torch.cuda.Event()  # type: ignore[no-untyped-call]
                done.record(side)
        except RuntimeError as exc:
            raise self._failed("cudaMemcpyAsync", exc) from None
        return done

    def copy_to_device(self, src: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, Any]:
        try:
            dst = torch.empty(src.shape, dtype=src.dtype, device=device)
        except torch.OutOfMemoryError as exc:
            raise CudaCallError("cudaMalloc", 2, str(exc).splitlines()[0], oom=True) from None
        except RuntimeError as exc:
            raise self._failed("cudaMalloc", exc) from None
        side = self._stream(device)
        try:
            with torch.cuda.device(device):
                consumer = torch.cuda.current_stream(device)
                side.wait_stream(consumer)  # dst was allocated on the consumer's stream
                with torch.cuda.stream(side):
                    dst.copy_(src, non_blocking=True)
                done = torch.cuda.Event()  # type: ignore[no-untyped-call]
                done.record(side)
                consumer.wait_event(done)  # work queued after this sees the filled tensor
        except RuntimeError as exc:
            raise self._failed("cudaMemcpyAsync", exc) from None
        return dst, done

    def synchronize(self, token: Any) -> None:
        try:
            token.synchronize()
        except RuntimeError as exc:
            raise self._failed("cudaEventSynchronize", exc) from None

    def drain(self, device: torch.device) -> None:
        with self._lock:
            side = self._streams.get(_index(device))
        if side is None:  # never made: nothing was queued on it
            return
        try:
            side.synchronize()
        except RuntimeError as exc:
            raise self._failed("cudaStreamSynchronize", exc) from None

    def clear_error(self) -> None:
        library = _cudart_library()
        if library is not None:
            library.cudaGetLastError()

    def empty_cache(self) -> None:
        try:
            torch.cuda.empty_cache()
        except RuntimeError as exc:
            raise self._failed("cudaFree", exc) from None

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        """``device``'s side stream, made on first use (a failure to make it is a ``CudaCallError``)."""
        index = _index(device)
        with self._lock:
            stream = self._streams.get(index)
            if stream is None:
                try:
                    stream = torch.cuda.Stream(device=index)  # type: ignore[no-untyped-call]
                except RuntimeError as exc:
                    raise self._failed("cudaStreamCreate", exc) from None
                self._streams[index] = stream
            return stream

    def _failed(self, call: str, exc: RuntimeError) -> CudaCallError:
        """The ``CudaCallError`` for an error torch raised during ``call``, after clearing the error state."""
        self.clear_error()
        code = getattr(exc, "error_code", None)
        return CudaCallError(call, int(code) if code is not None else -1, str(exc).splitlines()[0])

    def _check(self, call: str, error: Any) -> None:
        code = int(error)
        if code:
            text = _cudart().cudaGetErrorString(error)
            self.clear_error()
            raise CudaCallError(call, code, str(text))


def stage_to_host(source: torch.Tensor, runtime: CudaRuntime | None = None) -> torch.Tensor:
    """A host copy of the flat uint8 device tensor ``source``: for CUDA (or ROCm) devices a pinned
    buffer filled on a side stream after the producer's pending work, else ``.cpu()``."""
    rt = runtime if runtime is not None else _DEFAULT
    if not rt.is_device(source):
        return source.cpu()
    try:
        host = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
    except RuntimeError:
        host = torch.empty(source.shape, dtype=source.dtype)  # no pinned memory left: pageable
    rt.synchronize(rt.copy_to_host(host, source))
    return host


def keep_forever(*objects: Any) -> None:
    """Keep ``objects`` alive until the process exits, whoever drops them: memory a device may
    still be reading or writing (a quarantined mapping, the source of a copy) is never freed."""
    for obj in objects:
        if obj is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _cudart() -> Any:
    """torch's bindings of the CUDA runtime (cudaHostRegister, cudaHostUnregister, cudaGetErrorString)."""
    return torch.cuda.cudart()  # type: ignore[no-untyped-call]


_CUDART: list[Any] = []


def _cudart_library() -> Any:
    """The CUDA runtime library torch loaded (found in this process's mappings), or None."""
    if not _CUDART:
        found = None
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                paths = {line.split()[-1] for line in maps if "libcudart" in line}
            for path in sorted(paths):
                found = ctypes.CDLL(path)
                break
        except OSError:
            found = None
        _CUDART.append(found)
    return _CUDART[0]


_DEFAULT = TorchCudaRuntime()


def _index(device: torch.device) -> int:
    """The index of CUDA device ``device`` (the current one where it names none)."""
    return device.index if device.index is not None else torch.cuda.current_device()
