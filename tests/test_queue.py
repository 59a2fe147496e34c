"""The torch.multiprocessing queue transport: many producers, stale discard, TTL, bounds, timeouts, leaks."""

from __future__ import annotations

import ast
import errno
import gc
import logging
import os
import queue as stdlib_queue
import re
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest
import torch
import torch.multiprocessing as tmp

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports.base import Buffer, Handle
from tests.conftest import REPO

OOB = tw.EncodeOptions(inline_threshold=1, embed_threshold=0)


def _ctx() -> Any:
    return tmp.get_context("spawn")


def _pair(queue: Any, **options: Any) -> tuple[tw.Encoder, tw.Decoder, transports.QueueTransport]:
    tx = transports.QueueTransport(queue)
    rx = transports.QueueTransport(queue, **options)
    return tw.Encoder(transport=tx, options=OOB), tw.Decoder(REGISTRY, transports=[rx]), rx


def producer(
    name: int, data_queue: Any, frames_queue: Any, done_queue: Any, messages: int, die_after_first_put: bool = False
) -> None:
    """Encode ``messages`` messages of two tensors (different dtypes and shapes) each."""
    tx = transports.QueueTransport(data_queue)
    encoder = tw.Encoder(transport=tx, options=OOB)
    for m in range(messages):
        floats = torch.full((3 + name, 4), float(100 * name + m))
        ints = torch.arange(5 + m, dtype=torch.int16) + name
        if die_after_first_put:
            tx.begin_message()
            tx.export_storage(
                torch.empty(0, dtype=torch.uint8).set_(floats.untyped_storage()), 0, floats.numel() * 4, []
            )
            data_queue.close()
            data_queue.join_thread()  # the first tensor is really on its way
            os._exit(3)  # killed mid-stream: one tensor of the message is out, the other never comes
        frames = encoder.encode(diffusion.Output(output=(floats, ints), chunk_index=m))
        frames_queue.put((name, m, [bytes(memoryview(f)) for f in frames]))
    frames_queue.put((name, None, None))
    done_queue.get()  # stay alive until the consumer has taken our tensors (their fds come from us)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"timeout": 0}, "timeout must be a number of seconds > 0 and finite, got 0"),
        ({"timeout": float("inf")}, "timeout must be a number of seconds > 0 and finite, got inf"),
        ({"timeout": float("nan")}, "timeout must be a number of seconds > 0 and finite, got nan"),
        ({"ttl": -1.0}, "ttl must be a number of seconds > 0, got -1.0"),
        ({"ttl": float("nan")}, "ttl must be a number of seconds > 0, got nan"),
        ({"max_buffered": 0}, "max_buffered must be at least 1, got 0"),
        ({"max_buffered_bytes": -1}, "max_buffered_bytes must be at least 1, got -1"),
        ({"max_in_flight": 0}, "max_in_flight must be at least 1, got 0"),
    ],
)
def test_options_out_of_range_are_refused_by_name_when_the_transport_is_made(
    options: dict[str, Any], error: str
) -> None:
    """They were taken as given: an infinite or NaN timeout failed the first send inside the
    queue's own code, a max_in_flight of 0 made every CUDA send wait its timeout and fail."""
    with pytest.raises(ValueError) as info:
        transports.QueueTransport(_ctx().Queue(), **options)
    assert str(info.value) == error


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"timeout": True}, "timeout must be a number, got True"),
        ({"ttl": "300"}, "ttl must be a number, got '300'"),
        ({"max_in_flight": True}, "max_in_flight must be a number, got True"),
        ({"max_buffered": None}, "max_buffered must be a number, got None"),
    ],
)
def test_options_that_are_not_numbers_are_refused_by_name_when_the_transport_is_made(
    options: dict[str, Any], error: str
) -> None:
    """A bool was taken as 1 (a one-second timeout, one CUDA tensor in flight); a string or None
    failed a comparison with words that named no option."""
    with pytest.raises(TypeError) as info:
        transports.QueueTransport(_ctx().Queue(), **options)
    assert str(info.value) == error


def test_four_producers_three_messages_two_tensors_out_of_order() -> None:
    ctx = _ctx()
    data, frames_q, done = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=producer, args=(n, data, frames_q, done, 3)) for n in range(4)]
    for p in procs:
        p.start()
    received: dict[int, list[tuple[int, list[bytes]]]] = {n: [] for n in range(4)}
    finished = 0
    while finished < 4:
        name, m, frames = frames_q.get(timeout=60)
        if m is None:
            finished += 1
        else:
            received[name].append((m, frames))
    rx = transports.QueueTransport(data)
    decoder = tw.Decoder(REGISTRY, transports=[rx])
    order = [(3, 0), (1, 0), (1, 1), (0, 0), (3, 1), (2, 0), (0, 1), (2, 1), (0, 2), (1, 2), (3, 2), (2, 2)]
    for name, m in order:  # producers in any order, each producer's messages in its own order
        message = decoder.decode(received[name][m][1])
        floats, ints = message.output
        assert message.chunk_index == m
        assert floats.shape == (3 + name, 4) and bool((floats == 100 * name + m).all())
        assert ints.dtype == torch.int16 and ints.tolist() == [i + name for i in range(5 + m)]
    assert rx.buffered() == 0
    for _ in procs:
        done.put(None)
    for p in procs:
        p.join(timeout=30)


def test_stale_messages_are_discarded_with_a_counting_log_line(caplog: pytest.LogCaptureFixture) -> None:
    queue = _ctx().Queue()
    encoder, decoder, rx = _pair(queue)
    first = encoder.encode(diffusion.Output(output=(torch.ones(3), torch.ones(2, dtype=torch.int64))))
    second = encoder.encode(diffusion.Output(output=(torch.zeros(3), torch.zeros(2, dtype=torch.int64))))
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        out = decoder.decode(second)
    assert float(out.output[0].sum()) == 0.0
    assert "discarding 2 stale tensor(s) of 1 older message(s) from sender" in caplog.text
    assert rx.buffered() == 0
    with pytest.raises(tw.TransportError, match=r"no tensor 0 of message 1 from sender .* after waiting 0.2s"):
        tw.Decoder(REGISTRY, transports=[transports.QueueTransport(queue, timeout=0.2)]).decode(first)


