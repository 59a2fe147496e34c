"""A case being generated: frame 0 as the list of its items, which mutations edit in place.

Frame 0 is the msgpack array ``[tag, fingerprint, data, buffers, body]`` (``tensorwire._wire``); a
draft keeps its items as raw msgpack until a mutation needs one decoded (``get``), and mutations may
drop, add, reorder or retype items. ``data`` is a bin of the bytes of the tensors carried in frame 0
(each ``ext(3)`` of the body names its offset and size there); a mutation that needs room there
appends to it (``append_data``), and ``data_claim`` makes ``finish`` write a bin header that claims
more (or less) than the data and everything after it. Values the generator cannot know (the
victim's names and fds, the worker's own handles) are ``Live`` markers in the buffer table (the
item at ``BUFFERS``), and a handle bound whole is a ``LiveHandle`` whose fields may then be
overridden. ``finish`` turns the markers into ``Binding``s (paths computed at the end, so mutations
may add, drop and reorder buffer entries, and move the table itself, freely) and encodes frame 0
with placeholders.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tools.fuzz import rawmp
from tools.fuzz.case import Binding, Case, Damage, Export
from tools.fuzz.materialize import bindable
from tools.fuzz.seeds import Template

__all__ = [
    "BODY",
    "BUFFERS",
    "DATA",
    "DELETE",
    "FINGERPRINT",
    "TAG",
    "BodyTuple",
    "Draft",
    "Live",
    "LiveHandle",
    "encode",
    "finish",
    "start",
]

TAG, FINGERPRINT, DATA, BUFFERS, BODY = range(5)  # the items of frame 0; only the buffer table holds live values
_EXT_TUPLE = 2
_WALKED = 256  # markers only sit in short lists: longer ones (thousands of entries) are not walked


class _Delete:
    """Marks a key (or item) to remove at materialization."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()


class Live:
    """A value resolved at materialization from ``ref`` (see ``tools.fuzz.materialize``)."""

    __slots__ = ("ref",)

    def __init__(self, ref: list[Any]) -> None:
        self.ref = ref

    def __deepcopy__(self, memo: dict[int, Any]) -> Live:
        return Live(list(self.ref))


class LiveHandle:
    """A handle bound whole from ``ref``, then ``fields`` set on it (literals, ``Live``, ``DELETE``)."""

    __slots__ = ("fields", "ref")

    def __init__(self, ref: list[Any], fields: dict[str, Any] | None = None) -> None:
        self.ref = ref
        self.fields: dict[str, Any] = dict(fields or {})

    def __deepcopy__(self, memo: dict[int, Any]) -> LiveHandle:
        return LiveHandle(list(self.ref), dict(self.fields))


class BodyTuple:
    """A tree tuple of the body opened for mutation (written back as ``ext(2, items)``)."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items


def _enc_hook(value: Any) -> Any:
    if isinstance(value, BodyTuple):
        return msgspec.msgpack.Ext(_EXT_TUPLE, encode(value.items))
    if isinstance(value, Live | LiveHandle | _Delete):
        return "$unbound"  # a marker outside a bound entry: a plain string on the wire
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_ITEMS = msgspec.msgpack.Decoder(list[msgspec.Raw])


def encode(value: Any) -> bytes:
    """msgpack of a draft value (``msgspec.Raw`` verbatim, tuples as extensions)."""
    return _ENCODER.encode(value)


@dataclass
class Draft:
    """The parts of a case under construction (``items``: frame 0's items, raw until decoded)."""

    rng: random.Random
    family: str
    items: list[Any]
    frames: list[bytes]  # frames 1.. (inline buffers)
    exports: list[Export] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    raw_header: bytes | None = None  # frame 0 replaced by these bytes
    no_frames: bool = False
    damage: Damage | None = None
    joined: bool = False
    writable: bool = False
    decoder: int = 0
    data_claim: int | None = None  # the data's bin claims its bytes, all that follows it and this many more

    def get(self, index: int) -> Any:
        """Item ``index`` (decoded on first use), or None if there is none or it does not decode."""
        if not 0 <= index < len(self.items):
            return None
        value = self.items[index]
        if isinstance(value, msgspec.Raw):
            try:
                value = self.items[index] = msgspec.msgpack.decode(value)
            except (msgspec.MsgspecError, RecursionError):  # malformed, or nested past msgspec's own limit
                return None
        return value

    def put(self, index: int, value: Any) -> None:
        """Set item ``index``, or add it at the end if frame 0 has fewer items."""
        if 0 <= index < len(self.items):
            self.items[index] = value
        else:
            self.items.append(value)

    def listed(self, index: int) -> list[Any] | None:
        """Item ``index`` if it is a list."""
        value = self.get(index)
        return value if isinstance(value, list) else None

    def data(self) -> bytes | None:
        """Frame 0's data, if the item at ``DATA`` is a bin."""
        value = self.get(DATA)
        return value if isinstance(value, bytes) else None

    def append_data(self, extra: bytes) -> int | None:
        """Append ``extra`` to frame 0's data; where it starts there (None if the data is no bin)."""
        data = self.data()
        if data is None:
            return None
        self.items[DATA] = data + extra
        return len(data)

    def spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each item in frame 0 as ``finish`` writes it (about: a bound value's
        placeholder is not as long as the value)."""
        pos = len(rawmp.array_header(len(self.items)))
        spans = []
        for value in self.items:
            end = pos + len(encode(value))
            spans.append((pos, end))
            pos = end
        return spans


def start(rng: random.Random, family: str, tpl: Template, exports: list[Export]) -> Draft:
    """A draft of template ``tpl`` whose out-of-band entries are bound to ``exports`` (one each)."""
    draft = Draft(rng, family, list(_ITEMS.decode(tpl.frames[0])), list(tpl.frames[1:]), exports)
    buffers = draft.listed(BUFFERS)
    if buffers is not None:
        for k, (entry_index, _) in enumerate(tpl.oob[: len(exports)]):
            buffers[entry_index][1] = LiveHandle(["ctx", "own", k, "handle"])
    return draft


def _extract(value: Any, top: int, bindings: list[Binding]) -> Any:
    """``value`` with its markers replaced by placeholders, recording a binding for each (iterative)."""
    holder = [value]
    stack: list[tuple[Any, Any, list[str | int]]] = [(holder, 0, [top])]
    while stack:
        parent, key, path = stack.pop()
        node = parent[key]
        if isinstance(node, LiveHandle):
            bindings.append(Binding(path, node.ref))
            for name, item in node.fields.items():
                bindings.append(Binding([*path, name], _ref(item)))
            parent[key] = "$" + ".".join(str(step) for step in node.ref[1:])
        elif isinstance(node, Live | _Delete):
            bindings.append(Binding(path, _ref(node)))
            parent[key] = "$bound"
        elif isinstance(node, dict):
            stack.extend((node, k, [*path, k]) for k in list(node) if isinstance(k, str | int))
        elif isinstance(node, list) and len(node) <= _WALKED:
            stack.extend((node, i, [*path, i]) for i in range(len(node)))
    return holder[0]


def _ref(item: Any) -> list[Any]:
    if isinstance(item, Live):
        return item.ref
    if isinstance(item, _Delete):
        return ["del"]
    return ["lit", item]


def _claim(raw: list[bytes], extra: int) -> None:
    """The data's bin header (where the item is a bin) rewritten as a bin32 claiming its bytes, every
    byte of frame 0 after it and ``extra`` more."""
    payload = rawmp.bin_payload(raw[DATA]) if len(raw) > DATA else None
    if payload is not None:
        claim = len(payload) + sum(len(r) for r in raw[DATA + 1 :]) + extra
        raw[DATA] = rawmp.bin_header(min(max(claim, 0), 2**32 - 1), 4) + payload


def finish(draft: Draft, label: str) -> Case:
    """The case the draft describes."""
    bindings: list[Binding] = []
    if draft.no_frames:
        frames: list[bytes] = []
    elif draft.raw_header is not None:
        frames = [draft.raw_header, *draft.frames]
    else:
        raw = [encode(_extract(v, i, bindings) if isinstance(v, list) else v) for i, v in enumerate(draft.items)]
        if draft.data_claim is not None:
            _claim(raw, draft.data_claim)
        frames = [rawmp.build_array(raw), *draft.frames]
        if bindings and not bindable(frames[0], bindings):
            bindings = []  # the buffer table behind an item that does not parse: the placeholders stay
    return Case(
        draft.family,
        label,
        frames,
        draft.exports,
        bindings,
        draft.damage,
        draft.joined,
        draft.writable,
        draft.decoder,
    )
