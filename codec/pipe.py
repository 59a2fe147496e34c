"""Messages over a ``multiprocessing`` connection as one blob each, received into a reusable buffer.

``send(conn, frames)`` sends the frames of one encoded message as a single ``tw.join`` blob.
``Receiver(conn).recv()`` reads the next blob with ``conn.recv_bytes_into`` into a bytearray it
keeps, and returns ``tw.split`` views of it: writable frames, so a ``Decoder`` builds tensors
straight on the received bytes instead of copying them out of read-only ``bytes``::

    send(conn, tw.Encoder().encode(message))                # one end
    receiver = Receiver(conn)                               # the other end
    message = tw.Decoder(REGISTRY).decode(receiver.recv(timeout=5.0))

The reuse rule: the frames of one ``recv``, and every tensor or array decoded from them, are views
of the receiver's buffer. ``recv`` writes into that buffer again only when nothing views it any
more; while any view, frame or decoded value of the previous message is alive, the next message
goes into a fresh buffer sized for it as the first one is (``initial``, or the next power of two
that holds it), which then becomes the one that is reused. So a message never changes under values
decoded from an earlier one, values kept from one large message do not make each later one take
as much memory, and a consumer that lets go of each message before asking for the next reads
every message into the same memory. Views are
detected the way CPython enforces them: a bytearray with exported buffers refuses to resize.
Memory held some other way is not seen: a raw address (``data_ptr()``, ``ctypes``) kept after
its tensor is gone, or a frame closed with ``memoryview.release()`` while a tensor still uses it.

On a ``multiprocessing.connection.Connection`` (POSIX) both ends speak its framing on its file
descriptor directly, with no copy of their own: ``send`` gathers the blob's pieces into one
``writev`` (the frames are not joined first), and ``Receiver`` reads the size first, then the
message straight into its buffer (``Connection.recv_bytes_into`` reads into a ``BytesIO`` and
copies from there), so a message over ``max_bytes`` is read off in bounded chunks and never held,
and a ``recv`` timeout bounds the whole message, not only its start. A descriptor set non-blocking
is waited on as a blocking one is, so a message is never cut off part of the way at either end.
Either end talks to a plain ``send_bytes`` / ``recv_bytes`` peer. Other connections go through
``send_bytes`` and ``recv_bytes_into``.
"""

from __future__ import annotations

import os
import struct
import time
import weakref
from collections.abc import Sequence
from multiprocessing import BufferTooShort
from multiprocessing.connection import Connection
from traceback import clear_frames
from typing import Any, Protocol

from tensorwire._pipe_io import DRAIN, Ended, Stalled, Written, drain, read_into, readv, write_all, wrote_nothing
from tensorwire._timeouts import deadline_after, next_wait
from tensorwire._wire import MAX_FRAMES, Buffer, blob_parts, join, split
from tensorwire.errors import DecodeError

__all__ = [
    "DEFAULT_INITIAL",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_FRAMES",
    "ByteReader",
    "ByteWriter",
    "Receiver",
    "frame_header",
    "send",
]

DEFAULT_INITIAL = 64 * 1024
DEFAULT_MAX_BYTES = 1024**3
DEFAULT_MAX_FRAMES = MAX_FRAMES
"""``Receiver``'s default ``max_frames`` (``tw.split``'s): frame 0 and the buffers ``Limits`` allow."""


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


_DIRECT = os.name == "posix"  # a Connection's file descriptor is read and written with os.read/os.write
_SIZE = struct.Struct("!i")  # multiprocessing's framing: a message's size, big-endian
_LARGE = struct.Struct("!Q")  # past 0x7FFFFFFF bytes: a size of -1, then the size in 8 bytes
_LARGE_SIZE = 0x7FFFFFFF
_cut_off: weakref.WeakSet[Connection] = weakref.WeakSet()  # connections a send stopped part of the way
_SEND_CUT_OFF = "an earlier send was interrupted in the middle of a message, so the stream cannot be written on"


