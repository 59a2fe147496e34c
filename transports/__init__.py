"""Transports: where out-of-band tensor buffers live between encode and decode."""

from tensorwire.transports.base import Handle, Transport, available, by_name
from tensorwire.transports.cuda_runtime import CudaCallError, CudaRuntime, TorchCudaRuntime
from tensorwire.transports.cuda_shm import CudaShmTransport
from tensorwire.transports.inline import InlineHandle, InlineTransport
from tensorwire.transports.queue import QueueHandle, QueueTransport
from tensorwire.transports.shm import ShmHandle, ShmTransport, SlotHandle, our_segments, reap

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
