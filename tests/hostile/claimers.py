"""Receivers racing for the same messages (run in spawned children by test_slot_lifetime)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorwire.transports.shm import Backing


def claim_all(start: Any, frames_list: list[list[bytes]], backing: Backing, report: Any) -> None:
    """Wait for ``start``, then try to decode every message; report which ones this process got."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY

    decoder = tw.Decoder(
        REGISTRY,
        transports=[transports.ShmTransport(backing=backing)],
        options=tw.DecodeOptions(borrow=False),
    )
    won: list[int] = []
    lost: list[str] = []
    start.wait(60)
    for i, frames in enumerate(frames_list):
        try:
            message = decoder.decode(frames)
        except tw.DecodeError as exc:
            lost.append(str(exc))
            continue
        if int(message.chunk_index) == i and float(message.output[0]) == float(i):
            won.append(i)
    report.send((won, lost))
