"""Device placement on receive (``Decoder(..., device=...)``) through a fake runtime, and the
retention policy's bounds; the real device copies run in tests/test_cuda_gpu.py."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import _retention as retention
from tensorwire.transports._page_layout import FREE
from tensorwire.transports._retention import Retention
from tests.conftest import write_schemas
from tests.cuda_fakes import NO_CUDA_HERE, FakeCudaRuntime
from tests.wire_helpers import frame_of, head_of

MiB = 1024 * 1024


@pytest.fixture
def shm(tmp_path: Path) -> Iterator[transports.ShmTransport]:
    transport = transports.ShmTransport(tmp_path, idle_seconds=0)
    yield transport
    transport.close()


def _on_device(fake: FakeCudaRuntime, tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().data_ptr() in fake.device_storages


def _decoder(
    shm: transports.ShmTransport, fake: FakeCudaRuntime, device: Any = "cuda:0", *, borrow: bool | None = None
) -> tw.Decoder:
    options = tw.DecodeOptions(borrow=borrow)
    return tw.Decoder(REGISTRY, transports=[shm], options=options, device=device, runtime=fake)


def _copying(shm: transports.ShmTransport, fake: FakeCudaRuntime) -> tw.Decoder:
    """A decoder that receives pool slots as private copies: each copy is registered for its own device copy."""
    return _decoder(shm, fake, borrow=False)


def _mapping(shm: transports.ShmTransport) -> tuple[int, int]:
    """(address, bytes) of the one segment the transport's reader maps."""
    (segment,) = shm._reader._maps.values()
    return segment.address, len(segment.mapping)


def test_every_tensor_lands_on_the_device_and_views_keep_sharing(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    base = torch.randn(2 * MiB // 4)
    array = np.arange(10)
    frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=(base, base[10:20], array)))
    whole, view, arr = _decoder(shm, fake).decode(frames).output
    assert torch.equal(whole, base) and torch.equal(view, base[10:20]) and np.array_equal(arr, array)
    assert _on_device(fake, whole) and _on_device(fake, view)  # one device buffer for both views
    assert whole.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()
    assert isinstance(arr, np.ndarray)  # numpy arrays stay on the host
    assert fake.calls["copy_to_device"] == 1 and fake.calls["register"] == 1
    assert fake.registered == dict([_mapping(shm)])  # the slot's whole mapping, kept registered
    assert shm.pool is not None and [s.state for s in shm.pool.slots()] == [FREE]  # host slot let go


