"""The cases of the built-in types' golden fixtures (``tests/golden``, ``tensorwire golden record``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tensorwire.golden import Cases

__all__ = ["cases"]


def cases() -> Cases:
    """Fixture builders per type id: deterministic messages covering every built-in type."""
    from tensorwire.builtins import diffusion, media, rpc

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