def send(conn: ByteWriter, frames: Sequence[Buffer], *, timeout: float | None = None) -> None:
    """Send the frames of one encoded message on ``conn`` as a single blob (``tw.join``).

    ``timeout``: seconds the whole message may take to go (None or ``math.inf``: no limit; NaN is
    a ``ValueError``; only on a ``Connection``): a peer that stops reading makes the send a
    ``TimeoutError`` saying how much of it went. One that wrote nothing leaves the connection
    usable; one that wrote part of the message leaves the stream in the middle of it, as below.

    On a ``multiprocessing.connection.Connection`` the blob's pieces (the frames themselves, not
    copied) go to its file descriptor in one ``writev``, framed as ``send_bytes`` frames them;
    elsewhere the frames are joined once and sent with ``send_bytes``. An exception that stops a
    send on a ``Connection`` once it may have written part of the message (an interrupt, an error a
    signal handler raises whatever its type, or a write that fails part of the way) leaves the
    stream in the middle of it: every later ``send`` on that connection is an ``OSError`` saying so
    (its peer's ``Receiver`` never reads the next message as the rest of that one; close the
    connection). A frame ``writev`` cannot take (one that is not C-contiguous) is refused with
    nothing written, and the connection stays usable. A send to a peer that closed its end is a
    ``BrokenPipeError`` only while SIGPIPE is ignored, as Python sets it at start-up: a process that
    restored its default action (``signal.SIG_DFL``) is killed by it, as by ``send_bytes``.
    Not safe from several threads on one connection at once (nor is ``send_bytes``): a pipe keeps
    only a write of up to 4 KiB (``PIPE_BUF``) whole, so a longer message may go in pieces with
    another thread's among them, and the peer reads garbage; send from one thread, or under a lock."""
    deadline = deadline_after(timeout)  # (None for infinity: no limit)
    if _DIRECT and type(conn) is Connection:
        if conn in _cut_off:
            raise OSError(_SEND_CUT_OFF)
        parts, size = blob_parts(frames)
        fd = conn.fileno()  # OSError("handle is closed") as Connection says it
        if not conn.writable:
            raise OSError("connection is read-only")
        header = frame_header(size)
        written = Written()
        blocking = deadline is not None and os.get_blocking(fd)
        try:
            if blocking:  # waited for with the deadline instead (``write_all``)
                os.set_blocking(fd, False)
            write_all(fd, [header, *parts], len(header) + size, written, deadline)
        except Stalled as stalled:
            went = "" if written.bytes else " (nothing of it: the connection can be used on)"
            if written.bytes:
                _cut_off.add(conn)
            raise TimeoutError(f"a message was not sent in full within {timeout} s: {stalled}{went}") from None
        except BaseException as exc:  # (``written`` counts what went; an interrupt may come as a write
            if written.bytes or not wrote_nothing(exc, parts):  # returns, before it is counted)
                _cut_off.add(conn)
            raise
        finally:
            if blocking:
                os.set_blocking(fd, True)
        return
    if deadline is not None:
        raise ValueError(f"a send timeout needs a multiprocessing Connection (on POSIX), not {type(conn).__name__}")
    conn.send_bytes(join(frames))