def test_a_message_older_than_one_read_is_refused_as_stale_without_waiting() -> None:
    """Its receiver waited its whole timeout for tensors it had discarded (or would discard as they
    came), then said none came: a ``TransportError`` (ETIMEDOUT)."""
    queue = _ctx().Queue()
    encoder, decoder, rx = _pair(queue, timeout=1.0)
    first = encoder.encode(diffusion.Output(output=torch.ones(3)))
    second = encoder.encode(diffusion.Output(output=torch.zeros(3)))
    assert float(decoder.decode(second).output.sum()) == 0.0
    with pytest.raises(tw.DecodeError) as info:
        decoder.decode(first)
    assert re.fullmatch(
        r"queue tensor 0 of message 1 from sender \S+ is stale: message 2 of that sender was read already",
        info.value.message,
    )
    assert info.value.path is None and rx.buffered() == 0
    rx.close()


def test_a_message_decoded_twice_is_refused_without_waiting() -> None:
    """Its receiver waited its whole timeout for the tensors the first decode had taken, then said
    none came: a ``TransportError`` (ETIMEDOUT)."""
    queue = _ctx().Queue()
    encoder, decoder, rx = _pair(queue, timeout=1.0)
    frames = encoder.encode(diffusion.Output(output=(torch.ones(3), torch.zeros(2, dtype=torch.int64))))
    assert float(decoder.decode(frames).output[0].sum()) == 3.0
    with pytest.raises(tw.DecodeError) as info:
        decoder.decode(frames)
    assert re.fullmatch(
        r"queue tensor 0 of message 1 from sender \S+ was taken already, by an earlier decode of that message "
        r"\(one that read it, or failed after taking it\)",
        info.value.message,
    )
    assert info.value.path is None and rx.buffered() == 0
    rx.close()


