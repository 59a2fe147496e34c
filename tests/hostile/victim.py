"""Another live process, owning what forged handles point at (run in a spawned child).

It makes decoys that carry tensorwire's name pattern with its own pid but are not tensorwire
segments (a regular file with old timestamps, an empty file, a FIFO, a symlink, a directory,
another uid's file), and real tensorwire buffers in flight that nobody has claimed: a memfd pool
slot, a named pool slot and a one-shot segment. It tells the attacker everything about them but
the capabilities; at the end it reports whether each is exactly as it was, then hands over its
real frames so the test can show the intended receiver still gets them.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

import msgspec
import torch

DECOY_SIZE = 4096 + 4096  # a control page and 4 KiB: the size a one-shot of 4 KiB would have
PAYLOAD = torch.arange(1024, dtype=torch.float32)  # 4 KiB


def make_decoys(directory: Path) -> dict[str, str]:
    """Decoy files in ``directory`` by kind, named like this process's segments."""
    token = secrets.token_hex(16)
    kinds = ["regular", "empty", "fifo", "symlink", "directory", "foreign_uid", "control_like"]
    names = {kind: f"tw-{os.getpid()}-{token}-{i + 0x100:x}" for i, kind in enumerate(kinds)}
    regular = directory / names["regular"]
    regular.write_bytes(secrets.token_bytes(DECOY_SIZE))
    (directory / names["empty"]).write_bytes(b"")
    os.mkfifo(directory / names["fifo"])
    os.symlink(regular, directory / names["symlink"])
    os.mkdir(directory / names["directory"])
    foreign = directory / names["foreign_uid"]
    foreign.write_bytes(secrets.token_bytes(DECOY_SIZE))
    if os.geteuid() == 0:
        os.chown(foreign, 65534, 65534)
    # a file that looks like a one-shot segment's control page, for a capability nobody knows
    from tensorwire.transports._one_shot_page import init_file

    like = directory / names["control_like"]
    like.write_bytes(bytes(DECOY_SIZE))  # zero-filled, as a new segment's
    fd = os.open(like, os.O_RDWR)
    try:
        init_file(fd, 4096, time.monotonic_ns() + 3600 * 10**9, like.name)
    finally:
        os.close(fd)
    for name in names.values():
        os.utime(directory / name, ns=(1_000_000_000, 2_000_000_000), follow_symlinks=False)
    return names


def snapshot(directory: Path, names: list[str]) -> dict[str, Any]:
    """What each file is now: kind, size, content digest, atime and mtime (read without touching atime)."""
    state: dict[str, Any] = {}
    for name in names:
        path = directory / name
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            state[name] = None
            continue
        digest = None
        if stat.S_ISREG(info.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NOATIME)
            try:
                digest = hashlib.sha256(os.pread(fd, info.st_size + 1, 0)).hexdigest()
            finally:
                os.close(fd)
        state[name] = (stat.S_IFMT(info.st_mode), info.st_size, digest, info.st_atime_ns, info.st_mtime_ns)
    return state


def _in_flight(directory: Path) -> tuple[list[Any], dict[str, Any], list[list[bytes]]]:
    """Real buffers in flight: (transports kept alive, handle facts without capabilities, frames)."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import diffusion

    oob = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # the payload through shared memory
    kept: list[Any] = []
    facts: dict[str, Any] = {}
    frames_out: list[list[bytes]] = []
    for kind, options in (
        ("memfd", {"backing": "memfd"}),
        ("named", {"backing": "named"}),
        ("one_shot", {"pool": False}),
    ):
        transport = transports.ShmTransport(directory, claim_timeout=3600.0, **options)
        frames = tw.Encoder(transport=transport, options=oob).encode(diffusion.Output(output=PAYLOAD + len(kept)))
        handle = dict(msgspec.msgpack.decode(frames[0])[3][0][1])  # frame 0: [tag, fingerprint, data, buffers, body]
        handle.pop("capability")
        facts[kind] = handle
        kept.append(transport)
        frames_out.append([bytes(memoryview(f)) for f in frames])
    return kept, facts, frames_out


def _slot_states(kept: list[Any]) -> list[tuple[int, int]]:
    """(state, generation) of every pool slot of the kept transports."""
    return [(s.state, s.generation) for t in kept if t.pool is not None for s in t.pool.slots()]


def victim(conn: Any, directory: str) -> None:
    """The child: make targets, report them, wait, report how they are, hand over the real frames."""
    root = Path(directory)
    decoys = make_decoys(root)
    kept, facts, frames = _in_flight(root)
    watched = [*decoys.values(), facts["one_shot"]["name"], facts["named"]["name"]]
    before = snapshot(root, watched), _slot_states(kept)
    sink = os.open("/dev/null", os.O_RDONLY)
    reader, writer = os.pipe()
    conn.send({"pid": os.getpid(), "decoys": decoys, "handles": facts, "other_fds": [sink, reader, writer]})
    conn.recv()  # the attacker has done its worst
    after = snapshot(root, watched), _slot_states(kept)
    conn.send({"unchanged": after == before, "before": before, "after": after})
    conn.send(frames)
    conn.recv()  # the intended receiver has its messages
    for transport in kept:
        transport.close()
    for fd in (sink, reader, writer):
        os.close(fd)
