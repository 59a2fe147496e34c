"""Children for test_mapping_lifetime: a receiver holding a borrowed view while a neighbour acts."""

from __future__ import annotations

from typing import Any


def hold_and_read(conn: Any) -> None:
    """Decode two messages (borrowed views), wait while the neighbour tries to resize the memory,
    then read every element and report the sums (a SIGBUS would end this process instead)."""
    import codec
    import transports
    from codec.generated import REGISTRY

    decoder = codec.Decoder(REGISTRY, transports=[transports.ShmTransport()])
    first = decoder.decode(conn.recv()).output
    conn.send("holding")
    conn.recv()  # the neighbour tried
    second = decoder.decode(conn.recv()).output  # a slot reused after the attempt
    conn.send((float(first.double().sum()), float(second.double().sum())))
    conn.recv()
