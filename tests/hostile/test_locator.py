"""The error locator (``codec.inspect.describe``): any bytes give plain JSON data or a DecodeError.

``describe`` is what ``tensorwire inspect`` prints and how the decoder names the body path of a
bad descriptor. A malformed header is a ``DecodeError`` saying where; a value of any type is
shown as JSON data; the contents of a bytes value (a handle's capability) are never shown.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_helpers import damage

import codec
from codec.cli import main
from codec.generated import REGISTRY, diffusion, rpc
from codec.inspect import describe

INLINE = codec.Encoder()
SECRET = bytes(range(0xA0, 0xB0))  # 16 bytes, like a capability
_SHOWN = re.compile(rf"{SECRET.hex()}|xa0\W{{0,4}}xa1")  # its hex, or its repr however escaped


def _frames() -> list[Any]:
    return INLINE.encode(diffusion.Output(output=(torch.zeros(2, 3), {"k": torch.ones(2)}), error="e"))


def _header() -> dict[str, Any]:
    return msgspec.msgpack.decode(_frames()[0])  # type: ignore[no-any-return]


def _forged(change: Callable[[dict[str, Any]], Any]) -> bytes:
    header = _header()
    change(header)
    return msgspec.msgpack.encode(header)


def _with_body(body: bytes) -> bytes:
    header = _header()
    header["body"] = msgspec.Raw(body)
    return msgspec.msgpack.encode(header)


def _slot_handle(**extra: Any) -> dict[str, Any]:
    return {"transport": "shm-slot", "name": "tw-1-" + "a" * 32 + "-1", "offset": 0, "generation": 1, **extra}


def _assert_plain(info: Any) -> None:
    """``info`` is JSON data (str-keyed dicts, lists, str, int, float, bool, None) showing no secret."""
    stack = [info]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            assert all(type(k) is str for k in value), value
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        else:
            assert value is None or type(value) in (str, int, float, bool), value
    assert not _SHOWN.search(json.dumps(info))


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda h: h.__setitem__("tensors", [5]), r"tensor descriptor 0 is not an array - at `\$\.tensors\[0\]`"),
        (lambda h: h["tensors"].append({"kind": "tensor"}), r"tensor descriptor 2 is not an array"),
        (lambda h: h.__setitem__("tensors", 7), r"`tensors` is not an array - at `\$\.tensors`"),
        (lambda h: h.__setitem__("tensors", "abcdefg"), r"`tensors` is not an array"),
        (lambda h: h.__setitem__("tensors", None), r"`tensors` is not an array"),
        (lambda h: h.__setitem__("buffers", 5), r"`buffers` is not an array - at `\$\.buffers`"),
        (lambda h: h.__setitem__("buffers", "xy"), r"`buffers` is not an array"),
        (lambda h: h.__setitem__("buffers", {"a": 1}), r"`buffers` is not an array"),
        (lambda h: h["buffers"].__setitem__(1, 3), r"buffer 1 is not a map with a handle map - at `\$\.buffers\[1\]`"),
        (lambda h: h["buffers"][0].__setitem__("handle", 5), r"buffer 0 is not a map with a handle map"),
        (lambda h: h["buffers"][0].__setitem__("handle", [1, 2]), r"buffer 0 is not a map with a handle map"),
        (lambda h: h["buffers"][0].pop("handle"), r"buffer 0 is not a map with a handle map"),
        (
            lambda h: h["body"].__setitem__("output", msgspec.msgpack.Ext(2, msgspec.msgpack.encode(5))),
            r"a tree tuple must hold an array",
        ),
        (
            lambda h: h["body"].__setitem__("output", msgspec.msgpack.Ext(2, msgspec.msgpack.encode({"a": 1}))),
            r"a tree tuple must hold an array",
        ),
        (lambda h: h["body"].__setitem__("output", msgspec.msgpack.Ext(2, b"\xc1")), r"invalid header"),
        (lambda h: h["body"].__setitem__("output", msgspec.msgpack.Ext(2, b"\x01\x02")), r"invalid header"),
    ],
)
def test_malformed_headers_are_decode_errors_saying_where(change: Callable[[dict[str, Any]], Any], error: str) -> None:
    with pytest.raises(codec.DecodeError, match=error):
        describe(_forged(change))


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\xc1",
        b"\x01",
        b"\x92\x01",
        b"\x81\xa4body\xd4\x05",
        b"\x91" * 100,
        b"\xdd\xff\xff\xff\xff",
    ],
)
def test_frames_that_are_not_headers(frame: bytes) -> None:
    with pytest.raises(codec.DecodeError, match=r"invalid header|truncated|nesting|invalid msgpack byte"):
        describe(frame)


def test_a_capability_and_every_other_bytes_value_in_a_handle_is_shown_by_its_length_only() -> None:
    handle = _slot_handle(capability=SECRET, extra=[SECRET, {"deep": SECRET}], keyed={"k": 1})
    frame = _forged(lambda h: h["buffers"][1].__setitem__("handle", handle))
    info = describe(frame)
    shown = info["buffers"][1]["handle"]
    assert shown["capability"] == {"$bytes": 16}
    assert shown["extra"] == [{"$bytes": 16}, {"deep": {"$bytes": 16}}]
    assert shown["name"] == handle["name"] and shown["generation"] == 1
    assert info["buffers"][1]["transport"] == "shm-slot"
    _assert_plain(info)


def test_a_bytes_transport_name_or_key_in_a_handle_is_not_shown_either() -> None:
    encode = msgspec.msgpack.encode
    raw = (
        b"\x83" + encode("transport") + encode(SECRET) + encode(SECRET) + encode(SECRET) + encode(5) + encode([SECRET])
    )
    header = _header()
    header["buffers"][0]["handle"] = msgspec.Raw(raw)
    info = describe(msgspec.msgpack.encode(header))
    assert info["buffers"][0]["transport"] == {"$bytes": 16}
    assert info["buffers"][0]["handle"] == {
        "transport": {"$bytes": 16},
        '{"$bytes": 16}': {"$bytes": 16},
        "5": [{"$bytes": 16}],
    }
    _assert_plain(info)


def test_inspect_never_prints_a_capability(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frames = _frames()
    header = msgspec.msgpack.decode(frames[0])
    header["buffers"][1]["handle"] = _slot_handle(capability=SECRET)
    blob = tmp_path / "message.tw"
    blob.write_bytes(codec.join([msgspec.msgpack.encode(header), *frames[1:]]))
    assert main(["inspect", str(blob)]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["buffers"][1]["handle"]["capability"] == {"$bytes": 16}
    assert not _SHOWN.search(out)


def _body(value: Any) -> bytes:
    return b"\x81\xa6output" + value if isinstance(value, bytes) else msgspec.msgpack.encode({"output": value})


REF = msgspec.msgpack.Ext(1, b"\x00\x00\x00\x00")
REF1 = msgspec.msgpack.Ext(1, b"\x01\x00\x00\x00")
REF_BYTES = b"\xd6\x01\x00\x00\x00\x00"


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        ({"a b": REF, "k": [1, REF1]}, ['$.output["a b"]', "$.output.k[1]"]),
        ({"é": REF, "0x": REF1}, ["$.output.é", '$.output["0x"]']),
        (
            b"\x82\x07" + REF_BYTES + b"\xc0\x91" + REF_BYTES[:-4] + b"\x01\x00\x00\x00",
            ["$.output[7]", "$.output[null][0]"],
        ),
        (b"\x81\x92\x01\x02" + REF_BYTES, ["$.output[[1, 2]]", None]),  # an array as a key
        (msgspec.msgpack.Ext(2, msgspec.msgpack.encode([1, REF, (REF1,)])), ["$.output[1]", "$.output[2][0]"]),
        ([REF, REF, {"x": REF}], ["$.output[0]", None]),  # the first reference names the path
        ([msgspec.msgpack.Ext(1, b"\x09\x00\x00\x00"), REF1], [None, "$.output[1]"]),  # index 9: no descriptor
        ({"a" * 1000: REF}, ['$.output["' + "a" * 61 + '..."]', None]),  # a long key is cut short
    ],
)
def test_tensor_paths(body: Any, paths: list[str | None]) -> None:
    info = describe(_with_body(_body(body)))
    assert [t["path"] for t in info["tensors"]] == paths
    _assert_plain(info)


def test_values_that_are_not_json_are_shown_as_json() -> None:
    items = [float("nan"), msgspec.msgpack.Ext(9, b"zz"), b"raw"]
    body = b"\x81\xa6output\x94" + b"".join(map(msgspec.msgpack.encode, items)) + b"\x81\x92\x01\x02\x01"
    info = describe(_with_body(body))  # the last item: a map with an array as its key
    out = info["body"]["output"]
    assert math.isnan(out[0]) and out[1] == {"$ext": 9} and out[2] == {"$bytes": 3}
    assert out[3] == {"[1, 2]": 1}
    _assert_plain(info)
    stamp = describe(_with_body(msgspec.msgpack.encode({"t": msgspec.msgpack.Ext(-1, b"\x00" * 4)})))
    assert stamp["body"]["t"] == {"$timestamp": "1970-01-01T00:00:00+00:00"}


def test_descriptor_fields_of_any_type_are_shown_as_they_are() -> None:
    info = describe(_forged(lambda h: h["tensors"][0].__setitem__(2, "abc")))
    assert info["tensors"][0]["shape"] == "abc"
    info = describe(_forged(lambda h: h["tensors"][0].__setitem__(3, {"x": b"123"})))
    assert info["tensors"][0]["strides"] == {"x": {"$bytes": 3}}
    info = describe(_forged(lambda h: h["tensors"].__setitem__(0, ["tensor"])))
    assert info["tensors"][0]["kind"] == "tensor" and info["tensors"][0]["nbytes"] is None
    _assert_plain(info)


def test_a_decode_error_names_the_body_path_the_locator_finds() -> None:
    message = rpc.Request(method="m", kwargs={"a b": torch.ones(2)})
    header = msgspec.msgpack.decode(INLINE.encode(message)[0])
    header["tensors"][0][1] = "object"
    frames = [msgspec.msgpack.encode(header), *INLINE.encode(message)[1:]]
    with pytest.raises(codec.DecodeError, match=r"not in the wire dtype table - at `\$\.kwargs\[\"a b\"\]\.dtype`$"):
        codec.Decoder(REGISTRY).decode(frames)


# -- any bytes ------------------------------------------------------------------------------------


def _describes_or_rejects(frame: bytes) -> None:
    try:
        info = describe(frame)
    except codec.DecodeError as exc:
        assert str(exc)
        return
    assert isinstance(info, dict)
    _assert_plain(info)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=st.binary(max_size=300))
def test_random_bytes(frame: bytes) -> None:
    _describes_or_rejects(frame)


_EDITS = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]), st.integers(0, 2**16), st.integers(0, 255)),
    min_size=1,
    max_size=6,
)


def _valid_frames() -> list[bytes]:
    header = _header()
    header["buffers"][1]["handle"] = _slot_handle(capability=SECRET)
    return [
        msgspec.msgpack.encode(header),
        bytes(INLINE.encode(rpc.Request(method="m", args=[1, (2.5, "x")], kwargs={"t": (None, b"b")}))[0]),
        bytes(INLINE.encode(diffusion.Output(output=[torch.zeros(0), (torch.ones(3), {"a b": 1})]))[0]),
    ]


VALID = _valid_frames()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(VALID) - 1), edits=_EDITS, cut=st.none() | st.integers(0, 400))
def test_damaged_valid_frames(which: int, edits: list[tuple[str, int, int]], cut: int | None) -> None:
    _describes_or_rejects(damage(VALID[which], edits)[:cut])


_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=6)
    | st.builds(msgspec.msgpack.Ext, st.integers(-128, 127), st.binary(max_size=6))
    | st.just(REF)
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4) | st.integers(-5, 5), inner, max_size=4)
    ),
    max_leaves=10,
)
_TARGETS: list[Callable[[dict[Any, Any], Any], Any]] = [
    lambda h, v: h.__setitem__("tensors", v),
    lambda h, v: h["tensors"].__setitem__(0, v),
    lambda h, v: h["tensors"][1].__setitem__(2, v),
    lambda h, v: h["tensors"][0].append(v),
    lambda h, v: h.__setitem__("buffers", v),
    lambda h, v: h["buffers"].__setitem__(0, v),
    lambda h, v: h["buffers"][1].__setitem__("handle", v),
    lambda h, v: h["buffers"][1]["handle"].__setitem__("capability", v),
    lambda h, v: h["buffers"][0].__setitem__("nbytes", v),
    lambda h, v: h.__setitem__("body", v),
    lambda h, v: h["body"].__setitem__("output", v),
    lambda h, v: h.__setitem__("type", v),
    lambda h, v: h.__setitem__(7, v),
]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(_TARGETS), value=_VALUES)
def test_any_value_anywhere_in_a_header(target: Callable[[dict[Any, Any], Any], Any], value: Any) -> None:
    header = msgspec.msgpack.decode(VALID[0])
    target(header, value)
    _describes_or_rejects(msgspec.msgpack.encode(header))
