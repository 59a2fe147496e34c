"""The warm shared-memory pool: reuse, leases, zero-copy allocation, budget, trimming, safety."""

from __future__ import annotations

import errno
import gc
import inspect
import math
import os
import re
import struct
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire._memory import Chars
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.dtypes import DTYPE_NAMES
from tensorwire.transports import _pool, _pool_choice, _segment
from tensorwire.transports import _slots as slot_reader
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CLAIMED, CONTROL_BYTES, FREE, IN_FLIGHT, RECEIVER_BYTE, SENDER
from tensorwire.transports._pool import Pool, Slot, size_class
from tensorwire.transports._pool_choice import PASSED
from tensorwire.transports._retention import Retention
from tensorwire.transports.shm import SHM_DIR, Backing
from tests.wire_helpers import edit_descriptor, frame_of, head_of, held_elsewhere, segments_of, tensor_exts

OOB = tw.EncodeOptions(inline_threshold=1, embed_threshold=0)


@pytest.fixture(params=["memfd", "named"])
def shm(request: pytest.FixtureRequest) -> Iterator[transports.ShmTransport]:
    before = set(segments_of(os.getpid()))  # other tests' long-lived transports may hold some
    transport = transports.ShmTransport(idle_seconds=0, backing=request.param)
    yield transport
    transport.close()
    gc.collect()
    assert set(segments_of(os.getpid())) <= before


def _pair(shm: transports.ShmTransport, **options: Any) -> tuple[tw.Encoder, tw.Decoder]:
    return tw.Encoder(transport=shm, options=OOB), tw.Decoder(
        REGISTRY, transports=[shm], options=tw.DecodeOptions(**options)
    )


def _slots(shm: transports.ShmTransport) -> list[Slot]:
    assert shm.pool is not None
    return shm.pool.slots()


def _states(shm: transports.ShmTransport) -> list[int]:
    return [slot.state for slot in _slots(shm)]


# a module's byte views made through ctypes (types of 256 sizes kept), or all through numpy (none kept)
BOTH_VIEWS = pytest.mark.parametrize("kept", [256, 0], ids=["ctypes view", "numpy view"])


def _views(monkeypatch: pytest.MonkeyPatch, module: Any, kept: int) -> Chars:
    """A fresh ``Chars`` keeping ``kept`` sizes, as ``module``'s ``_VIEWS`` for the test."""
    views = Chars(kept)
    monkeypatch.setattr(module, "_VIEWS", views)
    return views


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"claim_timeout": 0}, "claim_timeout must be > 0 and at most 2**32 seconds, got 0"),
        ({"claim_timeout": math.inf}, "claim_timeout must be > 0 and at most 2**32 seconds, got inf"),
        ({"claim_timeout": math.nan}, "claim_timeout must be > 0 and at most 2**32 seconds, got nan"),
        ({"claim_timeout": 2.0**33}, "claim_timeout must be > 0 and at most 2**32 seconds, got 8589934592.0"),
        ({"idle_seconds": math.nan}, "idle_seconds must be a number of seconds, got nan"),
        ({"cache_fraction": 1.5}, "cache_fraction must be in [0, 1], got 1.5"),
        ({"cache_fraction": math.nan}, "cache_fraction must be in [0, 1], got nan"),
        ({"max_cached_bytes": -1}, "max_cached_bytes must be None or >= 0, got -1"),
        ({"backing": "tmpfs"}, "backing must be 'memfd' or 'named', got 'tmpfs'"),
    ],
)
def test_options_out_of_range_are_refused_by_name_when_the_transport_is_made(
    options: dict[str, Any], error: str
) -> None:
    """A claim timeout of infinity or NaN was taken, and the first send failed on it
    (``OverflowError``, not a codec error); a bad fraction was named as the retention policy's."""
    with pytest.raises(ValueError) as info:
        transports.ShmTransport(**options)
    assert str(info.value) == error


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"idle_seconds": "5"}, "idle_seconds must be a number, got '5'"),
        ({"idle_seconds": None}, "idle_seconds must be a number, got None"),
        ({"claim_timeout": True}, "claim_timeout must be a number, got True"),
        ({"cache_fraction": True}, "cache_fraction must be a number, got True"),
        ({"max_cached_bytes": "1000"}, "max_cached_bytes must be a number, got '1000'"),
    ],
)
def test_options_that_are_not_numbers_are_refused_by_name_when_the_transport_is_made(
    options: dict[str, Any], error: str
) -> None:
    """An idle time given as a string was taken, and every send then failed on it (a
    ``TypeError`` from the pool's comparison); a bool was taken as 1 (a one-second claim timeout)."""
    with pytest.raises(TypeError) as info:
        transports.ShmTransport(**options)
    assert str(info.value) == error


def test_a_long_claim_timeout_still_sends() -> None:
    with transports.ShmTransport(claim_timeout=2.0**32, idle_seconds=math.inf) as shm:
        frames = tw.Encoder(shm, tw.EncodeOptions(inline_threshold=0)).encode(diffusion.Output(output=torch.ones(4096)))
        assert torch.equal(tw.Decoder(REGISTRY, [shm]).decode(frames).output, torch.ones(4096))


def test_size_classes_waste_at_most_a_quarter() -> None:
    assert size_class(1) == 64 * 1024
    for n in (65_537, 1_000_000, 3 * 2**20 + 5, 2**28, 2**30, 2**30 + 1):
        c = size_class(n)
        assert c >= n and c <= n * 1.25 + 4096 and c % 4096 == 0


