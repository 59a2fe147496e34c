"""A ``CudaRuntime`` over host memory, for testing the CUDA paths' logic without a GPU.

"Device" tensors are ordinary CPU tensors (or meta tensors, whose copies fill the target with
``FILL``); registrations are bookkept like the real runtime does (a range registered twice, or
unregistered when it is not, is an error). Any call can be made to fail with ``fail_next``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch

from tensorwire.transports.cuda_runtime import CudaCallError

FILL = 0xAB  # what a copy from a meta "device" tensor writes
NO_CUDA_HERE = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
"""Why this torch places nothing on a device without a GPU: a CPU build, or a CUDA build with no device."""
_NAMES = {
    "register": "cudaHostRegister",
    "unregister": "cudaHostUnregister",
    "copy_to_host": "cudaMemcpyAsync",
    "copy_to_device": "cudaMemcpyAsync",
    "alloc": "cudaMalloc",
    "synchronize": "cudaEventSynchronize",
    "drain": "cudaStreamSynchronize",
}


class FakeCudaRuntime:
    def __init__(self, unavailable: str | None = None) -> None:
        self.unavailable = unavailable
        self.calls: Counter[str] = Counter()
        self.registered: dict[int, int] = {}  # address -> bytes
        self.cleared = 0
        self.flushed = 0
        self.device_storages: set[int] = set()  # data_ptr of every "device" buffer handed out
        self._failures: dict[str, list[int]] = {}

    def fail_next(self, call: str, code: int = 1, times: int = 1) -> None:
        """Make the next ``times`` calls of ``call`` fail with ``code`` (2 on ``alloc`` is out of memory)."""
        self._failures.setdefault(call, []).extend([code] * times)

    def _enter(self, call: str) -> None:
        self.calls[call] += 1
        pending = self._failures.get(call)
        if pending:
            code = pending.pop(0)
            self.cleared += 1  # the real adapter clears the thread's error state after a failure
            oom = call == "alloc" and code == 2
            raise CudaCallError(_NAMES[call], code, "out of memory" if oom else "injected failure", oom=oom)

    def unavailable_reason(self) -> str | None:
        return self.unavailable

    def is_device(self, tensor: torch.Tensor) -> bool:
        return True

    def register(self, address: int, nbytes: int) -> None:
        self._enter("register")
        if address in self.registered:
            raise CudaCallError("cudaHostRegister", 712, "part or all of the range is already registered")
        self.registered[address] = nbytes

    def unregister(self, address: int) -> None:
        self._enter("unregister")
        if self.registered.pop(address, None) is None:
            raise CudaCallError("cudaHostUnregister", 713, "pointer does not correspond to a registered range")

    def copy_to_host(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        self._enter("copy_to_host")
        if src.is_meta:
            dst.fill_(FILL)
        else:  # a device copy runs on no CPU thread: numpy's, not torch's (not fork-safe) thread pool
            np.copyto(dst.numpy(), src.numpy(), casting="no")
        return "copy"

    def copy_to_device(self, src: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, Any]:
        self._enter("alloc")
        self._enter("copy_to_device")
        dst = src.clone()
        self.device_storages.add(dst.untyped_storage().data_ptr())
        return dst, "copy"

    def synchronize(self, token: Any) -> None:
        self._enter("synchronize")

    def drain(self, device: torch.device) -> None:
        self._enter("drain")

    def clear_error(self) -> None:
        self.cleared += 1

    def empty_cache(self) -> None:
        self.flushed += 1
