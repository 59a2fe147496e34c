"""Golden wire fixtures: bytes written by every released schema version, kept to prove they still decode.

``tests/golden/<type id>/v<N>/<case>.bin`` is a joined blob (inline buffers only) and
``<case>.json`` describes the value it must decode to (tensors by dtype, shape and a SHA-256 of
their bits). ``MANIFEST.sha256`` pins every file: a released fixture is never edited, only added.
``record(root)`` writes the fixtures that do not exist yet (``tensorwire golden record``).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import torch

from tensorwire.encoder import Encoder
from tensorwire.wire import join

__all__ = ["MANIFEST", "cases", "describe", "manifest_lines", "read_manifest", "record"]

MANIFEST = "MANIFEST.sha256"


def _bits(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        flat = torch.empty(value.numel(), dtype=value.dtype).copy_(value.reshape(-1))
        raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    else:
        raw = np.ascontiguousarray(value).tobytes()
    return hashlib.sha256(raw).hexdigest()


def describe(value: Any) -> Any:
    """A JSON description of a message, exact for every field (tensors by their bits' SHA-256)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        kind = "$tensor" if isinstance(value, torch.Tensor) else "$ndarray"
        dtype = str(value.dtype).removeprefix("torch.")
        return {kind: dtype, "shape": list(value.shape), "sha256": _bits(value)}
    if isinstance(value, msgspec.Struct):
        info = getattr(type(value), "__tw_type__", None)
        out: dict[str, Any] = {"$type": info.type_id if info else type(value).__name__}
        out.update({name: describe(getattr(value, name)) for name in value.__struct_fields__})
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return {"$tuple": [describe(v) for v in value]}
    if isinstance(value, frozenset | set):
        return {"$set": sorted(describe(v) for v in value)}
    if isinstance(value, list):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, float) and value != value:
        return {"$float": "nan"}
    return value


