"""tensorwire.pipe: one blob per message over a multiprocessing pipe, received into a reusable buffer."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.pipe import Receiver, send
from tests.wire_helpers import edit_descriptor, frame_of, head_of

KiB = 1024
MiB = 1024 * KiB
SIZES = [16, 100 * KiB, 3 * MiB]
WAIT = 60.0  # seconds: the bound on every wait for a message, a thread or a child


def payload(nbytes: int, seed: int) -> torch.Tensor:
    """A float32 tensor of ``nbytes`` random bits (NaNs and infinities included)."""
    generator = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31, (nbytes // 4,), dtype=torch.int64, generator=generator)
    return bits.to(torch.int32).view(torch.float32)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def blob_size(tensor: torch.Tensor) -> int:
    return len(tw.join(tw.Encoder().encode(diffusion.Output(output=tensor))))


def buffer_span(receiver: Receiver) -> tuple[int, int]:
    """``(address, size)`` of the receiver's current buffer (the view taken here is let go)."""
    array = np.frombuffer(receiver.buffer, dtype=np.uint8)
    return array.ctypes.data, array.nbytes


def inside(tensor: torch.Tensor, span: tuple[int, int]) -> bool:
    start, size = span
    nbytes = tensor.numel() * tensor.element_size()
    return start <= tensor.data_ptr() and tensor.data_ptr() + nbytes <= start + size