def test_steady_state_reuses_one_slot_and_hands_it_back(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    tensor = torch.arange(100_000, dtype=torch.float32)
    for i in range(20):
        out = decoder.decode(encoder.encode(diffusion.Output(output=tensor + i)))
        assert torch.equal(out.output, tensor + i)
        assert _states(shm) == [CLAIMED]  # borrowed by default while the view lives
        del out
        assert _states(shm) == [FREE]
    assert len(_slots(shm)) == 1


def test_a_slot_is_never_reused_while_a_receiver_holds_a_view(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    first = decoder.decode(encoder.encode(diffusion.Output(output=torch.zeros(50_000))))
    second = decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(50_000))))
    assert len(_slots(shm)) == 2
    assert float(first.output.sum()) == 0.0 and float(second.output.sum()) == 50_000.0
    del first
    third = decoder.decode(encoder.encode(diffusion.Output(output=torch.full((50_000,), 2.0))))
    assert len(_slots(shm)) == 2 and float(second.output.sum()) == 50_000.0
    del second, third


@BOTH_VIEWS
def test_a_borrowed_slot_is_a_view_owned_by_its_lease(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    views = _views(monkeypatch, slot_reader, kept)
    encoder, decoder = _pair(shm)
    tensor = torch.arange(60_000, dtype=torch.float32)
    frames = encoder.encode(diffusion.Output(output=tensor))
    nbytes, handle = decoder.table.decode(frames[0]).buffers[0]
    buffer: Any = shm.import_(handle, frames, nbytes, borrow=True)
    assert sorted(views.types) == ([nbytes] if kept else [])  # the way it was viewed
    assert callable(buffer.base.pin_host)  # what placement asks for a page-locked copy to a device
    assert bytes(buffer) == tensor.numpy().tobytes() and not memoryview(buffer).readonly
    assert _states(shm) == [CLAIMED]
    del buffer
    gc.collect()
    assert _states(shm) == [FREE]
    for value in (tensor, tensor.numpy()):  # a tensor, an array: each a view of the buffer
        out = decoder.decode(encoder.encode(diffusion.Output(output=value))).output
        assert type(out) is type(value)
        part = out[10:20]
        del out
        gc.collect()
        assert _states(shm) == [CLAIMED] and part.tolist() == list(range(10, 20))  # a view of it holds it
        del part
        gc.collect()
        assert _states(shm) == [FREE]


def test_copy_receive_hands_the_slot_back_at_once(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm, borrow=False)
    out = decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(70_000))))
    assert _states(shm) == [FREE] and float(out.output.sum()) == 70_000.0


def test_empty_sends_without_copying(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    tensor = shm.empty((256, 256), torch.bfloat16)
    tensor.copy_(torch.randn(256, 256).to(torch.bfloat16))
    assert _states(shm) == [SENDER]
    frames = encoder.encode(diffusion.Output(output=tensor))
    assert _states(shm) == [IN_FLIGHT] and len(_slots(shm)) == 1  # no second slot
    tensor[0, 0] = 7.0  # breaking the ownership rule shows the memory is shared, not copied
    out = decoder.decode(frames).output
    assert out.dtype == torch.bfloat16 and float(out[0, 0]) == 7.0
    assert torch.equal(out.view(torch.int16), tensor.view(torch.int16))
    del out
    assert _states(shm) == [FREE]


@BOTH_VIEWS
def test_a_pool_tensor_dropped_unsent_returns_its_slot(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    views = _views(monkeypatch, _pool, kept)
    tensor = shm.empty_like(torch.zeros(3, 1000))
    array = shm.empty_numpy((10, 10), np.int64)
    assert tensor.shape == (3, 1000) and array.shape == (10, 10) and array.dtype == np.int64
    assert sorted(views.types) == ([800, 12_000] if kept else [])  # the way each was viewed
    assert sorted(_states(shm)) == [SENDER, SENDER]
    part = array[2:4]
    del array
    gc.collect()
    part[:] = 7  # still its slot's memory, and the slot still the sender's
    assert sorted(_states(shm)) == [SENDER, SENDER] and int(part.sum()) == 7 * 20
    del tensor, part
    gc.collect()
    assert _states(shm) == [FREE, FREE]


def test_a_replayed_or_stale_handle_is_rejected(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
    held = decoder.decode(frames)
    with pytest.raises(tw.DecodeError, match=r"generation 1 is no longer in flight \(stale or replayed handle\)"):
        decoder.decode(frames)
    assert _states(shm) == [CLAIMED]  # the replay did not free the slot under the holder
    del held
    with pytest.raises(tw.DecodeError, match=r"no longer in flight"):
        decoder.decode(frames)


def test_pool_handles_are_verified(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
    header = head_of(frames[0])
    handle = header[3][0][1]
    assert handle["transport"] == "shm-slot"
    handle["offset"] = size_class(160_000)
    with pytest.raises(tw.DecodeError, match=r"outside its \d+-byte area"):
        decoder.decode([frame_of(header)])
    handle["name"] = "psm_not_ours"
    with pytest.raises(tw.DecodeError, match=r"'psm_not_ours' is not a tensorwire name"):
        decoder.decode([frame_of(header)])
    assert _states(shm) == [FREE]  # the failed decode handed the slot back


def test_a_segment_without_a_control_page_is_rejected(shm: transports.ShmTransport) -> None:
    encoder, _ = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
    assert shm.pool is not None
    shm.pool.slots()[0].mapping[:8] = b"NOTASLOT"
    fresh = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(pool=False, backing=shm.backing)])
    with pytest.raises(tw.DecodeError, match=r"has no valid control page"):
        fresh.decode(frames)


def test_a_segment_shorter_than_its_control_page_is_rejected(shm: transports.ShmTransport) -> None:
    encoder, _ = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
    header = head_of(frames[0])
    handle = header[3][0][1]
    name = handle["name"]
    short = name.rsplit("-", 1)[0] + "-fffff"  # a name of our pattern, same creator
    (SHM_DIR / short).write_bytes(b"\0" * 64)
    handle["name"] = short
    handle.pop("fd", None)  # a named segment
    fresh = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(pool=False, backing="named")])
    try:
        with pytest.raises(
            tw.DecodeError, match=rf"pool segment {short} holds 64 bytes, less than its \d+-byte header"
        ):
            fresh.decode([frame_of(header)])
    finally:
        (SHM_DIR / short).unlink()


