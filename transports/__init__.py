"""Transports: where out-of-band tensor buffers live between encode and decode.

The built-in transports, and the registry of transports by name: the built-ins plus the classes
that installed distributions declare under the ``tensorwire.transports`` entry-point group
(``name = "module:Class"``, a ``Transport`` subclass whose ``name`` is the entry's name).
"""

from importlib import metadata

from tensorwire.transports._reaper import Segment, held_memfds, list_segments
from tensorwire.transports.base import Handle, Transport
from tensorwire.transports.cuda_runtime import CudaCallError, CudaRuntime, TorchCudaRuntime
from tensorwire.transports.cuda_shm import CudaShmTransport
from tensorwire.transports.inline import InlineHandle, InlineTransport
from tensorwire.transports.shm import SHM_DIR, ShmHandle, ShmTransport, SlotHandle, our_segments, reap
from tensorwire.transports.torch_queue import QueueHandle, QueueTransport

__all__ = [
    "ENTRY_POINTS",
    "CudaCallError",
    "CudaRuntime",
    "CudaShmTransport",
    "Handle",
    "InlineHandle",
    "InlineTransport",
    "QueueHandle",
    "QueueTransport",
    "SHM_DIR",
    "Segment",
    "ShmHandle",
    "ShmTransport",
    "SlotHandle",
    "TorchCudaRuntime",
    "Transport",
    "available",
    "by_name",
    "held_memfds",
    "list_segments",
    "our_segments",
    "reap",
]

ENTRY_POINTS = "tensorwire.transports"
"""The entry-point group third-party transports register under."""
_BUILT_IN: dict[str, type[Transport]] = {
    t.name: t for t in (InlineTransport, ShmTransport, CudaShmTransport, QueueTransport)
}


def available() -> dict[str, type[Transport]]:
    """Transport classes by name: the built-ins plus the ``tensorwire.transports`` entry points.

    An entry point that fails to load, is not a ``Transport`` subclass, takes a built-in name or
    names its class differently raises ``ValueError`` naming the entry point."""
    found = dict(_BUILT_IN)
    for entry in metadata.entry_points(group=ENTRY_POINTS):
        where = f"entry point {entry.name!r} ({entry.value}) of group {ENTRY_POINTS!r}"
        if entry.name in _BUILT_IN:
            raise ValueError(f"{where}: {entry.name!r} is a built-in transport")
        try:
            cls = entry.load()
        except Exception as exc:
            raise ValueError(f"{where} failed to load: {type(exc).__name__}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Transport)):
            raise ValueError(f"{where} is not a tensorwire.transports.Transport subclass: {cls!r}")
        if getattr(cls, "name", None) != entry.name:
            raise ValueError(f"{where}: its class is named {getattr(cls, 'name', None)!r}")
        found[entry.name] = cls
    return found


def by_name(name: str) -> type[Transport]:
    """The transport class registered as ``name``."""
    found = available()
    if name not in found:
        raise KeyError(f"unknown transport {name!r}; available: {', '.join(sorted(found))}")
    return found[name]
