"""CudaShmTransport's logic on CPU: policy and fallback, failure injection at every runtime call,
quarantine, pool bounds and retention (the GPU itself is exercised by tests/test_cuda_gpu.py)."""

from __future__ import annotations

import ast
import bisect
import gc
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.inspection import describe
from tensorwire.transports._page_layout import FREE, IN_FLIGHT
from tensorwire.transports.shm import our_segments
from tests.conftest import REPO
from tests.cuda_fakes import FILL, NO_CUDA_HERE, FakeCudaRuntime
from tests.wire_helpers import held_elsewhere

MiB = 1024 * 1024


@pytest.fixture
def fake() -> FakeCudaRuntime:
    return FakeCudaRuntime()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"registered_host_fraction": 2.0}, "registered_host_fraction must be in [0, 1], got 2.0"),
        ({"registered_shm_fraction": -0.5}, "registered_shm_fraction must be in [0, 1], got -0.5"),
        ({"min_free_fraction": float("nan")}, "min_free_fraction must be in [0, 1], got nan"),
        ({"max_registered_bytes": -1}, "max_registered_bytes must be None or >= 0, got -1"),
        ({"claim_timeout": float("inf")}, "claim_timeout must be > 0 and at most 2**32 seconds, got inf"),
    ],
)
def test_options_out_of_range_are_refused_by_their_own_names(
    tmp_path: Path, fake: FakeCudaRuntime, options: dict[str, Any], error: str
) -> None:
    """The registered pool's fractions were refused under the retention policy's names
    (``host_fraction must be in [0, 1]``), which are not the transport's."""
    with pytest.raises(ValueError) as info:
        transports.CudaShmTransport(tmp_path, runtime=fake, **options)
    assert str(info.value) == error


@pytest.fixture
def cuda_shm(tmp_path: Path, fake: FakeCudaRuntime) -> Iterator[transports.CudaShmTransport]:
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    yield transport
    transport.close()
    if transport.healthy:
        assert fake.registered == {}, "every registration is undone by close()"
        assert our_segments(tmp_path) == []


def _send(transport: transports.CudaShmTransport, source: torch.Tensor) -> Any:
    storage = source.view(torch.uint8).reshape(-1)
    return transport.export_device(storage, 0, storage.numel(), [])


def _receive(tmp_path: Path, handle: Any, nbytes: int) -> bytes:
    reader = transports.ShmTransport(tmp_path, pool=False)
    return bytes(reader.import_(handle, [], nbytes, borrow=False))


def _registered_states(transport: transports.CudaShmTransport) -> list[int]:
    assert transport.registered is not None
    return [slot.state for slot in transport.registered.slots()]


# -- policy -------------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_without_cuda_the_transport_says_why_and_takes_no_device_buffers(tmp_path: Path) -> None:
    transport = transports.CudaShmTransport(tmp_path)
    try:
        assert not transport.available and transport.registered is None
        assert transport.unavailable_reason == NO_CUDA_HERE
        assert _send(transport, torch.arange(4.0)) is None
    finally:
        transport.close()


def test_a_cpu_build_and_a_cuda_build_without_a_device_each_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorwire.transports.cuda_runtime import cuda_unavailable_reason

    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert cuda_unavailable_reason() == "torch was built without CUDA"
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_unavailable_reason() == "no CUDA device is visible"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cuda_unavailable_reason() is None


def test_a_rocm_build_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorwire.transports.cuda_runtime import cuda_unavailable_reason

    monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
    assert cuda_unavailable_reason() == "torch is a ROCm build (HIP 6.2.0); the CUDA runtime calls are not used"


def test_a_device_tensor_goes_straight_into_a_registered_slot(tmp_path: Path, cuda_shm: Any, fake: Any) -> None:
    source = torch.randn(3, 1000, dtype=torch.float32).to(torch.bfloat16)
    before = source.clone()
    handle = _send(cuda_shm, source)
    assert isinstance(handle, transports.SlotHandle)
    assert cuda_shm.registrations == 1 and fake.calls["register"] == 1
    assert _receive(tmp_path, handle, 6000) == source.view(torch.uint8).numpy().tobytes()  # raw bf16 bits
    assert torch.equal(source.view(torch.int16), before.view(torch.int16))  # the caller's tensor is untouched
    assert _registered_states(cuda_shm) == [FREE]  # the copy-receive handed it back