def test_a_tensor_of_an_older_message_arriving_after_a_newer_one_was_read_is_not_buffered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A sender's tensor that arrives once a newer message of that sender has been read (held up,
    or sent again) can never be asked for: it is dropped with a log line, not kept in the buffer."""
    queue = _ctx().Queue()
    encoder, decoder, rx = _pair(queue, timeout=0.3)
    encoder.encode(diffusion.Output(output=torch.ones(3)))
    late = queue.get(timeout=10)  # the first message's tensor, held up
    second = encoder.encode(diffusion.Output(output=torch.zeros(3)))
    assert float(decoder.decode(second).output.sum()) == 0.0
    queue.put(late)
    third = encoder.encode(diffusion.Output(output=torch.full((3,), 2.0)))  # queued after the late one
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        assert float(decoder.decode(third).output.sum()) == 6.0  # the wait for it drains the late one
    assert rx.buffered() == 0 and rx.buffered_bytes() == 0
    stale = r"ignoring a stale tensor from sender \S+ \(message \d+ is older than the one consumed\)"
    assert any(re.fullmatch(stale, r.getMessage()) for r in caplog.records), caplog.text


def test_a_silent_sender_is_evicted_after_its_ttl(caplog: pytest.LogCaptureFixture) -> None:
    import time

    queue = _ctx().Queue()
    quiet = transports.QueueTransport(queue)
    talker = tw.Encoder(transport=transports.QueueTransport(queue), options=OOB)
    rx = transports.QueueTransport(queue, ttl=0.2)
    decoder = tw.Decoder(REGISTRY, transports=[rx])
    tw.Encoder(transport=quiet, options=OOB).encode(diffusion.Output(output=torch.ones(4)))  # never read
    first = talker.encode(diffusion.Output(output=torch.ones(2)))
    decoder.decode(first)  # drains quiet's tensor into the buffer on the way
    assert rx.buffered() == 1
    time.sleep(0.3)
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        decoder.decode(talker.encode(diffusion.Output(output=torch.ones(2))))
    assert f"evicting sender {quiet.sender_id!r}, silent for over 0.2s (1 buffered tensor(s) dropped)" in caplog.text
    assert rx.buffered() == 0


def test_storing_a_tensor_looks_at_no_more_senders_than_it_evicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tensor stored looked at every sender's last sighting to find the silent ones: draining
    ``n`` senders' tensors took ``n**2`` looks. Senders are kept in the order last seen, so that the
    look stops at the first one heard from within the ttl."""
    from tensorwire.transports import _queue_buffer

    looks = 0

    class _Counted(_queue_buffer._Sender):
        def __getattribute__(self, name: str) -> Any:
            if name == "last_seen":
                nonlocal looks
                looks += 1
            return super().__getattribute__(name)

    monkeypatch.setattr(_queue_buffer, "_Sender", _Counted)
    items: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    tensor = torch.ones(1, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
    senders = 500
    for number in range(senders):
        items.put((f"{number}-quiet", 0, 0, tensor))
    items.put(("0-quiet", 1, 0, tensor))  # the first sender, heard from again: now the last but one
    items.put(("talker", 0, 0, tensor))
    rx = transports.QueueTransport(items, timeout=5.0)
    wanted = transports.QueueHandle(sender="talker", message=0, tensor=0)
    assert bytes(rx.import_(wanted, [], 1, borrow=False)) == b"\x01"
    assert rx.buffered() == senders + 1
    assert looks <= 2 * (senders + 1)  # one look each store (was one per sender each store)
    seen = [sender.last_seen for sender in rx._senders.values()]
    assert seen == sorted(seen) and list(rx._senders)[-2:] == ["0-quiet", "talker"]
    rx.close()


def test_the_buffer_is_bounded() -> None:
    queue = _ctx().Queue()
    other = tw.Encoder(transport=transports.QueueTransport(queue), options=OOB)
    wanted = tw.Encoder(transport=transports.QueueTransport(queue), options=OOB)
    for _ in range(3):
        other.encode(diffusion.Output(output=torch.ones(8)))
    frames = wanted.encode(diffusion.Output(output=torch.ones(8)))
    rx = transports.QueueTransport(queue, max_buffered=2)
    with pytest.raises(tw.TransportError, match=r"receive buffer full \(2 tensors, 64 bytes; limits 2 and"):
        tw.Decoder(REGISTRY, transports=[rx]).decode(frames)
    queue.get(timeout=10)  # the wanted tensor, left on the queue
    other.encode(diffusion.Output(output=torch.ones(8)))
    frames = wanted.encode(diffusion.Output(output=torch.ones(8)))
    small = transports.QueueTransport(queue, max_buffered_bytes=10)
    with pytest.raises(tw.TransportError, match=r"receive buffer full \(0 tensors, 0 bytes; limits 1024 and 10\)"):
        tw.Decoder(REGISTRY, transports=[small]).decode(frames)


def test_the_buffer_counts_the_bytes_of_a_tensor_of_wider_elements() -> None:
    """A queued tensor was counted by its elements: one of 8-byte elements took eight times the
    bytes ``buffered_bytes()`` said, and went past ``max_buffered_bytes``."""
    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    rx = transports.QueueTransport(queue, timeout=0.2, max_buffered_bytes=4000)
    nobody = transports.QueueHandle(sender="nobody", message=1, tensor=0)
    queue.put(("s", 1, 0, torch.zeros(400, dtype=torch.float64)))
    with pytest.raises(tw.TransportError, match="no tensor 0 of message 1 from sender 'nobody'"):
        rx.import_(nobody, [], 8, borrow=False)
    assert rx.buffered() == 1 and rx.buffered_bytes() == 3200
    queue.put(("s", 1, 1, torch.zeros(200, dtype=torch.float64)))
    with pytest.raises(tw.TransportError, match=r"receive buffer full \(1 tensors, 3200 bytes; limits 1024 and 4000\)"):
        rx.import_(nobody, [], 8, borrow=False)
    assert rx.buffered() == 1 and rx.buffered_bytes() == 3200
    rx.close()


def test_the_tensor_asked_for_is_taken_whatever_room_the_buffer_has() -> None:
    """A receiver whose buffer was full dropped the very tensor it was waiting for (the buffer was
    full, a ``TransportError``), which it never had to buffer: the message was lost for good."""
    queue = _ctx().Queue()
    other = tw.Encoder(transport=transports.QueueTransport(queue), options=OOB)
    wanted = tw.Encoder(transport=transports.QueueTransport(queue), options=OOB)
    held = other.encode(diffusion.Output(output=torch.full((8,), 1.0)))
    rx = transports.QueueTransport(queue, max_buffered=1, max_buffered_bytes=40)
    decoder = tw.Decoder(REGISTRY, transports=[rx])
    for size in (8, 100):  # the buffer full by count, then too small for the tensor's bytes
        frames = wanted.encode(diffusion.Output(output=torch.full((size,), 2.0)))
        assert torch.equal(decoder.decode(frames).output, torch.full((size,), 2.0))
        assert (rx.buffered(), rx.buffered_bytes()) == (1, 32)  # the other sender's tensor
    assert torch.equal(decoder.decode(held).output, torch.full((8,), 1.0))
    assert (rx.buffered(), rx.buffered_bytes()) == (0, 0)
    rx.close()


def test_the_buffer_counts_follow_every_tensor_in_and_out() -> None:
    """``buffered`` and ``buffered_bytes`` through each way a tensor enters or leaves the buffer:
    stored, stored again under the same ids (a broken sender), read, released, discarded as stale."""
    queue = _ctx().Queue()
    rx = transports.QueueTransport(queue, timeout=0.5)

    def put(sender: str, message: int, index: int, nbytes: int) -> None:
        queue.put((sender, message, index, torch.zeros(nbytes, dtype=torch.uint8)))

    put("a", 0, 0, 10)
    put("a", 0, 0, 30)  # the same ids again: replaces the first
    put("a", 0, 1, 5)
    put("a", 1, 0, 7)
    put("b", 0, 0, 100)
    put("b", 0, 1, 1)
    with pytest.raises(tw.TransportError, match="no tensor 0 of message 0 from sender 'c'"):
        rx.import_(transports.QueueHandle(sender="c", message=0, tensor=0), [], 1, borrow=None)  # drains all
    assert (rx.buffered(), rx.buffered_bytes()) == (5, 143)
    assert len(rx.import_(transports.QueueHandle(sender="b", message=0, tensor=0), [], 100, borrow=None)) == 100
    assert (rx.buffered(), rx.buffered_bytes()) == (4, 43)
    rx.release(transports.QueueHandle(sender="b", message=0, tensor=1))
    rx.release(transports.QueueHandle(sender="b", message=0, tensor=1))  # gone already: no change
    assert (rx.buffered(), rx.buffered_bytes()) == (3, 42)
    assert len(rx.import_(transports.QueueHandle(sender="a", message=1, tensor=0), [], 7, borrow=None)) == 7
    assert (rx.buffered(), rx.buffered_bytes()) == (0, 0)  # message 0 of "a" discarded as stale
    put("a", 2, 0, 9)
    with pytest.raises(tw.TransportError, match="no tensor 0 of message 0 from sender 'c'"):
        rx.import_(transports.QueueHandle(sender="c", message=0, tensor=0), [], 1, borrow=None)
    assert (rx.buffered(), rx.buffered_bytes()) == (1, 9)
    rx.close()
    assert (rx.buffered(), rx.buffered_bytes()) == (0, 0)


def test_the_arriving_tensor_is_checked_against_the_buffer_entry() -> None:
    from tests.wire_helpers import edit_descriptor, frame_of, head_of

    queue = _ctx().Queue()
    encoder, decoder, _ = _pair(queue)
    frames = encoder.encode(diffusion.Output(output=torch.ones(8)))
    header = head_of(frames[0])
    header[3][0][0] = 16
    header[4]["output"] = edit_descriptor(header[4]["output"], shape=[4], nbytes=16)
    with pytest.raises(tw.DecodeError, match=r"is torch.uint8 of shape \(32,\), the buffer entry says 16 bytes"):
        decoder.decode([frame_of(header)])


@pytest.mark.parametrize(
    ("tensor", "shown"),
    [
        (torch.zeros(32, dtype=torch.int8), r"torch.int8 of shape \(32,\)"),
        (torch.zeros(2, 16, dtype=torch.uint8), r"torch.uint8 of shape \(2, 16\)"),
    ],
    ids=["another dtype", "another rank"],
)
def test_an_arriving_tensor_of_the_right_size_but_another_dtype_or_rank_is_refused(
    tensor: torch.Tensor, shown: str
) -> None:
    """The tensor a queue item carries must be the flat uint8 bytes its buffer entry names: one
    of as many elements but another dtype, or another rank, is a ``DecodeError``."""
    queue = _ctx().Queue()
    encoder, decoder, _ = _pair(queue)
    frames = encoder.encode(diffusion.Output(output=torch.ones(8)))
    sender, message, index, sent = queue.get(timeout=10)
    assert sent.dtype == torch.uint8 and sent.shape == (32,)
    queue.put((sender, message, index, tensor.share_memory_()))  # type: ignore[no-untyped-call]
    with pytest.raises(tw.DecodeError, match=rf"is {shown}, the buffer entry says 32 bytes$"):
        decoder.decode(frames)


SENDERS = ["s\n[fake] line", "s\x1b[31mred\x1b[0m\u202egnp.exe\r\x07"]  # what a log or a terminal acts on


@pytest.mark.parametrize("sender", [*SENDERS, "s" * 100_000])
def test_a_buffer_table_s_sender_id_is_quoted_escaped_and_cut_short(sender: str) -> None:
    """The checks of a peer's buffer table and of the tensor that arrives quote its sender id as
    every other message does: escaped, and its first 64 characters only."""
    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    rx = transports.QueueTransport(queue, timeout=1.0)
    handle = transports.QueueHandle(sender=sender, message=1, tensor=0)
    shown = repr(sender) if len(sender) <= 64 else repr(sender[:64]) + f"... ({len(sender)} characters)"
    with pytest.raises(tw.DecodeError) as twice:
        rx.verify([handle, handle], [])
    assert twice.value.message == f"queue tensor ({shown}, 1, 0) is named twice in one message"
    with pytest.raises(tw.DecodeError) as negative:
        rx.verify([transports.QueueHandle(sender=sender, message=-1, tensor=0)], [])
    assert negative.value.message == f"queue handle ({shown}, -1, 0): ids must not be negative"
    queue.put((sender, 1, 0, torch.zeros(4, dtype=torch.int8)))
    with pytest.raises(tw.DecodeError) as arrived:
        rx.import_(handle, [], 4, borrow=False)
    assert arrived.value.message == (
        f"queue tensor ({shown}, 1, 0) is torch.int8 of shape (4,), the buffer entry says 4 bytes"
    )
    rx.close()


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        ("twice", r"queue tensor \('[0-9a-f-]+', 1, 0\) is named twice in one message$"),
        ("negative message", r"queue handle \('[0-9a-f-]+', -1, 0\): ids must not be negative$"),
        ("negative tensor", r"queue handle \('[0-9a-f-]+', 1, -1\): ids must not be negative$"),
    ],
)
def test_a_buffer_table_naming_a_queue_tensor_twice_or_by_a_negative_id_is_refused(edit: str, error: str) -> None:
    """A peer's buffer table is checked before any tensor is taken off the queue: one handle named
    twice, or a negative message or tensor id, is a ``DecodeError``."""
    from tests.wire_helpers import frame_of, head_of

    queue = _ctx().Queue()
    encoder, decoder, _ = _pair(queue)
    frames = encoder.encode(diffusion.Output(output=[torch.ones(8), torch.ones(8)]))
    header = head_of(frames[0])
    first, second = header[3]
    if edit == "twice":
        second[1] = dict(first[1])
    else:
        first[1]["message" if edit == "negative message" else "tensor"] = -1
    with pytest.raises(tw.DecodeError, match=error):
        decoder.decode([frame_of(header)])


