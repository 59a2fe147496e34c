"""Frame 0's layout: where its data lies (``data_span``), for every encoding of the items before it."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorwire._wire import data_span

FINGERPRINT = "ab" * 32


def _str(text: str, width: int) -> bytes:
    """``text`` as a msgpack str with a header of ``width`` length bytes (0: a fixstr)."""
    raw = text.encode()
    head = {0: bytes([0xA0 | len(raw)]), 1: b"\xd9", 2: b"\xda", 4: b"\xdb"}[width]
    return head + (len(raw).to_bytes(width, "big") if width else b"") + raw


def _bin(data: bytes, width: int) -> bytes:
    head = {1: b"\xc4", 2: b"\xc5", 4: b"\xc6"}[width]
    return head + len(data).to_bytes(width, "big") + data


@given(
    tag=st.text(max_size=300),
    fingerprint=st.text(max_size=80),
    data=st.binary(max_size=70_000),
    rest=st.lists(st.integers(-(2**63), 2**64 - 1), max_size=3),
)
def test_the_span_is_where_msgspec_reads_the_data(tag: str, fingerprint: str, data: bytes, rest: list[int]) -> None:
    frame = msgspec.msgpack.encode([tag, fingerprint, data, rest, {}])
    span = data_span(frame)
    assert span is not None and frame[span[0] : span[1]] == data
    assert data_span(memoryview(frame)) == span


@pytest.mark.parametrize("tag_width", [0, 1, 2, 4])
@pytest.mark.parametrize("fingerprint", [FINGERPRINT, "short", ""])
@pytest.mark.parametrize("bin_width", [1, 2, 4])
def test_every_header_width_is_read(tag_width: int, fingerprint: str, bin_width: int) -> None:
    """Non-canonical headers (a str32 tag, a bin32 of three bytes) are valid msgpack: found too."""
    tag = "tensorwire:3:a.B:1"
    data = b"\x91\x92\x93"
    fp_width = 0 if len(fingerprint) < 32 else 1
    frame = b"\x95" + _str(tag, tag_width) + _str(fingerprint, fp_width) + _bin(data, bin_width) + b"\x90\x80"
    assert msgspec.msgpack.decode(frame)[2] == data
    span = data_span(frame)
    assert span is not None and frame[span[0] : span[1]] == data


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x95",
        b"\x94" + _str("t", 0) + _str(FINGERPRINT, 1) + _bin(b"", 1) + b"\x90",  # four items
        b"\x95" + _str("t", 0) + _str(FINGERPRINT, 1) + b"\x90\x90\x80",  # no data: an array in its place
        b"\x95\x01" + _str(FINGERPRINT, 1) + _bin(b"", 1) + b"\x90\x80",  # a tag that is not a string
        b"\x95" + _str("t", 0) + _str(FINGERPRINT, 1) + b"\xc4\x09" + b"\x90\x80",  # data past the end
        b"\x95" + _str("t", 0) + _str(FINGERPRINT, 1) + _bin(b"xy", 1),  # nothing after the data
        b"\x95" + _str("t", 0) + _str(FINGERPRINT, 1)[:40],  # cut inside the fingerprint
        b"\x95\xdb\xff\xff\xff\xff",  # a tag longer than the frame
        b"\x95" + _str("t", 0) + _str(FINGERPRINT, 1) + b"\xc6\xff\xff",  # cut inside the data's length
    ],
)
def test_frames_that_do_not_open_as_frame_0_have_no_span(frame: bytes) -> None:
    assert data_span(frame) is None
