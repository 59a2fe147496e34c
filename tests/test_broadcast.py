"""One shared-memory buffer for several receivers: ``ShmTransport.fan_out`` and the control page's broadcast."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import time
from typing import Any

import pytest
import torch

import tensorwire as tw
from tensorwire.builtins import REGISTRY, rpc
from tensorwire.transports._page_layout import _W_PIDS, CLAIMED, FREE, IN_FLIGHT, MAX_READERS
from tensorwire.transports._pool_choice import reusable

MiB = 1024 * 1024


def _states(shm: Any) -> list[int]:
    return [slot.state for slot in shm.pool.slots()]


def _message() -> Any:
    return rpc.Request(method="m", kwargs={"x": torch.randn(MiB)})


def test_each_receiver_gets_the_tensor_and_the_slot_is_free_after_the_last() -> None:
    message = _message()
    with tw.transports.ShmTransport() as shm:
        frames = tw.Encoder(shm.fan_out(3)).encode(message)
        assert len(frames) == 1 and len(_states(shm)) == 1  # one slot, whatever the receivers
        readers = [tw.transports.ShmTransport() for _ in range(3)]
        got = [tw.Decoder(REGISTRY, [r]).decode(frames).kwargs["x"] for r in readers]
        assert all(torch.equal(x, message.kwargs["x"]) for x in got)
        assert _states(shm) == [CLAIMED]
        del got[0]
        gc.collect()
        assert _states(shm) == [CLAIMED]  # two receivers still hold it
        got.clear()
        gc.collect()
        assert _states(shm) == [FREE]
        for reader in readers:
            reader.close()


def test_a_fourth_claim_of_a_broadcast_to_three_is_refused() -> None:
    with tw.transports.ShmTransport() as shm, tw.transports.ShmTransport() as reader:
        frames = tw.Encoder(shm.fan_out(3)).encode(_message())
        decoder = tw.Decoder(REGISTRY, [reader], tw.DecodeOptions(borrow=False))
        for _ in range(3):
            decoder.decode(frames)  # copies: each claim frees its hold at once
        assert _states(shm) == [FREE]
        with pytest.raises(tw.DecodeError, match="no longer in flight"):
            decoder.decode(frames)


def test_holders_free_a_broadcast_whose_other_receivers_never_came() -> None:
    with tw.transports.ShmTransport(claim_timeout=0.3) as shm, tw.transports.ShmTransport() as reader:
        frames = tw.Encoder(shm.fan_out(3)).encode(_message())
        decoder = tw.Decoder(REGISTRY, [reader])
        held = decoder.decode(frames).kwargs["x"]
        assert _states(shm) == [IN_FLIGHT]  # one claim of three
        time.sleep(0.4)
        assert shm.pool is not None
        shm.pool.expire()  # (or the pool's trimmer did already): held, so closed to claims, not freed
        assert _states(shm) == [CLAIMED]
        with pytest.raises(tw.DecodeError, match="expired: it was not claimed within its sender's claim timeout"):
            decoder.decode(frames)
        del held
        gc.collect()
        assert _states(shm) == [FREE]


def test_a_broadcast_nobody_claims_expires_back_to_free() -> None:
    with tw.transports.ShmTransport(claim_timeout=0.2) as shm:
        tw.Encoder(shm.fan_out(2)).encode(_message())
        time.sleep(0.3)
        assert shm.pool is not None
        shm.pool.expire()  # (or the pool's trimmer did already)
        assert _states(shm) == [FREE]


def test_receivers_that_never_get_it_are_withdrawn_by_the_sender() -> None:
    with tw.transports.ShmTransport() as shm, tw.transports.ShmTransport() as reader:
        fan = shm.fan_out(3)
        frames = tw.Encoder(fan).encode(_message())
        table = tw.Decoder(REGISTRY, [reader]).table.decode(frames[0])
        handle = table.buffers[0][1]
        held = tw.Decoder(REGISTRY, [reader]).decode(frames).kwargs["x"]
        fan.withdraw(handle, 2)  # two of the three were never sent the message
        assert _states(shm) == [CLAIMED]
        del held
        gc.collect()
        assert _states(shm) == [FREE]


@pytest.mark.parametrize("reused", [False, True], ids=["pid free", "pid taken by a later process"])
def test_a_dead_holder_is_taken_off_by_the_senders_reclaim(reused: bool) -> None:
    """A broadcast's holder died: the sender takes it off, and frees the page once the other holder
    lets go; so too when a later process took the dead holder's pid (its claim says when it started)."""
    import multiprocessing as mp

    from tests.procs import hold_and_die

    with tw.transports.ShmTransport() as shm, tw.transports.ShmTransport() as reader:
        frames = [bytes(f) for f in tw.Encoder(shm.fan_out(2)).encode(_message())]
        held = tw.Decoder(REGISTRY, [reader]).decode(frames).kwargs["x"]
        process = mp.get_context("spawn").Process(target=hold_and_die, args=(frames,))
        process.start()
        process.join(60)
        assert process.exitcode == 0 and process.pid is not None
        assert shm.pool is not None
        slot = shm.pool.slots()[0]
        pids = slot.page.words[_W_PIDS : _W_PIDS + 2].tolist()
        assert sorted(pids) == sorted([os.getpid(), process.pid])
        later = subprocess.Popen(["sleep", "60"]) if reused else None  # started after the dead holder
        try:
            if later is not None:
                slot.page.words[_W_PIDS + pids.index(process.pid)] = later.pid  # as if it took the pid
            del held
            gc.collect()
            assert _states(shm) == [CLAIMED]  # the dead holder's hold is still on the page
            assert reusable(slot, time.monotonic_ns())  # reclaimed: its last holder is gone
            assert _states(shm) == [FREE]
        finally:
            if later is not None:
                later.kill()
                later.wait()


def test_the_number_of_receivers_is_bounded() -> None:
    with tw.transports.ShmTransport() as shm:
        with pytest.raises(ValueError, match=f"a broadcast is for 1 to {MAX_READERS} receivers, not 0"):
            shm.fan_out(0)
        with pytest.raises(ValueError, match=f"a broadcast is for 1 to {MAX_READERS} receivers, not 65"):
            shm.fan_out(MAX_READERS + 1)
    with tw.transports.ShmTransport(pool=False) as one_shot:
        with pytest.raises(ValueError, match=r"a broadcast needs the pool \(ShmTransport\(pool=True\)\)"):
            one_shot.fan_out(2)


def test_a_broadcast_buffer_the_pool_has_no_room_for_is_a_transport_error() -> None:
    with tw.transports.ShmTransport(max_cached_bytes=64 * 1024) as shm:
        with pytest.raises(tw.TransportError, match="no room for a 4194304-byte broadcast buffer") as caught:
            tw.Encoder(shm.fan_out(2)).encode(_message())
        assert caught.value.errno == errno.ENOMEM
        assert shm.pool is not None and shm.pool.slots() == []
