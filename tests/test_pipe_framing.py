"""tensorwire.pipe on a Connection's descriptor: multiprocessing's framing, broken and hostile streams."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import re
import signal
import struct
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.pipe import Receiver, frame_header, send
from tests.test_pipe import WAIT, KiB, MiB, Sender, buffer_span, payload, same_bits


@pytest.fixture
def pipe() -> Iterator[tuple[Connection, Connection]]:
    """``(reader, writer)`` ends of a real pipe."""
    reader, writer = mp.Pipe(duplex=False)
    yield reader, writer
    reader.close()
    writer.close()


class Proxy:
    """A connection that is not a ``Connection``: ``tensorwire.pipe`` takes its general path."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def send_bytes(self, buf: bytes) -> None:
        self.conn.send_bytes(buf)

    def poll(self, timeout: float | None = None) -> bool:
        return self.conn.poll(timeout)

    def recv_bytes_into(self, buf: Any) -> int:
        return self.conn.recv_bytes_into(buf)


def frames_of(nbytes: int, seed: int) -> list[Any]:
    """A message with its tensor in a buffer of its own (an inline frame after frame 0)."""
    encoder = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0))
    return encoder.encode(diffusion.Output(output=payload(nbytes, seed)))


def decoded(frames: list[Any]) -> torch.Tensor:
    out = tw.Decoder(REGISTRY).decode(frames).output
    assert isinstance(out, torch.Tensor)
    return out


def write_raw(writer: Connection, data: bytes) -> None:
    """``data`` on the writer's descriptor, as it is: no framing added."""
    view = memoryview(data)
    while view:
        view = view[os.write(writer.fileno(), view) :]


def test_frame_header_is_what_send_bytes_writes() -> None:
    assert frame_header(0) == b"\0\0\0\0"
    assert frame_header(4096) == struct.pack("!i", 4096)
    assert frame_header(0x7FFFFFFF) == b"\x7f\xff\xff\xff"
    assert frame_header(0x80000000) == b"\xff\xff\xff\xff" + struct.pack("!Q", 0x80000000)


@pytest.mark.parametrize("nbytes", [16, 100 * KiB, 3 * MiB], ids=["16B", "100KiB", "3MiB"])
def test_send_is_read_by_recv_bytes_as_the_joined_blob(pipe: tuple[Connection, Connection], nbytes: int) -> None:
    reader, writer = pipe
    frames = frames_of(nbytes, seed=nbytes)
    sender = Sender(writer)
    sender.send_raw(lambda: send(writer, frames))
    assert reader.poll(WAIT)
    assert reader.recv_bytes() == tw.join(frames)
    sender.wait()


@pytest.mark.parametrize("nbytes", [16, 100 * KiB, 3 * MiB], ids=["16B", "100KiB", "3MiB"])
def test_the_receiver_reads_what_send_bytes_sent(pipe: tuple[Connection, Connection], nbytes: int) -> None:
    reader, writer = pipe
    frames = frames_of(nbytes, seed=nbytes)
    sender = Sender(writer)
    sender.send_raw(lambda: writer.send_bytes(tw.join(frames)))
    got = Receiver(reader).recv(timeout=WAIT)
    sender.wait()
    assert [bytes(f) for f in got] == [bytes(f) for f in frames]
    assert all(not f.readonly for f in got)
    assert same_bits(decoded(got), decoded(frames))


def test_a_size_in_the_long_form_is_read(pipe: tuple[Connection, Connection]) -> None:
    """-1 and a 64-bit size, which send_bytes writes past 2 GiB, is read for any size (recv_bytes does too)."""
    reader, writer = pipe
    blob = tw.join(frames_of(100, seed=1))
    for _ in range(2):
        write_raw(writer, struct.pack("!i", -1) + struct.pack("!Q", len(blob)) + blob)
    assert reader.recv_bytes() == blob
    got = Receiver(reader).recv(timeout=WAIT)
    assert bytes(tw.join(got)) == blob