def test_a_handle_naming_a_megabyte_sender_id_is_a_timeout_error_quoting_it_cut_short() -> None:
    """The tensor of a sender that never sent here is waited for ``timeout``: the ``TransportError``
    (ETIMEDOUT) quoted the peer's sender id whole, so a megabyte id made a megabyte error line; it
    quotes the id's first 64 characters and says how long it was, and the rest of the text stays."""
    from tests.wire_helpers import frame_of, head_of

    queue = _ctx().Queue()
    encoder, decoder, _ = _pair(queue, timeout=0.05)
    header = head_of(encoder.encode(diffusion.Output(output=torch.ones(8)))[0])
    header[3][0][1]["sender"] = "s" * 1_000_000
    with pytest.raises(tw.TransportError) as info:
        decoder.decode([frame_of(header)])
    assert info.value.errno == errno.ETIMEDOUT
    shown = "'" + "s" * 64 + "'... (1000000 characters)"
    assert info.value.strerror == f"no tensor 0 of message 1 from sender {shown} after waiting 0.05s"


@pytest.mark.parametrize("sender", SENDERS)
def test_every_message_quoting_a_peer_s_sender_id_writes_it_escaped(
    sender: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A newline, an ANSI escape, a bidirectional override or a bell in a peer's sender id went into
    the error text and the log lines raw (a forged log line, a recoloured terminal); each is now
    quoted, its characters written as their escapes."""
    from multiprocessing.reduction import ForkingPickler

    shown = repr(sender)
    assert shown.isprintable() and "\n" not in shown and "\x1b" not in shown
    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    rx = transports.QueueTransport(queue, timeout=0.1, ttl=1.0, max_buffered=1)
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        with pytest.raises(tw.TransportError) as timeout:  # nothing came from it
            rx.import_(transports.QueueHandle(sender=sender, message=1, tensor=0), [], 4, borrow=False)
        assert timeout.value.strerror == f"no tensor 0 of message 1 from sender {shown} after waiting 0.1s"
        queue.put(("other", 0, 0, torch.zeros(4, dtype=torch.uint8)))  # the buffer holds one
        queue.put((sender, 1, 0, torch.zeros(4, dtype=torch.uint8)))
        with pytest.raises(tw.TransportError) as full:
            rx.import_(transports.QueueHandle(sender="nobody", message=0, tensor=0), [], 4, borrow=False)
        assert str(full.value.strerror).endswith(f"taking a tensor from sender {shown}")
        assert len(rx.import_(transports.QueueHandle(sender="other", message=0, tensor=0), [], 4, borrow=False)) == 4
        queue.put((sender, 1, 0, torch.zeros(4, dtype=torch.uint8)))
        queue.put((sender, 2, 0, torch.zeros(4, dtype=torch.uint8)))
        assert len(rx.import_(transports.QueueHandle(sender=sender, message=2, tensor=0), [], 4, borrow=False)) == 4
        for message, error in ((1, "is stale: message 2"), (2, "was taken already")):
            with pytest.raises(tw.DecodeError) as refused:
                rx.import_(transports.QueueHandle(sender=sender, message=message, tensor=0), [], 4, borrow=False)
            assert refused.value.message.startswith(f"queue tensor 0 of message {message} from sender {shown} {error}")
        queue.put((sender, 1, 0, torch.zeros(4, dtype=torch.uint8)))  # older than the one read
        queue.put((sender, 3, 0, b"not a pickle", "not-a-page"))
        queue.put((sender, 3, 1, bytes(ForkingPickler.dumps("no tensor")), "not-a-page"))
        queue.put((sender, 1 << 60, 0, b"", "not-a-page"))
        with pytest.raises(tw.TransportError):  # (drains them)
            rx.import_(transports.QueueHandle(sender="nobody", message=0, tensor=0), [], 4, borrow=False)
        time.sleep(1.1)
        queue.put(("late", 0, 0, torch.zeros(4, dtype=torch.uint8)))  # evicts the silent ones
        with pytest.raises(tw.TransportError):
            rx.import_(transports.QueueHandle(sender="nobody", message=0, tensor=0), [], 4, borrow=False)
    lines = [record.getMessage() for record in caplog.records]
    expected = [
        f"discarding 1 stale tensor(s) of 1 older message(s) from sender {shown}",
        f"ignoring a stale tensor from sender {shown} (message 1 is older than the one consumed)",
        f"dropping a CUDA tensor from sender {shown} that could not be opened: ",
        f"sender {shown} names an ack page 'not-a-page' that is not a tensorwire name",
        f"dropping a CUDA item from sender {shown} that is no tensor: 'no tensor'",
        f"dropping a CUDA item from sender {shown} whose ids no ack page holds: {1 << 60}/0",
        f"evicting sender {shown}, silent for over 1.0s (0 buffered tensor(s) dropped)",
    ]
    for start in expected:
        assert any(line.startswith(start) for line in lines), (start, lines)
    assert all(line.isprintable() for line in lines), lines
    rx.close()


def test_snapshot_copies_and_default_aliases() -> None:
    queue = _ctx().Queue()
    encoder, decoder, _ = _pair(queue)
    tensor = torch.arange(6.0)
    frames = encoder.encode(diffusion.Output(output=tensor))
    assert tensor.is_shared()  # type: ignore[no-untyped-call]  # moved into shared memory in place
    tensor[0] = 99.0
    assert float(decoder.decode(frames).output[0]) == 99.0  # later writes are visible: aliasing
    snap = tw.Encoder(transport=transports.QueueTransport(queue, snapshot=True), options=OOB)
    other = torch.arange(6.0)
    frames = snap.encode(diffusion.Output(output=other))
    other[0] = 99.0
    assert not other.is_shared() and float(decoder.decode(frames).output[0]) == 0.0  # type: ignore[no-untyped-call]


def test_a_producer_killed_mid_stream_does_not_stop_the_others() -> None:
    ctx = _ctx()
    data, frames_q, done = ctx.Queue(), ctx.Queue(), ctx.Queue()
    dying = ctx.Process(target=producer, args=(7, data, frames_q, done, 1, True))
    dying.start()
    dying.join(timeout=60)
    assert dying.exitcode == 3
    healthy = ctx.Process(target=producer, args=(1, data, frames_q, done, 2))
    healthy.start()
    got: list[list[Buffer]] = []
    while len(got) < 2:
        _, m, frames = frames_q.get(timeout=60)
        if m is not None:
            got.append(frames)
    rx = transports.QueueTransport(data, timeout=5)
    decoder = tw.Decoder(REGISTRY, transports=[rx])
    for m, frames in enumerate(got):
        assert decoder.decode(frames).chunk_index == m
    assert rx.buffered() <= 1  # the dead producer's half message (if it could be received) waits for its TTL
    frames_q.get(timeout=60)  # the healthy producer's end marker
    done.put(None)
    healthy.join(timeout=30)


def _own_shared_memory() -> int:
    """Bytes of shared memory this process holds: each /dev/shm file or memfd it has open or maps
    (unlinked ones too, as torch's are), once, and each /dev/shm file named for its pid by torch.
    Only this process's: another's use of /dev/shm does not count."""
    sizes: dict[tuple[int, int], int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target, info = os.readlink(f"/proc/self/fd/{fd}"), os.stat(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own fd, or one closed meanwhile
            continue
        if target.startswith(("/dev/shm/", "/memfd:")):
            sizes[(info.st_dev, info.st_ino)] = info.st_size
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            span, _, _, device, inode, *path = line.split(maxsplit=5)
            if path and path[0].startswith(("/dev/shm/", "/memfd:")):
                major, minor = (int(part, 16) for part in device.split(":"))
                low, high = (int(end, 16) for end in span.split("-"))
                key = (os.makedev(major, minor), int(inode))
                sizes[key] = max(sizes.get(key, 0), high - low)
    prefix = f"torch_{os.getpid()}_"
    named = sum(entry.stat().st_size for entry in os.scandir("/dev/shm") if entry.name.startswith(prefix))
    return sum(sizes.values()) + named


def test_two_thousand_messages_do_not_grow_anything() -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    queue = _ctx().Queue()
    encoder, decoder, rx = _pair(queue)
    for i in range(50):  # warm-up: the queue's feeder thread and pipes exist from here on
        decoder.decode(encoder.encode(diffusion.Output(output=torch.full((64,), float(i)))))
    base_fds, base_shm = fds(), _own_shared_memory()
    for i in range(2000):
        out = decoder.decode(encoder.encode(diffusion.Output(output=torch.full((64,), float(i)))))
        assert float(out.output[0]) == float(i)
    del out
    import gc

    gc.collect()
    assert rx.buffered() == 0
    assert fds() <= base_fds + 2
    assert _own_shared_memory() <= base_shm + 1024 * 1024


def test_a_full_queue_fails_the_export_after_its_timeout() -> None:
    queue = _ctx().Queue(maxsize=1)
    encoder = tw.Encoder(transport=transports.QueueTransport(queue, timeout=0.2), options=OOB)
    encoder.encode(diffusion.Output(output=torch.ones(4)))
    with pytest.raises(tw.TransportError, match=r"queue full for 0.2s sending") as info:
        encoder.encode(diffusion.Output(output=torch.ones(4)))
    assert info.value.errno == errno.EAGAIN


def test_a_send_on_a_full_queue_with_a_timeout_longer_than_a_wait_can_last_waits() -> None:
    """A ``timeout`` past what the queue's semaphore takes (``1e20``) was passed to it whole: a send
    that found the queue full failed at once with a ``TransportError`` (EINVAL), not waiting at all."""
    queue = _ctx().Queue(maxsize=1)
    tx = transports.QueueTransport(queue, timeout=1e20)
    encoder = tw.Encoder(transport=tx, options=OOB)
    encoder.encode(diffusion.Output(output=torch.ones(4)))  # the queue is full
    put, putting = queue.put, threading.Event()

    def noted_put(*args: Any, **kwargs: Any) -> None:
        putting.set()
        put(*args, **kwargs)

    def take_one() -> None:
        putting.wait()
        time.sleep(0.1)  # let the put start waiting for room
        taken.append(queue.get(timeout=60))

    taken: list[Any] = []
    queue.put = noted_put
    taker = threading.Thread(target=take_one, daemon=True)
    taker.start()
    encoder.encode(diffusion.Output(output=torch.full((4,), 2.0)))  # waits until the first item is taken
    taker.join(60)
    assert [item[:3] for item in taken] == [(tx.sender_id, 1, 0)]
    assert torch.equal(queue.get(timeout=60)[3].view(torch.float32), torch.full((4,), 2.0))


class _FlakyQueue:
    """A queue whose first item cannot be received (as when its producer died before we took its fds)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.failed = False

    def get(self, timeout: float) -> Any:
        if not self.failed:
            self.failed = True
            raise ConnectionRefusedError("the producer is gone")
        return self.items.pop(0)


def test_an_item_that_cannot_be_received_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    real = _ctx().Queue()
    frames = tw.Encoder(transport=transports.QueueTransport(real), options=OOB).encode(
        diffusion.Output(output=torch.arange(3.0))
    )
    flaky = _FlakyQueue([real.get(timeout=10)])
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        out = tw.Decoder(REGISTRY, transports=[transports.QueueTransport(flaky)]).decode(frames)
    assert out.output.tolist() == [0.0, 1.0, 2.0]
    assert "dropping a queue item that could not be received: the producer is gone" in caplog.text


class _Unpicklable:
    """An application's item that its receiver cannot unpickle."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, ("not a number",))


def test_an_item_that_does_not_unpickle_or_a_closed_queue_is_a_transport_error() -> None:
    """Their errors (here a ``ValueError`` each) came out of a decode: no ``CodecError``. The item
    that does not unpickle is gone: the same message decodes next time."""
    queue = _ctx().Queue()
    encoder, decoder, rx = _pair(queue)
    queue.put(_Unpicklable())
    frames = encoder.encode(diffusion.Output(output=torch.arange(3.0)))
    with pytest.raises(tw.TransportError, match=r"cannot take an item off the queue: ValueError\(\"invalid literal"):
        decoder.decode(frames)
    assert decoder.decode(frames).output.tolist() == [0.0, 1.0, 2.0]
    frames = encoder.encode(diffusion.Output(output=torch.arange(3.0)))
    queue.close()
    with pytest.raises(tw.TransportError, match=r"off the queue: ValueError\('Queue .* is closed'\)"):
        decoder.decode(frames)  # at once, not a warning for each try until the timeout
    assert rx.buffered() == 0


def test_items_that_are_not_tensorwire_items_are_dropped_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """Anything else on the queue (an application's stop sentinel, a tuple of other types) escaped
    ``decode`` as TypeError, ValueError or AttributeError."""
    queue = _ctx().Queue()
    others = [
        None,
        ("s",),
        ("s", 0, 0, "not a tensor"),
        ("s", "0", 0, torch.zeros(4, dtype=torch.uint8)),
        ("s", -1, 0, torch.zeros(4, dtype=torch.uint8)),
        ("s", 0, -1, torch.zeros(4, dtype=torch.uint8)),
        (0, 0, 0, torch.zeros(4, dtype=torch.uint8)),
    ]
    for item in others:
        queue.put(item)
    encoder = tw.Encoder(transport=transports.QueueTransport(queue), options=OOB)
    frames = encoder.encode(diffusion.Output(output=torch.arange(3.0)))
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        out = tw.Decoder(REGISTRY, transports=[transports.QueueTransport(queue, timeout=5)]).decode(frames)
    assert out.output.tolist() == [0.0, 1.0, 2.0]
    dropped = [r.getMessage() for r in caplog.records if "not a tensorwire item" in r.getMessage()]
    assert dropped == [f"dropping a queue item that is not a tensorwire item: {item!r}" for item in others]


def test_a_device_item_that_unpickles_to_no_tensor_is_dropped_not_stored(caplog: pytest.LogCaptureFixture) -> None:
    """A CUDA item's bytes that unpickle to something other than a tensor are dropped with a log
    line (its ack page name, not a tensorwire name, is refused too); the next message reads."""
    import pickle

    queue = _ctx().Queue()
    queue.put(("s", 0, 0, pickle.dumps("not a tensor"), "not-a-page"))
    encoder = tw.Encoder(transport=transports.QueueTransport(queue), options=OOB)
    frames = encoder.encode(diffusion.Output(output=torch.arange(3.0)))
    rx = transports.QueueTransport(queue, timeout=5)
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        out = tw.Decoder(REGISTRY, transports=[rx]).decode(frames)
    assert out.output.tolist() == [0.0, 1.0, 2.0]
    assert rx.buffered() == 0
    assert "dropping a CUDA item from sender 's' that is no tensor: 'not a tensor'" in caplog.text


# -- CUDA tensors (their logic, with a runtime that takes host tensors for device ones) -----------
def _device_like(values: torch.Tensor) -> torch.Tensor:
    return values.view(torch.uint8).reshape(-1)


def test_cuda_tensors_are_kept_until_the_receiver_acknowledges_them() -> None:
    from tests.cuda_fakes import FakeCudaRuntime
    from tests.wire_helpers import segments_of

    before = set(segments_of(os.getpid()))
    queue = _ctx().Queue()
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), max_in_flight=2, timeout=0.3)
    rx = transports.QueueTransport(queue)
    first, second = torch.arange(1000, dtype=torch.float32), torch.full((10,), 7, dtype=torch.int64)
    handles: list[Handle] = []
    for values in (first, second):
        tx.begin_message()
        handle = tx.export_device(_device_like(values), 0, values.numel() * values.element_size(), [])
        assert handle is not None
        handles.append(handle)
    assert tx.in_flight == 2 and all(isinstance(h, transports.QueueHandle) for h in handles)
    tx.begin_message()
    with pytest.raises(
        tw.TransportError,
        match=r"2 CUDA tensor\(s\) from sender \S+ not acknowledged by the receiver after 0.3s \(max_in_flight 2\)",
    ):
        tx.export_device(_device_like(first), 0, 4000, [])
    assert bytes(rx.import_(handles[0], [], 4000, borrow=False)) == first.numpy().tobytes()
    assert tx.in_flight == 1  # the first arrived; the second is still on its way
    assert bytes(rx.import_(handles[1], [], 80, borrow=False)) == second.numpy().tobytes()
    assert tx.in_flight == 0
    assert tx.export_device(_device_like(first), 0, 4000, []) is not None  # room again
    tx.close()
    rx.close()
    assert set(segments_of(os.getpid())) <= before  # the ack page went with its sender


def test_a_cuda_tensor_that_cannot_be_shared_fails_the_export(monkeypatch: pytest.MonkeyPatch) -> None:
    from multiprocessing.reduction import ForkingPickler

    from tests.cuda_fakes import FakeCudaRuntime

    def refuse(obj: Any, protocol: Any = None) -> bytes:
        raise RuntimeError("CUDA IPC is not supported with expandable segments")

    queue = _ctx().Queue()
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), timeout=0.2)
    monkeypatch.setattr(ForkingPickler, "dumps", refuse)
    tx.begin_message()
    with pytest.raises(tw.TransportError, match="cannot share a 40-byte buffer on cpu: CUDA IPC is not supported"):
        tx.export_device(_device_like(torch.ones(10)), 0, 40, [])
    assert tx.in_flight == 0 and queue.empty()
    tx.close()


def test_an_interrupt_landing_as_a_cuda_send_takes_its_room_gives_the_room_back() -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``) that landed as ``export_device`` took
    room for its tensor (as the room's lock was let go), before its give-back was entered, kept
    that room taken for good: each such interrupt lowered ``max_in_flight`` by one, until every
    CUDA send waited its timeout and failed. The room is given back."""
    from tests.cuda_fakes import FakeCudaRuntime

    class InterruptedAsLetGo:
        """The room's lock; the first time it is let go with room taken, a ``KeyboardInterrupt``."""

        def __init__(self, lock: Any) -> None:
            self._lock, self.raised = lock, False

        def __enter__(self) -> Any:
            return self._lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            self._lock.__exit__(*exc)
            if not self.raised and tx._sending:
                self.raised = True
                raise KeyboardInterrupt

    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), max_in_flight=1, timeout=0.3)
    lock = tx._streams_lock
    tx._streams_lock = InterruptedAsLetGo(lock)  # type: ignore[assignment]
    tx.begin_message()
    with pytest.raises(KeyboardInterrupt):
        tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    assert tx._streams_lock.raised  # type: ignore[attr-defined]
    tx._streams_lock = lock
    assert tx._sending == 0 and tx.in_flight == 0 and queue.empty()
    tx.begin_message()
    assert tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, []) is not None  # the room, again
    tx.close()


