"""Children for test_sender_side: a sender under a low fd limit whose receiver never claims."""

from __future__ import annotations

from typing import Any


def send_unclaimed_under_a_low_fd_limit(conn: Any, soft: int, messages: int) -> None:
    """With ``RLIMIT_NOFILE`` at ``soft``, send ``messages`` 256 KiB tensors nobody claims: report
    how many encoded, how many pool slots and one-shots they took, and whether an unrelated open
    still works."""
    import os
    import resource

    import torch

    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    shm = transports.ShmTransport(conn.recv())
    encoder = tw.Encoder(transport=shm, options=tw.EncodeOptions(embed_threshold=0, inline_threshold=1))
    tensor = torch.ones(65536)
    kinds: dict[str, int] = {}
    errors = []
    for _ in range(messages):
        try:
            frames = encoder.encode(diffusion.Output(output=tensor))
        except tw.CodecError as exc:
            errors.append(str(exc))
            continue
        kind = "slot" if b"generation" in bytes(frames[0]) else "one-shot"
        kinds[kind] = kinds.get(kind, 0) + 1
    try:
        os.close(os.open("/dev/null", os.O_RDONLY))
        opens = True
    except OSError:
        opens = False
    assert shm.pool is not None
    conn.send((kinds, errors[:1], len(shm.pool.slots()), opens))
    shm.close()