def test_registered_slots_are_reused_not_registered_again(tmp_path: Path, cuda_shm: Any, fake: Any) -> None:
    for i in range(20):
        source = torch.full((100_000,), i, dtype=torch.uint8)
        assert _receive(tmp_path, _send(cuda_shm, source), 100_000) == bytes([i]) * 100_000
    assert fake.calls["register"] == 1 and cuda_shm.registrations == 1
    assert cuda_shm.registered_bytes == sum(fake.registered.values()) >= 100_000
    assert cuda_shm.release_cache() > 0
    assert cuda_shm.registrations == 0 and fake.registered == {} and fake.calls["unregister"] == 1
    assert cuda_shm.registered_bytes == 0


def test_claimed_says_whether_a_receiver_proved_a_registered_slots_capability(
    tmp_path: Path, cuda_shm: Any, fake: Any
) -> None:
    """A device buffer's hand-over is the registered pool's: ``claimed`` looked for it in the plain
    pool only, and said False (it cannot be claimed any more) while it waited for its receiver."""
    handle = _send(cuda_shm, torch.arange(64, dtype=torch.uint8))
    forged = msgspec.structs.replace(handle, capability=bytes(16))
    assert (cuda_shm.claimed(handle), cuda_shm.claimed(forged)) == (None, False)
    with held_elsewhere(lambda: _receive(tmp_path, handle, 64)):
        assert cuda_shm.claimed(handle) is True
    assert cuda_shm.claimed(cuda_shm.export(memoryview(bytes(64)), [])) is None  # a host buffer's: the plain pool


def test_a_zero_byte_buffer_is_never_registered(cuda_shm: Any, fake: Any) -> None:
    with pytest.raises(tw.TransportError, match="0-byte buffer is never registered"):
        cuda_shm.export_device(torch.empty(0, dtype=torch.uint8), 0, 0, [])
    assert fake.calls["register"] == 0


def test_a_zero_byte_device_tensor_is_neither_copied_nor_registered(tmp_path: Path, cuda_shm: Any, fake: Any) -> None:
    frames = tw.Encoder(transport=cuda_shm).encode(_video_message(_meta(0)))
    (tensor,) = tw.Decoder(REGISTRY).decode(frames).output
    assert tensor.shape == (0,) and tensor.dtype == torch.uint8
    assert fake.calls["copy_to_host"] == 0 and fake.calls["register"] == 0


def _video_message(*tensors: torch.Tensor) -> Any:
    return diffusion.Output(output=tuple(tensors))


def _meta(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device="meta")


def test_the_encoder_sends_device_buffers_through_export_device(tmp_path: Path, cuda_shm: Any, fake: Any) -> None:
    encoder = tw.Encoder(transport=cuda_shm, options=tw.EncodeOptions(inline_threshold=1024))
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(tmp_path, pool=False)])
    frames = encoder.encode(_video_message(_meta(300_000), _meta(100)))
    assert [b["transport"] for b in describe(frames[0])["buffers"]] == ["shm-slot", "inline"]
    assert fake.calls["copy_to_host"] == 2  # the big one into its registered slot, the small one staged
    big, small = decoder.decode(frames).output
    assert big.dtype == torch.uint8 and big.shape == (300_000,) and bool((big == FILL).all())
    assert bool((small == FILL).all()) and small.shape == (100,)
    del big, small
    assert _registered_states(cuda_shm) == [FREE]


def test_unavailable_runtime_falls_back_to_a_staged_copy_through_the_plain_pool(tmp_path: Path) -> None:
    fake = FakeCudaRuntime(unavailable="torch is a ROCm build (HIP 6.2.0); the CUDA runtime calls are not used")
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    try:
        assert not transport.available and transport.registered is None
        frames = tw.Encoder(transport=transport).encode(_video_message(_meta(400_000)))
        assert fake.calls["copy_to_host"] == 1 and fake.calls["register"] == 0  # staged, never registered
        assert transport.pool is not None and [s.state for s in transport.pool.slots()] == [IN_FLIGHT]
        decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(tmp_path, pool=False)])
        (tensor,) = decoder.decode(frames).output
        assert bool((tensor == FILL).all())
    finally:
        transport.close()


