"""Transports: where out-of-band tensor buffers live between encode and decode."""

import codec  # noqa: F401  (first: codec's encoder/decoder import these modules, which use codec.errors)
from transports.base import Handle, Transport, available, by_name
from transports.cuda_runtime import CudaCallError, CudaRuntime, TorchCudaRuntime
from transports.cuda_shm import CudaShmTransport
from transports.inline import InlineHandle, InlineTransport
from transports.queue import QueueHandle, QueueTransport
from transports.shm import ShmHandle, ShmTransport, SlotHandle, our_segments, reap

__all__ = [
    "CudaCallError",
    "CudaRuntime",
    "CudaShmTransport",
    "Handle",
    "InlineHandle",
    "InlineTransport",
    "QueueHandle",
    "QueueTransport",
    "ShmHandle",
    "ShmTransport",
    "SlotHandle",
    "TorchCudaRuntime",
    "Transport",
    "available",
    "by_name",
    "our_segments",
    "reap",
]
