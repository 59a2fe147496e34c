"""``Transport``: the base class of every transport (where an out-of-band buffer lives between
encode and decode), and ``Handle``, the base of their handles.

A transport ``export``s a buffer and returns a typed handle (a msgspec Struct tagged by the
transport's name, placed in the header's buffer table); the receiving side ``verify``s every
handle of a message before touching anything, then ``import_``s each into a buffer. ``release``
undoes an export (or discards an unread one); ``close`` releases what the transport holds, and a
transport is a context manager that closes on exit. The optional hooks have no-op defaults.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

import msgspec

from tensorwire.errors import DecodeError

if TYPE_CHECKING:
    from typing import Self

    from tensorwire.transports.cuda_runtime import CudaRuntime

__all__ = ["Buffer", "Handle", "Transport", "not_read_by"]

Buffer: TypeAlias = bytes | bytearray | memoryview | Any  # any object with the buffer protocol


class Handle(msgspec.Struct, tag_field="transport", forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Base of every transport's handle type; subclasses set ``tag=<transport name>``."""


class Transport(ABC):
    """Moves one buffer from an encoder to a decoder.

    Subclasses set ``name`` and ``handle_types`` and implement ``export``, ``verify``, ``import_``,
    ``release`` and ``close``; they may override the hooks ``begin_message``, ``export_storage``,
    ``export_device``, ``claimed``, ``device_runtime`` and ``importing``, which do nothing by
    default.
    """

    name: ClassVar[str]
    handle_types: ClassVar[tuple[type[Handle], ...]]  # the handle kinds this transport reads and writes

    @abstractmethod
    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        """Make ``data`` (a flat byte view) available to a receiver; frames may be appended."""

    @abstractmethod
    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        """Reject ill-formed handles of one message (``DecodeError``) before anything is opened."""

    @abstractmethod
    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        """The buffer behind ``handle`` (``nbytes`` long): a private copy, or with ``borrow`` a view
        (``None``: the transport's own default for that kind of handle)."""

    @abstractmethod
    def release(self, handle: Handle) -> None:
        """Undo an export, or discard a buffer that will not be imported; never raises for a gone buffer."""

    def release_all(self, handles: Sequence[Handle]) -> None:
        """``release`` each of ``handles`` (the buffers of one message that will not be read); one
        that fails does not keep the others."""
        for handle in handles:
            try:
                self.release(handle)
            except Exception:
                pass

    @abstractmethod
    def close(self) -> None:
        """Release everything this transport holds."""

    def begin_message(self) -> None:  # noqa: B027  (an optional hook: doing nothing is the default)
        """Called once per encode before its first export to this transport (for transports that
        number messages); nothing by default."""

    def export_storage(self, storage: Any, start: int, nbytes: int, frames: list[Buffer]) -> Handle | None:
        """Export bytes ``[start, start + nbytes)`` of a host torch storage (a uint8 tensor over it),
        for transports that move storages rather than bytes; None (the default): use ``export``."""
        return None

    def export_device(self, storage: Any, start: int, nbytes: int, frames: list[Buffer]) -> Handle | None:
        """Export bytes ``[start, start + nbytes)`` of a storage on a device; None (the default): the
        encoder copies them to the host and calls ``export_storage`` or ``export``."""
        return None

    def claimed(self, handle: Handle) -> bool | None:
        """What became of one of this transport's exports, as far as its sender can tell: True once
        a receiver of another process proved its capability (it could open what was sent), None
        while it waits for one, False once it cannot be claimed any more (expired, undone, claimed by
        this process, not known). A transport that cannot tell says True (the default): nothing
        waits on a claim it cannot see."""
        return True

    def importing(self) -> AbstractContextManager[object]:
        """The context the imports of one message's buffers run in, when it has more than one (for a
        transport whose imports may wait: one budget for all of them); nothing by default."""
        return nullcontext()

    def device_runtime(self) -> CudaRuntime | None:
        """The CUDA adapter the encoder stages this transport's device tensors to the host with;
        None (the default): torch's own."""
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def not_read_by(transport: Transport, handle: Handle) -> DecodeError:
    """The error for a handle of a kind ``transport`` does not read, given to its ``verify`` or ``import_``."""
    return DecodeError(f"the {transport.name} transport does not read {type(handle).__name__}s")