def test_a_spent_registered_budget_falls_back_to_staging(tmp_path: Path, fake: Any) -> None:
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, max_registered_bytes=200_000, idle_seconds=0)
    try:
        frames = tw.Encoder(transport=transport).encode(_video_message(_meta(300_000)))
        assert fake.calls["register"] == 0 and transport.registrations == 0
        assert transport.pool is not None and len(transport.pool.slots()) == 1  # the staged copy went there
        del frames
    finally:
        transport.close()


# -- failure injection ----------------------------------------------------------------------------
def test_a_failed_registration_leaves_nothing_behind(tmp_path: Path, cuda_shm: Any, fake: Any) -> None:
    fake.fail_next("register", code=2)
    source = torch.arange(50_000, dtype=torch.int32)
    with pytest.raises(tw.TransportError, match=r"cudaHostRegister of \d+ bytes failed with CUDA error 2"):
        _send(cuda_shm, source)
    assert our_segments(tmp_path) == [] and cuda_shm.registrations == 0 and cuda_shm.healthy
    assert torch.equal(source, torch.arange(50_000, dtype=torch.int32))
    assert _send(cuda_shm, source) is not None  # the next transfer registers afresh


def test_a_failed_copy_enqueue_gives_the_slot_back_once_the_stream_is_drained(cuda_shm: Any, fake: Any) -> None:
    fake.fail_next("copy_to_host", code=700)
    with pytest.raises(tw.TransportError, match=r"cuda_shm: cudaMemcpyAsync failed with CUDA error 700"):
        _send(cuda_shm, torch.ones(100_000))
    assert fake.calls["drain"] == 1 and cuda_shm.healthy and _registered_states(cuda_shm) == [FREE]
    assert _send(cuda_shm, torch.ones(100_000)) is not None and fake.calls["register"] == 1  # reused


