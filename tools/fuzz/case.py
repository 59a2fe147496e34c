"""One fuzz case, and the self-contained file a failing case is saved as.

A case is the input a receiver gets, written so that it can be rebuilt in any process:

- ``frames``: the frames as generated. Wherever the input names something that exists only
  while the run lives (a segment of the decoding worker's own sender, a target of the victim, a
  pid), frame 0 holds a placeholder and ``bindings`` say what goes there;
- ``exports``: the worker's own out-of-band buffers (the bytes and how they travel: a memfd or a
  named pool slot, or a one-shot segment); the worker exports them afresh for every run of the
  case and ``["ctx", "own", k, ...]`` bindings name their handles;
- ``bindings``: ``(path into frame 0's array, ref)``, applied in order (``tools.fuzz.materialize``
  documents the refs);
- ``damage``: byte edits applied after the bindings, to one frame or to the joined blob;
- ``joined``: the receiver gets ``tw.split`` of one blob instead of the frames; ``writable``:
  frames (or the blob) as ``bytearray``; ``decoder``: which decoder configuration reads it.

A case file is msgpack: the frames as one blob (``tw.join``) plus the fields above and what was
found. Replaying it against a fresh victim and a fresh sender rebuilds the same input.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

import tensorwire as tw

__all__ = ["FORMAT", "Binding", "Case", "Damage", "Export", "Found", "dump", "file_name", "load"]

FORMAT = "twfuzz-case/3"  # frame 0 in wire format 3; binding paths start with an item index (the buffer table: 3)


class Export(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One of the sender's own out-of-band buffers: ``mode`` "memfd", "named" or "oneshot";
    ``pad`` bytes before it in its pool slot (the handle's offset)."""

    mode: str
    data: bytes
    pad: int = 0


class Binding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Put what ``ref`` names at ``path`` (the index of an item of frame 0, then keys and indices)."""

    path: list[str | int]
    ref: list[Any]


class Damage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Byte edits (``kind, where, byte``) then a cut, on frame ``target`` (-1: the joined blob)."""

    target: int
    edits: list[tuple[str, int, int]]
    cut: int | None = None


class Case(msgspec.Struct, forbid_unknown_fields=True):
    """A receiver's input, rebuildable in any process (see the module docstring)."""

    family: str
    label: str
    frames: list[bytes]
    exports: list[Export] = []
    bindings: list[Binding] = []
    damage: Damage | None = None
    joined: bool = False
    writable: bool = False
    decoder: int = 0


class Found(msgspec.Struct, forbid_unknown_fields=True):
    """Why a case was saved: its category (crash, non-codec, harm, leak, known), what was seen, where
    it came from (a generator seed and index, if any)."""

    category: str
    detail: str
    seed: int | None = None
    index: int | None = None


class _File(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    family: str
    label: str
    blob: bytes
    exports: list[Export]
    bindings: list[Binding]
    damage: Damage | None
    joined: bool
    writable: bool
    decoder: int
    found: Found | None = None


def dump(case: Case, found: Found | None = None) -> bytes:
    """The case file of ``case``."""
    blob = tw.join(case.frames) if case.frames else b""
    record = _File(
        FORMAT,
        case.family,
        case.label,
        blob,
        case.exports,
        case.bindings,
        case.damage,
        case.joined,
        case.writable,
        case.decoder,
        found,
    )
    return msgspec.msgpack.encode(record)


def load(data: bytes) -> tuple[Case, Found | None]:
    """The case (and why it was saved) in a case file; ``ValueError`` if it is not one."""
    try:
        record = msgspec.msgpack.decode(data, type=_File)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"not a fuzz case file: {exc}") from None
    if record.format != FORMAT:
        raise ValueError(f"case file format {record.format!r}, expected {FORMAT!r}")
    frames = [bytes(f) for f in tw.split(record.blob)] if record.blob else []
    case = Case(
        record.family,
        record.label,
        frames,
        record.exports,
        record.bindings,
        record.damage,
        record.joined,
        record.writable,
        record.decoder,
    )
    return case, record.found


def file_name(case: Case, category: str) -> str:
    """A content-addressed file name: the same input always gets the same name."""
    return f"{category}-{hashlib.sha256(dump(case)).hexdigest()[:16]}.twcase"