def test_an_interrupt_landing_as_an_ack_page_is_made_leaves_no_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``) that landed after a CUDA send created
    its stream's ack page, before the page's removal at close was set up, left the file in the
    directory for the sender's life (the next send made another one)."""
    from tensorwire.transports._ack import AckPage
    from tests.cuda_fakes import FakeCudaRuntime

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), timeout=0.3, directory=tmp_path)
    monkeypatch.setattr(AckPage, "__init__", interrupted)
    tx.begin_message()
    with pytest.raises(KeyboardInterrupt):
        tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == [] and tx.in_flight == 0
    tx.begin_message()
    assert tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, []) is not None
    assert len(list(tmp_path.iterdir())) == 1
    tx.close()
    assert list(tmp_path.iterdir()) == []


def test_snapshot_sends_a_device_copy() -> None:
    from tests.cuda_fakes import FakeCudaRuntime

    queue = _ctx().Queue()
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), snapshot=True)
    rx = transports.QueueTransport(queue)
    values = torch.zeros(4)
    tx.begin_message()
    handle = tx.export_device(_device_like(values), 0, 16, [])
    assert handle is not None
    values.fill_(5.0)  # after export: not seen by the receiver
    assert bytes(rx.import_(handle, [], 16, borrow=False)) == torch.zeros(4).numpy().tobytes()
    tx.close()
    rx.close()