class _Interrupted(FakeCudaRuntime):
    """A runtime whose ``call`` raises ``KeyboardInterrupt`` once (a Ctrl-C during it)."""

    def __init__(self, call: str) -> None:
        super().__init__()
        self.interrupt = call

    def copy_to_host(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        token = super().copy_to_host(dst, src)
        self._interrupted("copy_to_host")
        return token

    def synchronize(self, token: Any) -> None:
        super().synchronize(token)
        self._interrupted("synchronize")

    def _interrupted(self, call: str) -> None:
        if self.interrupt == call:
            self.interrupt = ""
            raise KeyboardInterrupt


@pytest.mark.parametrize("call", ["copy_to_host", "synchronize"])
def test_an_interrupted_copy_gives_the_slot_back_once_the_stream_is_drained(tmp_path: Path, call: str) -> None:
    """The slot stayed held by the sender for good (a registered slot more per interrupted send):
    only a ``CudaCallError`` gave it back."""
    fake = _Interrupted(call)
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    try:
        with pytest.raises(KeyboardInterrupt):
            _send(transport, torch.ones(100_000))
        assert fake.calls["drain"] == 1 and transport.healthy and _registered_states(transport) == [FREE]
        assert _send(transport, torch.ones(100_000)) is not None and fake.calls["register"] == 1  # reused
    finally:
        transport.close()


@pytest.mark.parametrize("where", ["as-its-target-is-made", "before-the-hand-over", "after-it"])
def test_an_interrupt_landing_around_a_device_copy_gives_the_slot_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``) that landed after the send took its
    registered slot, before its copy's guard (as the copy's target was made), or in the slot's
    hand-over once the copy was done, left the slot taken by the sender for good (or in flight
    until its claim timeout): the next send registered another slot. It is given back at once."""
    from tensorwire.transports._pool import Pool

    fake = FakeCudaRuntime()
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    try:
        if where == "as-its-target-is-made":
            made = torch.frombuffer

            def interrupted(*args: Any, **kwargs: Any) -> torch.Tensor:
                made(*args, **kwargs)
                raise KeyboardInterrupt

            monkeypatch.setattr(torch, "frombuffer", interrupted)
        else:
            hand_over = Pool.hand_over

            def interrupted_hand_over(pool: Pool, slot: Any, readers: int = 1) -> tuple[int, bytes]:
                if where == "after-it":
                    hand_over(pool, slot, readers)
                raise KeyboardInterrupt

            monkeypatch.setattr(Pool, "hand_over", interrupted_hand_over)
        with pytest.raises(KeyboardInterrupt):
            _send(transport, torch.ones(100_000))
        monkeypatch.undo()
        assert _registered_states(transport) == [FREE]
        assert _send(transport, torch.ones(100_000)) is not None and fake.calls["register"] == 1  # reused
    finally:
        monkeypatch.undo()
        transport.close()


def test_an_uncertain_copy_is_quarantined_and_further_transfers_refused(tmp_path: Path, fake: Any) -> None:
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    fake.fail_next("copy_to_host", code=700)
    fake.fail_next("drain", code=700)
    source = torch.ones(100_000)
    with pytest.raises(tw.TransportError, match="cudaMemcpyAsync failed with CUDA error 700"):
        _send(transport, source)
    assert not transport.healthy
    assert transport.reason is not None and "draining the copy stream then" in transport.reason
    (kept,) = transport.quarantined
    assert not kept.mapping.closed and kept.source is not None  # never unmapped under the device
    assert transport.registered is not None and transport.registered.slots() == []  # out of the pool
    with pytest.raises(tw.TransportError, match="cuda_shm refuses device transfers: cudaMemcpyAsync"):
        _send(transport, source)
    transport.close()
    assert not kept.mapping.closed and transport.registrations == 1  # still registered: never unregistered
    assert our_segments(tmp_path) == []  # its name is gone, the mapping stays
    mapping = kept.mapping
    del transport, kept
    gc.collect()
    assert sys.getrefcount(mapping) >= 3  # ours, the call's, and the keep-alive: dropping the transport unmaps nothing


def test_a_failed_synchronize_after_a_queued_copy_is_quarantined(tmp_path: Path, fake: Any) -> None:
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    fake.fail_next("synchronize", code=999)
    with pytest.raises(tw.TransportError, match="cudaEventSynchronize failed with CUDA error 999"):
        _send(transport, torch.ones(100_000))
    assert not transport.healthy and "was queued" in str(transport.reason)
    assert fake.registered != {}  # not unregistered while the copy may run
    transport.close()


def test_a_failed_unregistration_keeps_the_mapping(tmp_path: Path, fake: Any) -> None:
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    assert _receive(tmp_path, _send(transport, torch.ones(100_000)), 400_000) == torch.ones(100_000).numpy().tobytes()
    fake.fail_next("unregister", code=1)
    transport.release_cache()
    (kept,) = transport.quarantined
    assert not kept.mapping.closed and "cudaHostUnregister failed with CUDA error 1" in kept.reason
    assert not transport.healthy and our_segments(tmp_path) == []
    assert transport.registrations == 1 and len(fake.registered) == 1  # still registered, and counted so
    transport.close()


def test_a_transport_dropped_without_close_unregisters_before_unmapping(tmp_path: Path, fake: Any) -> None:
    """The pool's finalizer unmapped the registered slots of a transport dropped without ``close()``
    and never unregistered them: host memory unmapped while the device runtime still had it pinned."""
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    for size in (100_000, 300_000):
        transport.release(_send(transport, torch.ones(size)))
    assert transport.registered is not None
    kept, freed = (slot.mapping for slot in transport.registered.slots())
    fake.fail_next("unregister", code=1)  # the first slot's: it stays registered, so it stays mapped
    del transport
    gc.collect()
    assert fake.calls["unregister"] == 2 and len(fake.registered) == 1
    assert not kept.closed and freed.closed
    assert our_segments(tmp_path) == []


def test_a_failure_mid_message_releases_what_was_exported(tmp_path: Path, cuda_shm: Any, fake: Any) -> None:
    encoder = tw.Encoder(transport=cuda_shm)
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(tmp_path, pool=False)])
    decoder.decode(encoder.encode(_video_message(_meta(300_000))))  # one registered slot, handed back
    assert _registered_states(cuda_shm) == [FREE]
    fake.fail_next("register", code=2)  # the next message's second buffer needs a new, bigger slot
    with pytest.raises(tw.TransportError, match="cudaHostRegister of 655360 bytes failed with CUDA error 2"):
        encoder.encode(_video_message(_meta(300_000), _meta(600_000)))
    assert _registered_states(cuda_shm) == [FREE]  # the first buffer's slot was released
    assert cuda_shm._reader._maps == {}  # by its own pool, not by mapping it again as a reader
    assert cuda_shm.registrations == 1 and len(cuda_shm.registered.slots()) == 1
    assert our_segments(tmp_path) == []  # memfds: nothing named in the directory


CLOSED_DURING_A_COPY = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import torch
    import tensorwire as tw
    from tensorwire import transports
    from tests.cuda_fakes import FakeCudaRuntime

    class Closing(FakeCudaRuntime):
        def copy_to_host(self, dst, src):
            transport.close()  # as another thread would, while this copy runs
            return super().copy_to_host(dst, src)

    fake = Closing() if {when!r} == "copying" else FakeCudaRuntime()
    transport = transports.CudaShmTransport({directory!r}, runtime=fake)
    acquire = transport.registered.acquire
    if {when!r} == "acquired":
        def acquire_then_close(*args):
            slot = acquire(*args)
            transport.close()  # as another thread would, right after this send took its slot
            return slot
        transport.registered.acquire = acquire_then_close
    source = torch.arange(1 << 20, dtype=torch.int32).view(torch.uint8)
    try:
        transport.export_device(source, 0, source.numel(), [])
    except tw.TransportError as exc:
        print(exc.errno, exc.strerror)
    """
)