def frame_header(size: int) -> bytes:
    """What ``Connection.send_bytes`` writes ahead of a message of ``size`` bytes."""
    return _SIZE.pack(size) if size <= _LARGE_SIZE else _SIZE.pack(-1) + _LARGE.pack(size)


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
    two that holds it, at most ``max_bytes`` (on a ``Connection``, one past 64 KiB as its bytes
    arrive, so a peer that stops part of the way leaves what it sent held, not the size it
    announced); a fresh buffer (the current one still in use) is
    sized the same way for the message read into it, at least ``initial`` (through another
    reader, which tells a message's size only once it is read, for the message before it). A message over
    ``max_bytes`` is a ``DecodeError``; it has been read off the connection by then, so the next
    ``recv`` gets the message after it.
    On a ``Connection`` it is read off in 64 KiB chunks and dropped, so ``max_bytes`` bounds what a
    message can make the receiver hold; through another reader's ``recv_bytes_into`` (which reads
    a message whole before it can tell it does not fit) it bounds only the memory kept.
    ``max_frames``: the most frames a message may have (``DEFAULT_MAX_FRAMES``, what a decoder with
    the default ``Limits`` takes); a blob of more is a ``DecodeError`` before its frames are made
    (each costs ~25 times its 8 bytes in the blob's frame table). Not safe to share between threads:
    one ``recv`` at a time."""

    def __init__(
        self,
        conn: ByteReader,
        *,
        initial: int = DEFAULT_INITIAL,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_frames: int = DEFAULT_MAX_FRAMES,
    ) -> None:
        if initial < 1:
            raise ValueError(f"initial must be at least 1 byte, got {initial}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1 byte, got {max_bytes}")
        if max_frames < 1:
            raise ValueError(f"max_frames must be at least 1 frame, got {max_frames}")
        self._conn = conn
        self._max_bytes = max_bytes
        self._max_frames = max_frames
        self._initial = min(initial, max_bytes)
        self._buffer = bytearray(self._initial)
        self._last = 0  # the size of the last message read through another reader (its next one's guess)
        self._direct = conn if _DIRECT and type(conn) is Connection else None  # read off its descriptor
        self._head = memoryview(bytearray(_LARGE.size))  # a message's size, as it arrives
        self._short = self._head[: _SIZE.size]  # its first 4 bytes (-1 past 2 GiB: 8 more follow)
        self._broken = ""  # why the stream can no longer be read: a message stopped part of the way

    @property
    def conn(self) -> ByteReader:
        """The connection messages are read from."""
        return self._conn

    @property
    def max_bytes(self) -> int:
        """The largest message accepted, in bytes."""
        return self._max_bytes

    @property
    def max_frames(self) -> int:
        """The most frames a message may have."""
        return self._max_frames

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

        ``timeout``: seconds to wait for a message (None or ``math.inf``: wait forever; NaN is a
        ``ValueError``); ``TimeoutError`` when none starts to arrive. On a ``Connection`` the whole
        message must arrive within it too: one whose sender stops part of the way is a
        ``TimeoutError`` that leaves the stream in the middle of that message, so every later
        ``recv`` is an ``OSError`` saying so (close the connection); so is every ``recv`` after
        one that an exception (``KeyboardInterrupt``, a signal handler's whatever its type, a read
        that failed) stopped part of the way.
        ``EOFError`` when the other end is closed and nothing is left to read; ``OSError`` when it
        closes in the middle of a message. ``DecodeError`` for a message over ``max_bytes``, one
        whose header announces a negative size, one that is not a blob, or one of more than
        ``max_frames`` frames.
        """
        if self._broken:
            raise OSError(self._broken)
        conn = self._conn
        deadline = None
        if timeout is not None:
            deadline = deadline_after(timeout)  # (None for infinity: no limit)
            while not conn.poll(next_wait(deadline)):
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"no message arrived within {timeout} s")
        if self._direct is not None:
            try:
                return split(self._read_message(self._direct, deadline), max_frames=self._max_frames)
            except Stalled as stalled:
                if not self._broken:  # not a byte of it read: another reader of the descriptor took it
                    raise TimeoutError(f"no message arrived within {timeout} s") from None
                raise TimeoutError(f"a message did not arrive in full within {timeout} s: {stalled}") from None
            except DecodeError as exc:  # (the frames of its traceback had the buffer's view as a local)
                clear_frames(exc.__traceback__)  # so a caller that keeps the error keeps none of the buffer
                raise
        buffer = self._buffer
        if _in_use(buffer):
            buffer = self._fresh(self._last)  # (its size is known once it is read: a larger one grows it)
        try:
            size = conn.recv_bytes_into(buffer)
        except BufferTooShort as exc:
            size = len(exc.args[0])
            if size > self._max_bytes:  # (``exc`` stays the error's context: kept with the error, it
                exc.args = ()  # keeps none of the message, nor the frames of the read that holds it)
                exc.__traceback__ = None
                raise DecodeError(
                    f"message of {size} bytes is over the receiver's max_bytes of {self._max_bytes}"
                ) from None
            buffer = self._fresh(size)
            buffer[:size] = exc.args[0]
        self._last = size
        try:
            return split(memoryview(buffer)[:size], max_frames=self._max_frames)
        except DecodeError as exc:
            clear_frames(exc.__traceback__)  # (as above)
            raise

    def _fresh(self, size: int) -> bytearray:
        """A new buffer, made the one reused, for a message of ``size`` bytes (``_capacity``)."""
        buffer = self._buffer = bytearray(self._capacity(size))
        return buffer

    def _capacity(self, size: int) -> int:
        """The size of a fresh buffer for a message of ``size`` bytes: the next power of two that
        holds it, at least ``initial``, at most ``max_bytes``."""
        return min(max(1 << (size - 1).bit_length(), self._initial), self._max_bytes)

    def _read_message(self, conn: Connection, deadline: float | None) -> memoryview:
        """The next message on ``conn``, read off its descriptor as ``Connection.recv_bytes`` reads
        it (a big-endian size, -1 and a 64-bit size past 2 GiB, then the bytes), straight into the
        buffer (see the module for the reuse rule), all of it by ``deadline`` (None: no limit;
        else ``Stalled`` when a part of it does not come in time)."""
        fd = conn.fileno()  # OSError("handle is closed") as Connection says it
        if not conn.readable:
            raise OSError("connection is write-only")
        short = self._short
        short[0] = _UNREAD
        self._broken = _CUT_OFF  # until the message is read to its end: an exception may stop it anywhere
        try:
            got = readv(fd, short, deadline, "0 of 4 bytes read")
        except BaseException:  # (an interrupt may come as a read returns: the first byte says if it read)
            if short[0] == _UNREAD:
                self._broken = ""
            raise
        if not got:
            self._broken = ""
            raise EOFError
        try:
            view = self._read_rest(fd, got, deadline)
        except Stalled as stalled:
            self._broken = f"the connection stopped in the middle of a message: {stalled}"
            raise
        except DecodeError:  # read off to its end
            self._broken = ""
            raise
        except Ended as ended:  # the connection is at its end (any other OSError, a failed read's or one
            self._broken = ""  # a signal handler raised, leaves the stream in the middle of the message)
            raise OSError(*ended.args) from None
        self._broken = ""
        return view

    def _read_rest(self, fd: int, got: int, deadline: float | None) -> memoryview:
        """The message whose first ``got`` bytes of its size are read, read as ``_read_message`` says."""
        head = self._head
        read_into(fd, self._short, deadline, got)
        (size,) = _SIZE.unpack_from(head)
        if size == -1:
            read_into(fd, head, deadline)
            (size,) = _LARGE.unpack_from(head)
        elif size < 0:  # Connection reads it as an empty message: nothing of it follows
            raise DecodeError(f"message header announces {size} bytes")
        if size > self._max_bytes:
            drain(fd, size, deadline)
            raise DecodeError(f"message of {size} bytes is over the receiver's max_bytes of {self._max_bytes}")
        buffer = self._buffer
        if size > len(buffer) or _in_use(buffer):
            return self._read_growing(fd, size, deadline)
        view = memoryview(buffer)[:size]
        read_into(fd, view, deadline)
        return view

    def _read_growing(self, fd: int, size: int, deadline: float | None) -> memoryview:
        """A message of ``size`` bytes read as ``_read_rest`` says into a fresh buffer (``_capacity``
        bytes). Past ``DRAIN`` bytes the buffer grows as the message arrives (read a chunk at a
        time and appended): a peer that announces a large message and stops makes the receiver
        hold what it sent, not what it announced (``bytearray(n)`` writes all ``n`` bytes, so they
        are all resident)."""
        capacity = self._capacity(size)
        if capacity <= DRAIN:
            view = memoryview(self._fresh(size))[:size]
            read_into(fd, view, deadline)
            return view
        chunk = memoryview(self._fresh(DRAIN))  # (the current buffer goes now, not once the message is in)
        buffer = bytearray()
        while len(buffer) < size:
            part = chunk[: size - len(buffer)]
            read_into(fd, part, deadline, before=len(buffer), whole=size)
            buffer += part
        chunk[:] = bytes(len(chunk))  # the rest of the capacity, zeros a chunk at a time (no temporary
        while len(buffer) < capacity:  # of half the capacity beside the message)
            buffer += chunk[: capacity - len(buffer)]
        self._buffer = buffer
        return memoryview(buffer)[:size]


_CUT_OFF = "an earlier recv was interrupted in the middle of a message, so the stream cannot be read on"
_UNREAD = 0x80  # no size begins with this byte (one up to 0x7FFFFFFF begins with 0x00-0x7F, -1 with 0xFF)