def test_a_cpu_tensor_is_not_taken_as_a_device_one() -> None:
    tx = transports.QueueTransport(_ctx().Queue())  # the real runtime: a CPU tensor is no CUDA tensor
    assert tx.export_device(torch.zeros(4, dtype=torch.uint8), 0, 4, []) is None


def test_a_receiver_that_cannot_acknowledge_says_so_and_still_delivers(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from multiprocessing.reduction import ForkingPickler

    from tensorwire.transports._reaper import next_name

    impostor = tmp_path / next_name()  # a tensorwire name, but not an ack page
    impostor.write_bytes(b"\0" * 4096)
    queue = _ctx().Queue()
    rx = transports.QueueTransport(queue, directory=tmp_path, timeout=0.3)

    def payload() -> bytes:  # each carries its own shared fd, usable once
        return bytes(ForkingPickler.dumps(torch.arange(4, dtype=torch.uint8)))

    queue.put(("s1", 0, 0, payload(), "../../etc/passwd"))
    queue.put(("s2", 0, 0, payload(), impostor.name))
    queue.put(("s3", 0, 0, b"not a pickle", impostor.name))
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        for sender in ("s1", "s2"):
            handle = transports.QueueHandle(sender=sender, message=0, tensor=0)
            assert bytes(rx.import_(handle, [], 4, borrow=False)) == bytes(range(4))
        with pytest.raises(tw.TransportError, match=r"no tensor 0 of message 0 from sender 's3' after waiting 0\.3s"):
            rx.import_(transports.QueueHandle(sender="s3", message=0, tensor=0), [], 4, borrow=False)
    assert "sender 's1' names an ack page '../../etc/passwd' that is not a tensorwire name" in caplog.text
    assert "cannot acknowledge sender 's2': ack page" in caplog.text and "is not a 4096-byte page" in caplog.text
    assert "dropping a CUDA tensor from sender 's3' that could not be opened" in caplog.text
    rx.close()


def test_a_cuda_tensor_the_receiver_cannot_open_is_still_acknowledged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An item whose CUDA IPC open failed was dropped unacknowledged: its sender kept the tensor
    until ``close()``, and ``max_in_flight`` such items refused every later export."""
    from multiprocessing.reduction import ForkingPickler

    from tests.cuda_fakes import FakeCudaRuntime

    def unopenable(data: Any, **kwargs: Any) -> Any:
        raise RuntimeError("CUDA error: invalid resource handle")

    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()  # (one that pickles nothing itself)
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), max_in_flight=1, timeout=0.3)
    rx = transports.QueueTransport(queue, timeout=0.3)
    tx.begin_message()
    handle = tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    assert handle is not None and tx.in_flight == 1
    monkeypatch.setattr(ForkingPickler, "loads", unopenable)
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        with pytest.raises(tw.TransportError, match=r"no tensor 0 of message 1 from sender \S+ after waiting 0\.3s"):
            rx.import_(handle, [], 16, borrow=False)
    assert "that could not be opened: RuntimeError('CUDA error: invalid resource handle')" in caplog.text
    assert tx.in_flight == 0 and rx.buffered() == 0  # acknowledged, not buffered
    monkeypatch.undo()
    tx.begin_message()
    assert tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, []) is not None  # room again
    tx.close()
    rx.close()


@pytest.mark.parametrize(
    ("message", "index"), [(1 << 60, 0), (1, 1 << 20)], ids=["past the page's word", "a tensor id past a message's"]
)
def test_a_cuda_item_whose_ids_no_ack_page_holds_is_dropped_unacknowledged(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, message: int, index: int
) -> None:
    """Its position on the sender's ack page was written as given: past 64 bits a ``struct.error``
    came out of the decode; a tensor id past a message's acknowledged a later tensor of the sender,
    which let go of it unread."""
    from tests.cuda_fakes import FakeCudaRuntime

    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), directory=tmp_path)
    rx = transports.QueueTransport(queue, timeout=0.3, directory=tmp_path)
    tx.begin_message()
    tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    tx.begin_message()
    tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    assert tx.in_flight == 2
    first, second = queue.get(), queue.get()
    queue.put((first[0], message, index, *first[3:]))
    forged = transports.QueueHandle(sender=first[0], message=message, tensor=index)
    with caplog.at_level(logging.WARNING, logger="tensorwire.queue"):
        with pytest.raises(tw.TransportError, match=rf"no tensor {index} of message {message} from sender \S+"):
            rx.import_(forged, [], 16, borrow=False)
    assert (
        f"dropping a CUDA item from sender {first[0]!r} whose ids no ack page holds: {message}/{index}" in caplog.text
    )
    assert tx.in_flight == 2 and rx.buffered() == 0  # nothing acknowledged
    queue.put(second)
    taken = rx.import_(transports.QueueHandle(sender=first[0], message=2, tensor=0), [], 16, borrow=False)
    assert bytes(taken) == bytes(range(16))
    assert tx.in_flight == 0  # the next item still reads (its position covers the first's)
    tx.close()
    rx.close()


def test_the_ack_page_of_a_sender_whose_tensors_could_not_be_opened_goes_with_its_ttl(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Such a sender never entered the receive buffer's bookkeeping, which the ttl evicts from: its
    ack page stayed mapped in the receiver for good (one more for each such producer)."""
    import time
    from multiprocessing.reduction import ForkingPickler

    from tests.cuda_fakes import FakeCudaRuntime

    def unopenable(data: Any, **kwargs: Any) -> Any:
        raise RuntimeError("CUDA error: invalid resource handle")

    def mapped(name: str) -> bool:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            return any(name in line for line in maps)

    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), directory=tmp_path)
    rx = transports.QueueTransport(queue, timeout=0.3, ttl=0.2, directory=tmp_path)
    tx.begin_message()
    handle = tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    assert handle is not None
    (page,) = (p.name for p in tmp_path.iterdir())
    with monkeypatch.context() as patched:
        patched.setattr(ForkingPickler, "loads", unopenable)
        with pytest.raises(tw.TransportError, match=r"no tensor 0 of message 1 from sender \S+ after waiting"):
            rx.import_(handle, [], 16, borrow=False)
    assert tx.in_flight == 0 and mapped(page)  # acknowledged through its page
    tx.close()  # the sender is done: its page's name goes, the receiver's mapping stays
    time.sleep(0.3)
    other = transports.QueueTransport(queue)
    other.begin_message()
    later = other.export_storage(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    assert bytes(rx.import_(later, [], 16, borrow=False)) == bytes(range(16))  # after the ttl: evicted
    assert not mapped(page)
    rx.close()


def test_a_senders_close_leaves_a_file_a_neighbour_moved_onto_its_ack_page_name(tmp_path: Any) -> None:
    from tensorwire.transports._ack import InFlight
    from tensorwire.transports._reaper import next_name

    acks = InFlight(tmp_path, next_name)
    name = acks.page_name()
    theirs = tmp_path / "neighbours-file"
    theirs.write_bytes(b"not yours")
    os.rename(theirs, tmp_path / name)  # the neighbour's file now holds the page's name
    acks.close()
    assert (tmp_path / name).read_bytes() == b"not yours"
    acks.page_name()  # a later page is the sender's own: its close removes it
    acks.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_senders_ack_page_goes_when_the_transport_is_dropped_without_close(tmp_path: Any) -> None:
    """It stayed in /dev/shm for good: only ``close()`` removed it."""
    from tests.cuda_fakes import FakeCudaRuntime

    tx = transports.QueueTransport(_ctx().Queue(), runtime=FakeCudaRuntime(), directory=tmp_path)
    tx.begin_message()
    assert tx.export_device(_device_like(torch.ones(10)), 0, 40, []) is not None
    assert len(list(tmp_path.iterdir())) == 1  # the stream's ack page
    del tx
    gc.collect()
    assert list(tmp_path.iterdir()) == []


EXIT_WITH_AN_ACK_PAGE = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    import torch, torch.multiprocessing
    from tensorwire import transports
    from tests.cuda_fakes import FakeCudaRuntime
    tx = transports.QueueTransport(
        torch.multiprocessing.get_context("spawn").Queue(), runtime=FakeCudaRuntime(), directory={directory!r}
    )
    tx.begin_message()
    tx.export_device(torch.ones(10).view(torch.uint8), 0, 40, [])
    child = os.fork()
    if child == 0:
        sys.exit(0)  # a forked child's exit leaves its parent's page
    os.waitpid(child, 0)
    print(sorted(os.listdir({directory!r})))
    """
)


def test_a_senders_ack_page_goes_at_exit_and_not_at_its_forked_childs(tmp_path: Any) -> None:
    """A sender that exited without ``close()`` left its ack page in /dev/shm."""
    script = EXIT_WITH_AN_ACK_PAGE.format(repo=str(REPO), directory=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    (page,) = ast.literal_eval(result.stdout.strip())  # there after the child's exit
    assert page.startswith("tw-")
    assert list(tmp_path.iterdir()) == []  # gone with its sender
