"""One Encoder and one Decoder over the queue transport, each shared by four threads.

Four threads send 100 messages each through one shared Encoder (one QueueTransport) and four
threads receive them through one shared Decoder (one QueueTransport on the same queue), thread
``i`` decoding thread ``i``'s messages: every message arrives once, with its own two tensors, and
nothing stays buffered. Then the same with the senders' threads in a spawned process; and each
sending thread's CUDA bookkeeping (its own ack page) with a runtime that fakes the device.
"""

from __future__ import annotations

import queue as stdlib_queue
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as tmp

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY
from tests.hostile import queue_procs
from tests.hostile.queue_procs import MESSAGES, THREADS, Outcome, decode_all, encode_all

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through the queue
JOIN = 300.0  # seconds: a bound for a hung thread, never a speed requirement


def _decoding_threads(decoder: tw.Decoder, receives: list[Any], outcomes: list[Outcome]) -> list[threading.Thread]:
    def run(i: int) -> None:
        outcomes[i] = decode_all(decoder, i, receives[i])

    return [threading.Thread(target=run, args=(i,), daemon=True) for i in range(THREADS)]


def _run(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    assert not any(t.is_alive() for t in threads), "a thread is still running"


def _assert_all_delivered(outcomes: list[Outcome], rx: transports.QueueTransport) -> None:
    for i, outcome in enumerate(outcomes):
        assert outcome.problems == [], f"thread {i}: {outcome.problems[:3]}"
        assert outcome.decoded == list(range(MESSAGES))  # none lost, none twice, in the thread's order
    ids = [key for outcome in outcomes for key in outcome.ids]
    assert len(ids) == len(set(ids)) == THREADS * MESSAGES * 2  # no two tensors share an id
    streams = [{sender for sender, _, _ in outcome.ids} for outcome in outcomes]
    assert all(len(s) == 1 for s in streams) and len(set.union(*streams)) == THREADS  # a stream per thread
    assert rx.buffered() == 0 and rx.buffered_bytes() == 0


@pytest.mark.parametrize("timeout", [10.0, 1e10], ids=["10 s", "longer than one wait can last"])
def test_four_threads_share_one_encoder_and_four_share_one_decoder(timeout: float) -> None:
    """A receiver's ``timeout`` past ``threading.TIMEOUT_MAX`` (292 years) was the wait of a thread
    that found another draining the queue: an ``OverflowError``."""
    data = tmp.get_context("spawn").Queue()
    tx, rx = transports.QueueTransport(data), transports.QueueTransport(data, timeout=timeout)
    encoder, decoder = tw.Encoder(transport=tx, options=OOB), tw.Decoder(REGISTRY, transports=[rx])
    handovers: list[stdlib_queue.Queue[Any]] = [stdlib_queue.Queue(maxsize=4) for _ in range(THREADS)]
    outcomes = [Outcome() for _ in range(THREADS)]
    senders = [
        threading.Thread(target=encode_all, args=(encoder, i, partial(h.put, timeout=JOIN)), daemon=True)
        for i, h in enumerate(handovers)
    ]
    receivers = _decoding_threads(decoder, [partial(h.get, timeout=JOIN) for h in handovers], outcomes)
    try:
        _run(senders + receivers)
        _assert_all_delivered(outcomes, rx)
        assert data.empty()  # nothing sent that no message named
    finally:
        data.cancel_join_thread()  # on failure, what is still queued must not hold up the exit
        tx.close()
        rx.close()


def test_a_four_thread_producer_process_and_a_four_thread_consumer() -> None:
    ctx = tmp.get_context("spawn")
    data, done = ctx.Queue(), ctx.Event()
    pipes = [ctx.Pipe(duplex=False) for _ in range(THREADS)]
    child = ctx.Process(target=queue_procs.threaded_producer, args=(data, [w for _, w in pipes], done))
    child.start()
    rx = transports.QueueTransport(data)
    try:
        for _, write in pipes:
            write.close()  # the child has its own copy
        outcomes = [Outcome() for _ in range(THREADS)]
        receives = [queue_procs.receiver(read, 120.0) for read, _ in pipes]
        _run(_decoding_threads(tw.Decoder(REGISTRY, transports=[rx]), receives, outcomes))
        _assert_all_delivered(outcomes, rx)
    finally:
        done.set()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join(10)
        rx.close()
    assert child.exitcode == 0


def test_each_sending_thread_has_its_own_stream_and_ack_page(tmp_path: Path) -> None:
    from tensorwire.transports.shm import our_segments
    from tests.cuda_fakes import FakeCudaRuntime  # takes host tensors for device ones

    data = tmp.get_context("spawn").Queue()
    tx = transports.QueueTransport(data, runtime=FakeCudaRuntime(), directory=tmp_path)
    rx = transports.QueueTransport(data, directory=tmp_path)
    values = [torch.full((4,), float(i)) for i in range(THREADS)]
    handles: list[Any] = [None] * THREADS

    def send(i: int) -> None:
        tx.begin_message()
        handles[i] = tx.export_device(values[i].view(torch.uint8).reshape(-1), 0, 16, [])

    _run([threading.Thread(target=send, args=(i,)) for i in range(THREADS)])
    try:
        assert len({h.sender for h in handles}) == THREADS  # a sender id per thread
        assert all((h.message, h.tensor) == (1, 0) for h in handles)  # each stream's first message
        assert tx.in_flight == THREADS and len(our_segments(tmp_path)) == THREADS  # an ack page per stream
        for handle, value in zip(handles, values, strict=True):
            assert bytes(rx.import_(handle, [], 16, borrow=False)) == value.numpy().tobytes()
        assert tx.in_flight == 0
        send(0)  # a new stream (this thread's) drops the ended threads' streams, nothing of theirs in flight
        assert tx.in_flight == 1 and len(our_segments(tmp_path)) == 1
    finally:
        tx.close()
        rx.close()
    assert our_segments(tmp_path) == []


def test_threads_sending_cuda_tensors_at_once_keep_to_max_in_flight(tmp_path: Path) -> None:
    """Each thread saw room and sent: eight threads at once put eight CUDA tensors in flight past a
    ``max_in_flight`` of one."""
    from tests.cuda_fakes import FakeCudaRuntime  # takes host tensors for device ones

    data: stdlib_queue.Queue[Any] = stdlib_queue.Queue()  # nobody receives: nothing is acknowledged
    tx = transports.QueueTransport(data, runtime=FakeCudaRuntime(), max_in_flight=1, timeout=0.2, directory=tmp_path)
    start = threading.Barrier(2 * THREADS)
    refused: list[str] = []

    def send() -> None:
        tx.begin_message()
        start.wait(JOIN)
        try:
            tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
        except tw.TransportError as exc:
            refused.append(str(exc.strerror))

    try:
        _run([threading.Thread(target=send, daemon=True) for _ in range(2 * THREADS)])
        assert tx.in_flight == data.qsize() == 1
        assert len(refused) == 2 * THREADS - 1
        assert all(r.endswith("not acknowledged by the receiver after 0.2s (max_in_flight 1)") for r in refused)
    finally:
        tx.close()
