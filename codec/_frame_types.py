"""The msgspec types frame 0 is decoded as: the whole frame as a tagged union of every registered
type (``frame_type``, its body typed), and frame 0 up to its buffer table (``table_decoder``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal, Union

import msgspec

from tensorwire._wire import tag
from tensorwire.registry import Registry

__all__ = ["frame_type", "table_decoder"]


@lru_cache(maxsize=64)
def frame_type(registry: Registry, strict: bool) -> Any:
    """Frame 0 as a tagged union of every type of ``registry``."""
    frames = []
    for cls in registry:
        info = cls.__tw_type__
        fingerprint: Any = Literal[info.fingerprint] if strict else str
        frames.append(
            msgspec.defstruct(
                f"Frame_{info.type_id}_v{info.version}",
                [("fingerprint", fingerprint), ("data", memoryview), ("buffers", msgspec.Raw), ("body", cls)],
                array_like=True,
                forbid_unknown_fields=True,
                gc=False,  # dropped as soon as its body is taken: never part of a cycle
                tag=tag(info.type_id, info.version),
            )
        )
    return Union[tuple(frames)] if len(frames) > 1 else frames[0]  # noqa: UP007


@lru_cache(maxsize=64)
def table_decoder(handle_types: tuple[type[Any], ...]) -> msgspec.msgpack.Decoder[Any]:
    """Frame 0's buffer table (the body after it is skipped unread)."""
    handle: Any = handle_types[0] if len(handle_types) == 1 else Union[handle_types]  # noqa: UP007
    entry = tuple[Annotated[int, msgspec.Meta(ge=0)], handle]  # [nbytes, handle]
    table = msgspec.defstruct(
        "BufferTable",
        [("tag", str), ("fingerprint", Any), ("data", memoryview), ("buffers", list[entry])],
        array_like=True,
    )
    return msgspec.msgpack.Decoder(table)
