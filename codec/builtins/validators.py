"""Named validators of the built-in schemas: the rules the schema subset cannot say.

Rule ids (each error names one):

- ``VIDEO_DIMS_POSITIVE``     every dim of the video tensor is > 0 (rank 5 is said by the schema)
- ``VIDEO_FLOAT_LAYOUT``      normalized_float video uses the bcthw layout
- ``VIDEO_FLOAT_CHANNELS``    normalized_float (bcthw) video has 3 channels in dim 1
- ``VIDEO_FLOAT_DTYPE``       normalized_float video is float16, bfloat16 or float32
- ``VIDEO_FLOAT_RANGE``       normalized_float video's range is negative_one_to_one or zero_to_one
- ``VIDEO_UINT8_LAYOUT``      uint8_frames video uses the bthwc layout
- ``VIDEO_UINT8_CHANNELS``    uint8_frames (bthwc) video has 3 channels in the last dim
- ``VIDEO_UINT8_DTYPE``       uint8_frames video is uint8
- ``VIDEO_UINT8_RANGE``       uint8_frames video's range is zero_to_255
- ``VIDEO_UINT8_NO_PENDING``  uint8_frames video has no pending float consumers
- ``VIDEO_UINT8_CONTIGUOUS``  uint8_frames video is contiguous
- ``MEDIA_PREPARED_CONTIGUOUS`` media prepared for transport holds a contiguous tensor
- ``MEDIA_METADATA_INTERNAL`` media metadata has no key ``internal`` (reserved for the process)
- ``RPC_OK_XOR_ERROR``        an RPC result (or rank status) is ok exactly when it carries no error
"""

from __future__ import annotations

from typing import Any

from tensorwire.dtypes import dtype_of
from tensorwire.rules import register_validator, violation

__all__: list[str] = []


def _value(member: Any) -> Any:
    return getattr(member, "value", member)


@register_validator("media.video_contract")
def video_contract(video: Any) -> None:
    """The typed video contract (layout, encoding, value range, colour model, pending consumers)."""
    name = "media.Video"
    tensor = video.tensor
    shape = tuple(tensor.shape)
    if any(size <= 0 for size in shape):
        raise violation(name, "VIDEO_DIMS_POSITIVE", f"every dim must be > 0, got shape {shape}")
    encoding, layout, value_range = _value(video.encoding), _value(video.layout), _value(video.value_range)
    dtype = dtype_of(tensor)
    if encoding == "normalized_float":
        if layout != "bcthw":
            raise violation(name, "VIDEO_FLOAT_LAYOUT", f"normalized_float video must use bcthw, got {layout}")
        if shape[1] != 3:
            raise violation(name, "VIDEO_FLOAT_CHANNELS", f"bcthw video must have 3 channels, got {shape[1]}")
        if dtype not in ("float16", "bfloat16", "float32"):
            raise violation(
                name, "VIDEO_FLOAT_DTYPE", f"normalized_float video must be fp16, bf16 or fp32, got {dtype}"
            )
        if value_range not in ("negative_one_to_one", "zero_to_one"):
            raise violation(name, "VIDEO_FLOAT_RANGE", f"normalized_float video cannot use range {value_range}")
        return
    if layout != "bthwc":
        raise violation(name, "VIDEO_UINT8_LAYOUT", f"uint8_frames video must use bthwc, got {layout}")
    if shape[-1] != 3:
        raise violation(name, "VIDEO_UINT8_CHANNELS", f"bthwc video must have 3 channels, got {shape[-1]}")
    if dtype != "uint8":
        raise violation(name, "VIDEO_UINT8_DTYPE", f"uint8_frames video must be uint8, got {dtype}")
    if value_range != "zero_to_255":
        raise violation(name, "VIDEO_UINT8_RANGE", f"uint8_frames video cannot use range {value_range}")
    if video.pending_float_consumers:
        pending = ", ".join(sorted(_value(c) for c in video.pending_float_consumers))
        raise violation(
            name, "VIDEO_UINT8_NO_PENDING", f"uint8_frames video cannot have pending float consumers ({pending})"
        )
    if not tensor.is_contiguous():
        raise violation(name, "VIDEO_UINT8_CONTIGUOUS", "uint8_frames video tensor must be contiguous")


@register_validator("media.media_contract")
def media_contract(media: Any) -> None:
    """Media prepared for transport holds a contiguous tensor; metadata keeps ``internal`` reserved."""
    if media.prepared_for_transport and not media.video.tensor.is_contiguous():
        raise violation("media.Media", "MEDIA_PREPARED_CONTIGUOUS", "a prepared video tensor must be contiguous")
    if "internal" in media.metadata:
        raise violation("media.Media", "MEDIA_METADATA_INTERNAL", "metadata key 'internal' is reserved")


@register_validator("rpc.ok_xor_error")
def ok_xor_error(status: Any) -> None:
    """``ok`` is true exactly when ``error`` is None."""
    if bool(status.ok) == (status.error is not None):
        detail = "ok is true but an error is set" if status.ok else "ok is false but no error is set"
        raise violation(type(status).__tw_rules__.type_name, "RPC_OK_XOR_ERROR", detail)
