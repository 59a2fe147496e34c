"""Built-in message types: construction, defaults, and every contract rule with the name it reports."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion, media, rpc


def _float_video(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "tensor": torch.zeros(1, 3, 2, 4, 6, dtype=torch.bfloat16),
        "layout": media.VideoTensorLayout.BCTHW,
        "encoding": media.VideoTensorEncoding.NORMALIZED_FLOAT,
        "value_range": media.VideoValueRange.NEGATIVE_ONE_TO_ONE,
    }
    return {**fields, **changes}


def _uint8_video(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "tensor": torch.zeros(1, 2, 4, 6, 3, dtype=torch.uint8),
        "layout": media.VideoTensorLayout.BTHWC,
        "encoding": media.VideoTensorEncoding.UINT8_FRAMES,
        "value_range": media.VideoValueRange.ZERO_TO_255,
    }
    return {**fields, **changes}


def test_every_builtin_type_can_be_constructed() -> None:
    video = media.Video(**_float_video(pending_float_consumers=frozenset({media.FloatVideoConsumer.VIDEO_GUARDRAILS})))
    frames = media.Video(**_uint8_video())
    item = media.Media(video=frames, prepared_for_transport=True, metadata={"fps": 24, "tags": ["a"]})
    output = diffusion.Output(media=item, stage_durations={"denoise": 1.5}, started_event_ids=["e1"])
    legacy = diffusion.Output(
        output=(torch.zeros(2), {"audio": np.zeros(3, dtype=np.float32)}),
        trajectory_latents=torch.zeros(4, 2),
        trajectory_decoded=[np.zeros((4, 4, 3), dtype=np.uint8)],
        video_output_index=0,
    )
    runner = diffusion.RunnerOutput(request_id="r1", step_index=0, finished=True, result=legacy)
    batch = diffusion.RunnerBatch(runner_outputs=[runner])
    tagged = diffusion.DpTagged(dp_rank=1, output=output)
    request = rpc.Request(method="generate", args=(1, "a"), kwargs={"steps": 30})
    statuses = [rpc.RankStatus(rank=0, ok=True, bool_result=True)]
    value = rpc.Value(value=True)
    results = [
        rpc.Result(method="generate", ok=True, payload=p, rank_statuses=statuses)
        for p in (output, runner, batch, tagged, value, None)
    ]
    built: list[Any] = [video, frames, item, output, legacy, runner, batch, tagged, request, value, *results]
    assert {type(m).__tw_type__.type_id for m in built} == {i.type_id for i in REGISTRY.infos()}
    assert video.color_model is media.VideoColorModel.RGB and video.preserve_input_dtype is False
    assert legacy.finished is True and legacy.total_chunks == 1 and legacy.peak_memory_mb == 0.0


def test_defaults_are_fresh_per_instance() -> None:
    a, b = diffusion.Output(), diffusion.Output()
    a.started_event_ids.append("x")
    a.stage_durations["vae"] = 1.0
    assert b.started_event_ids == [] and b.stage_durations == {}


# rule id -> the message fields that break it
VIDEO_RULES: list[tuple[str, dict[str, Any]]] = [
    ("VIDEO_DIMS_POSITIVE", _float_video(tensor=torch.zeros(1, 3, 0, 4, 6))),
    ("VIDEO_FLOAT_LAYOUT", _float_video(layout=media.VideoTensorLayout.BTHWC)),
    ("VIDEO_FLOAT_CHANNELS", _float_video(tensor=torch.zeros(1, 4, 2, 4, 6))),
    ("VIDEO_FLOAT_DTYPE", _float_video(tensor=torch.zeros(1, 3, 2, 4, 6, dtype=torch.uint8))),
    ("VIDEO_FLOAT_RANGE", _float_video(value_range=media.VideoValueRange.ZERO_TO_255)),
    ("VIDEO_UINT8_LAYOUT", _uint8_video(layout=media.VideoTensorLayout.BCTHW)),
    ("VIDEO_UINT8_CHANNELS", _uint8_video(tensor=torch.zeros(1, 2, 4, 6, 4, dtype=torch.uint8))),
    ("VIDEO_UINT8_DTYPE", _uint8_video(tensor=torch.zeros(1, 2, 4, 6, 3, dtype=torch.float16))),
    ("VIDEO_UINT8_RANGE", _uint8_video(value_range=media.VideoValueRange.ZERO_TO_ONE)),
    (
        "VIDEO_UINT8_NO_PENDING",
        _uint8_video(pending_float_consumers=frozenset({media.FloatVideoConsumer.FRAME_INTERPOLATION})),
    ),
    (
        "VIDEO_UINT8_CONTIGUOUS",
        _uint8_video(tensor=torch.zeros(1, 2, 6, 4, 3, dtype=torch.uint8).transpose(2, 3)),
    ),
]


@pytest.mark.parametrize(("rule", "fields"), VIDEO_RULES, ids=[r for r, _ in VIDEO_RULES])
def test_video_contract_violations_name_their_rule(rule: str, fields: dict[str, Any]) -> None:
    with pytest.raises(tw.ValidationError, match=rf"^media.Video: rule {rule}: "):
        media.Video(**fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            _float_video(tensor=torch.zeros(3, 2, 4, 6)),
            r"media.Video.tensor: expected rank 5, got shape \(3, 2, 4, 6\)",
        ),
        (
            _float_video(tensor=torch.zeros(1, 3, 2, 4, 6, dtype=torch.int32)),
            r"media.Video.tensor: dtype int32 is not allowed; expected one of float16, bfloat16, float32, uint8",
        ),
        (_float_video(tensor=np.zeros((1, 3, 2, 4, 6), dtype=np.float32)), r"expected torch.Tensor, got ndarray"),
    ],
)
def test_video_rules_said_by_the_schema(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(tw.ValidationError, match=message):
        media.Video(**fields)


def test_valid_videos_pass_every_rule() -> None:
    for value_range in (media.VideoValueRange.NEGATIVE_ONE_TO_ONE, media.VideoValueRange.ZERO_TO_ONE):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            media.Video(**_float_video(tensor=torch.zeros(2, 3, 1, 2, 2, dtype=dtype), value_range=value_range))
    media.Video(**_uint8_video())


def test_media_rules() -> None:
    strided = media.Video(**_float_video(tensor=torch.zeros(1, 3, 2, 6, 4).transpose(3, 4)))
    media.Media(video=strided)  # not prepared: strided is fine
    with pytest.raises(tw.ValidationError, match=r"^media.Media: rule MEDIA_PREPARED_CONTIGUOUS: "):
        media.Media(video=strided, prepared_for_transport=True)
    video = media.Video(**_uint8_video())
    with pytest.raises(
        tw.ValidationError, match=r"^media.Media: rule MEDIA_METADATA_INTERNAL: metadata key 'internal'"
    ):
        media.Media(video=video, metadata={"internal": 1})
    with pytest.raises(tw.ValidationError, match=r"media.Media.metadata\['x'\]: Tensor is not allowed in a JSON tree"):
        media.Media(video=video, metadata={"x": torch.zeros(1)})
    with pytest.raises(tw.ValidationError, match=r"media.Media.metadata\['x'\]: a JSON tree has no tuples"):
        media.Media(video=video, metadata={"x": (1, 2)})


def test_output_holds_at_most_one_of_media_and_output() -> None:
    item = media.Media(video=media.Video(**_uint8_video()))
    with pytest.raises(
        tw.ValidationError, match=r"^diffusion.Output: at most one of media, output may be set; got media, output$"
    ):
        diffusion.Output(media=item, output=torch.zeros(1))


def test_output_trees() -> None:
    deep: Any = 1
    for _ in range(64):
        deep = [deep]
    diffusion.Output(output=deep)  # 64 levels: the limit
    with pytest.raises(
        tw.ValidationError, match=r"diffusion.Output.output(\[0\])+: tree is deeper than its limit of 64"
    ):
        diffusion.Output(output=[deep])
    with pytest.raises(tw.ValidationError, match=r"diffusion.Output.output: tree dict keys must be str, got int"):
        diffusion.Output(output={1: 2})
    with pytest.raises(tw.ValidationError, match=r"diffusion.Output.output\[1\]: set is not allowed in a tree"):
        diffusion.Output(output=(1, {2}))
    with pytest.raises(
        tw.ValidationError, match=r"trajectory_decoded\[0\]: dtype float32 is not allowed; expected one of uint8"
    ):
        diffusion.Output(trajectory_decoded=[np.zeros((2, 2, 3), dtype=np.float32)])


def test_rpc_ok_xor_error() -> None:
    with pytest.raises(
        tw.ValidationError, match=r"^rpc.Result: rule RPC_OK_XOR_ERROR: ok is false but no error is set"
    ):
        rpc.Result(method="m", ok=False)
    with pytest.raises(tw.ValidationError, match=r"^rpc.Result: rule RPC_OK_XOR_ERROR: ok is true but an error is set"):
        rpc.Result(method="m", ok=True, error="x")
    with pytest.raises(tw.ValidationError, match=r"^rpc.RankStatus: rule RPC_OK_XOR_ERROR"):
        rpc.RankStatus(rank=0, ok=False)


def test_rules_also_run_when_a_message_is_decoded() -> None:
    wire = msgspec.msgpack.encode({"method": "m", "ok": False, "rank_statuses": []})
    with pytest.raises(msgspec.ValidationError, match=r"rule RPC_OK_XOR_ERROR"):
        msgspec.msgpack.decode(wire, type=rpc.Result)
    bad_status = msgspec.msgpack.encode({"method": "m", "ok": True, "rank_statuses": [{"rank": 0, "ok": False}]})
    with pytest.raises(msgspec.ValidationError, match=r"rule RPC_OK_XOR_ERROR.* - at `\$.rank_statuses\[0\]`"):
        msgspec.msgpack.decode(bad_status, type=rpc.Result)
    out_of_range = msgspec.msgpack.encode({"dp_rank": -1, "output": {}})
    with pytest.raises(msgspec.ValidationError, match=r"Expected `int` >= 0 - at `\$.dp_rank`"):
        msgspec.msgpack.decode(out_of_range, type=diffusion.DpTagged)


def test_union_payload_decodes_by_tag() -> None:
    for payload in (diffusion.RunnerOutput(request_id="x"), rpc.Value(value=[1, "a"]), diffusion.Output(error="e")):
        wire = msgspec.msgpack.encode(rpc.Result(method="m", ok=True, payload=payload))
        decoded = msgspec.msgpack.decode(wire, type=rpc.Result)
        assert type(decoded.payload) is type(payload)
        assert msgspec.msgpack.encode(decoded.payload) == msgspec.msgpack.encode(payload)
    unknown = msgspec.msgpack.encode({"method": "m", "ok": True, "payload": {"kind": "evil.Type"}})
    with pytest.raises(msgspec.ValidationError, match=r"Invalid value 'evil.Type' - at `\$.payload.kind`"):
        msgspec.msgpack.decode(unknown, type=rpc.Result)


def test_named_dims_must_agree(tmp_path: Any) -> None:
    from tests.conftest import minimal, write_schemas

    doc = minimal(
        "audio.Pair",
        left={"x-tensor": {"shape": ["channels", None]}},
        right={"x-tensor": {"shape": ["channels", 4], "devices": ["cpu"], "contiguous": True}},
    )
    Pair = tw.load_schemas(write_schemas(tmp_path, {"audio/Pair.v1.json": doc})).type("audio.Pair")
    Pair(left=torch.zeros(2, 9), right=torch.zeros(2, 4))
    with pytest.raises(tw.ValidationError, match=r"audio.Pair.right: dim 'channels' is 3, but 2 in audio.Pair.left"):
        Pair(left=torch.zeros(2, 9), right=torch.zeros(3, 4))
    with pytest.raises(tw.ValidationError, match=r"audio.Pair.right: dim 1 must be 4, got shape \(2, 5\)"):
        Pair(left=torch.zeros(2, 9), right=torch.zeros(2, 5))
    with pytest.raises(tw.ValidationError, match=r"audio.Pair.right: must be contiguous"):
        Pair(left=torch.zeros(2, 9), right=torch.zeros(4, 2).t())
    with pytest.raises(
        tw.ValidationError, match=r"audio.Pair.left: dtype torch.float8_e4m3fnuz is not in the wire dtype table"
    ):
        Pair(left=torch.zeros(2, 2, dtype=torch.float8_e4m3fnuz), right=torch.zeros(2, 4))


def test_every_table_dtype_is_accepted_where_allowed() -> None:
    for name in tw.DTYPE_NAMES:
        tensor = torch.zeros(2, dtype=getattr(torch, name))
        diffusion.Output(trajectory_latents=tensor)
        assert tw.dtypes.dtype_of(tensor) == name
