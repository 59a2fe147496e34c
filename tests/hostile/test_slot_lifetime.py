"""How long a handed-over slot stays claimable, who may claim it, and garbage in its control page.

A slot nobody claims comes back after the claim timeout, its capability void (a late claim is an
"expired" DecodeError); a message rejected after its handles proved their capabilities gives its
slots back at once, while forged handles give back nothing; of several receivers racing for one
slot, exactly one wins; values a receiver scribbled into a control page never raise in the sender.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import tensorwire as tw
from tensorwire import _wire as wire
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import _slots
from tensorwire.transports._page_layout import CLAIMED, FREE, IN_FLIGHT
from tests.hostile import claimers
from tests.wire_helpers import frame_of, head_of

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor out of band
BACKINGS = ["memfd", "named"]


@pytest.fixture(params=BACKINGS)
def backing(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[transports.ShmTransport] = []

    def build(**options: Any) -> transports.ShmTransport:
        made.append(transports.ShmTransport(**options))
        return made[-1]

    yield build
    for transport in made:
        transport.close()


def _states(shm: transports.ShmTransport) -> list[int]:
    assert shm.pool is not None
    return [slot.state for slot in shm.pool.slots()]


def _message(i: int = 0) -> Any:
    return diffusion.Output(output=torch.full((20_000,), float(i)), chunk_index=i)


def _wait_for(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


def test_an_unclaimed_slot_expires_and_a_late_claim_says_so(backing: str, make: Any) -> None:
    shm = make(backing=backing, claim_timeout=0.2, idle_seconds=0)
    receiver = make(backing=backing, pool=False)
    encoder, decoder = tw.Encoder(transport=shm, options=OOB), tw.Decoder(REGISTRY, transports=[receiver])
    frames = encoder.encode(_message())
    assert _states(shm) == [IN_FLIGHT]
    time.sleep(0.3)
    with pytest.raises(tw.DecodeError, match=r"generation 1 expired: it was not claimed within its sender's"):
        decoder.decode(frames)  # past the deadline (brought back by the trimmer, or not yet): refused
    assert shm.pool is not None
    shm.pool.expire()
    assert _states(shm) == [FREE]
    with pytest.raises(tw.DecodeError, match=r"generation 1 expired"):
        decoder.decode(frames)
    again = decoder.decode(encoder.encode(_message(1)))  # the slot is reused under a new generation
    assert float(again.output[0]) == 1.0 and len(_states(shm)) == 1
    del again
    same = tw.Decoder(REGISTRY, transports=[shm])  # a late claim through the sender's own transport
    frames = encoder.encode(_message(2))
    time.sleep(0.3)
    for _ in range(2):  # its failed claim gives the slot back, and the next one still says why
        with pytest.raises(tw.DecodeError, match=r"generation 3 expired"):
            same.decode(frames)
    assert _states(shm) == [FREE]


def test_the_trimmer_brings_expired_slots_back_by_itself(backing: str, make: Any) -> None:
    shm = make(backing=backing, claim_timeout=0.1, idle_seconds=0)
    tw.Encoder(transport=shm, options=OOB).encode(_message())
    assert _wait_for(lambda: _states(shm) == [FREE]), _states(shm)


def test_an_unclaimed_one_shot_is_unlinked_after_its_timeout(make: Any) -> None:
    shm = make(pool=False, claim_timeout=0.1)
    frames = tw.Encoder(transport=shm, options=OOB).encode(_message())
    name = head_of(frames[0])[3][0][1]["name"]
    assert (shm.directory / name).exists()
    time.sleep(0.2)
    shm.trim()
    assert not (shm.directory / name).exists()
    with pytest.raises(tw.TransportError, match=rf"cannot open shared memory segment {name}: No such file"):
        tw.Decoder(REGISTRY, transports=[shm]).decode(frames)


class _ReadCount(dict[str, Any]):
    """A one-shot memory that counts the entries read through ``items()``."""

    read = 0

    def items(self) -> Any:
        for item in super().items():
            self.read += 1
            yield item


def test_a_sweep_reads_only_the_one_shots_that_fell_due(make: Any) -> None:
    # a sender remembers every one-shot segment until its claim timeout (claimed or not); each export
    # sweeps, so a sweep that read them all cost a send what it had sent within the timeout
    shm = make(pool=False, claim_timeout=0.2)
    shm._one_shots.prune = lambda: None  # the janitor's sweeps would go unseen here: only the sends'
    encoder = tw.Encoder(transport=shm, options=OOB)
    early = [head_of(encoder.encode(_message(i))[0])[3][0][1]["name"] for i in range(3)]
    time.sleep(0.3)
    memory = shm._one_shots._pending = _ReadCount(shm._one_shots._pending)
    late = [head_of(encoder.encode(_message(i))[0])[3][0][1]["name"] for i in range(50)]
    assert memory.read == 3 + 49  # the first sweep read the three due (nothing else yet); each
    # later one read one entry, the first not due
    assert not any((shm.directory / name).exists() for name in early)
    assert all((shm.directory / name).exists() for name in late) and list(memory) == late
    time.sleep(0.3)
    memory.read = 0
    assert shm._one_shots.sweep() == 50 and memory.read == 50 and not memory
    assert not any((shm.directory / name).exists() for name in late)


def _rejected(frames: list[Any], tag: str) -> list[Any]:
    head = head_of(frames[0])
    head[0] = tag
    return [frame_of(head), *frames[1:]]


def test_a_rejected_message_gives_its_proven_slots_back_at_once(backing: str, make: Any) -> None:
    shm = make(backing=backing)
    receiver = make(backing=backing, pool=False)
    encoder, decoder = tw.Encoder(transport=shm, options=OOB), tw.Decoder(REGISTRY, transports=[receiver])
    for tag, error in (
        ("pickle:2:diffusion.Output:1", r"not a tensorwire message"),
        (wire.tag("evil.Type", 1), r"unknown type id 'evil.Type'"),
        (wire.tag("diffusion.Output", 9), r"unknown version 9 of diffusion.Output"),
    ):
        frames = encoder.encode(diffusion.Output(output=[torch.ones(20_000), torch.zeros(30_000)]))
        with pytest.raises(tw.DecodeError, match=error):
            decoder.decode(_rejected(frames, tag))
        assert set(_states(shm)) == {FREE}  # no waiting for the claim timeout


def test_forged_handles_in_a_rejected_message_give_nothing_back(backing: str, make: Any) -> None:
    shm = make(backing=backing)
    receiver = make(backing=backing, pool=False)
    encoder, decoder = tw.Encoder(transport=shm, options=OOB), tw.Decoder(REGISTRY, transports=[receiver])
    frames = encoder.encode(_message(3))
    head = head_of(frames[0])
    head[0] = "pickle:2:diffusion.Output:1"
    head[3][0][1]["capability"] = bytes(16)
    with pytest.raises(tw.DecodeError, match=r"not a tensorwire message"):
        decoder.decode([frame_of(head)])
    assert _states(shm) == [IN_FLIGHT]
    out = decoder.decode(frames)  # the intended receiver still gets it
    assert float(out.output[0]) == 3.0 and _states(shm) == [CLAIMED]
    del out


def test_of_racing_processes_exactly_one_claims_each_slot(backing: str, make: Any) -> None:
    shm = make(backing=backing, claim_timeout=600.0)
    encoder = tw.Encoder(transport=shm, options=OOB)
    count, racers = 20, 4
    frames_list = [[bytes(memoryview(f)) for f in encoder.encode(_message(i))] for i in range(count)]
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    pipes = [ctx.Pipe() for _ in range(racers)]
    children = [
        ctx.Process(target=claimers.claim_all, args=(start, frames_list, backing, child), daemon=True)
        for _, child in pipes
    ]
    try:
        for child in children:
            child.start()
        time.sleep(1.0)  # let them all reach the start line (they import torch first)
        start.set()
        results = [parent.recv() for parent, _ in pipes]
        for child in children:
            child.join(60)
            assert child.exitcode == 0
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
    winners = sorted(i for won, _ in results for i in won)
    assert winners == list(range(count))  # every message exactly once
    losses = [error for _, lost in results for error in lost]
    assert len(losses) == count * (racers - 1)
    assert all("no longer in flight" in error for error in losses), losses[:3]
    assert set(_states(shm)) == {FREE}


def test_of_racing_threads_exactly_one_claims_a_slot(make: Any) -> None:
    shm = make()
    frames = tw.Encoder(transport=shm, options=OOB).encode(_message(5))
    decoder = tw.Decoder(REGISTRY, transports=[make(pool=False)], options=tw.DecodeOptions(borrow=False))
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def race() -> None:
        barrier.wait()
        try:
            outcomes.append(f"won {float(decoder.decode(frames).output[0])}")
        except tw.DecodeError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes)[-1] == "won 5.0" and outcomes.count("won 5.0") == 1
    assert sum("no longer in flight" in o for o in outcomes) == 7


@pytest.mark.parametrize(
    ("word", "value"),
    [
        (3, 2**31),  # a receiver pid that does not fit pid_t
        (3, 2**63 + 5),
        (3, 4_194_305),  # one past the largest pid the kernel hands out
        (2, 2**64 - 1),  # a generation about to wrap
        (1, 77),  # no state of the protocol: the slot is dropped, never reused
        (5, 2**64 - 1),  # a deadline far away
        (12, 2**64 - 1),  # a broadcast's receiver count out of range
        (12, 64),  # a broadcast to 64 that was none: holders, claims and pids as they are
        (14, 2**63),  # a broadcast's holder count out of range
        (16, 2**31),  # a holder pid that does not fit pid_t
    ],
)
def test_garbage_in_a_control_page_never_raises_in_the_sender(backing: str, make: Any, word: int, value: int) -> None:
    shm = make(backing=backing)
    encoder, decoder = tw.Encoder(transport=shm, options=OOB), tw.Decoder(REGISTRY, transports=[shm])
    held = decoder.decode(encoder.encode(_message(1)))
    assert shm.pool is not None
    slot = shm.pool.slots()[0]
    slot.page.words[word] = value  # what a broken or hostile receiver holding the slot could write
    del held
    for i in range(2, 5):
        out = decoder.decode(encoder.encode(_message(i)))
        assert float(out.output[0]) == float(i)
        del out
    assert len(shm.pool.slots()) <= 2  # reclaimed or replaced, not piling up


@pytest.mark.parametrize("borrow", [True, False], ids=["a-borrowed-view", "a-copy"])
def test_an_interrupt_landing_as_a_receiver_reads_its_claimed_slot_gives_the_slot_back(
    backing: str, make: Any, monkeypatch: pytest.MonkeyPatch, borrow: bool
) -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``) that landed after a receiver claimed
    a slot, before its view's hold on the slot (or its copy) was made, kept the claim for the
    receiver's life: the sender never took that slot again. The slot is freed at once."""
    shm = make(backing=backing)
    receiver = make(backing=backing, pool=False)
    encoder = tw.Encoder(transport=shm, options=OOB)
    decoder = tw.Decoder(REGISTRY, transports=[receiver], options=tw.DecodeOptions(borrow=borrow))

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    frames = encoder.encode(_message())
    monkeypatch.setattr(_slots, "_ReceiverLease" if borrow else "bytearray", interrupted, raising=borrow)
    with pytest.raises(KeyboardInterrupt):
        decoder.decode(frames)
    monkeypatch.undo()
    assert _states(shm) == [FREE]
    decoder.decode(encoder.encode(_message(1)))
    assert len(_states(shm)) == 1  # the same slot, sent again
