"""A ``CudaRuntime`` over host memory, so that the fuzzer's workers run ``CudaShmTransport`` (its
registered pool, its sends and its receiving side) without a GPU: every tensor counts as a device
one, a registration is a no-op and a "device" copy is a host copy."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["HostRuntime"]


class HostRuntime:
    """Host tensors stand in for device ones (``tensorwire.transports.cuda_runtime.CudaRuntime``)."""

    def unavailable_reason(self) -> str | None:
        return None

    def is_device(self, tensor: torch.Tensor) -> bool:
        return True

    def register(self, address: int, nbytes: int) -> None:
        pass

    def unregister(self, address: int) -> None:
        pass

    def copy_to_host(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        np.copyto(dst.numpy(), src.numpy(), casting="no")  # (numpy's copy: no torch thread pool in a worker)
        return None

    def copy_to_device(self, src: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, Any]:
        return src.clone(), None

    def synchronize(self, token: Any) -> None:
        pass

    def drain(self, device: torch.device) -> None:
        pass

    def clear_error(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass
