"""Encode and decode options: the inline threshold and the limits a message must stay within."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["DecodeOptions", "EncodeOptions", "Limits"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def _count(options: Any, name: str) -> None:
    """``options.name`` is a whole number of at least 0 (a bool is not one)."""
    value = getattr(options, name)
    if type(value) is not int:
        raise TypeError(f"{type(options).__name__}.{name} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{type(options).__name__}.{name} must be 0 or more, got {value}")


def _flag(options: Any, name: str) -> None:
    """``options.name`` is True or False."""
    value = getattr(options, name)
    if type(value) is not bool:
        raise TypeError(f"{type(options).__name__}.{name} must be a bool, got {value!r}")


def _limits(options: Any) -> None:
    """``options.limits`` is a ``Limits``."""
    if not isinstance(options.limits, Limits):
        raise TypeError(f"{type(options).__name__}.limits must be a Limits, got {options.limits!r}")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds enforced on both sides; exceeding one is an ``EncodeError`` / ``DecodeError``.

    Defaults: header frame 64 MiB, whole message 64 GiB, 65,536 tensors and 4096 buffers per
    message, rank 8, 16 GiB per tensor, nesting depth 64. Small tensors travel inside the header
    frame, up to half of ``max_header_bytes`` of their bytes (the encoder sends the ones after that
    in buffers), so its size bounds their bytes and count together; ``max_tensors`` bounds the count.
    Frame 0 can decode into Python objects of ~75 times its size (one-byte empty lists or maps in a
    tree or untyped field): a receiver of untrusted peers lowers ``max_header_bytes`` to what its
    messages need.
    A ``max_depth`` near Python's recursion limit or past it (from Python 3.12 on, its separate
    limit on recursion in C: 10,000 levels on 3.13) is more than a decode can walk: a frame nested
    that deep is a ``DecodeError`` saying so. Below that, a decode recurses in C up to
    ``max_depth`` levels, each taking thread stack (up to ~1.6 KiB for a tree's tuples, ~0.3 KiB
    for arrays): the default fits a 256 KiB thread stack with room to spare, and a larger
    ``max_depth`` needs a stack to match. A frame nested deeper than a thread's stack holds crashes
    the process (SIGSEGV) before the recursion limit is reached: on a 256 KiB stack, ~160 levels of
    tuples, ~850 of arrays.
    """

    max_header_bytes: int = 64 * MiB
    max_message_bytes: int = 64 * GiB
    max_tensors: int = 65536
    max_buffers: int = 4096
    max_rank: int = 8
    max_tensor_bytes: int = 16 * GiB
    max_depth: int = 64

    def __post_init__(self) -> None:
        for field in fields(self):
            _count(self, field.name)


@dataclass(frozen=True, slots=True)
class EncodeOptions:
    """How an ``Encoder`` lays a message out.

    ``embed_threshold``: host tensors of fewer bytes travel inside frame 0, copied into it (one
    frame for any number of small tensors); larger ones travel in buffers. The default, 32 KiB, is
    where eight tensors in one message cost about the same either way in process. ``inline_threshold``:
    buffers of fewer bytes (counted on the bytes actually sent) travel as
    frames; larger ones go to the encoder's out-of-band transport. The default, 256 KiB, is where
    the pool overtakes inline frames over a pipe (``python -m tools.bench.threshold``). ``validate``: check every value
    against its schema before anything is exported (on by default).
    """

    embed_threshold: int = 32 * KiB
    inline_threshold: int = 256 * KiB
    validate: bool = True
    limits: Limits = Limits()

    def __post_init__(self) -> None:
        _count(self, "embed_threshold")
        _count(self, "inline_threshold")
        _flag(self, "validate")
        _limits(self)


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """How a ``Decoder`` reads a message.

    ``borrow``: True: tensors received out of band are views of the shared mapping, kept alive by
    a lease until the last view dies (zero copies); False: each buffer is copied into private
    memory (and a pool slot is handed back at once); None (default): each transport's own default,
    which for the shared-memory transport is a borrowed view of a pool slot and a copy of a
    one-shot segment.
    ``copy_readonly``: a received buffer that is not writable (e.g. an inline frame received as
    ``bytes``) is copied so the tensors built on it are writable; set False to share it: numpy
    arrays on it are then read-only views, and a buffer holding a torch tensor is still copied
    (torch has no read-only tensors, and writes must never reach the sender's or a blob's memory).
    ``strict_fingerprint``: reject a message whose schema fingerprint differs from the registry's
    class of the same type id and version (by default such compatible minor changes are decoded).
    """

    borrow: bool | None = None
    copy_readonly: bool = True
    strict_fingerprint: bool = False
    limits: Limits = Limits()

    def __post_init__(self) -> None:
        if self.borrow is not None:
            _flag(self, "borrow")
        _flag(self, "copy_readonly")
        _flag(self, "strict_fingerprint")
        _limits(self)