def _as_if_its_receiver_died(shm: transports.ShmTransport, slot: Any) -> None:
    """Make ``slot``'s claim look like that of a receiver that died: a pid no process has, and (a
    named slot) no receiver's lock on its file, which goes with a dead process's descriptors."""
    struct.pack_into("<Q", slot.mapping, 24, 999_999_999)
    for (name, _), mapped in shm._reader._maps.items():
        if name == slot.name:
            mapped.page.mark(RECEIVER_BYTE, False)


def test_a_named_slot_is_marked_only_while_a_proven_claim_holds_it(shm: transports.ShmTransport) -> None:
    """A receiver tells the sender it holds a named slot by a lock on its file (what a pid cannot
    tell across pid namespaces): taken by a claim once its capability proves, never by a refused
    one, and dropped when the last view dies. A memfd slot's receiver takes none."""
    encoder, decoder = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=torch.ones(30_000)))
    page = _slots(shm)[0].page  # the sender's: it sees the receiver's lock
    forged = head_of(frames[0])
    forged[3][0][1]["capability"] = bytes(16)
    with pytest.raises(tw.DecodeError, match=r"capability does not match"):
        decoder.decode([frame_of(forged), *frames[1:]])
    assert not page.marked_elsewhere(RECEIVER_BYTE)
    out = decoder.decode(frames)
    assert page.marked_elsewhere(RECEIVER_BYTE) == (shm.backing == "named")
    del out
    gc.collect()
    assert not page.marked_elsewhere(RECEIVER_BYTE)


def test_a_slot_claimed_by_a_dead_receiver_is_reclaimed(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    out = decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(30_000))))
    slot = _slots(shm)[0]
    _as_if_its_receiver_died(shm, slot)
    again = decoder.decode(encoder.encode(diffusion.Output(output=torch.zeros(30_000))))
    assert len(_slots(shm)) == 1 and float(again.output.sum()) == 0.0
    del out, again


@pytest.mark.parametrize("said", ["start said", "start not said"])
def test_a_slot_claimed_by_a_receiver_whose_pid_another_process_took_is_reclaimed(
    shm: transports.ShmTransport, said: str
) -> None:
    """A receiver died holding a slot and a later process took its pid: the sender took that
    process for the receiver, and never reused the slot while it lived. The claim says when its
    receiver started, so the slot is reclaimed; a claim that does not say (a page written by an
    older peer) is judged by the pid alone, as before."""
    encoder, decoder = _pair(shm)
    out = decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(30_000))))
    slot = _slots(shm)[0]
    later = subprocess.Popen(["sleep", "60"])  # started after this process, the slot's receiver
    try:
        _as_if_its_receiver_died(shm, slot)
        struct.pack_into("<Q", slot.mapping, 24, later.pid)  # the receiver's pid, taken by ``later``
        if said == "start not said":
            struct.pack_into("<Q", slot.mapping, 88, 0)
        again = decoder.decode(encoder.encode(diffusion.Output(output=torch.zeros(30_000))))
        assert len(_slots(shm)) == (1 if said == "start said" else 2) and float(again.output.sum()) == 0.0
        assert float(out.output.sum()) == (0.0 if said == "start said" else 30_000.0)  # its slot, reused
    finally:
        later.kill()
        later.wait()
    del out, again


