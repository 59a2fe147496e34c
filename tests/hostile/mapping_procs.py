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


def send_and_wait(conn: Any) -> None:
    """Send one message through a memfd pool slot, then exit when told to (without closing)."""
    import torch

    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    transport = transports.ShmTransport()
    encoder = tw.Encoder(transport=transport, options=tw.EncodeOptions(inline_threshold=1))
    frames = encoder.encode(diffusion.Output(output=torch.ones(1 << 20)))
    conn.send([bytes(memoryview(f)) for f in frames])
    conn.recv()
