"""``tensorwire demo``: a producer process sends a realistic diffusion result to this process.

The producer (a spawned process) builds a bf16 video 1x3x16x480x832 (BCTHW, normalized float,
with its media contract and metadata), trajectory latents and timesteps, and a batch of
per-request views of one large tensor; it encodes them as one ``diffusion.RunnerBatch`` with
shared memory for large buffers and sends the frames over a pipe. This process decodes, checks
every tensor bit for bit against the same seeded build, and prints where each tensor travelled,
the transfer rate, and that no segment of ours is left in /dev/shm. Out-of-band tensors are
received as borrowed views of the shared mappings (no copy on this side).
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from typing import Any, TextIO

import torch

__all__ = ["build_message", "run"]

SEED = 20261130
VIDEO_SHAPE = (1, 3, 16, 480, 832)
BATCH_SHAPE = (4, 3, 8, 240, 416)


def build_message(seed: int = SEED) -> Any:
    """The demo's message, the same for the same seed."""
    from tensorwire.builtins import diffusion, media

    gen = torch.Generator().manual_seed(seed)
    video = (torch.rand(VIDEO_SHAPE, generator=gen) * 2 - 1).to(torch.bfloat16)
    latents = torch.randn((1, 16, 4, 60, 104), generator=gen)
    timesteps = torch.linspace(1000, 0, 50)
    batch = torch.randn(BATCH_SHAPE, generator=gen)  # per-request views share this storage
    first = diffusion.Output(
        media=media.Media(
            video=media.Video(
                tensor=video,
                layout=media.VideoTensorLayout.BCTHW,
                encoding=media.VideoTensorEncoding.NORMALIZED_FLOAT,
                value_range=media.VideoValueRange.NEGATIVE_ONE_TO_ONE,
                pending_float_consumers=frozenset({media.FloatVideoConsumer.VIDEO_GUARDRAILS}),
            ),
            prepared_for_transport=True,
            metadata={"fps": 16, "prompt": "a red fox in the snow", "seed": seed},
        ),
        trajectory_latents=latents,
        trajectory_timesteps=timesteps,
        stage_durations={"text_encoder": 0.21, "denoise": 41.7, "vae_decode": 3.2},
        peak_memory_mb=30512.0,
    )
    runs = [diffusion.RunnerOutput(request_id="req-0", finished=True, result=first)]
    for i in range(BATCH_SHAPE[0]):
        result = diffusion.Output(output=(batch[i], {"index": i}))
        runs.append(diffusion.RunnerOutput(request_id=f"req-{i + 1}", step_index=49, finished=True, result=result))
    return diffusion.RunnerBatch(runner_outputs=runs)


_VIA = {"shm-slot": "pool", "shm": "shm", "inline": "inline"}


def _producer(conn: Any, seed: int) -> None:
    import tensorwire as tw
    from tensorwire import transports

    message = build_message(seed)
    shm = transports.ShmTransport()
    encoder = tw.Encoder(transport=shm)
    start = time.monotonic()
    frames = encoder.encode(message)
    conn.send((start, len(frames)))
    for frame in frames:
        conn.send_bytes(frame)
    conn.recv()  # wait until the consumer is done before exiting
    shm.close()
    conn.close()


def _tensors(value: Any, path: str, out: dict[str, torch.Tensor]) -> None:
    import msgspec

    if isinstance(value, torch.Tensor):
        out[path] = value
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            _tensors(getattr(value, name), f"{path}.{name}", out)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _tensors(item, f"{path}[{i}]", out)
    elif isinstance(value, dict):
        for key, item in value.items():
            _tensors(item, f"{path}.{key}", out)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(view), b.contiguous().view(view)))


def run(out: TextIO = sys.stdout, seed: int = SEED) -> int:
    """Run the demo; 0 when every tensor arrived bit-exact and /dev/shm holds nothing of ours."""
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY
    from tensorwire.inspection import describe
    from tensorwire.transports import held_memfds
    from tensorwire.transports.shm import our_segments

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    producer = ctx.Process(target=_producer, args=(child, seed), name="tensorwire-demo-producer")
    producer.start()
    try:
        start, count = parent.recv()
        frames = [parent.recv_bytes() for _ in range(count)]
        receiver = transports.ShmTransport()
        decoder = tw.Decoder(REGISTRY, transports=[receiver], options=tw.DecodeOptions(borrow=True))
        message = decoder.decode(frames)
        elapsed = time.monotonic() - start
        info = describe(frames[0])
        received: dict[str, torch.Tensor] = {}
        expected: dict[str, torch.Tensor] = {}
        _tensors(message, "$", received)
        _tensors(build_message(seed), "$", expected)
        same = {path: path in received and _same_bits(received[path], expected[path]) for path in expected}
        del message, received  # hand the borrowed slots back before the producer closes its pool
        receiver.close()  # and let go of the mapped segments
        parent.send("done")
    finally:
        producer.join(timeout=60)
        if producer.is_alive():
            producer.kill()
    transport_of = {b["index"]: _VIA.get(b["transport"], b["transport"]) for b in info["buffers"]}
    rows = []
    exact = len(same) == len(info["tensors"])
    for desc in info["tensors"]:
        path = desc["path"]
        ok = same.get(path, False)
        exact = exact and ok
        size = desc["nbytes"] / 2**20
        rows.append(
            (
                path,
                desc["dtype"],
                "x".join(map(str, desc["shape"])),
                f"{size:8.2f}",
                "frame0" if desc["buffer"] is None else transport_of[desc["buffer"]],
                "yes" if ok else "NO",
            )
        )
    total = sum(b["nbytes"] for b in info["buffers"])
    width = max(len(r[0]) for r in rows)
    print(f"{'tensor':<{width}}  {'dtype':<9} {'shape':<16} {'MiB':>8}  {'via':<6} bit-exact", file=out)
    for path, dtype, shape, size, via, mark in rows:
        print(f"{path:<{width}}  {dtype:<9} {shape:<16} {size}  {via:<6} {mark}", file=out)
    prefix = f"tw-{producer.pid}-"
    left = [n for n in [*our_segments(), *held_memfds()] if n.startswith(prefix)]  # files and memfds
    print(
        f"\n{info['type']} v{info['version']}: {len(rows)} tensors in {len(info['buffers'])} buffers, "
        f"{total / 2**20:.1f} MiB from encode start to decoded message in {elapsed * 1e3:.1f} ms "
        f"({total / elapsed / 1e9:.2f} GB/s)",
        file=out,
    )
    print(
        f"bit-exact: {'all' if exact else 'NO'}; segments of ours left (in /dev/shm or memfds): {len(left)}", file=out
    )
    return 0 if exact and not left else 1