class Sender:
    """Sends on ``conn`` from a thread, so a message larger than the pipe's capacity cannot block the test."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.encoder = tw.Encoder()

    def send(self, tensor: torch.Tensor) -> None:
        frames = self.encoder.encode(diffusion.Output(output=tensor))
        self.send_raw(lambda: send(self.conn, frames))

    def send_raw(self, action: Callable[[], None]) -> None:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                action()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.thread = thread
        self.errors = errors

    def wait(self) -> None:
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the sender thread did not finish in time"
        assert not self.errors, self.errors


@pytest.fixture(params=[False, True], ids=["simplex", "duplex"])
def pipe(request: pytest.FixtureRequest) -> Iterator[tuple[Connection, Connection]]:
    """``(reader, writer)`` ends of a real pipe."""
    reader, writer = mp.Pipe(duplex=request.param)
    yield reader, writer
    reader.close()
    writer.close()


def roundtrip(receiver: Receiver, sender: Sender, tensor: torch.Tensor) -> tuple[list[memoryview], torch.Tensor]:
    sender.send(tensor)
    frames = receiver.recv(timeout=WAIT)
    sender.wait()
    out = tw.Decoder(REGISTRY).decode(frames).output
    assert isinstance(out, torch.Tensor)
    return frames, out


@pytest.mark.parametrize("nbytes", SIZES, ids=["16B", "100KiB", "3MiB"])
def test_roundtrip_is_bit_exact_writable_and_in_the_buffer(pipe: tuple[Connection, Connection], nbytes: int) -> None:
    reader, writer = pipe
    receiver = Receiver(reader, initial=64 * KiB)
    tensor = payload(nbytes, seed=nbytes)
    size = blob_size(tensor)
    frames, out = roundtrip(receiver, Sender(writer), tensor)
    assert same_bits(out, tensor)
    assert all(not frame.readonly for frame in frames)
    expected = 64 * KiB if size <= 64 * KiB else 1 << (size - 1).bit_length()
    assert receiver.capacity == expected
    out.view(torch.int32)[0] = 0x12345678  # writable
    if len(frames) == 1:  # small enough to travel inside frame 0: the decoder builds it as its own copy
        return
    span = buffer_span(receiver)
    assert inside(out, span), "the decoded tensor was copied out of the receiver's buffer"
    at = out.data_ptr() - span[0]  # a write lands in the buffer itself
    assert np.frombuffer(receiver.buffer, dtype=np.int32, count=1, offset=at)[0] == 0x12345678


def test_growth_is_bounded_by_max_bytes(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    tensor = payload(3 * MiB, seed=1)
    size = blob_size(tensor)
    receiver = Receiver(reader, initial=1 * KiB, max_bytes=size + 100)
    _, out = roundtrip(receiver, Sender(writer), tensor)
    assert same_bits(out, tensor)
    assert receiver.capacity == size + 100  # not the next power of two, 4 MiB


@pytest.mark.parametrize("initial", [1000, 64 * KiB])
def test_a_buffer_grown_as_a_message_arrives_ends_at_its_full_size(
    pipe: tuple[Connection, Connection], initial: int
) -> None:
    """A message larger than the buffer is read into one grown as its bytes arrive (``initial`` is
    not a power of two in one case); it ends as large as a buffer made for it at once."""
    reader, writer = pipe
    receiver = Receiver(reader, initial=initial)
    tensor = payload(3 * MiB, seed=7)
    _, out = roundtrip(receiver, Sender(writer), tensor)
    assert same_bits(out, tensor)
    assert receiver.capacity == 1 << (blob_size(tensor) - 1).bit_length()


def test_a_message_that_stops_holds_the_bytes_that_came_not_the_size_announced(
    pipe: tuple[Connection, Connection],
) -> None:
    """A peer that announces ``max_bytes`` and stops after 40 KiB makes the receiver hold the
    64 KiB chunk a large message is read in (what came), not a buffer of the size announced (all
    of it resident: ``bytearray`` writes every byte it is made with), for ever after the timeout."""
    reader, writer = pipe
    receiver = Receiver(reader, initial=16 * KiB, max_bytes=64 * MiB)
    os.write(writer.fileno(), (64 * MiB).to_bytes(4, "big") + b"x" * (40 * KiB))  # (within the pipe's capacity)
    progress = f"{40 * KiB} of {64 * MiB} bytes read"
    with pytest.raises(TimeoutError, match=rf"^a message did not arrive in full within 0.2 s: {progress}$"):
        receiver.recv(timeout=0.2)
    assert receiver.capacity == 64 * KiB


def test_a_second_message_does_not_overwrite_a_live_tensor(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(reader, initial=4 * MiB)
    sender = Sender(writer)
    first, second, third = (payload(100 * KiB, seed=s) for s in (1, 2, 3))

    frames, kept = roundtrip(receiver, sender, first)
    first_span = buffer_span(receiver)
    assert inside(kept, first_span)
    del frames  # only the decoded tensor holds the first buffer now

    frames, out = roundtrip(receiver, sender, second)
    second_span = buffer_span(receiver)
    assert second_span[0] != first_span[0], "the second message went into memory a live tensor uses"
    assert same_bits(kept, first), "the first tensor changed under the second message"
    assert same_bits(out, second)
    assert inside(out, second_span)

    del frames, out  # nothing views the second buffer any more: the next message reuses it
    _, out = roundtrip(receiver, sender, third)
    assert buffer_span(receiver)[0] == second_span[0]
    assert same_bits(out, third)
    assert same_bits(kept, first)


def value_bits(value: Any) -> bytes:
    """The bytes of a host tensor or array, in logical order."""
    return (value.numpy() if isinstance(value, torch.Tensor) else value).tobytes()


@pytest.mark.parametrize(
    "make",
    [
        lambda seed: payload(100 * KiB, seed).numpy(),
        lambda seed: payload(100 * KiB, seed).view(256, -1),
        lambda seed: payload(100 * KiB, seed).numpy().reshape(256, -1)[:, ::2],
    ],
    ids=["ndarray", "2-d tensor", "strided ndarray"],
)
def test_a_decoded_array_or_tensor_of_any_rank_keeps_its_buffer(
    pipe: tuple[Connection, Connection], make: Callable[[int], Any]
) -> None:
    """numpy takes a memoryview's object as an array's base and lets go of the view itself: values
    built by numpy on a frame must still keep the receiver's buffer exported."""
    reader, writer = pipe
    receiver = Receiver(reader, initial=4 * MiB)
    sender = Sender(writer)
    first, second = make(1), make(2)
    expected = value_bits(first)  # (bits: the payload holds NaNs)
    sender.send(first)
    frames = receiver.recv(timeout=WAIT)
    sender.wait()
    kept = tw.Decoder(REGISTRY).decode(frames).output
    first_span = buffer_span(receiver)
    del frames  # only the decoded value holds the first buffer now

    sender.send(second)
    out = tw.Decoder(REGISTRY).decode(receiver.recv(timeout=WAIT)).output
    sender.wait()
    assert buffer_span(receiver)[0] != first_span[0], "the second message went into memory a live value uses"
    assert type(kept) is type(first) and value_bits(kept) == expected, "the first value changed under it"
    assert value_bits(out) == value_bits(second)


