"""The messages of the differential check: messages drawn valid under one version of a schema,
and whether each decodes under the other with every field both versions have unchanged (compared
as plain data, a struct on the fields both of its versions have)."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import numpy as np

import tensorwire as tw
from tools.compat_diff.values import Field, _values

__all__ = ["Fields", "messages", "plain", "same", "travels"]


class Fields(dict[str, Any]):
    """A struct's fields (a map's entries stay a plain dict)."""


def plain(value: Any) -> Any:
    """A decoded message as plain data comparable across the versions' classes."""
    if isinstance(value, msgspec.Struct):
        return Fields({k: plain(v) for k, v in msgspec.structs.asdict(value).items()})
    if isinstance(value, list | tuple | set | frozenset):
        items = [plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return (str(value.dtype), list(value.shape), value.tolist())
    if hasattr(value, "value") and not isinstance(value, int | float | str):
        return value.value
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    return value


def messages(
    r: random.Random, writer: type, fields: dict[str, Field], required: set[str], count: int, wrap: str = "flat"
) -> list[Any]:
    out: list[Any] = []
    for _ in range(count * 10):
        if len(out) == count:
            break
        values = {}
        for name, f in fields.items():
            if name not in required and r.random() < 0.3:
                continue
            values[name] = r.choice(_values(f))
        if wrap != "flat":
            values = {"w": values if wrap == "struct" else [values, values]}
        try:
            msg: Any = msgspec.convert(values, writer)
            tw.Encoder().encode(msg)
        except (msgspec.MsgspecError, tw.CodecError, TypeError, ValueError, OverflowError):
            continue
        out.append(msg)
    return out


def travels(msg: Any, reader: tw.Registry) -> tuple[bool, str]:
    """Whether ``msg`` decodes under ``reader`` with every field both sides have unchanged."""
    try:
        got = tw.Decoder(reader).decode(tw.Encoder().encode(msg))
    except tw.CodecError as exc:
        return False, f"decode error: {exc}"
    sent, back = plain(msg), plain(got)
    for k in sent.keys() & back.keys():
        if not same(sent[k], back[k]):
            return False, f"{k}: sent {sent[k]!r}, got {back[k]!r}"
    return True, ""


def same(sent: Any, back: Any) -> bool:
    """Equal, where a struct is compared on the fields both of its versions have."""
    if isinstance(sent, Fields) and isinstance(back, Fields):
        return all(same(sent[k], back[k]) for k in sent.keys() & back.keys())
    if isinstance(sent, list) and isinstance(back, list):
        return len(sent) == len(back) and all(same(a, b) for a, b in zip(sent, back, strict=True))
    return bool(sent == back)
