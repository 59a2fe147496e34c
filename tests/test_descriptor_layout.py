"""The ``ext(1)`` descriptor as ``unpack_descriptor`` reads it: every payload, the quick contiguous
case included, against the layout written out here (head, buffer, offset, nbytes, shape[, strides])."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorwire._wire import EXT_TENSOR, KINDS, SHARED, STRIDED, Descriptor, pack_descriptor, unpack_descriptor
from tensorwire.dtypes import DTYPE_NAMES
from tensorwire.errors import DecodeError

_PLACED = struct.Struct("<BBBBIQQ")


def _expected(payload: bytes) -> Descriptor | str:
    """What the layout says ``payload`` is: its descriptor, or the words of its error."""
    size = len(payload)
    if size < 4:
        return f"tensor descriptor of {size} bytes is shorter than its 4-byte head"
    kind, dtype, rank, flags = payload[:4]
    if kind >= 2:
        return f"tensor kind {kind} is neither 0 (tensor) nor 1 (ndarray)"
    if dtype >= len(DTYPE_NAMES):
        return f"dtype code {dtype} is not in the wire dtype table (0..{len(DTYPE_NAMES) - 1})"
    strided = bool(flags & STRIDED)
    end = _PLACED.size + (16 if strided else 8) * rank
    if flags & ~(STRIDED | SHARED) or size != end:
        return f"tensor descriptor of {size} bytes, expected {end} for rank {rank} and flags {flags}"
    _, _, _, _, buffer, offset, nbytes = _PLACED.unpack_from(payload)
    words = struct.unpack_from(f"<{rank}Q{rank}q" if strided else f"<{rank}Q", payload, _PLACED.size)
    shape, strides = (words[:rank], words[rank:]) if strided else (words, None)
    return Descriptor(KINDS[kind], DTYPE_NAMES[dtype], shape, strides, buffer, offset, nbytes)


def _read(payload: bytes) -> Descriptor | str:
    try:
        return unpack_descriptor(EXT_TENSOR, memoryview(payload))
    except DecodeError as exc:
        return exc.message


@given(
    kind=st.integers(0, 3),
    dtype=st.integers(0, len(DTYPE_NAMES) + 2),
    rank=st.integers(0, 18),
    flags=st.integers(0, 7),
    buffer=st.integers(0, 2**32 - 1),
    offset=st.integers(0, 2**64 - 1),
    nbytes=st.integers(0, 2**64 - 1),
    words=st.lists(st.integers(0, 2**64 - 1), max_size=40),
    cut=st.integers(-9, 9),
)
def test_every_placed_payload_reads_as_its_layout_says(
    kind: int, dtype: int, rank: int, flags: int, buffer: int, offset: int, nbytes: int, words: list[int], cut: int
) -> None:
    payload = _PLACED.pack(kind, dtype, rank, flags, buffer, offset, nbytes) + b"".join(
        w.to_bytes(8, "little") for w in words
    )
    payload = payload[: len(payload) + cut] if cut < 0 else payload + bytes(cut)
    got, expected = _read(payload), _expected(payload)
    assert got == expected
    if isinstance(got, Descriptor):  # a Descriptor of plain values: its fields read by name
        assert type(got) is Descriptor and type(got.shape) is tuple
        assert (got.buffer, got.offset, got.nbytes) == (buffer, offset, nbytes)


@pytest.mark.parametrize("rank", [0, 1, 2, 15, 16, 17])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("strides", [False, True])
def test_what_an_encoder_writes_reads_back(rank: int, shared: bool, strides: bool) -> None:
    shape = tuple(range(2, rank + 2))
    own = tuple(range(rank, 0, -1)) if strides else None
    for kind in (0, 1):
        for code, dtype in enumerate(DTYPE_NAMES):
            payload = pack_descriptor(kind, code, shape, own, 3, 64, 4096, shared)
            assert unpack_descriptor(EXT_TENSOR, payload) == (KINDS[kind], dtype, shape, own, 3, 64, 4096)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (
            _PLACED.pack(0, 0, 1, 4, 0, 0, 4) + bytes(8),
            "tensor descriptor of 32 bytes, expected 32 for rank 1 and flags 4",
        ),
        (_PLACED.pack(2, 0, 1, 0, 0, 0, 4) + bytes(8), "tensor kind 2 is neither 0 (tensor) nor 1 (ndarray)"),
        (_PLACED.pack(0, 200, 1, 0, 0, 0, 4) + bytes(8), "dtype code 200 is not in the wire dtype table"),
        (
            _PLACED.pack(0, 0, 2, 0, 0, 0, 4) + bytes(8),
            "tensor descriptor of 32 bytes, expected 40 for rank 2 and flags 0",
        ),
        (
            _PLACED.pack(0, 0, 1, 1, 0, 0, 4) + bytes(8),
            "tensor descriptor of 32 bytes, expected 40 for rank 1 and flags 1",
        ),
        (bytes(3), "tensor descriptor of 3 bytes is shorter than its 4-byte head"),
    ],
)
def test_a_payload_the_quick_read_does_not_take_gets_the_full_checks_words(payload: bytes, words: str) -> None:
    with pytest.raises(DecodeError) as info:
        unpack_descriptor(EXT_TENSOR, payload)
    assert info.value.message.startswith(words)