def test_a_negative_size_is_a_decode_error_and_the_next_message_reads(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    write_raw(writer, struct.pack("!i", -5))
    frames = frames_of(16, seed=2)
    send(writer, frames)
    receiver = Receiver(reader)
    with pytest.raises(tw.DecodeError, match=r"^message header announces -5 bytes$"):
        receiver.recv(timeout=WAIT)
    assert same_bits(decoded(receiver.recv(timeout=WAIT)), decoded(frames))


def test_an_oversized_message_is_read_off_in_bounded_memory(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(reader, initial=64 * KiB, max_bytes=1 * MiB)
    big, small = frames_of(8 * MiB, seed=3), frames_of(16, seed=4)
    size = len(tw.join(big))
    sender = Sender(writer)

    def send_both() -> None:
        send(writer, big)
        send(writer, small)

    sender.send_raw(send_both)
    tracemalloc.start()
    try:
        over = rf"^message of {size} bytes is over the receiver's max_bytes of {MiB}$"
        with pytest.raises(tw.DecodeError, match=over):
            receiver.recv(timeout=WAIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * KiB, f"reading off an {size}-byte message held {peak} bytes"
    assert receiver.capacity == 64 * KiB
    assert same_bits(decoded(receiver.recv(timeout=WAIT)), decoded(small))
    sender.wait()


def test_a_message_just_over_half_of_max_bytes_takes_no_more_than_max_bytes_to_read(
    pipe: tuple[Connection, Connection],
) -> None:
    """A grown buffer was padded to its capacity with one temporary of the missing bytes: a message
    just over half of ``max_bytes`` made the receiver allocate ~1.5 times ``max_bytes``."""
    reader, writer = pipe
    frames = frames_of(4 * MiB, seed=5)
    size = len(tw.join(frames))
    assert 4 * MiB < size < 4 * MiB + 4 * KiB
    receiver = Receiver(reader, initial=64 * KiB, max_bytes=8 * MiB)
    sender = Sender(writer)
    sender.send_raw(lambda: send(writer, frames))
    tracemalloc.start()
    try:
        got = receiver.recv(timeout=WAIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    sender.wait()
    assert same_bits(decoded(got), decoded(frames)) and receiver.capacity == 8 * MiB
    # max_bytes, bytearray's margin as it grows (an eighth) and a chunk or two: ~1.5 x max_bytes before
    assert peak < 9 * MiB + 512 * KiB, f"a {size}-byte message took {peak} bytes"


def test_a_kept_error_of_a_message_over_max_bytes_through_another_reader_keeps_none_of_it(
    pipe: tuple[Connection, Connection],
) -> None:
    """Another reader's ``recv_bytes_into`` reads a message whole before it can tell it does not fit;
    the error kept that message (its context, the ``BufferTooShort`` carrying it, and a local of its
    traceback's frame), so each error a caller kept held a message over ``max_bytes``."""
    reader, writer = pipe
    receiver = Receiver(Proxy(reader), initial=64 * KiB, max_bytes=1 * MiB)
    big = frames_of(8 * MiB, seed=3)
    size = len(tw.join(big))
    sender = Sender(writer)
    sender.send_raw(lambda: send(writer, big))
    tracemalloc.start()
    try:
        over = rf"^message of {size} bytes is over the receiver's max_bytes of {MiB}$"
        with pytest.raises(tw.DecodeError, match=over) as caught:
            receiver.recv(timeout=WAIT)
        sender.wait()
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.__traceback__ is not None
    assert kept < 1 * MiB, f"the kept error of a {size}-byte message held {kept} bytes"


@pytest.mark.parametrize("through", ["connection", "another reader"])
def test_a_message_of_max_bytes_is_read_into_max_bytes_and_one_byte_more_is_refused(
    pipe: tuple[Connection, Connection], through: str
) -> None:
    """``max_bytes`` is the largest message taken, exactly: one of that size is read into a buffer
    of that size (not the next power of two), and a message one byte larger is a ``DecodeError``
    naming both sizes, on a ``Connection``'s descriptor and through another reader's
    ``recv_bytes_into`` alike; the message after it reads."""
    reader, writer = pipe
    frames = frames_of(100 * KiB, seed=5)
    size = len(tw.join(frames))
    small = frames_of(16, seed=6)
    conn: Any = reader if through == "connection" else Proxy(reader)
    sender = Sender(writer)

    def send_all() -> None:
        send(writer, frames)
        send(writer, frames)
        send(writer, small)

    sender.send_raw(send_all)
    fits = Receiver(conn, initial=1 * KiB, max_bytes=size)
    assert [bytes(f) for f in fits.recv(timeout=WAIT)] == [bytes(f) for f in frames]
    assert fits.capacity == size
    over = Receiver(conn, initial=1 * KiB, max_bytes=size - 1)
    with pytest.raises(
        tw.DecodeError, match=rf"^message of {size} bytes is over the receiver's max_bytes of {size - 1}$"
    ):
        over.recv(timeout=WAIT)
    assert over.capacity == 1 * KiB
    assert same_bits(decoded(over.recv(timeout=WAIT)), decoded(small))
    sender.wait()


@pytest.mark.parametrize("through", ["connection", "another reader"])
def test_a_blob_of_more_frames_than_max_frames_is_refused_before_its_frames_are_made(
    pipe: tuple[Connection, Connection], through: str
) -> None:
    """A blob of many empty frames costs 8 bytes a frame on the wire and ~200 in views: one of more
    than ``max_frames`` (by default frame 0 and ``Limits().max_buffers``) is a ``DecodeError``
    before a view is made, so ``max_bytes`` still bounds what a message makes the receiver hold;
    the message after it reads."""
    reader, writer = pipe
    count = tw.Limits().max_buffers + 2
    many = [b""] * count
    small = frames_of(16, seed=6)
    conn: Any = reader if through == "connection" else Proxy(reader)
    sender = Sender(writer)

    def send_all() -> None:
        send(writer, many)
        send(writer, [b"", b"", b""])
        send(writer, small)

    sender.send_raw(send_all)
    receiver = Receiver(conn)
    assert receiver.max_frames == count - 1
    with pytest.raises(tw.DecodeError, match=rf"^blob of {count} frames is over the max_frames of {count - 1}$"):
        receiver.recv(timeout=WAIT)
    few = Receiver(conn, max_frames=2)
    with pytest.raises(tw.DecodeError, match=r"^blob of 3 frames is over the max_frames of 2$"):
        few.recv(timeout=WAIT)
    assert same_bits(decoded(few.recv(timeout=WAIT)), decoded(small))
    sender.wait()
    with pytest.raises(ValueError, match=r"^max_frames must be at least 1 frame, got 0$"):
        Receiver(conn, max_frames=0)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"\0\0", r"\(2 of 4 bytes\)"),
        (struct.pack("!i", -1) + b"\0\0\0", r"\(3 of 8 bytes\)"),
        (struct.pack("!i", 100) + bytes(10), r"\(10 of 100 bytes\)"),
        (struct.pack("!i", 200_000) + bytes(70_000), r"\(70000 of 200000 bytes\)"),  # over max_bytes, read off
    ],
    ids=["in the size", "in the long size", "in the message", "in an oversized message"],
)
def test_an_end_of_file_inside_a_message_is_an_os_error(
    pipe: tuple[Connection, Connection], data: bytes, error: str
) -> None:
    reader, writer = pipe
    sender = Sender(writer)

    def write_and_close() -> None:
        write_raw(writer, data)
        writer.close()

    sender.send_raw(write_and_close)
    receiver = Receiver(reader, max_bytes=100_000)
    with pytest.raises(OSError, match=rf"^got end of file during message {error}$"):
        receiver.recv(timeout=WAIT)
    sender.wait()
    with pytest.raises(EOFError):
        receiver.recv(timeout=WAIT)


def test_a_closed_or_one_way_end_is_refused_as_connection_refuses_it(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    frames = frames_of(16, seed=5)
    with pytest.raises(OSError, match=r"^connection is read-only$"):
        send(reader, frames)
    with pytest.raises(OSError, match=r"^connection is write-only$"):
        Receiver(writer).recv()
    receiver = Receiver(reader)
    reader.close()
    writer.close()
    with pytest.raises(OSError, match=r"^handle is closed$"):
        receiver.recv()
    with pytest.raises(OSError, match=r"^handle is closed$"):
        send(writer, frames)


def test_short_writes_are_resumed_where_they_stopped(
    pipe: tuple[Connection, Connection], monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = pipe
    frames = frames_of(100 * KiB, seed=6)
    writev = os.writev
    calls = []

    def short(fd: int, buffers: Any) -> int:  # at most 1,000 bytes a call, as a signal could cut it
        calls.append(len(buffers))
        room, pieces = 1000, []
        for buffer in buffers:
            view = memoryview(buffer).cast("B")[:room]
            pieces.append(view)
            room -= view.nbytes
            if not room:
                break
        return writev(fd, pieces)

    monkeypatch.setattr(os, "writev", short)
    sender = Sender(writer)
    sender.send_raw(lambda: send(writer, frames))
    got = Receiver(reader).recv(timeout=WAIT)
    sender.wait()
    assert len(calls) > 100
    assert [bytes(f) for f in got] == [bytes(f) for f in frames]


def test_more_pieces_than_one_writev_takes(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    frames = [bytes([i % 251]) * (1 + i % 7) for i in range(1500)]  # 1,500 frames: over 3,000 pieces
    sender = Sender(writer)
    sender.send_raw(lambda: send(writer, frames))
    got = Receiver(reader).recv(timeout=WAIT)
    sender.wait()
    assert [bytes(f) for f in got] == frames


def test_other_connections_take_send_bytes_and_recv_bytes_into(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(Proxy(reader), initial=1 * KiB)
    sender = Sender(writer)
    for nbytes in (16, 100 * KiB):
        frames = frames_of(nbytes, seed=nbytes)
        sender.send_raw(lambda: send(Proxy(writer), frames))  # noqa: B023 (waited for below)
        got = receiver.recv(timeout=WAIT)
        sender.wait()
        assert [bytes(f) for f in got] == [bytes(f) for f in frames]
    assert receiver.capacity == 128 * KiB


def test_through_another_reader_a_second_message_does_not_overwrite_a_live_tensor(
    pipe: tuple[Connection, Connection],
) -> None:
    """Through a reader that is not a ``Connection`` as on one: while a tensor decoded from one
    message lives, the next message goes into a fresh buffer, and the tensor keeps its bits."""
    reader, writer = pipe
    receiver = Receiver(Proxy(reader), initial=1 * MiB)
    first, second = payload(256 * KiB, seed=7), payload(256 * KiB, seed=8)
    sender = Sender(writer)
    sender.send(first)
    held = decoded(receiver.recv(timeout=WAIT))
    sender.wait()
    sender.send(second)
    got = decoded(receiver.recv(timeout=WAIT))
    sender.wait()
    assert same_bits(held, first)
    assert same_bits(got, second)


@pytest.mark.parametrize("through", ["connection", "another reader"])
def test_a_message_read_while_a_large_one_is_held_takes_a_buffer_sized_for_it(
    pipe: tuple[Connection, Connection], through: str
) -> None:
    """While frames of a large message are held, the next message goes into a fresh buffer sized
    for it (``initial`` here), not one as large as the held one: each small message kept after a
    large one took a buffer of the large one's size, up to ``max_bytes`` each. Another reader
    reads a message before its size is known: its fresh buffer is sized for the message before it
    (so only the first small one takes one of the large one's size)."""
    reader, writer = pipe
    conn: Any = reader if through == "connection" else Proxy(reader)
    receiver = Receiver(conn, initial=1 * KiB, max_bytes=16 * MiB)
    big, smalls = frames_of(3 * MiB, seed=1), [frames_of(16, seed=seed) for seed in range(2, 6)]
    sender = Sender(writer)

    def send_all() -> None:
        for frames in [big, *smalls]:
            send(writer, frames)

    sender.send_raw(send_all)
    fresh = [1 * KiB] * len(smalls) if through == "connection" else [4 * MiB] + [1 * KiB] * (len(smalls) - 1)
    held = [receiver.recv(timeout=WAIT)]
    assert receiver.capacity == 4 * MiB
    for capacity in fresh:
        held.append(receiver.recv(timeout=WAIT))
        assert receiver.capacity == capacity
    sender.wait()
    assert [len(frames[0].obj) for frames in held] == [4 * MiB, *fresh]  # type: ignore[arg-type]
    assert [[bytes(f) for f in frames] for frames in held] == [[bytes(f) for f in m] for m in [big, *smalls]]


@pytest.mark.parametrize("through", ["connection", "another reader"])
@pytest.mark.parametrize(
    ("blob", "error"),
    [
        (b"not a blob", r"^not a tensorwire blob: magic b'not ', expected b'TWB1'$"),
        (
            struct.pack("<4sIQ", b"TWB1", 1, 2**40),
            r"^blob truncated: frame 0 needs 1099511627776 bytes at 64, blob has 16$",
        ),
        (tw.join([b""] * 3), r"^blob of 3 frames is over the max_frames of 2$"),
    ],
    ids=["not a blob", "frame table past the blob", "too many frames"],
)
def test_a_kept_error_of_a_blob_that_does_not_split_keeps_nothing_of_the_buffer(
    pipe: tuple[Connection, Connection], through: str, blob: bytes, error: str
) -> None:
    """The error's traceback held the view of the buffer that the split was given: while the
    caller kept the error (to report it later), every later message went into a fresh buffer."""
    reader, writer = pipe
    conn: Any = reader if through == "connection" else Proxy(reader)
    receiver = Receiver(conn, max_frames=2)
    frames = frames_of(64, seed=9)
    writer.send_bytes(blob)
    send(writer, frames)
    span = buffer_span(receiver)
    with pytest.raises(tw.DecodeError, match=error) as caught:
        receiver.recv(timeout=WAIT)
    kept = caught.value
    assert same_bits(decoded(receiver.recv(timeout=WAIT)), decoded(frames))
    assert buffer_span(receiver) == span, "the kept error kept the buffer the blob was read into"
    assert kept.__traceback__ is not None


def test_a_socket_connection_takes_the_same_path() -> None:
    """A ``multiprocessing.connection`` Client/Listener pair (a Unix socket) is a Connection too."""
    from multiprocessing.connection import Client, Listener

    with Listener(family="AF_UNIX") as listener:
        client = Client(listener.address, family="AF_UNIX")
        server = listener.accept()
        try:
            assert type(server) is Connection
            frames = frames_of(3 * MiB, seed=7)
            sender = Sender(client)

            def send_twice() -> None:
                send(client, frames)
                client.send_bytes(tw.join(frames))

            sender.send_raw(send_twice)
            receiver = Receiver(server)
            for _ in range(2):  # from send, then from send_bytes
                got = receiver.recv(timeout=WAIT)
                assert [bytes(f) for f in got] == [bytes(f) for f in frames]
                del got
            sender.wait()
        finally:
            client.close()
            server.close()


def test_a_long_form_size_over_max_bytes_is_read_off_too(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    small = frames_of(16, seed=8)
    sender = Sender(writer)

    def write_over_and_send() -> None:
        write_raw(writer, struct.pack("!iQ", -1, 2 * MiB) + bytes(2 * MiB))
        send(writer, small)

    sender.send_raw(write_over_and_send)
    receiver = Receiver(reader, max_bytes=1 * MiB)
    with pytest.raises(
        tw.DecodeError, match=rf"^message of {2 * MiB} bytes is over the receiver's max_bytes of {MiB}$"
    ):
        receiver.recv(timeout=WAIT)
    assert same_bits(decoded(receiver.recv(timeout=WAIT)), decoded(small))
    sender.wait()


class Interrupted(Exception):
    """What the signal handler of ``interrupted_after`` raises."""


def interrupted_after(seconds: float, action: Callable[[], object], error: type[Exception] = Interrupted) -> None:
    """``action()``, which must be stopped by an ``error`` a SIGALRM handler raises ``seconds`` in."""

    def interrupt(signum: int, frame: object) -> None:
        raise error("interrupted")

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        with pytest.raises(error, match=r"^interrupted$"):
            action()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("error", [Interrupted, TimeoutError], ids=["exception", "os error"])
@pytest.mark.parametrize("timeout", [None, WAIT], ids=["blocking", "timeout"])
def test_a_message_an_exception_stops_part_of_the_way_is_not_read_on(
    pipe: tuple[Connection, Connection], timeout: float | None, error: type[Exception]
) -> None:
    """An exception that stops ``recv`` in the middle of a message leaves the stream there: the next
    ``recv`` says so, instead of reading the rest as a message of its own (here a blob that the
    stopped message carried, which was never sent). An ``OSError`` too (a ``TimeoutError`` from an
    alarm, say), which was taken for the connection's end."""
    reader, writer = pipe
    carried = tw.join(frames_of(64, seed=1))
    rest = frame_header(len(carried)) + carried
    blob = tw.join([b"x" * 100 + rest])
    write_raw(writer, (frame_header(len(blob)) + blob)[: -len(rest)])
    receiver = Receiver(reader)
    interrupted_after(0.2, lambda: receiver.recv(timeout=timeout), error)
    write_raw(writer, rest)
    with pytest.raises(OSError, match=r"^an earlier recv was interrupted in the middle of a message"):
        receiver.recv(timeout=WAIT)


@pytest.mark.parametrize("timeout", [None, WAIT], ids=["blocking", "timeout"])
def test_an_exception_as_the_read_of_a_size_returns_leaves_the_stream_marked(
    pipe: tuple[Connection, Connection], monkeypatch: pytest.MonkeyPatch, timeout: float | None
) -> None:
    """A signal whose handler raises can land as the read of a message's size returns with its
    bytes (the handler runs once the read is back): the stream was then past them, unmarked, and
    the next ``recv`` read the message's own bytes as the size of one."""
    reader, writer = pipe
    for seed in (1, 2):
        send(writer, frames_of(64, seed=seed))
    readv = os.readv

    def read_then_interrupt(fd: int, buffers: Any) -> int:
        readv(fd, buffers)
        monkeypatch.setattr(os, "readv", readv)
        raise Interrupted("interrupted")  # (what the handler of a signal that came during the read raises)

    monkeypatch.setattr(os, "readv", read_then_interrupt)
    receiver = Receiver(reader)
    with pytest.raises(Interrupted, match=r"^interrupted$"):
        receiver.recv(timeout=timeout)
    with pytest.raises(OSError, match=r"^an earlier recv was interrupted in the middle of a message"):
        receiver.recv(timeout=1.0)


@pytest.mark.parametrize("error", [Interrupted, TimeoutError], ids=["exception", "os error"])
def test_a_send_an_exception_stops_part_of_the_way_is_not_written_on(
    pipe: tuple[Connection, Connection], error: type[Exception]
) -> None:
    """An interrupt stopped ``send`` with part of a message in the pipe; the next ``send`` wrote
    its message after that part, so the receiver read the start of it as the rest of the first
    (its tensor's last bytes taken from the next message, decoded without a word). An ``OSError``
    a signal handler raised (an alarm's ``TimeoutError``) was taken for a write's own failure, which
    writes nothing, when it came as the write returned."""
    reader, writer = pipe
    big = frames_of(4 * MiB, seed=3)  # more than the pipe holds: the send waits for a reader
    interrupted_after(0.2, lambda: send(writer, big), error)
    receiver = Receiver(reader, max_bytes=8 * MiB)
    received: list[BaseException | list[memoryview]] = []

    def receive() -> None:  # (reading while the next send writes, if it does)
        try:
            received.append(receiver.recv(timeout=1.0))
        except BaseException as exc:
            received.append(exc)

    thread = threading.Thread(target=receive)
    thread.start()
    try:
        with pytest.raises(OSError, match=r"^an earlier send was interrupted in the middle of a message"):
            send(writer, frames_of(64, seed=4))
    finally:
        thread.join(WAIT)
    (outcome,) = received
    assert isinstance(outcome, TimeoutError)
    assert str(outcome).startswith("a message did not arrive in full within 1.0 s")


def test_a_send_that_fails_before_writing_leaves_the_connection_usable(pipe: tuple[Connection, Connection]) -> None:
    """A write that fails writes nothing (here the peer's end is closed): the stream is whole, and
    the connection is not marked."""
    reader, writer = pipe
    reader.close()
    with pytest.raises(BrokenPipeError):  # (Python ignores SIGPIPE)
        send(writer, frames_of(64, seed=5))
    with pytest.raises(BrokenPipeError):  # not the "interrupted" OSError
        send(writer, frames_of(64, seed=5))


def test_a_message_of_no_frames_is_refused_with_nothing_written(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    with pytest.raises(ValueError, match=r"^a blob holds at least one frame, got none$"):
        send(writer, [])
    assert not reader.poll(0)
    frames = frames_of(64, seed=7)
    send(writer, frames)
    assert same_bits(decoded(Receiver(reader).recv(timeout=WAIT)), decoded(frames))


@pytest.mark.parametrize(
    ("pieces", "error", "message"),
    [
        (1, BufferError, "memoryview: underlying buffer is not C-contiguous"),
        (2, BufferError, "memoryview: underlying buffer is not C-contiguous"),
        (1500, TypeError, "memoryview: casts are restricted to C-contiguous views"),
    ],
    ids=["alone", "after frame 0", "past one writev"],
)
def test_a_frame_that_is_not_contiguous_is_refused_and_leaves_the_connection_usable(
    pipe: tuple[Connection, Connection], pieces: int, error: type[Exception], message: str
) -> None:
    """``writev`` takes no strided buffer: nothing of the message is written, so the connection is
    not marked as cut off in the middle of one (every later send failed as if it were)."""
    reader, writer = pipe
    strided = memoryview(bytes(range(100)))[::2]
    with pytest.raises(error, match=rf"^{message}$"):
        send(writer, [b"frame"] * (pieces - 1) + [strided])
    assert not reader.poll(0)
    frames = frames_of(64, seed=6)
    send(writer, frames)
    assert same_bits(decoded(Receiver(reader).recv(timeout=WAIT)), decoded(frames))


@pytest.mark.parametrize("timeout", [None, WAIT], ids=["blocking", "timeout"])
def test_an_exception_while_no_message_has_started_leaves_the_stream_readable(
    pipe: tuple[Connection, Connection], timeout: float | None
) -> None:
    reader, writer = pipe
    receiver = Receiver(reader)
    interrupted_after(0.1, lambda: receiver.recv(timeout=timeout))
    frames = frames_of(64, seed=2)
    send(writer, frames)
    assert same_bits(decoded(receiver.recv(timeout=WAIT)), decoded(frames))


def test_a_send_to_a_peer_that_reads_nothing_times_out_saying_how_much_went(
    pipe: tuple[Connection, Connection],
) -> None:
    """``send`` had no timeout: a peer that stopped reading held the sender for good. A message
    larger than the pipe holds now goes in part, then the send is a ``TimeoutError``; the stream is
    then in the middle of that message, so the next send says so."""
    _, writer = pipe
    frames = frames_of(8 * MiB, seed=8)
    total = len(frame_header(len(tw.join(frames)))) + len(tw.join(frames))
    with pytest.raises(TimeoutError) as caught:
        send(writer, frames, timeout=0.2)
    went = re.fullmatch(
        rf"a message was not sent in full within 0\.2 s: (\d+) of {total} bytes written", str(caught.value)
    )
    assert went is not None and 0 < int(went.group(1)) < total, str(caught.value)
    assert os.get_blocking(writer.fileno())  # as it was
    with pytest.raises(OSError, match=r"^an earlier send was interrupted in the middle of a message"):
        send(writer, frames_of(16, seed=9), timeout=WAIT)


def test_a_send_that_timed_out_before_writing_anything_leaves_the_connection_usable(
    pipe: tuple[Connection, Connection],
) -> None:
    """Messages of up to 4 KiB go into a pipe whole or not at all: once it is full, a send with a
    timeout of 0 writes nothing, and the connection goes on once the peer reads."""
    reader, writer = pipe
    small = frames_of(512, seed=10)
    sent = 0
    while True:
        try:
            send(writer, small, timeout=0)
        except TimeoutError as exc:
            assert str(exc).startswith("a message was not sent in full within 0 s: 0 of ")
            assert str(exc).endswith(" bytes written (nothing of it: the connection can be used on)")
            break
        sent += 1
    assert sent > 0
    receiver = Receiver(reader)
    for _ in range(sent):
        assert same_bits(decoded(receiver.recv(timeout=WAIT)), decoded(small))
    last = frames_of(64, seed=11)
    send(writer, last, timeout=WAIT)
    assert same_bits(decoded(receiver.recv(timeout=WAIT)), decoded(last))


def test_a_send_timeout_is_refused_where_it_cannot_hold(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    with pytest.raises(
        ValueError, match=r"^a send timeout needs a multiprocessing Connection \(on POSIX\), not Proxy$"
    ):
        send(Proxy(writer), frames_of(16, seed=12), timeout=1.0)
    with pytest.raises(ValueError, match=r"^timeout must be a number of seconds"):
        send(writer, frames_of(16, seed=12), timeout=math.nan)
    assert not reader.poll(0)  # nothing sent either way
    send(Proxy(writer), frames_of(16, seed=12), timeout=math.inf)  # no limit: taken anywhere
    assert reader.poll(WAIT)


def test_non_blocking_descriptors_are_waited_on(pipe: tuple[Connection, Connection]) -> None:
    """A descriptor set non-blocking (for an event loop, say) is waited on as a blocking one is: a
    message larger than the pipe holds was cut off part of the way at both ends (``BlockingIOError``),
    and the next ``recv`` read the middle of it as a message."""
    reader, writer = pipe
    os.set_blocking(reader.fileno(), False)
    os.set_blocking(writer.fileno(), False)
    messages = [frames_of(1 * MiB, seed=seed) for seed in (1, 2)]
    sender = Sender(writer)

    def send_all() -> None:
        for frames in messages:
            send(writer, frames)

    sender.send_raw(send_all)
    receiver = Receiver(reader, max_bytes=4 * MiB)
    for frames, timeout in zip(messages, [None, WAIT], strict=True):
        assert same_bits(decoded(receiver.recv(timeout=timeout)), decoded(frames))
    sender.wait()


_STREAM_MESSAGES = [tw.join(frames_of(n, 7)) for n in (0, 100, 5000)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(
        st.one_of(
            st.binary(max_size=64),
            st.builds(frame_header, st.integers(0, 2**40)),
            st.builds(lambda size: struct.pack("!i", size), st.integers(-(2**31), 2**31 - 1)),
            st.sampled_from(_STREAM_MESSAGES).map(lambda blob: frame_header(len(blob)) + blob),
            st.tuples(st.sampled_from(_STREAM_MESSAGES), st.integers(0, 6000), st.integers(0, 255)).map(
                lambda t: frame_header(len(t[0])) + t[0][: t[1]] + bytes([t[2]]) + t[0][t[1] + 1 :]
            ),
        ),
        max_size=5,
    ),
    max_frames=st.sampled_from([1, 2, 4097]),
)
def test_a_hostile_byte_stream_gives_messages_or_the_documented_errors(pieces: list[bytes], max_frames: int) -> None:
    """Whatever bytes arrive on the pipe (sizes of any value, blobs cut or damaged, junk between
    them), each ``recv`` gives frames that decode or raise a ``CodecError``, or raises a
    ``DecodeError``, ``EOFError`` at the end or ``OSError`` for a message the end cuts off."""
    reader, writer = mp.Pipe(duplex=False)
    stream = b"".join(pieces)

    def feed() -> None:  # all of it, then the end
        write_raw(writer, stream)
        writer.close()

    feeder = threading.Thread(target=feed)
    feeder.start()
    receiver = Receiver(reader, initial=64, max_bytes=MiB, max_frames=max_frames)
    try:
        while True:  # each recv reads some of the stream: to its end
            try:
                frames = receiver.recv(timeout=WAIT)
            except tw.DecodeError as exc:
                assert str(exc)
                continue
            except EOFError:
                break
            except OSError as exc:  # the end came in the middle of a message
                assert type(exc) is OSError and "end of file" in str(exc)
                break
            try:
                tw.Decoder(REGISTRY).decode(frames)
            except tw.CodecError as exc:
                assert str(exc)
            del frames
    finally:
        feeder.join()
        reader.close()