def test_small_buffers_are_copied_without_registration(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    frames = tw.Encoder(transport=shm, options=tw.EncodeOptions(embed_threshold=0)).encode(
        diffusion.Output(output=torch.arange(100))
    )
    tensor = _decoder(shm, fake).decode(frames).output
    assert _on_device(fake, tensor) and torch.equal(tensor, torch.arange(100))
    assert fake.calls["register"] == 0 and fake.calls["copy_to_device"] == 1


def test_per_path_placement_moves_only_the_named_tensors(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    message = diffusion.Output(
        output={"latents": torch.ones(8), "mask": torch.zeros(8)}, trajectory_latents=torch.ones(3)
    )
    frames = tw.Encoder(transport=shm).encode(message)
    decoded = _decoder(shm, fake, {"$.output.latents": "cuda:0", "$.trajectory_latents": "cuda:0"}).decode(frames)
    assert _on_device(fake, decoded.output["latents"]) and _on_device(fake, decoded.trajectory_latents)
    assert not _on_device(fake, decoded.output["mask"])
    everything_else = _decoder(shm, fake, {"$.output.mask": "cpu", "*": "cuda:0"}).decode(frames)
    assert not _on_device(fake, everything_else.output["mask"]) and _on_device(fake, everything_else.trajectory_latents)


def test_per_path_placement_counts_no_tensor_of_a_field_the_reader_does_not_know() -> None:
    """A newer writer's fields ahead of the known ones (their values skipped unread by the decode)
    hold tensors: each known tensor still goes where its own path says."""
    fake = FakeCudaRuntime()
    result = diffusion.Output(output=torch.ones(8), trajectory_latents=torch.zeros(3))
    frames = tw.Encoder().encode(diffusion.RunnerOutput(request_id="a", result=result))
    head = head_of(frames[0])
    body = head[4]
    sent = body.pop("result")
    head[4] = {"added": [sent["trajectory_latents"]], **body, "result": {"added": sent["output"], **sent}}
    decoder = tw.Decoder(REGISTRY, device={"$.result.output": "cuda:0"}, runtime=fake)
    decoded = decoder.decode([frame_of(head), *frames[1:]]).result
    assert _on_device(fake, decoded.output) and torch.equal(decoded.output.cpu(), torch.ones(8))
    assert not _on_device(fake, decoded.trajectory_latents)


def test_per_path_placement_makes_no_path_for_a_tensor_of_a_field_the_reader_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every tensor extension of frame 0 was given its path, of up to 64 keys of 64 characters,
    though the decode skips the fields it does not know: 100,000 three-byte extensions under 60
    such keys in an unknown field (a 300 KB frame 0) took 450 MB and 4 s to place one tensor."""
    from tensorwire import inspection

    made: list[str] = []
    path_of = inspection._path

    def counted(where: Any) -> str:
        made.append(path_of(where))
        return made[-1]

    monkeypatch.setattr(inspection, "_path", counted)
    fake = FakeCudaRuntime()
    frames = tw.Encoder().encode(diffusion.Output(output=torch.ones(8)))
    head = head_of(frames[0])
    unknown: Any = [msgspec.msgpack.Ext(1, b"")] * 100
    for _ in range(3):
        unknown = {"k" * 64: unknown}
    head[4]["added"] = unknown
    decoder = tw.Decoder(REGISTRY, device={"$.output": "cuda:0"}, runtime=fake)
    decoded = decoder.decode([frame_of(head), *frames[1:]])
    assert _on_device(fake, decoded.output) and torch.equal(decoded.output.cpu(), torch.ones(8))
    assert made == ["$.output"]


def test_per_path_placement_puts_no_tensor_of_a_map_that_repeats_a_key_on_another_tensors_device() -> None:
    """A map that repeats a key keeps its last value, but the decode reads the earlier value's
    tensor too: the paths found in the body would be one tensor off from there on."""
    fake = FakeCudaRuntime()
    result = diffusion.Output(output=torch.ones(8), trajectory_latents=torch.zeros(3))
    encoder = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0))  # each tensor in a buffer of its own
    frames = encoder.encode(diffusion.RunnerOutput(request_id="a", result=result))
    head = head_of(frames[0])
    sent = head[4]["result"]
    head[4]["result"] = {"outpuz": sent["output"], **sent}
    repeated = frame_of(head).replace(b"\xa6outpuz", b"\xa6output")  # output: twice, the last kept
    decoder = tw.Decoder(REGISTRY, device={"$.result.trajectory_latents": "cuda:0"}, runtime=fake)
    decoded = decoder.decode([repeated, *frames[1:]]).result
    assert torch.equal(decoded.output.cpu(), torch.ones(8))
    assert not _on_device(fake, decoded.output)  # (it went to cuda:0 as the path the next tensor had)


def test_per_path_placement_finds_paths_as_deep_as_the_decoders_limit(tmp_path: Path) -> None:
    """A message nested past the default depth limit, decoded under a higher one, is placed by path
    too (the paths were looked for within the default limit: the decode failed)."""
    levels = 80
    deep: dict[str, Any] = {"x-tensor": {}}
    for _ in range(levels):
        deep = {"type": "array", "items": deep}
    doc = {
        "$id": "deep.Deep",
        "x-version": 1,
        "title": "Deep",
        "description": "A tensor inside many arrays, and one at the top.",
        "type": "object",
        "properties": {"deep": deep, "top": {"x-tensor": {}}},
        "required": ["deep", "top"],
    }
    registry = tw.load_schemas(write_schemas(tmp_path, {"deep/Deep.v1.json": doc}))
    value: Any = torch.zeros(2)
    for _ in range(levels):
        value = [value]
    limits = tw.Limits(max_depth=levels + 10)
    frames = tw.Encoder(options=tw.EncodeOptions(limits=limits)).encode(
        registry.type("deep.Deep")(deep=value, top=torch.ones(4))
    )
    fake = FakeCudaRuntime()
    options = tw.DecodeOptions(limits=limits)
    decoded = tw.Decoder(registry, options=options, device={"$.top": "cuda:0"}, runtime=fake).decode(frames)
    assert _on_device(fake, decoded.top) and torch.equal(decoded.top.cpu(), torch.ones(4))


def test_one_tensor_sent_twice_is_placed_per_path_or_shared_once(shm: transports.ShmTransport) -> None:
    """The same tensor at two paths: with a per-path mapping each occurrence goes where its path
    says; placed whole (or not at all) both occurrences are one object."""
    fake = FakeCudaRuntime()
    tensor = torch.ones(8)
    options = tw.EncodeOptions(embed_threshold=0)
    frames = tw.Encoder(transport=shm, options=options).encode(diffusion.Output(output={"a": tensor, "b": tensor}))
    apart = _decoder(shm, fake, {"$.output.a": "cuda:0"}).decode(frames).output
    assert _on_device(fake, apart["a"]) and not _on_device(fake, apart["b"])
    assert torch.equal(apart["a"], tensor) and torch.equal(apart["b"], tensor)
    frames = tw.Encoder(transport=shm, options=options).encode(diffusion.Output(output={"a": tensor, "b": tensor}))
    together = _decoder(shm, fake).decode(frames).output
    assert together["a"] is together["b"] and _on_device(fake, together["a"])
    frames = tw.Encoder(transport=shm, options=options).encode(diffusion.Output(output={"a": tensor, "b": tensor}))
    plain = tw.Decoder(REGISTRY, transports=[shm]).decode(frames).output
    assert plain["a"] is plain["b"]


def test_out_of_memory_flushes_the_cache_once_and_retries(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("alloc", code=2)
    frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB)))
    tensor = _copying(shm, fake).decode(frames).output
    assert fake.flushed == 1 and _on_device(fake, tensor) and fake.registered == {}


def test_out_of_memory_twice_releases_the_whole_message(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("alloc", code=2, times=2)
    frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB)))
    with pytest.raises(
        tw.TransportError, match=r"placing buffer 0 \(4194304 bytes\) to cuda:0: cudaMalloc .*after flushing"
    ) as caught:
        _copying(shm, fake).decode(frames)
    assert fake.flushed == 1 and fake.registered == {}
    assert shm.pool is not None
    assert [s.state for s in shm.pool.slots()] == [FREE]  # the message was released, while its error is kept
    assert "upload_one" in [entry.name for entry in caught.traceback]  # the failed frames' lines stay


def test_a_failed_cache_flush_is_a_transport_error_and_unregisters(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.cuda.empty_cache`` raising (a sticky device error) escaped the adapter as torch's
    ``RuntimeError``, past the placement's cleanup: the host memory stayed registered."""

    def refuse() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "empty_cache", refuse)
    runtime = _HostRuntime(transports.CudaCallError("cudaMalloc", 2, "out of memory", oom=True))
    frames = tw.Encoder().encode(diffusion.Output(output=torch.ones(MiB)))
    expected = r"placing buffer 0 \(4194304 bytes\) to cuda:0: cudaFree failed with CUDA error -1 \(CUDA error: an"
    with pytest.raises(tw.TransportError, match=expected):
        tw.Decoder(REGISTRY, device="cuda:0", runtime=runtime).decode(frames)
    assert runtime.registered == {}


def test_a_failed_registration_falls_back_to_a_pageable_copy(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("register", code=1)
    frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB)))
    tensor = _copying(shm, fake).decode(frames).output
    assert _on_device(fake, tensor) and fake.calls["unregister"] == 0