@pytest.mark.parametrize("when", ["acquired", "copying"])
def test_a_close_during_a_device_copy_is_a_transport_error_not_a_crash(tmp_path: Path, when: str) -> None:
    """The copy's target was made over the slot's mapping without holding it: a close by another
    thread unmapped it under the copy (SIGSEGV), or, before the copy, made it a ``ValueError``."""
    script = CLOSED_DURING_A_COPY.format(repo=str(REPO), directory=str(tmp_path), when=when)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, (
        f"child {'killed by ' + signal.Signals(-result.returncode).name if result.returncode < 0 else 'failed'}: "
        f"{result.stderr[-2000:]}"
    )
    error = {
        "acquired": "9 the shared-memory pool was closed during a copy",
        "copying": "9 the shared-memory pool was closed before pool slot tw-",
    }[when]
    assert result.stdout.startswith(error), result.stdout
    assert our_segments(tmp_path) == []


FORKED_AFTER_REGISTERING = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    import torch
    from tensorwire import transports
    from tests.cuda_fakes import FakeCudaRuntime

    fake = FakeCudaRuntime()
    transport = transports.CudaShmTransport({directory!r}, runtime=fake, idle_seconds=0)
    source = torch.ones(100_000).view(torch.uint8)
    transport.release(transport.export_device(source, 0, source.numel(), []))
    fake.fail_next("synchronize", code=999)
    try:
        transport.export_device(source, 0, source.numel(), [])  # the slot again: quarantined
    except OSError:
        pass

    def view():
        return [transport.registrations, transport.registered_bytes, transport.healthy, len(transport.quarantined)]

    child = os.fork()
    if child == 0:
        seen = [view()]
        fake.registered.clear()  # the child's own runtime has registered nothing
        transport.release(transport.export_device(source, 0, source.numel(), []))
        seen.append(view())
        transport.close()
        seen.append(view())
        print(seen, flush=True)
        os._exit(0)
    os.waitpid(child, 0)
    print(view())
    transport.close()
    """
)


def test_a_forked_childs_registrations_are_its_own(tmp_path: Path) -> None:
    """A forked child reported its parent's registrations, bytes and quarantine as its own (and was
    refused device transfers for its parent's uncertain copy); its close left them counted."""
    script = FORKED_AFTER_REGISTERING.format(repo=str(REPO), directory=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    child, parent = (ast.literal_eval(line) for line in result.stdout.splitlines())
    assert child == [[0, 0, True, 0], [1, 458752, True, 0], [0, 0, True, 0]]
    assert parent == [1, 458752, False, 1]  # the quarantined slot, still registered
    assert our_segments(tmp_path) == []


# -- the torch adapter's error handling (its device calls run in tests/test_cuda_gpu.py) -------------
class _StickyError(RuntimeError):
    error_code = 700


def test_the_torch_runtime_names_call_and_code_and_clears_the_error_state(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorwire.transports import cuda_runtime

    runtime = transports.TorchCudaRuntime()
    cleared: list[int] = []
    monkeypatch.setattr(runtime, "clear_error", lambda: cleared.append(1))

    flags_seen: list[int] = []

    class _Cudart:
        def cudaHostRegister(self, address: int, nbytes: int, flags: int) -> int:
            flags_seen.append(flags)
            return 2

        def cudaGetErrorString(self, error: int) -> str:
            return "out of memory"

    monkeypatch.setattr(cuda_runtime, "_cudart", _Cudart)
    with pytest.raises(transports.CudaCallError, match=r"cudaHostRegister failed with CUDA error 2 \(out of memory\)"):
        runtime.register(4096, 4096)
    assert flags_seen == [1]  # cudaHostRegisterPortable: pinned for every device's context
    failure = runtime._failed("cudaEventSynchronize", _StickyError("CUDA error: an illegal memory access\nsecond line"))
    assert (failure.call, failure.code, failure.text) == (
        "cudaEventSynchronize",
        700,
        "CUDA error: an illegal memory access",
    )
    assert cleared == [1, 1]
    assert not runtime.is_device(torch.zeros(1))
    assert torch.equal(
        cuda_runtime.stage_to_host(torch.arange(5, dtype=torch.uint8)), torch.arange(5, dtype=torch.uint8)
    )


class _HostRegisteringRuntime(transports.TorchCudaRuntime):
    """The torch adapter's copies, with registration bookkept on the host (no device here)."""

    def __init__(self) -> None:
        super().__init__()
        self.registered: dict[int, int] = {}

    def unavailable_reason(self) -> str | None:
        return None

    def is_device(self, tensor: torch.Tensor) -> bool:
        return True

    def register(self, address: int, nbytes: int) -> None:
        self.registered[address] = nbytes

    def unregister(self, address: int) -> None:
        del self.registered[address]


def test_a_side_stream_that_cannot_be_made_is_a_transport_error_and_the_slot_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making the side stream (e.g. after a sticky device error) raised torch's RuntimeError out of
    ``copy_to_host``: past the transport's cleanup, so the registered slot stayed taken for good."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "Stream", refuse)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    runtime = _HostRegisteringRuntime()
    transport = transports.CudaShmTransport(tmp_path, runtime=runtime, idle_seconds=0)
    try:
        expected = r"cuda_shm: cudaStreamCreate failed with CUDA error -1 \(CUDA error: an illegal memory access"
        with pytest.raises(tw.TransportError, match=expected):
            _send(transport, torch.ones(100_000))
        assert _registered_states(transport) == [FREE] and transport.healthy  # nothing was queued to drain
    finally:
        transport.close()
    assert runtime.registered == {}


@pytest.mark.parametrize("where", ["before-its-registration", "after-it"])
def test_an_interrupt_landing_as_the_registered_pool_grows_leaves_no_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """An interrupt (a signal handler's ``KeyboardInterrupt``) that landed after the registered pool
    created a slot's segment, before the slot was in the pool's indexes, left the file (and fd) for
    the life of the process and, once registered, the range registered under a mapping nobody
    unregisters. The slot is unregistered and unmade at once."""
    from tensorwire.transports import _pool_growth as growth_module

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    fake = FakeCudaRuntime()
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, backing="named", idle_seconds=0)
    try:
        if where == "before-its-registration":
            monkeypatch.setattr(growth_module, "Page", interrupted)
        else:  # as its data area's address is indexed, once the range is registered
            monkeypatch.setattr(bisect, "insort", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _send(transport, torch.ones(100_000))
        monkeypatch.undo()
        assert _registered_states(transport) == [] and our_segments(tmp_path) == []
        assert fake.registered == {} and transport.registrations == 0 and transport.healthy
        assert _send(transport, torch.ones(100_000)) is not None and _registered_states(transport) != []
    finally:
        monkeypatch.undo()
        transport.close()


class _InterruptedRegistration(FakeCudaRuntime):
    """A runtime whose next ``register`` is interrupted (a ``KeyboardInterrupt``) once it has
    registered the range (``after``) or before it does."""

    def __init__(self, after: bool) -> None:
        super().__init__()
        self.after, self.interrupt = after, True

    def register(self, address: int, nbytes: int) -> None:
        if self.interrupt and not self.after:
            self.interrupt = False
            raise KeyboardInterrupt
        super().register(address, nbytes)
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt


@pytest.mark.parametrize("after", [False, True], ids=["before-the-range-is-registered", "after-it"])
def test_an_interrupt_landing_as_a_slot_is_registered_leaves_no_range_registered(tmp_path: Path, after: bool) -> None:
    """An interrupt that landed once the runtime registered a new slot's range, before the
    registration was recorded, left the range registered under a mapping that was unmapped: the
    next slot mapped there could not be registered (CUDA error 712). The range is unregistered at
    once; one that landed before the runtime registered it is no failed unregistration either."""
    fake = _InterruptedRegistration(after)
    transport = transports.CudaShmTransport(tmp_path, runtime=fake, idle_seconds=0)
    try:
        with pytest.raises(KeyboardInterrupt):
            _send(transport, torch.ones(100_000))
        assert fake.registered == {} and transport.registrations == 0 and transport.healthy
        assert _registered_states(transport) == [] and our_segments(tmp_path) == []
        assert _send(transport, torch.ones(100_000)) is not None and transport.registrations == 1
    finally:
        transport.close()
    assert fake.registered == {}


class _RegisteredMeanwhile:
    """A stand-in for the registrations' lock: the first time it is taken once armed, the slot's
    registration is recorded (its pending mark becomes its bytes), as another thread's would be."""

    def __init__(self, slots: dict[str, int], name: str, nbytes: int) -> None:
        self.slots, self.name, self.nbytes, self.armed = slots, name, nbytes, False

    def __enter__(self) -> None:
        if self.armed:
            self.armed = False
            self.slots[self.name] = self.nbytes

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_failed_unregistration_reads_the_pending_mark_under_the_lock() -> None:
    """A failed unregistration read whether the slot's registration was pending (0 bytes: the
    runtime never registered it) without the lock and forgot it under the lock: a registration
    recorded between the two was forgotten too, the range left registered under a mapping the pool
    then unmapped. The mark is read and cleared in one hold of the lock: such a slot is quarantined."""
    import mmap

    from tensorwire.transports.cuda_shm import _Registrations

    fake = FakeCudaRuntime()
    registrations = _Registrations(fake)
    mapping = mmap.mmap(-1, 4096)
    slot: Any = type("Slot", (), {"name": "tw-1-" + "a" * 32 + "-1", "address": 4096, "capacity": 4096})()
    slot.mapping = mapping
    registrations.slots[slot.name] = 0  # pending, as an interrupt during its registration leaves it
    lock = registrations.lock = _RegisteredMeanwhile(registrations.slots, slot.name, slot.capacity)  # type: ignore[assignment]
    fake.fail_next("unregister", code=1)
    lock.armed = True
    assert registrations.unregister(slot) is False  # still registered: its mapping kept for good
    assert registrations.slots == {slot.name: 4096}
    (kept,) = registrations.quarantine
    assert kept.mapping is mapping and "cudaHostUnregister failed with CUDA error 1" in kept.reason
    registrations.slots[slot.name] = 0  # pending, and nothing records it meanwhile: forgotten
    fake.fail_next("unregister", code=1)
    assert registrations.unregister(slot) is True and registrations.slots == {}
    assert len(registrations.quarantine) == 1