def test_a_processes_start_is_read_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sender looking for a free slot checks the start of every receiver holding one: another
    process's start (a read of ``/proc``) is read again only after a second, this process's once."""
    reads: list[int | str] = []

    def started(pid: int | str = "self") -> int:
        reads.append(pid)
        return 1000 + len(reads)

    monkeypatch.setattr(_segment, "started", started)
    monkeypatch.setattr(_segment, "_STARTS", {})
    monkeypatch.setattr(_segment, "_OWN_START", (0, 0))
    other = os.getppid()
    assert _segment.started_as_said(other, 1001) and _segment.started_as_said(other, 1001)
    assert not _segment.started_as_said(other, 999) and reads == [other]  # read once
    monkeypatch.setattr(_segment, "_STARTS_FOR", -1.0)  # as if the second were over
    assert not _segment.started_as_said(other, 1001) and reads == [other, other]  # read again: 1002 now
    assert _segment.started_as_said(other, 0)  # not said: nothing read
    own = [_segment.started_as_said(os.getpid(), 1003), _segment.started_as_said(os.getpid(), 1004)]
    assert own == [True, False] and reads == [other, other, "self"]


def test_the_budget_falls_back_to_one_shot_segments() -> None:
    before = set(segments_of(os.getpid()))
    shm = transports.ShmTransport(max_cached_bytes=300_000, idle_seconds=0)
    encoder = tw.Encoder(transport=shm, options=OOB)
    decoder = tw.Decoder(REGISTRY, transports=[shm])
    frames = encoder.encode(diffusion.Output(output=[torch.ones(40_000), torch.ones(40_000)]))
    kinds = [handle["transport"] for _, handle in head_of(frames[0])[3]]
    assert kinds == ["shm-slot", "shm"]  # 196 KiB slot fits, a second one would not
    out = decoder.decode(frames)
    assert float(out.output[1].sum()) == 40_000.0
    del out
    shm.close()
    assert set(segments_of(os.getpid())) == before


def test_idle_slots_are_given_back(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    for size in (10_000, 100_000, 1_000_000):
        decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(size))))
    gc.collect()
    assert len(_slots(shm)) == 3
    freed = shm.trim(0)
    assert freed == sum(size_class(n * 4) + CONTROL_BYTES for n in (10_000, 100_000, 1_000_000))
    assert _slots(shm) == []  # the fixture checks /dev/shm


def test_ten_thousand_transfers_leave_nothing_behind() -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def shm_bytes() -> int:  # shared memory this process maps (memfds never show in /dev/shm's usage)
        with open("/proc/self/status", encoding="ascii") as status:
            line = next(line for line in status if line.startswith("RssShmem:"))
        return int(line.split()[1]) * 1024

    gc.collect()
    base_fds, base_bytes, base_segments = fds(), shm_bytes(), set(segments_of(os.getpid()))
    shm = transports.ShmTransport()
    encoder, decoder = _pair(shm)
    tensor = torch.arange(20_000, dtype=torch.float32)
    for i in range(10_000):
        out = decoder.decode(encoder.encode(diffusion.Output(output=tensor, chunk_index=i)))
        assert out.chunk_index == i
    assert float(out.output[-1]) == 19_999.0
    del out
    assert len(_slots(shm)) == 2  # the previous message is held while the next is sent
    shm.close()
    gc.collect()
    assert fds() == base_fds
    assert shm_bytes() <= base_bytes
    assert set(segments_of(os.getpid())) == base_segments


@pytest.mark.parametrize("backing", ["memfd", "named"])
def test_a_pool_dropped_without_close_lets_go_of_its_free_slots_and_stops_trimming(backing: Backing) -> None:
    import threading
    import weakref

    shm = transports.ShmTransport(idle_seconds=60, backing=backing)
    encoder, decoder = _pair(shm)
    decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(10_000))))
    gc.collect()
    pool = shm.pool
    assert pool is not None  # (a name: an assertion on shm.pool would keep it in a rewritten temporary)
    pool_ref = weakref.ref(pool)
    names = [slot.name for slot in pool.slots()]
    del pool
    assert names and set(names) <= set(segments_of(os.getpid()))
    assert any(t.name == "tensorwire-pool-trim" for t in threading.enumerate())
    del shm, encoder, decoder
    gc.collect()
    assert pool_ref() is None  # the trimmer thread does not keep it alive
    assert not any((SHM_DIR / n).exists() for n in names)
    if backing == "memfd":
        assert not set(names) & set(segments_of(os.getpid()))  # no fd, no mapping: the memory is gone


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda shm: shm.empty((-1, 3), torch.float32), "empty: shape[0] is -1; expected an int >= 0"),
        (lambda shm: shm.empty((2, 3.0), torch.float32), "empty: shape[1] is 3.0; expected an int >= 0"),
        (lambda shm: shm.empty((2, True), torch.float32), "empty: shape[1] is True; expected an int >= 0"),
        (lambda shm: shm.empty(5, torch.float32), "empty: shape is 5; expected a sequence of ints"),
        (lambda shm: shm.empty((2,), np.float32), "empty: dtype is <class 'numpy.float32'>; expected a torch.dtype"),
        (lambda shm: shm.empty_numpy((4, -2), np.int32), "empty_numpy: shape[1] is -2; expected an int >= 0"),
        (
            lambda shm: shm.empty_numpy((4,), object),
            "empty_numpy: dtype object holds Python object references; it cannot live in shared memory",
        ),
        (
            lambda shm: shm.empty_numpy((4,), "S0"),
            "empty_numpy: dtype |S0 has no size; it cannot live in shared memory",
        ),
    ],
)
def test_an_allocation_of_a_bad_shape_or_dtype_is_refused_before_it_takes_a_slot(
    shm: transports.ShmTransport, call: Any, message: str
) -> None:
    with pytest.raises(tw.TransportError, match=f"^\\[Errno {errno.EINVAL}\\] {re.escape(message)}$") as info:
        call(shm)
    assert info.value.errno == errno.EINVAL
    assert _slots(shm) == []


def test_a_zero_byte_allocation_takes_no_slot_and_travels_inline(shm: transports.ShmTransport) -> None:
    tensor, array = shm.empty((0, 3), torch.float32), shm.empty_numpy((2, 0), np.int64)
    assert tensor.shape == (0, 3) and tensor.dtype == torch.float32
    assert array.shape == (2, 0) and array.dtype == np.dtype(np.int64)
    assert _slots(shm) == []  # (a slot was taken, and held by the empty array while it lived)
    out = _pair(shm)[1].decode(_pair(shm)[0].encode(diffusion.Output(output=[tensor, array]))).output
    assert out[0].shape == (0, 3) and out[1].shape == (2, 0) and _slots(shm) == []
    with transports.ShmTransport(pool=False) as unpooled, pytest.raises(tw.TransportError, match=r"needs the pool"):
        unpooled.empty_numpy((0,), np.int8)  # still a call that needs the pool


def test_an_allocation_takes_any_int_like_dims(shm: transports.ShmTransport) -> None:
    dims: Any = (np.int64(3), torch.tensor(2))  # what operator.index takes
    assert shm.empty(dims, torch.bfloat16).shape == (3, 2) and shm.empty(torch.Size([0, 4]), torch.int8).shape == (0, 4)
    assert shm.empty_numpy(torch.Size([2, 3]), [("a", "<i4"), ("b", "<f8")]).shape == (2, 3)


def test_empty_numpy_sends_without_copying(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    array = shm.empty_numpy((4, 5), np.int32)
    array[:] = np.arange(20).reshape(4, 5)
    frames = encoder.encode(diffusion.Output(output=array))
    assert _states(shm) == [IN_FLIGHT]  # the allocating slot itself was handed over
    out = decoder.decode(frames).output
    assert np.array_equal(out, np.arange(20).reshape(4, 5)) and _states(shm) == [CLAIMED]
    del out


def test_read_only_memory_goes_through_the_pool(shm: transports.ShmTransport) -> None:
    # an array over bytes reaches the transport as a read-only view (its address found through numpy)
    values = np.arange(30_000, dtype=np.float32)
    array = np.frombuffer(values.tobytes(), dtype=np.float32)
    assert not array.flags.writeable
    encoder, decoder = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=array))
    assert _states(shm) == [IN_FLIGHT] and len(frames) == 1
    out = decoder.decode(frames).output
    assert np.array_equal(out, values)
    del out


def test_the_address_of_a_view_is_the_one_numpy_gives() -> None:
    from tensorwire.transports.shm import _address

    block = np.arange(64, dtype=np.uint8)
    views = (block.data, block.data[5:], block.data.toreadonly()[7:], block.data[64:])
    for view in views:  # (the last is empty: ctypes refuses it, numpy gives its address)
        assert _address(view) == np.frombuffer(view, dtype=np.uint8).ctypes.data
    with pytest.raises(BufferError, match="not C-contiguous"):  # numpy's refusal, for a writable view too
        _address(block[::2].data)


def test_a_descriptor_failure_hands_the_slots_back(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=[torch.ones(20_000), torch.ones(30_000)]))
    header = head_of(frames[0])
    second = header[4]["output"][1]
    assert tensor_exts(header[4])[1] is second
    header[4]["output"][1] = edit_descriptor(second, dtype=len(DTYPE_NAMES))
    with pytest.raises(tw.DecodeError, match=rf"dtype code {len(DTYPE_NAMES)} is not in the wire dtype table"):
        decoder.decode([frame_of(header)])
    assert _states(shm) == [FREE, FREE]


def _slot_names(frames: list[Any]) -> list[str]:
    return [handle["name"] for _, handle in head_of(frames[0])[3]]


def _counting_looks(shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """The names of the slots ``acquire`` looks at from now on, in order: at a glance (is it free?),
    and closely (can it be made free?)."""
    pool = shm.pool
    assert pool is not None
    glances: list[str] = []
    looks: list[str] = []
    is_free_property: property = inspect.getattr_static(Page, "is_free")
    quick = is_free_property.fget
    assert quick is not None

    def is_free(page: Page) -> bool:  # (called under the pool's lock: its slots read without it)
        glances.append(next(slot.name for slot in pool._by_name.values() if slot.page is page))
        return bool(quick(page))

    close = _pool_choice.reusable

    def reusable(slot: Any, now_ns: int, alive: Any = _segment.alive) -> bool | None:
        looks.append(slot.name)
        return close(slot, now_ns, alive)

    monkeypatch.setattr(Page, "is_free", property(is_free))
    monkeypatch.setattr(_pool_choice, "reusable", reusable)
    return glances, looks


def test_a_send_takes_the_first_free_slot_with_a_glance_at_each_before_it(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder, decoder = _pair(shm)
    tensor = torch.ones(10_000)
    pending = [encoder.encode(diffusion.Output(output=tensor)) for _ in range(5)]
    freed = pending.pop(2)
    decoder.decode(freed)  # the middle slot is free again; the others are still in flight
    names = [slot.name for slot in _slots(shm)]
    glances, looks = _counting_looks(shm, monkeypatch)
    frames = encoder.encode(diffusion.Output(output=tensor))
    assert _slot_names(frames) == [names[2]] and len(_slots(shm)) == 5
    assert glances == names[:3] and looks == []  # no lock, no liveness check while a slot is free
    for pending_frames in [*pending, frames]:
        decoder.decode(pending_frames)


def test_one_message_at_a_time_stays_on_the_first_slot(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    tensor = torch.ones(10_000)
    held = [decoder.decode(encoder.encode(diffusion.Output(output=tensor))) for _ in range(3)]
    first = _slots(shm)[0].name
    del held  # three free slots: the other two idle out
    for _ in range(6):
        frames = encoder.encode(diffusion.Output(output=tensor))
        assert _slot_names(frames) == [first]
        decoder.decode(frames)
    assert _states(shm) == [FREE, FREE, FREE]


def test_slots_that_sends_keep_finding_busy_move_out_of_their_way(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a receiver keeps ten tensors (their slots stay claimed) while messages keep coming one at a time
    monkeypatch.setattr(_pool, "WALK_EVERY", 0.0)  # every send that finds none free looks closely
    encoder, decoder = _pair(shm)
    tensor = torch.ones(10_000)
    kept = [decoder.decode(encoder.encode(diffusion.Output(output=tensor))) for _ in range(10)]
    held = [slot.name for slot in _slots(shm)]
    glances, looks = _counting_looks(shm, monkeypatch)
    frames = encoder.encode(diffusion.Output(output=tensor))  # none free: each looked at closely, then growth
    assert glances == held and looks == held
    decoder.decode(frames)
    moving = _slot_names(frames)[0]
    for _ in range(PASSED - 1):  # a glance at each held slot still in the way, then the free one
        glances.clear()
        frames = encoder.encode(diffusion.Output(output=tensor))
        assert _slot_names(frames) == [moving] and glances[-1] == moving and len(glances) <= 11
        decoder.decode(frames)
    assert [slot.name for slot in _slots(shm)] == [moving, *held]  # held: at the back
    glances.clear()
    looks.clear()
    frames = encoder.encode(diffusion.Output(output=tensor))
    assert glances == [moving] and looks == []  # one glance per send from now on
    decoder.decode(frames)
    del kept
    assert _states(shm) == [FREE] * 11 and len(_slots(shm)) == 11


def test_a_pipeline_of_messages_in_flight_reuses_each_slot_as_it_is_freed(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 32 messages in flight, each read in the order sent: each send takes the slot the oldest left
    encoder, decoder = _pair(shm)
    tensor = torch.ones(10_000)
    pending = [encoder.encode(diffusion.Output(output=tensor, chunk_index=i)) for i in range(32)]
    _, looks = _counting_looks(shm, monkeypatch)
    for i in range(32, 96):
        oldest = pending.pop(0)
        assert decoder.decode(oldest).chunk_index == i - 32  # (the tensor dies: its slot is free)
        frames = encoder.encode(diffusion.Output(output=tensor, chunk_index=i))
        assert _slot_names(frames) == _slot_names(oldest)
        pending.append(frames)
    assert looks == [] and len(_slots(shm)) == 32  # none grown
    for frames in pending:
        decoder.decode(frames)


def test_a_view_inside_a_pool_tensor_is_handed_over_without_a_copy(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    first = shm.empty((100_000,), torch.float32)
    second = shm.empty((100_000,), torch.float32)
    first.copy_(torch.arange(100_000, dtype=torch.float32))
    second.fill_(2.0)
    slots = _slots(shm)
    frames = encoder.encode(diffusion.Output(output=first[50_000:60_000]))  # found by an address inside the slot
    assert _slot_names(frames) == [slots[0].name] and len(_slots(shm)) == 2
    assert _states(shm) == [IN_FLIGHT, SENDER]
    first[50_000] = -1.0  # shared, not copied
    out = decoder.decode(frames).output
    assert float(out[0]) == -1.0 and torch.equal(out[1:], torch.arange(50_001, 60_000, dtype=torch.float32))
    del out, first
    plain = torch.ones(100_000)  # memory no slot holds: copied into a new slot, the pool tensor untouched
    frames = encoder.encode(diffusion.Output(output=plain))
    assert _slot_names(frames) != [slots[1].name] and slots[1].state == SENDER
    assert float(decoder.decode(frames).output.sum()) == 100_000.0
    assert float(second.sum()) == 200_000.0


def test_a_tensor_reaching_past_its_slot_is_not_handed_over_as_the_slot() -> None:
    pool = transports.ShmTransport(idle_seconds=0).pool
    assert pool is not None
    try:
        array = pool.empty_array(70_000)
        assert array is not None
        slot = pool.slots()[0]
        start = slot.address
        assert pool.hand_over_allocated(start - 1, 10) is None  # below every slot
        assert pool.hand_over_allocated(start + slot.capacity - 8, 16) is None  # runs past its end
        assert pool.hand_over_allocated(start + slot.capacity, 8) is None  # just after it
        assert slot.state == SENDER
        found = pool.hand_over_allocated(start + 64, 8)
        assert found is not None and found[0] is slot and slot.state == IN_FLIGHT
        assert pool.hand_over_allocated(start, 8) is None  # handed over once only
        del array
    finally:
        pool.close()


def test_the_pools_byte_count_follows_its_slots(shm: transports.ShmTransport) -> None:
    pool = shm.pool
    assert pool is not None

    def counted() -> int:
        return sum(slot.capacity + CONTROL_BYTES for slot in pool.slots())

    encoder, decoder = _pair(shm)
    held = [decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(n)))) for n in (10_000, 100_000, 30_000)]
    assert pool.cached_bytes == counted() == sum(size_class(n * 4) + CONTROL_BYTES for n in (10_000, 100_000, 30_000))
    garbage = pool.slots()[0]
    del held
    garbage.page.words[1] = 99  # a control page holding garbage: dropped when next looked at
    decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(10_000))))
    assert garbage not in pool.slots() and pool.cached_bytes == counted()
    pool.forget(pool.slots()[0])
    assert pool.cached_bytes == counted()
    shm.trim(0)
    assert pool.cached_bytes == counted() == 0


def test_garbled_slots_are_never_taken_and_are_dropped_when_no_slot_is_free(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pool, "WALK_EVERY", 0.0)  # every send that finds none free looks closely
    encoder, decoder = _pair(shm)
    tensor = torch.ones(10_000)
    held = [decoder.decode(encoder.encode(diffusion.Output(output=tensor))) for _ in range(3)]
    del held
    first, second, third = _slots(shm)
    first.page.words[0] = 0  # free, but not our magic
    second.page.words[1] = 99  # not a state
    frames = encoder.encode(diffusion.Output(output=tensor))
    assert _slot_names(frames) == [third.name]  # past both, without dropping them yet
    assert _slots(shm) == [first, second, third]
    again = encoder.encode(diffusion.Output(output=tensor))  # none free: garbage dropped, the pool grows
    slots = _slots(shm)
    assert slots[0] is third and len(slots) == 2 and _slot_names(again) == [slots[1].name]
    decoder.decode(frames)
    decoder.decode(again)


def _keeping(shm: transports.ShmTransport, count: int) -> tuple[Pool, tw.Encoder, tw.Decoder, torch.Tensor, list[Any]]:
    """The pool, an encoder and decoder over ``shm``, the tensor they send, and the messages of
    ``count`` sends a receiver keeps (their slots stay claimed)."""
    pool = shm.pool
    assert pool is not None
    encoder, decoder = _pair(shm)
    tensor = torch.ones(10_000)
    return (
        pool,
        encoder,
        decoder,
        tensor,
        [decoder.decode(encoder.encode(diffusion.Output(output=tensor))) for _ in range(count)],
    )


def test_a_busy_class_is_walked_closely_at_most_every_walk_every(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver keeps many tensors: a send that finds none free grows the pool without looking
    closely at each held slot again, until ``WALK_EVERY`` has passed or the budget forbids growth;
    a close walk checks each receiver's liveness once."""
    monkeypatch.setattr(_pool, "WALK_EVERY", 3600.0)
    monkeypatch.setattr(_pool, "WALK_ALWAYS", 4)  # (a class of at most 4 slots is walked every time)
    pool, encoder, decoder, tensor, kept = _keeping(shm, 10)  # one close walk on the way
    held = [slot.name for slot in pool.slots()]
    glances, looks = _counting_looks(shm, monkeypatch)
    kept.append(decoder.decode(encoder.encode(diffusion.Output(output=tensor))))
    assert glances == held and looks == [] and len(pool.slots()) == 11  # grown, no close look
    dead = pool.slots()[4]
    _as_if_its_receiver_died(shm, dead)
    checked: list[int] = []

    def alive(pid: int) -> bool:
        checked.append(pid)
        return pid != 999_999_999

    monkeypatch.setattr(_pool_choice, "alive", alive)
    monkeypatch.setattr(pool, "retention", Retention(max_bytes=pool.cached_bytes))  # no room to grow
    glances.clear()
    frames = encoder.encode(diffusion.Output(output=tensor))  # so the walk comes at once
    assert _slot_names(frames) == [dead.name] and len(pool.slots()) == 11
    assert looks == held[:5]  # up to the slot it can reclaim
    assert checked == [os.getpid(), 999_999_999]  # four slots of this process's, one look at it
    decoder.decode(frames)
    del kept