def test_a_failed_copy_enqueue_drains_and_releases(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("copy_to_device", code=700)
    frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB)))
    decoder = _copying(shm, fake)
    with pytest.raises(tw.TransportError, match="cudaMemcpyAsync failed with CUDA error 700"):
        decoder.decode(frames)
    assert fake.calls["drain"] == 1 and fake.registered == {} and decoder.placement is not None
    assert decoder.placement.healthy


def test_an_uncertain_copy_keeps_its_host_memory_and_refuses_more(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("synchronize", code=999)
    encoder = tw.Encoder(transport=shm)
    decoder = _copying(shm, fake)
    with pytest.raises(tw.TransportError, match="cudaEventSynchronize failed with CUDA error 999"):
        decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(MiB))))
    assert decoder.placement is not None and not decoder.placement.healthy
    assert len(fake.registered) == 1  # still registered: a copy may be reading it
    with pytest.raises(tw.TransportError, match="device placement refused: cudaEventSynchronize"):
        decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(MiB))))


def test_a_failed_drain_after_a_failed_enqueue_keeps_the_registration(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("copy_to_device", code=700)
    fake.fail_next("drain", code=700)
    decoder = _copying(shm, fake)
    with pytest.raises(tw.TransportError, match="cudaMemcpyAsync failed with CUDA error 700"):
        decoder.decode(tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB))))
    assert decoder.placement is not None and not decoder.placement.healthy
    assert "cudaStreamSynchronize failed with CUDA error 700" in str(decoder.placement.reason)
    assert len(fake.registered) == 1 and fake.calls["unregister"] == 0


