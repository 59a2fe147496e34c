"""Children for test_mapping_lifetime: a receiver holding a borrowed view while a neighbour acts."""

from __future__ import annotations

from typing import Any


def hold_and_read(conn: Any) -> None:
    """Decode two messages (borrowed views), wait while the neighbour tries to resize the memory,
    then read every element and report the sums (a SIGBUS would end this process instead)."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY

    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport()])
    first = decoder.decode(conn.recv()).output
    conn.send("holding")
    conn.recv()  # the neighbour tried
    second = decoder.decode(conn.recv()).output  # a slot reused after the attempt
    conn.send((float(first.double().sum()), float(second.double().sum())))
    conn.recv()


def send_and_wait(conn: Any, directory: str | None = None) -> None:
    """Send one message through a memfd pool slot (a named one in ``directory``), then exit when told
    to (without closing)."""
    import torch

    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    transport = transports.ShmTransport() if directory is None else transports.ShmTransport(directory, backing="named")
    encoder = tw.Encoder(transport=transport, options=tw.EncodeOptions(inline_threshold=1))
    frames = encoder.encode(diffusion.Output(output=torch.ones(1 << 20)))
    conn.send([bytes(memoryview(f)) for f in frames])
    conn.recv()


def send_one_shots_cut_short(conn: Any, directory: str) -> None:
    """Send one-shot segments that a neighbour cuts short (to 0 and to 100 bytes) right after their
    space is reserved, before anything is written: report what each encode did and whether its
    message decodes (a SIGBUS would end this process instead)."""
    import os

    import torch

    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion

    sender = transports.ShmTransport(directory, pool=False)
    encoder = tw.Encoder(transport=sender, options=tw.EncodeOptions(inline_threshold=1))
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory)])
    reserve = os.posix_fallocate
    cut_to = [0]

    def reserve_then_cut(fd: int, offset: int, length: int) -> None:
        reserve(fd, offset, length)
        os.truncate(os.readlink(f"/proc/self/fd/{fd}"), cut_to[0])  # by name, as a neighbour would

    os.posix_fallocate = reserve_then_cut
    results: list[object] = []
    for cut_to[0], elements in ((0, 300_000), (100, 300_000), (0, 3_000_000)):  # 1.2 MB; 12 MB: in parallel
        tensor = torch.arange(elements, dtype=torch.float32)
        try:
            frames = encoder.encode(diffusion.Output(output=tensor))
        except tw.CodecError as exc:
            results.append(f"encode: {type(exc).__name__}")
            continue
        except Exception as exc:
            results.append(f"encode raised {type(exc).__name__}: {exc}")
            continue
        try:
            results.append(bool(torch.equal(decoder.decode(frames).output, tensor)))
        except tw.CodecError as exc:
            results.append(f"decode: {type(exc).__name__}: {exc}")
    os.posix_fallocate = reserve
    sender.close()
    conn.send(results)