def test_a_parked_slot_freed_again_is_found_by_the_next_walk(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pool, "WALK_EVERY", 0.0)
    pool, encoder, decoder, tensor, kept = _keeping(shm, 5)
    held = pool.slots()
    for _ in range(PASSED):  # one message at a time, past the five held slots: they are parked
        decoder.decode(encoder.encode(diffusion.Output(output=tensor)))
    moving = pool.slots()[0]
    assert pool.slots() == [moving, *held] and all(slot.parked for slot in held) and not moving.parked
    del kept[2]  # its receiver lets go: free, but parked
    glances, looks = _counting_looks(shm, monkeypatch)
    first = decoder.decode(encoder.encode(diffusion.Output(output=tensor)))  # keeps the slot in use
    assert glances == [moving.name] and looks == []  # parked slots are not glanced at
    frames = encoder.encode(diffusion.Output(output=tensor))  # none free before the parked: a close walk
    assert _slot_names(frames) == [held[2].name] and len(pool.slots()) == 6
    assert looks == [moving.name, held[0].name, held[1].name, held[2].name]
    assert pool.slots() == [moving, held[2], held[0], held[1], held[3], held[4]] and not held[2].parked
    decoder.decode(frames)
    del first, kept


def test_a_small_class_is_walked_closely_whenever_none_is_free(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pool, "WALK_EVERY", 3600.0)
    pool, encoder, decoder, tensor, kept = _keeping(shm, 3)
    held = [slot.name for slot in pool.slots()]
    _, looks = _counting_looks(shm, monkeypatch)
    for grown in range(1, 3):
        kept.append(decoder.decode(encoder.encode(diffusion.Output(output=tensor))))
        assert looks == held + [slot.name for slot in pool.slots()[3 : 2 + grown]]  # every time
        looks.clear()
    assert len(pool.slots()) == 5 <= _pool.WALK_ALWAYS
    del kept