def test_a_failed_unregistration_fails_the_decode_and_keeps_the_memory(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("unregister", code=1)
    decoder = _copying(shm, fake)
    with pytest.raises(
        tw.TransportError,
        match=r"placing buffer 0 \(4194304 bytes\) to cuda:0: cudaHostUnregister failed with CUDA error 1 .*after",
    ):
        decoder.decode(tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB))))
    assert decoder.placement is not None and not decoder.placement.healthy


# -- pool mappings registered once ----------------------------------------------------------------
def test_a_pool_slot_is_registered_once_for_every_message_it_carries(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    encoder, decoder = tw.Encoder(transport=shm), _decoder(shm, fake)
    for value in range(3):
        tensor = decoder.decode(encoder.encode(diffusion.Output(output=torch.full((MiB,), float(value))))).output
        assert _on_device(fake, tensor) and torch.equal(tensor, torch.full((MiB,), float(value)))
    assert shm.pool is not None and len(shm.pool.slots()) == 1 and fake.calls["copy_to_device"] == 3
    address, size = _mapping(shm)
    assert fake.calls["register"] == 1 and fake.registered == {address: size} and fake.calls["unregister"] == 0
    assert shm._reader.pinned_bytes == size
    shm.close()  # the reader lets go of its mappings: each is unregistered before it is unmapped
    assert fake.registered == {} and fake.calls["unregister"] == 1 and shm._reader.pinned_bytes == 0


def test_a_mapping_its_sender_dropped_is_unregistered_when_pruned(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    _decoder(shm, fake).decode(tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB))))
    assert len(fake.registered) == 1
    assert shm.trim(0) > 0  # the sender drops its free slot
    shm._reader.prune()  # as the janitor does every few seconds
    assert fake.registered == {} and shm._reader.mapped == 0 and shm._reader.pinned_bytes == 0


