"""Functions run in spawned processes by the cross-process tests (importable by the children)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from tensorwire.transports.shm import Backing


def producer(conn: Any, control: Any, count: int) -> None:
    """Send ``count`` messages with shared-memory tensors on ``conn``; exit when ``control`` says so."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    encoder = tw.Encoder(
        transport=transports.ShmTransport(), options=tw.EncodeOptions(inline_threshold=1024, embed_threshold=0)
    )
    for i in range(count):
        message = diffusion.Output(output=(torch.full((512,), float(i)), torch.arange(8) + i), chunk_index=i)
        frames = encoder.encode(message)
        conn.send(len(frames))
        for frame in frames:
            conn.send_bytes(frame)
    control.recv()


def consumer(conn: Any, report: Any, count: int, borrow: bool) -> None:
    """Receive ``count`` messages on ``conn``, check them, send ``(received, ok)`` on ``report``."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY

    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport()], options=tw.DecodeOptions(borrow=borrow))
    ok = True
    for i in range(count):
        frames = [conn.recv_bytes() for _ in range(conn.recv())]
        message = decoder.decode(frames)
        big, small = message.output
        ok = (
            ok
            and message.chunk_index == i
            and bool((big == float(i)).all())
            and small.tolist() == list(range(i, i + 8))
        )
    del message, big, small  # let the last borrowed slot go before reporting
    report.send((count, ok))


def export_and_exit(conn: Any, backing: Backing = "memfd") -> None:
    """Export one pool slot, hand its frames to the parent, and exit without anyone receiving it yet."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    transport = transports.ShmTransport(backing=backing)
    encoder = tw.Encoder(transport=transport, options=tw.EncodeOptions(inline_threshold=1, embed_threshold=0))
    frames = encoder.encode(diffusion.Output(output=torch.arange(1000, dtype=torch.float32)))
    conn.send([bytes(memoryview(f)) for f in frames])


def cuda_tensors(seed: int) -> list[torch.Tensor]:
    """The CUDA tensors of the GPU round-trip test: bf16, fp16, fp32 and uint8, from ``seed``."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    shape = (4, 1024, 1024)
    floats = [
        torch.randn(shape, generator=generator, device="cuda", dtype=dtype)
        for dtype in (torch.bfloat16, torch.float16, torch.float32)
    ]
    return [*floats, torch.randint(0, 256, shape, generator=generator, device="cuda", dtype=torch.uint8)]


def cuda_producer(conn: Any, seed: int) -> None:
    """Encode ``cuda_tensors(seed)`` with ``CudaShmTransport`` and send the frames plus the expected bytes."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    transport = transports.CudaShmTransport()
    tensors = cuda_tensors(seed)
    frames = tw.Encoder(transport=transport).encode(diffusion.Output(output=tuple(tensors)))
    conn.send([bytes(memoryview(f)) for f in frames])
    conn.send([t.cpu().view(torch.uint8).numpy().tobytes() for t in tensors])
    conn.send((transport.available, transport.registrations))
    conn.recv()  # the receiver has the message: the pool may go
    transport.close()
    conn.send(transport.registrations)


def cuda_queue_producer(data_queue: Any, conn: Any, seed: int) -> None:
    """Encode ``cuda_tensors(seed)`` twice with ``QueueTransport`` (CUDA IPC); report what stays unacknowledged."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    transport = transports.QueueTransport(data_queue)
    tensors = cuda_tensors(seed)
    encoder = tw.Encoder(transport=transport)
    for _ in range(2):  # the receiver reads the first as device views, the second onto its host
        frames = encoder.encode(diffusion.Output(output=tuple(tensors)))
        conn.send([bytes(memoryview(f)) for f in frames])
    conn.send([t.cpu().view(torch.uint8).numpy().tobytes() for t in tensors])
    conn.recv()  # the receiver has decoded the message and let go of its views
    conn.send(transport.in_flight)
    transport.close()


def hold_and_die(frames: list[bytes]) -> None:
    """Claim a broadcast's shared-memory buffer and exit while still holding it (no clean-up runs)."""
    import os

    import tensorwire as tw
    from tensorwire.builtins import REGISTRY

    reader = tw.transports.ShmTransport()
    held = tw.Decoder(REGISTRY, [reader]).decode(frames)
    assert held.kwargs["x"].numel() > 0
    os._exit(0)
