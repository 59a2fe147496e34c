"""Functions run in spawned processes by the cross-process tests (importable by the children)."""

from __future__ import annotations

from typing import Any

import torch


def producer(conn: Any, control: Any, count: int) -> None:
    """Send ``count`` messages with shared-memory tensors on ``conn``; exit when ``control`` says so."""
    import codec
    import transports
    from codec.generated import diffusion

    encoder = codec.Encoder(transport=transports.ShmTransport(), options=codec.EncodeOptions(inline_threshold=1024))
    for i in range(count):
        message = diffusion.Output(output=(torch.full((512,), float(i)), torch.arange(8) + i), chunk_index=i)
        frames = encoder.encode(message)
        conn.send(len(frames))
        for frame in frames:
            conn.send_bytes(frame)
    control.recv()


def consumer(conn: Any, report: Any, count: int, borrow: bool) -> None:
    """Receive ``count`` messages on ``conn``, check them, send ``(received, ok)`` on ``report``."""
    import codec
    import transports
    from codec.generated import REGISTRY

    decoder = codec.Decoder(
        REGISTRY, transports=[transports.ShmTransport()], options=codec.DecodeOptions(borrow=borrow)
    )
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


def export_and_exit(conn: Any) -> None:
    """Export one segment, hand its frames to the parent, and exit without anyone receiving it yet."""
    import codec
    import transports
    from codec.generated import diffusion

    encoder = codec.Encoder(transport=transports.ShmTransport(), options=codec.EncodeOptions(inline_threshold=1))
    frames = encoder.encode(diffusion.Output(output=torch.arange(1000, dtype=torch.float32)))
    conn.send([bytes(memoryview(f)) for f in frames])