def test_mappings_over_the_budget_are_registered_per_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorwire.transports import _slots

    monkeypatch.setattr(_slots, "_pin_limit", lambda: 5 * MiB)  # room for one 4 MiB slot's mapping, not two
    fake = FakeCudaRuntime()
    shm = transports.ShmTransport(tmp_path, idle_seconds=0)
    try:
        encoder, decoder = tw.Encoder(transport=shm), _decoder(shm, fake)
        frames = encoder.encode(diffusion.Output(output=torch.ones(MiB)))
        held = encoder.encode(diffusion.Output(output=torch.ones(MiB)))  # a second slot, both in flight
        decoder.decode(frames)
        tensor = decoder.decode(held).output
        assert torch.equal(tensor, torch.ones(MiB)) and _on_device(fake, tensor)
        assert shm._reader.mapped == 2 and shm._reader.pinned_bytes < 5 * MiB
        # the first mapping pinned (one call); the second copy registered and unregistered its own bytes
        assert fake.calls["register"] == 2 and fake.calls["unregister"] == 1 and len(fake.registered) == 1
    finally:
        shm.close()
    assert fake.registered == {}


def test_a_small_copy_from_a_large_mapping_leaves_it_unpinned(shm: transports.ShmTransport) -> None:
    """Registering a mapping makes all of it resident: a sender's large slot that a message uses a
    little of is registered for that copy only."""
    fake = FakeCudaRuntime()
    big = shm.empty((16 * MiB,), torch.uint8)
    big.fill_(7)
    frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=big[: 2 * MiB]))  # handed over, no copy
    tensor = _decoder(shm, fake).decode(frames).output
    assert _on_device(fake, tensor) and torch.equal(tensor, big[: 2 * MiB])
    assert _mapping(shm)[1] > 16 * MiB and shm._reader.pinned_bytes == 0
    assert fake.calls["register"] == 1 and fake.calls["unregister"] == 1 and fake.registered == {}


def test_a_mapping_that_cannot_be_registered_is_not_tried_again(shm: transports.ShmTransport) -> None:
    fake = FakeCudaRuntime()
    fake.fail_next("register", code=1)  # the mapping's registration
    encoder, decoder = tw.Encoder(transport=shm), _decoder(shm, fake)
    for _ in range(2):
        tensor = decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(MiB)))).output
        assert _on_device(fake, tensor) and torch.equal(tensor, torch.ones(MiB))
    # 1 failed mapping registration, then each copy registers (and unregisters) its own bytes
    assert fake.calls["register"] == 3 and fake.calls["unregister"] == 2 and fake.registered == {}
    assert shm._reader.pinned_bytes == 0


def test_a_mapping_that_cannot_be_unregistered_is_never_unmapped(shm: transports.ShmTransport) -> None:
    import weakref

    fake = FakeCudaRuntime()
    _decoder(shm, fake).decode(tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(MiB))))
    (segment,) = shm._reader._maps.values()
    mapping = weakref.ref(segment.mapping)
    del segment
    fake.fail_next("unregister", code=1)
    shm.close()
    gc.collect()
    assert fake.calls["unregister"] == 1 and len(fake.registered) == 1  # still registered: the device may map it
    kept = mapping()
    assert kept is not None and not kept.closed  # kept mapped for good


def test_device_arguments_are_checked_up_front() -> None:
    with pytest.raises(ValueError, match="only cpu and cuda devices are supported, got mps"):
        tw.Decoder(REGISTRY, device="mps", runtime=FakeCudaRuntime())
    with pytest.raises(ValueError, match=r"device for 'x': Invalid device string"):
        tw.Decoder(REGISTRY, device={"x": "gpu!"}, runtime=FakeCudaRuntime())
    with pytest.raises(TypeError, match=r"keys are body paths \(str\), got int"):
        tw.Decoder(REGISTRY, device={1: "cuda"}, runtime=FakeCudaRuntime())  # type: ignore[dict-item]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_a_cuda_device_without_cuda_is_refused() -> None:
    with pytest.raises(ValueError, match=f"cannot place tensors on a device: {NO_CUDA_HERE}"):
        tw.Decoder(REGISTRY, device="cuda:0")


def test_cpu_placement_is_the_plain_decode(shm: transports.ShmTransport) -> None:
    frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(10)))
    tensor = tw.Decoder(REGISTRY, transports=[shm], device="cpu").decode(frames).output
    assert tensor.device.type == "cpu" and torch.equal(tensor, torch.ones(10))


