"""The CUDA paths on a real GPU (marked ``cuda``; skipped where torch sees no CUDA device).

Run by ``tools/gpu_check.sh`` on a machine with a GPU: registered-shm round trips of every
common dtype across processes with device placement on receive, CUDA IPC through the queue
transport with acknowledgements, stream ordering against a long producer kernel, registrations
back to zero after 1,000 transfers, a received slot registered once for many device copies, the
staging fallback and the out-of-memory path of placement.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
from typing import Any

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports._page_layout import FREE
from tests import procs
from tests.wire_helpers import segments_of

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MiB = 1024 * 1024


def _raw(tensor: torch.Tensor) -> bytes:
    return tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def test_every_dtype_round_trips_bit_exact_across_processes_onto_the_device() -> None:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    producer = ctx.Process(target=procs.cuda_producer, args=(child, 1234))
    producer.start()
    try:
        frames = parent.recv()
        expected = parent.recv()
        available, registrations = parent.recv()
        assert available and registrations >= 1
        shm = transports.ShmTransport()
        try:
            on_device = tw.Decoder(REGISTRY, transports=[shm], device="cuda:0").decode(frames).output
        finally:
            shm.close()  # the receiver's cached mappings of the producer's segments go with its transport
        assert [t.dtype for t in on_device] == [torch.bfloat16, torch.float16, torch.float32, torch.uint8]
        assert all(t.device.type == "cuda" for t in on_device)
        assert [_raw(t) for t in on_device] == expected  # raw bits, bf16 included
        parent.send("done")
        assert parent.recv() == 0  # the producer's registrations after close
    finally:
        producer.join(60)
    assert producer.exitcode == 0
    assert producer.pid is not None and segments_of(producer.pid) == []  # memfds and named segments alike


def test_cuda_tensors_through_the_queue_arrive_by_ipc_and_are_acknowledged() -> None:
    import torch.multiprocessing as tmp

    ctx = tmp.get_context("spawn")
    data = ctx.Queue()
    parent, child = ctx.Pipe()
    producer = ctx.Process(target=procs.cuda_queue_producer, args=(data, child, 99))
    producer.start()
    try:
        first, second, expected = parent.recv(), parent.recv(), parent.recv()
        receiver = transports.QueueTransport(data, timeout=60)
        received = tw.Decoder(REGISTRY, transports=[receiver]).decode(first).output
        assert all(t.device.type == "cuda" for t in received)  # views of the producer's memory
        assert [_raw(t) for t in received] == expected
        on_host = tw.Decoder(REGISTRY, transports=[receiver], device="cpu").decode(second).output
        assert all(t.device.type == "cpu" for t in on_host) and [_raw(t) for t in on_host] == expected
        del received, on_host
        torch.cuda.synchronize()
        parent.send("done")
        assert parent.recv() == 0  # every tensor was acknowledged
        receiver.close()
    finally:
        producer.join(60)
    assert producer.exitcode == 0


def test_a_tensor_still_being_written_arrives_complete() -> None:
    transport = transports.CudaShmTransport()
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    try:
        with torch.cuda.stream(stream):
            tensor = torch.zeros(16 * MiB // 4, device="cuda")
            torch.cuda._sleep(1_000_000_000)  # type: ignore[no-untyped-call]  # about half a second of GPU time
            tensor.fill_(7.0)  # queued behind the sleep on the producer's stream
            frames = tw.Encoder(transport=transport).encode(diffusion.Output(output=tensor))
        received = tw.Decoder(REGISTRY, transports=[transport]).decode(frames).output
        assert bool((received == 7.0).all())
        del received
    finally:
        transport.close()


def test_registrations_return_to_zero_after_a_thousand_transfers() -> None:
    transport = transports.CudaShmTransport()
    encoder = tw.Encoder(transport=transport)
    decoder = tw.Decoder(REGISTRY, transports=[transport], options=tw.DecodeOptions(borrow=False))
    tensor = torch.arange(MiB // 4, dtype=torch.float32, device="cuda")
    try:
        for i in range(1000):
            tensor.add_(1)
            received = decoder.decode(encoder.encode(diffusion.Output(output=tensor))).output
            if i % 250 == 0:
                assert float(received[0]) == i + 1
            assert transport.registrations <= 2
    finally:
        transport.close()
    assert transport.registrations == 0 and transport.healthy


def test_without_cuda_shm_the_encoder_stages_through_pinned_memory() -> None:
    shm = transports.ShmTransport()
    try:
        tensor = torch.randn(3, 1000, 1000, device="cuda").to(torch.bfloat16)
        frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=tensor))
        received = tw.Decoder(REGISTRY, transports=[shm]).decode(frames).output
        assert received.device.type == "cpu" and _raw(received) == _raw(tensor)
        del received
    finally:
        shm.close()


class _CountingRuntime(transports.TorchCudaRuntime):
    def __init__(self) -> None:
        super().__init__()
        self.flushed = self.registers = self.unregisters = 0

    def empty_cache(self) -> None:
        self.flushed += 1
        super().empty_cache()

    def register(self, address: int, nbytes: int) -> None:
        super().register(address, nbytes)
        self.registers += 1

    def unregister(self, address: int) -> None:
        super().unregister(address)
        self.unregisters += 1


def test_a_received_pool_slot_is_registered_once_for_many_device_copies() -> None:
    transport = transports.CudaShmTransport()
    runtime = _CountingRuntime()
    encoder = tw.Encoder(transport=transport)
    decoder = tw.Decoder(REGISTRY, transports=[transport], device="cuda:0", runtime=runtime)
    tensor = torch.zeros(4 * MiB // 4, dtype=torch.float32, device="cuda")
    try:
        for i in range(100):
            tensor.fill_(i)
            received = decoder.decode(encoder.encode(diffusion.Output(output=tensor))).output
            assert received.device.type == "cuda" and torch.equal(received, tensor)
        assert runtime.registers == 1 and runtime.unregisters == 0  # the receiver's mapping, pinned once
    finally:
        transport.close()
    assert runtime.unregisters == 1  # unregistered before the mapping went
    assert transport.registrations == 0 and transport.healthy


def test_placement_out_of_memory_flushes_once_then_releases_the_message() -> None:
    shm = transports.ShmTransport()
    runtime = _CountingRuntime()
    decoder = tw.Decoder(REGISTRY, transports=[shm], device="cuda:0", runtime=runtime)
    cap = int(torch.cuda.get_device_properties(0).total_memory * 0.05)  # this process's allocator cap
    hog: Any = None
    try:
        torch.cuda.set_per_process_memory_fraction(0.05)
        frames = tw.Encoder(transport=shm).encode(diffusion.Output(output=torch.ones(64 * MiB // 4)))
        hog = torch.empty(cap - 32 * MiB, dtype=torch.uint8, device="cuda")  # leaves less than the 64 MiB needed
        expected = (
            r"(?s)placing buffer 0 \(67108864 bytes\) to cuda:0: cudaMalloc failed with CUDA error 2 "
            r".*\(after flushing the allocator cache once\)$"
        )
        with pytest.raises(tw.TransportError, match=expected) as caught:
            decoder.decode(frames)
        assert caught.value.errno == errno.ENOMEM
        assert runtime.flushed == 1
        assert shm.pool is not None and [s.state for s in shm.pool.slots()] == [FREE]  # the message was released
    finally:
        del hog
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
        shm.close()
