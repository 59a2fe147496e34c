"""One Encoder and one Decoder, each shared by four threads, over every in-process transport.

Four threads send 100 messages each through one shared Encoder and four threads receive them
through one shared Decoder (frames handed over in-process, thread ``i`` decoding thread ``i``'s
messages), for inline frames, the memfd pool, the named pool, one-shot segments and
``CudaShmTransport`` with a fake CUDA runtime (host buffers through its pool). Every message
arrives once, bit-exact, with its own tensors; no slot is handed over twice under one generation,
the pool stays bounded, every slot is free at the end, and ``close()`` leaves no segment and no
fd. Then the same while every tenth message is kept (borrowed views) until the end: no slot is
handed over again while a view of it lives, and the kept messages are unchanged. (The queue
transport has its own test: ``test_threads_queue.py``.)
"""

from __future__ import annotations

import gc
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY
from tensorwire.transports._page_layout import FREE
from tests.cuda_fakes import FakeCudaRuntime
from tests.hostile import messages
from tests.wire_helpers import head_of, segments_of

THREADS, MESSAGES = 4, 100
DEPTH = 4  # frames waiting between a sending thread and its receiving thread
FLOATS, INTS = 16384, 4096  # 64 KiB and 16 KiB: two out-of-band buffers per message
KEEP_EVERY = 10
JOIN = 300.0  # seconds: a bound for a hung thread, never a speed requirement
OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor in a buffer of its own
Key = tuple[str, int]  # (segment name, generation) of one hand-over


def make_message(thread: int, index: int) -> Any:
    return messages.make_message(thread, index, FLOATS, INTS)


def check_message(thread: int, index: int, message: Any) -> str | None:
    return messages.check_message(thread, index, message, FLOATS, INTS)


def hand_overs(frames: list[Any]) -> list[Key]:
    """The hand-overs a message's header names (inline buffers name none)."""
    keys = []
    for _, handle in head_of(frames[0])[3]:
        if handle["transport"] != "inline":
            keys.append((handle["name"], handle.get("generation", 0)))
    return keys


@dataclass
class Outcome:
    """What one receiving thread saw."""

    decoded: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)
    frames: int = 0  # frames per message, summed


def send_all(encoder: tw.Encoder, thread: int, put: Callable[[Any], None]) -> None:
    """Encode ``thread``'s messages, handing ``(index, frames)`` on; an error as ``("error", text)``."""
    try:
        for index in range(MESSAGES):
            put((index, encoder.encode(make_message(thread, index))))
    except Exception as exc:
        put(("error", f"thread {thread} encode: {exc!r}"))
    finally:
        put(None)


Kept = list[tuple[int, int, Any, list[Key]]]  # (thread, index, message, its hand-overs)


def receive_all(decoder: tw.Decoder, thread: int, get: Callable[[], Any], kept: Kept | None) -> Outcome:
    """Decode what ``get`` hands over until ``None``; with ``kept``, every ``KEEP_EVERY``-th message
    is kept there (its borrowed views alive)."""
    outcome = Outcome()
    while (item := get()) is not None:
        index, frames = item
        if index == "error":
            outcome.problems.append(frames)
            continue
        keys = hand_overs(frames)
        outcome.keys.extend(keys)
        outcome.frames += len(frames)
        try:
            message = decoder.decode(frames)
            problem = check_message(thread, index, message)
        except Exception as exc:
            problem, message = f"thread {thread} message {index}: {exc!r}", None
        if problem is not None:
            outcome.problems.append(problem)
            continue
        outcome.decoded.append(index)
        if kept is not None and index % KEEP_EVERY == 0:
            kept.append((thread, index, message, keys))
        del message
    return outcome