# -- retention ------------------------------------------------------------------------------------
def test_retention_takes_the_smallest_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "host_memory", lambda: (10 * MiB, 100 * MiB))  # available, total
    shm_room = Retention(shm_fraction=1.0).budget(tmp_path, 0)
    assert shm_room > 0
    assert Retention(shm_fraction=1.0, host_fraction=0.5).budget(tmp_path, 2 * MiB) == 6 * MiB
    # 2 MiB cached + 10 MiB available, of which 9% of 100 MiB must stay free: 3 MiB in all
    assert Retention(shm_fraction=1.0, min_free_fraction=0.09).budget(tmp_path, 2 * MiB) == 3 * MiB
    assert Retention(max_bytes=123).budget(tmp_path, 0) == 123
    monkeypatch.setattr(retention, "host_memory", lambda: None)
    assert Retention(host_fraction=0.5).budget(tmp_path, 0) == 0  # no telemetry: no growth


def test_retention_fractions_are_checked() -> None:
    with pytest.raises(ValueError, match=r"host_fraction must be in \[0, 1\], got 1.5"):
        Retention(host_fraction=1.5)
    with pytest.raises(ValueError, match="max_bytes must be >= 0, got -1"):
        Retention(max_bytes=-1)


def test_a_buffer_delivered_as_a_tensor_view_keeps_its_offset() -> None:
    from tensorwire._descriptors import as_base, build
    from tensorwire._wire import Descriptor

    storage = torch.arange(40, dtype=torch.uint8)
    buffers: list[Any] = [storage[8:24], storage[3:19]]  # views starting inside their storage
    descs = [Descriptor("tensor", "int32", (2,), None, 0, 4, 8), Descriptor("tensor", "int16", (2,), None, 1, 2, 4)]
    built = [build(d, buffers[d.buffer], as_base(buffers[d.buffer])) for d in descs]  # as the decoder builds them
    assert torch.equal(built[0], storage[12:20].view(torch.int32))
    assert torch.equal(built[1], storage[5:9].clone().view(torch.int16))  # odd start: realigned


def test_retention_without_a_readable_directory_allows_no_growth(tmp_path: Path) -> None:
    assert Retention().budget(tmp_path / "missing", 0) == 0
    assert Retention(max_bytes=5).budget(tmp_path / "missing", 0) == 5  # a fixed cap needs no telemetry


class _HostRuntime(transports.TorchCudaRuntime):
    """The torch adapter's own streams, cache flush and cleanup around device allocations that all
    fail with ``failure``; registration bookkept on the host (no device here)."""

    def __init__(self, failure: transports.CudaCallError) -> None:
        super().__init__()
        self.failure = failure
        self.registered: dict[int, int] = {}

    def unavailable_reason(self) -> str | None:
        return None

    def register(self, address: int, nbytes: int) -> None:
        self.registered[address] = nbytes

    def unregister(self, address: int) -> None:
        del self.registered[address]

    def copy_to_device(self, src: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, Any]:
        raise self.failure


def test_a_device_this_process_lacks_fails_each_message_and_stays_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed allocation on a device index the process lacks, draining made that device's
    side stream, which failed too: the placement kept the host memory registered for good and
    refused every later message."""

    def no_such_device(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("CUDA error: invalid device ordinal")

    monkeypatch.setattr(torch.cuda, "Stream", no_such_device)
    runtime = _HostRuntime(transports.CudaCallError("cudaMalloc", 101, "invalid device ordinal"))
    decoder = tw.Decoder(REGISTRY, device="cuda:5", runtime=runtime)
    for _ in range(2):
        frames = tw.Encoder().encode(diffusion.Output(output=torch.ones(MiB)))
        expected = r"placing buffer 0 \(4194304 bytes\) to cuda:5: cudaMalloc failed with CUDA error 101 \(invalid"
        with pytest.raises(tw.TransportError, match=expected):
            decoder.decode(frames)
    assert decoder.placement is not None and decoder.placement.healthy and runtime.registered == {}
