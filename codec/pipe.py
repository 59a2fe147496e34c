"""Messages over a ``multiprocessing`` connection as one blob each, received into a reusable buffer.

``send(conn, frames)`` sends the frames of one encoded message as a single ``tw.join`` blob.
``Receiver(conn).recv()`` reads the next blob with ``conn.recv_bytes_into`` into a bytearray it
keeps, and returns ``tw.split`` views of it: writable frames, so a ``Decoder`` builds tensors
straight on the received bytes instead of copying them out of read-only ``bytes``::

    send(conn, codec.Encoder().encode(message))             # one end
    receiver = Receiver(conn)                               # the other end
    message = codec.Decoder(REGISTRY).decode(receiver.recv(timeout=5.0))

The reuse rule: the frames of one ``recv``, and every tensor or array decoded from them, are views
of the receiver's buffer. ``recv`` writes into that buffer again only when nothing views it any
more; while any view, frame or decoded value of the previous message is alive, the next message
goes into a fresh buffer of the same size (which then becomes the one that is reused). So a
message never changes under values decoded from an earlier one, and a consumer that lets go of
each message before asking for the next reads every message into the same memory. Views are
detected the way CPython enforces them: a bytearray with exported buffers refuses to resize.
Memory held some other way is not seen: a raw address (``data_ptr()``, ``ctypes``) kept after
its tensor is gone, or a frame closed with ``memoryview.release()`` while a tensor still uses it.
"""

from __future__ import annotations

from multiprocessing import BufferTooShort
from typing import Any, Protocol

from tensorwire import DecodeError, join, split

__all__ = ["DEFAULT_INITIAL", "DEFAULT_MAX_BYTES", "ByteReader", "ByteWriter", "Receiver", "send"]

DEFAULT_INITIAL = 64 * 1024
DEFAULT_MAX_BYTES = 1024**3


class ByteWriter(Protocol):
    """The sending side of a connection (``multiprocessing.connection.Connection`` is one)."""

    def send_bytes(self, buf: bytes) -> None:
        """Send ``buf`` as one message."""


class ByteReader(Protocol):
    """The receiving side of a connection (``multiprocessing.connection.Connection`` is one)."""

    def poll(self, timeout: float | None = ...) -> bool:
        """Whether a message is ready, waiting up to ``timeout`` seconds (None: forever)."""

    def recv_bytes_into(self, buf: Any) -> int:
        """Read one message into ``buf``; its size, or ``BufferTooShort`` carrying it as bytes."""


def send(conn: ByteWriter, frames: list[Any]) -> None:
    """Send the frames of one encoded message on ``conn`` as a single blob (``tw.join``).

    A connection carries a message as one contiguous buffer, so the frames are gathered once;
    the blob goes to the pipe without a further copy."""
    conn.send_bytes(join(frames))


def _in_use(buffer: bytearray) -> bool:
    """Whether anything views ``buffer``: CPython refuses to resize a bytearray with exports.

    Dropping the last byte and appending it back stays inside the allocation (no reallocation,
    no copy); the byte's value is not kept, which does not matter for a buffer about to be
    overwritten."""
    try:
        del buffer[-1]
    except BufferError:
        return True
    buffer.append(0)
    return False


class Receiver:
    """Receives messages sent with ``send`` into a buffer it reuses; see the module for the reuse rule.

    ``initial``: the first buffer's size in bytes. A larger message grows it to the next power of
    two that holds it, at most ``max_bytes``. A message over ``max_bytes`` is a ``DecodeError``;
    it has been read off the connection by then (``recv_bytes_into`` reads a message whole before
    it can tell it does not fit), so the next ``recv`` gets the message after it. ``max_bytes``
    therefore bounds the memory the receiver keeps, not what one oversized message costs while it
    is read. Not safe to share between threads.
    """

    def __init__(self, conn: ByteReader, *, initial: int = DEFAULT_INITIAL, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if initial < 1:
            raise ValueError(f"initial must be at least 1 byte, got {initial}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1 byte, got {max_bytes}")
        self._conn = conn
        self._max_bytes = max_bytes
        self._buffer = bytearray(min(initial, max_bytes))

    @property
    def conn(self) -> ByteReader:
        """The connection messages are read from."""
        return self._conn

    @property
    def max_bytes(self) -> int:
        """The largest message accepted, in bytes."""
        return self._max_bytes

    @property
    def capacity(self) -> int:
        """The size of the current buffer in bytes."""
        return len(self._buffer)

    @property
    def buffer(self) -> memoryview:
        """A read-only view of the current buffer (the memory the last message was read into).

        Holding it counts as a use: while it is alive the next ``recv`` reads into a fresh buffer."""
        return memoryview(self._buffer).toreadonly()

    def recv(self, timeout: float | None = None) -> list[memoryview]:
        """The frames of the next message, as writable views of the buffer, for a ``Decoder``.

        ``timeout``: seconds to wait for a message to start arriving (None: wait forever);
        ``TimeoutError`` when none does. ``EOFError`` when the other end is closed and nothing is
        left to read. ``DecodeError`` for a message over ``max_bytes`` or one that is not a blob.
        """
        conn = self._conn
        if timeout is not None and not conn.poll(timeout):
            raise TimeoutError(f"no message arrived within {timeout} s")
        buffer = self._buffer
        if _in_use(buffer):
            buffer = self._buffer = bytearray(len(buffer))
        try:
            size = conn.recv_bytes_into(buffer)
        except BufferTooShort as exc:
            message = exc.args[0]
            size = len(message)
            if size > self._max_bytes:
                raise DecodeError(
                    f"message of {size} bytes is over the receiver's max_bytes of {self._max_bytes}"
                ) from None
            buffer = self._buffer = bytearray(min(1 << (size - 1).bit_length(), self._max_bytes))
            buffer[:size] = message
        return split(memoryview(buffer)[:size])