def cases() -> dict[str, list[tuple[str, Callable[[], Any]]]]:
    """Fixture builders per type id: deterministic messages covering every built-in type."""
    from tensorwire.generated import diffusion, media, rpc

    def video_float() -> Any:
        bits = (torch.arange(1 * 3 * 2 * 4 * 4, dtype=torch.int32) * 97 % 65536).to(torch.int64)
        tensor = bits.to(torch.int32).to(torch.int16).view(torch.bfloat16).reshape(1, 3, 2, 4, 4)
        tensor = torch.where(torch.isfinite(tensor), tensor, torch.zeros_like(tensor))
        return media.Video(
            tensor=tensor,
            layout=media.VideoTensorLayout.BCTHW,
            encoding=media.VideoTensorEncoding.NORMALIZED_FLOAT,
            value_range=media.VideoValueRange.NEGATIVE_ONE_TO_ONE,
            pending_float_consumers=frozenset(media.FloatVideoConsumer),
        )

    def video_uint8() -> Any:
        return media.Video(
            tensor=(torch.arange(2 * 3 * 3 * 3) % 256).to(torch.uint8).reshape(1, 2, 3, 3, 3),
            layout=media.VideoTensorLayout.BTHWC,
            encoding=media.VideoTensorEncoding.UINT8_FRAMES,
            value_range=media.VideoValueRange.ZERO_TO_255,
        )

    def item() -> Any:
        return media.Media(video=video_float(), prepared_for_transport=True, metadata={"fps": 8, "tags": ["a", None]})

    def tree_output() -> Any:
        return diffusion.Output(
            output=(
                torch.arange(6, dtype=torch.float32).reshape(2, 3),
                {"audio": np.arange(5, dtype=np.int16), "raw": b"\x00\x01"},
                [1.5, None, "x"],
            ),
            trajectory_latents={"step": torch.linspace(0, 1, 4)},
            trajectory_timesteps=torch.arange(3, dtype=torch.int64),
            trajectory_decoded=[np.full((2, 2, 3), 7, dtype=np.uint8)],
            video_output_index=0,
            error="boom",
            error_status_code=503,
            finished=False,
            chunk_index=1,
            total_chunks=2,
            started_event_ids=["s"],
            stage_durations={"vae": 0.25},
            peak_memory_mb=12.5,
        )

    def media_output() -> Any:
        return diffusion.Output(media=item(), request_started=True)

    return {
        "media.Video": [("normalized_float_bf16", video_float), ("uint8_frames", video_uint8)],
        "media.Media": [("prepared", item)],
        "diffusion.Output": [("tree_output", tree_output), ("media", media_output), ("defaults", diffusion.Output)],
        "diffusion.RunnerOutput": [
            (
                "with_result",
                lambda: diffusion.RunnerOutput(request_id="r", step_index=3, finished=True, result=tree_output()),
            )
        ],
        "diffusion.RunnerBatch": [
            (
                "two",
                lambda: diffusion.RunnerBatch(
                    runner_outputs=[
                        diffusion.RunnerOutput(request_id="a", result=media_output()),
                        diffusion.RunnerOutput(request_id="b"),
                    ]
                ),
            )
        ],
        "diffusion.DpTagged": [("rank_3", lambda: diffusion.DpTagged(dp_rank=3, output=tree_output()))],
        "rpc.Request": [
            (
                "collective",
                lambda: rpc.Request(
                    method="add_lora",
                    args=(1, ("a", 2.0)),
                    kwargs={"t": torch.ones(2, dtype=torch.bfloat16)},
                    exec_all_ranks=True,
                    wave_request_ids=["a"],
                ),
            )
        ],
        "rpc.Value": [("tree", lambda: rpc.Value(value={"ok": True, "n": [1, 2, (3,)]}))],
        "rpc.Result": [
            (
                "payload_batch",
                lambda: rpc.Result(
                    method="m",
                    ok=True,
                    payload=diffusion.RunnerBatch(runner_outputs=[]),
                    rank_statuses=[rpc.RankStatus(rank=0, ok=True, bool_result=True)],
                ),
            ),
            (
                "error",
                lambda: rpc.Result(
                    method="m",
                    ok=False,
                    error="bad",
                    error_type="ValueError",
                    traceback="tb",
                    rank_statuses=[rpc.RankStatus(rank=1, ok=False, error="x")],
                ),
            ),
        ],
    }


def manifest_lines(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every fixture file under ``root``."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def read_manifest(root: Path) -> dict[str, str]:
    """The pinned checksums: relative path -> SHA-256."""
    path = root / MANIFEST
    if not path.exists():
        return {}
    pinned = {}
    for line in path.read_text().splitlines():
        digest, _, name = line.partition("  ")
        pinned[name] = digest
    return pinned


def record(root: Path) -> list[Path]:
    """Write the fixtures of every built-in type and version that has none yet; return the new files."""
    pinned = read_manifest(root)
    current = manifest_lines(root)
    edited = sorted(name for name, digest in pinned.items() if current.get(name) != digest)
    if edited:
        raise ValueError(f"released fixtures were edited or removed: {', '.join(edited)}; restore them")
    written: list[Path] = []
    encoder = Encoder()
    for type_id, builders in cases().items():
        for case, build in builders:
            message = build()
            version = type(message).__tw_type__.version
            base = root / type_id / f"v{version}" / case
            if base.with_suffix(".bin").exists():
                continue  # released: never rewritten
            base.parent.mkdir(parents=True, exist_ok=True)
            base.with_suffix(".bin").write_bytes(join(encoder.encode(message)))
            base.with_suffix(".json").write_text(json.dumps(describe(message), indent=2, sort_keys=True) + "\n")
            written += [base.with_suffix(".bin"), base.with_suffix(".json")]
    pinned.update({name: digest for name, digest in manifest_lines(root).items() if name not in pinned})
    (root / MANIFEST).write_text("".join(f"{digest}  {name}\n" for name, digest in sorted(pinned.items())))
    return written