def test_slots_in_flight_move_back_but_are_still_looked_at(
    shm: transports.ShmTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Messages no receiver has claimed (a deep pipeline, or lost) are not parked: the send that
    finds one freed takes it without a close walk."""
    monkeypatch.setattr(_pool, "WALK_EVERY", 3600.0)
    pool = shm.pool
    assert pool is not None
    encoder, decoder = _pair(shm)
    tensor = torch.ones(10_000)
    pending = [encoder.encode(diffusion.Output(output=tensor)) for _ in range(3)]
    in_flight = pool.slots()
    for _ in range(PASSED):
        decoder.decode(encoder.encode(diffusion.Output(output=tensor)))
    moving = pool.slots()[0]
    assert pool.slots() == [moving, *in_flight] and not any(slot.parked for slot in pool.slots())
    first = decoder.decode(encoder.encode(diffusion.Output(output=tensor)))  # the moving slot stays in use
    decoder.decode(pending[1])  # the second message read: its slot is free
    glances, looks = _counting_looks(shm, monkeypatch)
    frames = encoder.encode(diffusion.Output(output=tensor))
    assert _slot_names(frames) == _slot_names(pending[1]) and looks == []
    assert glances == [moving.name, in_flight[0].name, in_flight[1].name] and len(pool.slots()) == 4
    for other in (frames, pending[0], pending[2]):
        decoder.decode(other)
    del first


# -- what the sender can tell of an export's fate -----------------------------------------------------
def _handle_of(decoder: tw.Decoder, frames: list[Any]) -> Any:
    ((_, handle),) = decoder.table.decode(frames[0]).buffers
    return handle


def test_claimed_says_whether_a_receiver_proved_a_slots_capability(shm: transports.ShmTransport) -> None:
    encoder, decoder = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
    handle = _handle_of(decoder, frames)
    forged = msgspec.structs.replace(handle, capability=bytes(16))
    stale = msgspec.structs.replace(handle, generation=handle.generation + 1)
    assert (shm.claimed(handle), shm.claimed(forged), shm.claimed(stale)) == (None, False, False)
    with held_elsewhere(lambda: tw.Decoder(REGISTRY, [transports.ShmTransport(backing=shm.backing)]).decode(frames)):
        assert shm.claimed(handle) is True  # held by its receiver (a claim leaves no capability to check)
    assert _states(shm) == [FREE] and shm.claimed(handle) is True  # and let go
    later = encoder.encode(diffusion.Output(output=torch.ones(40_000)))  # the slot moves on: the
    assert shm.claimed(handle) is True  # hand-over before it is remembered (an ``empty`` tensor's next send)
    del decoder.decode(later).output  # claimed by this process, and let go
    encoder.encode(diffusion.Output(output=torch.ones(40_000)))  # and on again: the first is forgotten
    assert shm.claimed(handle) is False and shm.claimed(_handle_of(decoder, later)) is False


def test_claimed_says_none_for_a_slot_in_flight_past_its_deadline_until_it_is_brought_back() -> None:
    """Past its deadline a slot still holds its bytes until the sender brings it back: until then it
    waits (a ZeroMQ peer on trial gets no second message in shared memory meanwhile)."""
    with transports.ShmTransport() as shm:
        encoder, decoder = _pair(shm)
        handle = _handle_of(decoder, encoder.encode(diffusion.Output(output=torch.ones(40_000))))
        (slot,) = _slots(shm)
        slot.page.words[5] = time.monotonic_ns() - 1  # its claim deadline (word 5) has passed
        assert shm.claimed(handle) is None
        assert shm.pool is not None and shm.pool.expire() == 1
        assert _states(shm) == [FREE] and shm.claimed(handle) is False


def test_claimed_says_whether_a_one_shot_segment_was_claimed() -> None:
    with transports.ShmTransport(pool=False) as shm:
        encoder, decoder = _pair(shm)
        frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
        handle = _handle_of(decoder, frames)
        assert shm.claimed(handle) is None
        assert shm.claimed(msgspec.structs.replace(handle, capability=bytes(16))) is False
        with held_elsewhere(lambda: tw.Decoder(REGISTRY, [transports.ShmTransport(pool=False)]).decode(frames)):
            assert shm.claimed(handle) is True
        unclaimed = _handle_of(decoder, encoder.encode(diffusion.Output(output=torch.ones(40_000))))
        pending = shm._one_shots._pending
        for name, (known, _, made) in list(pending.items()):
            pending[name] = (known, time.monotonic_ns() - 1, made)  # both past their deadline
        assert (shm.claimed(unclaimed), shm.claimed(handle)) == (None, True)  # still there until swept
        shm.trim()  # swept: nothing is known of either any more
        assert (shm.claimed(unclaimed), shm.claimed(handle)) == (False, False)


def test_a_transport_that_cannot_tell_says_claimed() -> None:
    inline = transports.InlineTransport()
    assert inline.claimed(inline.export(memoryview(b"abc"), [b""])) is True


def test_claimed_says_false_for_what_this_process_claimed_or_gave_back(shm: transports.ShmTransport) -> None:
    """A handle echoed back to its sender was claimed (or, in a message that does not decode, given
    back) by the sender's own decoder, which ``claimed`` took for a peer's claim."""
    encoder, decoder = _pair(shm)
    frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
    handle = _handle_of(decoder, frames)
    held = decoder.decode(frames)
    assert shm.claimed(handle) is False
    del held
    assert _states(shm) == [FREE] and shm.claimed(handle) is False
    given_back = _handle_of(decoder, frames := encoder.encode(diffusion.Output(output=torch.ones(40_000))))
    decoder.release([given_back])
    assert shm.claimed(given_back) is False


def test_claimed_says_false_for_a_one_shot_segment_this_process_claimed() -> None:
    with transports.ShmTransport(pool=False) as shm, transports.ShmTransport(pool=False) as other:
        encoder = tw.Encoder(transport=shm, options=OOB)
        for reader in (shm, other):  # the same transport, or another of this process
            frames = encoder.encode(diffusion.Output(output=torch.ones(40_000)))
            handle = _handle_of(tw.Decoder(REGISTRY, [reader]), frames)
            tw.Decoder(REGISTRY, [reader]).decode(frames)
            assert shm.claimed(handle) is False