def run_threads(encoder: tw.Encoder, decoder: tw.Decoder, kept: Kept | None = None) -> list[Outcome]:
    """Four sending and four receiving threads, pairwise linked by a bounded queue."""
    links: list[queue.Queue[Any]] = [queue.Queue(maxsize=DEPTH) for _ in range(THREADS)]
    outcomes = [Outcome() for _ in range(THREADS)]

    def receive(i: int) -> None:
        outcomes[i] = receive_all(decoder, i, lambda: links[i].get(timeout=JOIN), kept)

    def send(i: int) -> None:
        send_all(encoder, i, lambda item: links[i].put(item, timeout=JOIN))

    threads = [threading.Thread(target=f, args=(i,), daemon=True) for f in (send, receive) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    assert not any(t.is_alive() for t in threads), "a thread is still running"
    return outcomes


@dataclass
class Setup:
    """A transport (None: inline frames) and what to check of it at the end."""

    transport: Any
    fake: FakeCudaRuntime | None = None


TRANSPORTS: dict[str, Callable[[], Setup]] = {
    "inline": lambda: Setup(None),
    "memfd": lambda: Setup(transports.ShmTransport()),
    "named": lambda: Setup(transports.ShmTransport(backing="named")),
    "one-shot": lambda: Setup(transports.ShmTransport(pool=False)),
    "cuda-fake": lambda: _cuda_fake(),
}


def _cuda_fake() -> Setup:
    fake = FakeCudaRuntime()
    return Setup(transports.CudaShmTransport(runtime=fake), fake)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def baseline() -> Iterator[None]:
    """No segment of this process and no fd stays after the test (relative to its start)."""
    gc.collect()
    segments, fds = set(segments_of(os.getpid())), _fds()
    yield
    gc.collect()
    assert set(segments_of(os.getpid())) <= segments
    assert _fds() == fds


def _pool_states(setup: Setup) -> list[int]:
    pool = None if setup.transport is None else setup.transport.pool
    return [] if pool is None else [slot.state for slot in pool.slots()]


def _assert_delivered(outcomes: list[Outcome], setup: Setup) -> list[Key]:
    """Every message once, in its thread's order, bit-exact; no hand-over named twice."""
    for i, outcome in enumerate(outcomes):
        assert outcome.problems == [], f"thread {i}: {outcome.problems[:3]}"
        assert outcome.decoded == list(range(MESSAGES))
    keys = [key for outcome in outcomes for key in outcome.keys]
    assert len(keys) == len(set(keys))  # no slot handed over twice under one generation, no name reused
    if setup.transport is None:
        assert keys == [] and all(o.frames == 3 * MESSAGES for o in outcomes)  # header + two inline buffers
    else:
        assert len(keys) == THREADS * MESSAGES * 2 and all(o.frames == MESSAGES for o in outcomes)
    return keys


def _close(setup: Setup) -> None:
    if setup.transport is None:
        return
    setup.transport.close()
    if setup.fake is not None:
        assert setup.fake.calls["copy_to_host"] == 0  # host buffers never took the device path
        assert setup.fake.registered == {} and setup.transport.registrations == 0


@pytest.mark.parametrize("kind", list(TRANSPORTS))
def test_four_threads_share_an_encoder_and_four_a_decoder(kind: str, baseline: None) -> None:
    setup = TRANSPORTS[kind]()
    try:
        encoder = tw.Encoder(transport=setup.transport, options=OOB)
        decoder = tw.Decoder(REGISTRY, transports=[] if setup.transport is None else [setup.transport])
        _assert_delivered(run_threads(encoder, decoder), setup)
        gc.collect()
        states = _pool_states(setup)
        assert len(states) <= THREADS * (DEPTH + 3) * 2  # bounded by the messages in flight at once
        assert all(state == FREE for state in states)
    finally:
        _close(setup)


def _assert_kept_intact(kept: Kept, keys: list[Key]) -> None:
    """Each kept message is unchanged, and none of its slots was handed over after it."""
    last: dict[str, int] = {}
    for name, generation in keys:
        last[name] = max(last.get(name, 0), generation)
    for thread, index, message, held in kept:
        assert check_message(thread, index, message) is None  # unchanged while others kept sending
        assert all(last[name] == generation for name, generation in held)  # never handed over again


@pytest.mark.parametrize("kind", ["memfd", "named"])
def test_borrowed_views_kept_across_threads_are_never_overwritten(kind: str, baseline: None) -> None:
    setup = TRANSPORTS[kind]()
    kept: Kept = []
    try:
        encoder = tw.Encoder(transport=setup.transport, options=OOB)
        decoder = tw.Decoder(REGISTRY, transports=[setup.transport])
        keys = _assert_delivered(run_threads(encoder, decoder, kept), setup)
        assert len(kept) == THREADS * MESSAGES // KEEP_EVERY
        _assert_kept_intact(kept, keys)
        states = _pool_states(setup)
        assert len(states) <= (THREADS * (DEPTH + 3) + len(kept)) * 2
        kept.clear()
        gc.collect()
        assert all(state == FREE for state in _pool_states(setup))
    finally:
        kept.clear()
        _close(setup)