def _unknown_type(frames: list[bytes]) -> list[bytes]:
    return [frames[0].replace(b"diffusion.Output", b"diffusion.Outpuu"), *frames[1:]]


def _too_deep(frames: list[bytes]) -> list[bytes]:
    head = head_of(frames[0])
    for _ in range(100):  # a body nested past the depth limit: refused before it is read
        head[4] = [head[4]]
    return [frame_of(head), *frames[1:]]


def _bad_descriptor(frames: list[bytes]) -> list[bytes]:
    head = head_of(frames[0])
    head[4]["output"] = edit_descriptor(head[4]["output"], nbytes=3)  # refused once its buffer is imported
    return [frame_of(head), *frames[1:]]


@pytest.mark.parametrize("damage", [_unknown_type, _too_deep, _bad_descriptor])
def test_a_kept_decode_error_keeps_nothing_of_the_receivers_buffer(
    pipe: tuple[Connection, Connection], damage: Callable[[list[bytes]], list[bytes]]
) -> None:
    reader, writer = pipe
    receiver = Receiver(reader, initial=4 * MiB)
    encoder = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0))
    frames = [bytes(f) for f in encoder.encode(diffusion.Output(output=payload(100 * KiB, seed=1)))]
    sender = Sender(writer)
    sender.send_raw(lambda: send(writer, damage(frames)))
    with pytest.raises(tw.DecodeError) as caught:
        tw.Decoder(REGISTRY).decode(receiver.recv(timeout=WAIT))
    sender.wait()
    span = buffer_span(receiver)
    kept = caught.value  # (the error and its traceback, as a caller that reports it later keeps them)
    _, out = roundtrip(receiver, sender, payload(100 * KiB, seed=2))
    assert buffer_span(receiver)[0] == span[0], "the kept error kept the failed message's buffer"
    assert same_bits(out, payload(100 * KiB, seed=2)) and kept.__traceback__ is not None


