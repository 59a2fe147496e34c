"""The ``Transport`` protocol: where an out-of-band buffer lives between encode and decode.

A transport ``export``s a buffer and returns a typed handle (a msgspec Struct tagged by the
transport's name, placed in the header's buffer table); the receiving side ``verify``s every
handle of a message before touching anything, then ``import_``s each into a buffer. ``release``
undoes an export (or discards an unread one); ``close`` releases what the transport holds.
Third-party transports register under the ``tensorwire.transports`` entry-point group.

Optional methods: ``begin_message()`` (called once per encode before its exports, for
transports that number messages); ``export_storage(storage, start, nbytes, frames)`` (given
instead of a byte view when the buffer is cut from a torch storage, for transports that move
storages rather than bytes); ``export_device(storage, start, nbytes, frames) -> handle | None``
(given a buffer that lives on a device; None lets the encoder stage it to the host instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from typing import Any, ClassVar, Protocol, TypeAlias, runtime_checkable

import msgspec

__all__ = ["Buffer", "Handle", "Transport", "available", "by_name"]

Buffer: TypeAlias = bytes | bytearray | memoryview | Any  # any object with the buffer protocol


class Handle(msgspec.Struct, tag_field="transport", forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Base of every transport's handle type; subclasses set ``tag=<transport name>``."""


@runtime_checkable
class Transport(Protocol):
    """Moves one buffer from an encoder to a decoder."""

    name: ClassVar[str]
    handle_types: ClassVar[tuple[type[Handle], ...]]  # the handle kinds this transport reads and writes

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        """Make ``data`` (a flat byte view) available to a receiver; frames may be appended."""
        ...

    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        """Reject ill-formed handles of one message (``DecodeError``) before anything is opened."""
        ...

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        """The buffer behind ``handle`` (``nbytes`` long): a private copy, or with ``borrow`` a view
        (``None``: the transport's own default for that kind of handle)."""
        ...

    def release(self, handle: Handle) -> None:
        """Undo an export, or discard a buffer that will not be imported; never raises for a gone buffer."""
        ...

    def close(self) -> None:
        """Release everything this transport holds."""
        ...


def available() -> dict[str, type[Any]]:
    """Transport classes by name: the built-ins plus the ``tensorwire.transports`` entry points."""
    from tensorwire.transports.cuda_shm import CudaShmTransport
    from tensorwire.transports.inline import InlineTransport
    from tensorwire.transports.queue import QueueTransport
    from tensorwire.transports.shm import ShmTransport

    found: dict[str, type[Any]] = {t.name: t for t in (InlineTransport, ShmTransport, CudaShmTransport, QueueTransport)}
    for entry in metadata.entry_points(group="tensorwire.transports"):
        cls = entry.load()
        found[cls.name] = cls
    return found


def by_name(name: str) -> type[Any]:
    """The transport class registered as ``name``."""
    found = available()
    if name not in found:
        raise KeyError(f"unknown transport {name!r}; available: {', '.join(sorted(found))}")
    return found[name]
