"""The inline transport: buffers travel as frames of the message itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from tensorwire.errors import DecodeError
from tensorwire.transports.base import Buffer, Handle, Transport, not_read_by

__all__ = ["InlineHandle", "InlineTransport"]


class InlineHandle(Handle, tag="inline", frozen=True):
    """The buffer is frame ``frame`` of the message."""

    frame: int


class InlineTransport(Transport):
    """Buffers as frames: zero-copy memoryviews on the way out; on the way in, the frame itself."""

    name: ClassVar[str] = "inline"
    handle_types: ClassVar[tuple[type[Handle], ...]] = (InlineHandle,)

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        frames.append(data.toreadonly())  # a receiver in this process must not write into the sender's tensor
        return InlineHandle(frame=len(frames) - 1)

    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        seen: set[int] = set()
        for handle in handles:
            if not isinstance(handle, InlineHandle):
                raise not_read_by(self, handle)
            if not 1 <= handle.frame < len(frames):
                raise DecodeError(f"inline buffer names frame {handle.frame}; the message has {len(frames)} frames")
            if handle.frame in seen:
                raise DecodeError(f"frame {handle.frame} is named by two buffers")
            seen.add(handle.frame)

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        if not isinstance(handle, InlineHandle):
            raise not_read_by(self, handle)
        try:
            frame = memoryview(frames[handle.frame]).cast("B")
        except (TypeError, ValueError) as exc:  # not a buffer, not C-contiguous, released
            raise DecodeError(f"frame {handle.frame} is not a contiguous buffer: {exc}") from None
        if frame.nbytes != nbytes:
            raise DecodeError(f"frame {handle.frame} holds {frame.nbytes} bytes, its buffer entry says {nbytes}")
        return frame

    def release(self, handle: Handle) -> None:
        """Nothing to undo: the frame is owned by the message."""

    def close(self) -> None:
        """Holds nothing."""