def test_held_frames_alone_keep_their_buffer(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(reader)
    sender = Sender(writer)
    first, second = payload(16, seed=1), payload(16, seed=2)
    sender.send(first)
    frames = receiver.recv(timeout=WAIT)
    sender.wait()
    before = [bytes(f) for f in frames]
    _, out = roundtrip(receiver, sender, second)
    assert [bytes(f) for f in frames] == before
    assert same_bits(tw.Decoder(REGISTRY).decode(frames).output, first)
    assert same_bits(out, second)


def test_a_held_buffer_view_is_a_use_too(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(reader)
    sender = Sender(writer)
    roundtrip(receiver, sender, payload(16, seed=1))
    view = receiver.buffer
    snapshot = bytes(view)
    roundtrip(receiver, sender, payload(16, seed=2))
    assert bytes(view) == snapshot


def test_over_max_bytes_is_a_decode_error_naming_both_sizes(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(reader, initial=64 * KiB, max_bytes=1 * MiB)
    sender = Sender(writer)
    big = payload(3 * MiB, seed=1)
    size = blob_size(big)
    sender.send(big)
    with pytest.raises(tw.DecodeError, match=rf"\b{size}\b.*\b{1 * MiB}\b"):
        receiver.recv(timeout=WAIT)
    sender.wait()
    assert receiver.capacity == 64 * KiB
    small = payload(16, seed=2)  # the oversized message was consumed: the next one reads cleanly
    _, out = roundtrip(receiver, sender, small)
    assert same_bits(out, small)


def test_a_payload_that_is_not_a_blob_is_a_decode_error(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(reader)
    writer.send_bytes(b"not a tensorwire blob")
    with pytest.raises(tw.DecodeError):
        receiver.recv(timeout=WAIT)


def test_nothing_arriving_is_a_timeout(pipe: tuple[Connection, Connection]) -> None:
    reader, _ = pipe
    receiver = Receiver(reader)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        receiver.recv(timeout=0.05)
    assert time.monotonic() - start >= 0.04


@pytest.mark.parametrize("timeout", [0, -1.0, 1e-9])
def test_a_message_already_there_is_read_with_a_timeout_that_is_up(
    pipe: tuple[Connection, Connection], timeout: float
) -> None:
    """A timeout of zero (or less) waits for nothing, but a message already in the pipe is read
    (the bytes after its size counted as a stalled message once, and broke the connection)."""
    reader, writer = pipe
    receiver = Receiver(reader)
    for seed in (1, 2):
        tensor = payload(1 * KiB, seed=seed)
        send(writer, tw.Encoder().encode(diffusion.Output(output=tensor)))
        assert same_bits(tw.Decoder(REGISTRY).decode(receiver.recv(timeout=timeout)).output, tensor)


def _recv_in_a_thread(receiver: Receiver, timeout: float) -> tuple[threading.Thread, list[BaseException]]:
    """``receiver.recv(timeout)`` in a thread (which a read that never ends would keep), its error kept."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            receiver.recv(timeout=timeout)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


@pytest.mark.parametrize(
    ("sent", "progress"),
    [
        ((1000).to_bytes(4, "big") + b"x" * 10, "10 of 1000 bytes read"),  # the message itself
        (b"\x00\x00", "2 of 4 bytes read"),  # its size
        ((2 * MiB).to_bytes(4, "big") + b"x" * 10, f"10 of {2 * MiB} bytes read"),  # one over max_bytes, read off
        ((1000).to_bytes(4, "big"), "0 of 1000 bytes read"),  # its size, then none of its bytes
        ((-1).to_bytes(4, "big", signed=True), "0 of 8 bytes read"),  # a large size's marker, then not the size
        ((2 * MiB).to_bytes(4, "big"), f"0 of {2 * MiB} bytes read"),  # one over max_bytes, then none of its bytes
    ],
    ids=["message", "size", "oversized", "only-size", "only-large-marker", "oversized-only-size"],
)
def test_a_message_that_stops_part_of_the_way_is_a_timeout_and_the_connection_says_so(
    pipe: tuple[Connection, Connection], sent: bytes, progress: str
) -> None:
    """A sender that stops in the middle of a message holds ``recv(timeout=)`` no longer than the
    timeout (it waited for the rest forever before); the stream is then in the middle of that
    message, so the next ``recv`` says so instead of reading the rest as a new message."""
    reader, writer = pipe
    receiver = Receiver(reader, max_bytes=1 * MiB)
    os.write(writer.fileno(), sent)
    thread, raised = _recv_in_a_thread(receiver, 0.2)
    thread.join(WAIT)
    try:
        assert not thread.is_alive(), "recv(timeout=0.2) still waits for the rest of the message"
    finally:
        writer.close()  # (a thread still waiting gets the end of the file)
    [error] = raised
    assert type(error) is TimeoutError
    assert str(error) == f"a message did not arrive in full within 0.2 s: {progress}"
    with pytest.raises(OSError, match=rf"^the connection stopped in the middle of a message: {progress}$"):
        receiver.recv(timeout=WAIT)


@pytest.mark.parametrize("no_limit", [math.inf, 1e300])
def test_an_infinite_timeout_waits_as_none_does(pipe: tuple[Connection, Connection], no_limit: float) -> None:
    """``Connection.poll`` raises OverflowError on infinity (and on a timeout it cannot hold)."""
    reader, writer = pipe
    receiver = Receiver(reader)
    later = threading.Timer(0.2, lambda: send(writer, tw.Encoder().encode(diffusion.Output(output=torch.ones(3)))))
    later.start()
    assert torch.equal(tw.Decoder(REGISTRY).decode(receiver.recv(timeout=no_limit)).output, torch.ones(3))
    later.join()


def test_a_timeout_too_long_for_one_poll_reads_a_message_that_takes_several_reads(
    pipe: tuple[Connection, Connection],
) -> None:
    """The wait for the rest of a message is one poll at most ``LONGEST_WAIT`` long (``poll``
    overflowed on 1e300 once a message took more than one read)."""
    reader, writer = pipe
    values = torch.arange(1_000_000, dtype=torch.float32)  # 4 MB: many reads of a pipe
    frames = tw.Encoder().encode(diffusion.Output(output=values))
    writing = threading.Thread(target=send, args=(writer, frames), daemon=True)
    writing.start()
    try:
        got = Receiver(reader, max_bytes=64 * MiB).recv(timeout=1e300)
        assert torch.equal(tw.Decoder(REGISTRY).decode(got).output, values)
    finally:
        reader.close()  # (a writer the receiver stopped reading from gets EPIPE)
        writing.join(WAIT)


def test_a_timeout_of_nan_is_refused(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    send(writer, tw.Encoder().encode(diffusion.Output(output=torch.ones(3))))
    receiver = Receiver(reader)
    with pytest.raises(ValueError, match=r"timeout must be a number of seconds \(or None: no limit\), got nan"):
        receiver.recv(timeout=math.nan)
    assert torch.equal(tw.Decoder(REGISTRY).decode(receiver.recv(timeout=WAIT)).output, torch.ones(3))  # still there


@pytest.mark.parametrize("timeout", [None, WAIT], ids=["blocking", "timeout"])
def test_a_closed_sender_is_eof(pipe: tuple[Connection, Connection], timeout: float | None) -> None:
    reader, writer = pipe
    receiver = Receiver(reader)
    writer.close()
    with pytest.raises(EOFError):
        receiver.recv(timeout=timeout)


def test_eof_after_the_last_message(pipe: tuple[Connection, Connection]) -> None:
    reader, writer = pipe
    receiver = Receiver(reader)
    tensor = payload(16, seed=1)
    send(writer, tw.Encoder().encode(diffusion.Output(output=tensor)))
    writer.close()
    assert same_bits(tw.Decoder(REGISTRY).decode(receiver.recv(timeout=WAIT)).output, tensor)
    with pytest.raises(EOFError):
        receiver.recv(timeout=WAIT)


def test_arguments_are_checked() -> None:
    reader, writer = mp.Pipe(duplex=False)
    try:
        with pytest.raises(ValueError, match="initial"):
            Receiver(reader, initial=0)
        with pytest.raises(ValueError, match="max_bytes"):
            Receiver(reader, max_bytes=0)
        receiver = Receiver(reader, initial=64 * KiB, max_bytes=1 * KiB)
        assert receiver.capacity == 1 * KiB
        assert receiver.max_bytes == 1 * KiB
        assert receiver.conn is reader
    finally:
        reader.close()
        writer.close()


def echo_child(conn: Connection, count: int) -> None:
    """Run in a spawned process: receive ``count`` messages with a Receiver and send each back."""
    receiver = Receiver(conn, initial=64 * KiB)
    decoder = tw.Decoder(REGISTRY)
    encoder = tw.Encoder()
    for _ in range(count):
        message = decoder.decode(receiver.recv(timeout=WAIT))
        send(conn, encoder.encode(message))
        del message
    conn.close()


def test_across_a_spawned_process() -> None:
    ctx = mp.get_context("spawn")
    parent, child_end = ctx.Pipe(duplex=True)
    tensors = [payload(n, seed=n) for n in SIZES]
    child = ctx.Process(target=echo_child, args=(child_end, len(tensors)), daemon=True)
    child.start()
    child_end.close()
    try:
        receiver = Receiver(parent, initial=64 * KiB)
        sender = Sender(parent)
        for tensor in tensors:
            frames, out = roundtrip(receiver, sender, tensor)
            assert same_bits(out, tensor)
            assert len(frames) == 1 or inside(out, buffer_span(receiver))
            del frames, out
        assert receiver.capacity == 4 * MiB
        with pytest.raises(EOFError):
            receiver.recv(timeout=WAIT)
        child.join(WAIT)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
        child.join(WAIT)
        parent.close()
