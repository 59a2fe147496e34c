"""The error locator (``tensorwire.inspection.describe``): any bytes give plain JSON data or a DecodeError.

``describe`` is what ``tensorwire inspect`` prints and how the decoder names the body path of a
bad descriptor. A malformed header is a ``DecodeError`` saying where; a malformed tensor
descriptor is listed, with its body path, by its error; a value of any type is shown as JSON
data; the contents of a bytes value (a handle's capability) are never shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire._wire import pack_descriptor, pack_inline
from tensorwire.builtins import REGISTRY, diffusion, rpc
from tensorwire.cli import main
from tensorwire.dtypes import DTYPE_NAMES
from tensorwire.inspection import describe, tensor_paths
from tests.wire_helpers import damage, edit_descriptor, ext_data, frame_of, head_of

INLINE = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0))  # each tensor in a buffer of its own
SECRET = bytes(range(0xA0, 0xB0))  # 16 bytes, like a capability
_SHOWN = re.compile(rf"{SECRET.hex()}|xa0\W{{0,4}}xa1")  # its hex, or its repr however escaped


def _frames() -> list[Any]:
    return INLINE.encode(diffusion.Output(output=(torch.zeros(2, 3), {"k": torch.ones(2)}), error="e"))


def _header() -> list[Any]:
    return head_of(_frames()[0])  # [tag, fingerprint, data, buffers, body]; two buffers


def _forged(change: Callable[[list[Any]], Any]) -> bytes:
    header = _header()
    change(header)
    return frame_of(header)


def _with_body(body: bytes) -> bytes:
    header = _header()
    header[4] = msgspec.Raw(body)
    return frame_of(header)


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
        (lambda h: h.__setitem__(3, 5), r"`buffers` is not an array - at `\$\.buffers`"),
        (lambda h: h.__setitem__(3, "xy"), r"`buffers` is not an array"),
        (lambda h: h.__setitem__(3, {"a": 1}), r"`buffers` is not an array"),
        (lambda h: h.__setitem__(2, "xy"), r"`data` is not a bin - at `\$\.data`"),
        (lambda h: h.__setitem__(2, [b"x"]), r"`data` is not a bin"),
        (lambda h: h[3].__setitem__(1, 3), r"buffer 1 is not an \[nbytes, handle map\] pair - at `\$\.buffers\[1\]`"),
        (lambda h: h[3][0].__setitem__(1, 5), r"buffer 0 is not an \[nbytes, handle map\] pair"),
        (lambda h: h[3][0].__setitem__(1, [1, 2]), r"buffer 0 is not an \[nbytes, handle map\] pair"),
        (lambda h: h[3][0].pop(), r"buffer 0 is not an \[nbytes, handle map\] pair"),
        (lambda h: h[3][0].append({}), r"buffer 0 is not an \[nbytes, handle map\] pair"),
        (
            lambda h: h[4].__setitem__("output", msgspec.msgpack.Ext(2, msgspec.msgpack.encode(5))),
            r"a tree tuple must hold an array",
        ),
        (
            lambda h: h[4].__setitem__("output", msgspec.msgpack.Ext(2, msgspec.msgpack.encode({"a": 1}))),
            r"a tree tuple must hold an array",
        ),
        (lambda h: h[4].__setitem__("output", msgspec.msgpack.Ext(2, b"\xc1")), r"invalid header"),
        (lambda h: h[4].__setitem__("output", msgspec.msgpack.Ext(2, b"\x01\x02")), r"invalid header"),
    ],
)
def test_malformed_headers_are_decode_errors_saying_where(change: Callable[[list[Any]], Any], error: str) -> None:
    with pytest.raises(tw.DecodeError, match=error):
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
        b"\x80",
        b"\x81\xa4body\x90",
    ],
)
def test_frames_that_are_not_headers(frame: bytes) -> None:
    with pytest.raises(tw.DecodeError, match=r"invalid header|truncated|nesting|invalid msgpack byte"):
        describe(frame)


def test_a_wire_1_header_says_its_wire_version_is_not_supported() -> None:
    frame = msgspec.msgpack.encode({"magic": "tensorwire", "wire": 1, "type": "diffusion.Output", "buffers": []})
    with pytest.raises(tw.DecodeError, match=r"^wire format version 1 is not supported \(this reader: 3\)"):
        describe(frame)


def test_a_capability_and_every_other_bytes_value_in_a_handle_is_shown_by_its_length_only() -> None:
    handle = _slot_handle(capability=SECRET, extra=[SECRET, {"deep": SECRET}], keyed={"k": 1})
    frame = _forged(lambda h: h[3][1].__setitem__(1, handle))
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
    header[3][0][1] = msgspec.Raw(raw)
    info = describe(frame_of(header))
    assert info["buffers"][0]["transport"] == {"$bytes": 16}
    assert info["buffers"][0]["handle"] == {
        "transport": {"$bytes": 16},
        '{"$bytes": 16}': {"$bytes": 16},
        "5": [{"$bytes": 16}],
    }
    _assert_plain(info)


def test_inspect_never_prints_a_capability(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frames = _frames()
    header = head_of(frames[0])
    header[3][1][1] = _slot_handle(capability=SECRET)
    blob = tmp_path / "message.tw"
    blob.write_bytes(tw.join([frame_of(header), *frames[1:]]))
    assert main(["inspect", str(blob)]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["buffers"][1]["handle"]["capability"] == {"$bytes": 16}
    assert not _SHOWN.search(out)


def _body(value: Any) -> bytes:
    return b"\x81\xa6output" + value if isinstance(value, bytes) else msgspec.msgpack.encode({"output": value})


FLOAT32 = DTYPE_NAMES.index("float32")
REF = msgspec.msgpack.Ext(1, pack_descriptor(0, FLOAT32, [2, 3], None, 0, 0, 24))  # a tensor in buffer 0
REF1 = msgspec.msgpack.Ext(1, pack_descriptor(0, FLOAT32, [2], None, 1, 0, 8))  # in buffer 1
EMBEDDED = msgspec.msgpack.Ext(3, pack_inline(1, FLOAT32, [2], 0, 8))  # an ndarray inside frame 0
BAD = msgspec.msgpack.Ext(1, b"\x00\x00\x01\x00")  # rank 1, and no room for its fields
REF_BYTES = msgspec.msgpack.encode(REF)
REF1_BYTES = msgspec.msgpack.encode(REF1)


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        ({"a b": REF, "k": [1, REF1]}, ['$.output["a b"]', "$.output.k[1]"]),
        ({"é": REF, "0x": REF1}, ["$.output.é", '$.output["0x"]']),
        (b"\x82\x07" + REF_BYTES + b"\xc0\x91" + REF1_BYTES, ["$.output[7]", "$.output[null][0]"]),
        (b"\x81\x92\x01\x02" + REF_BYTES, ["$.output[[1, 2]]"]),  # an array as a key
        (msgspec.msgpack.Ext(2, msgspec.msgpack.encode([1, REF, (REF1,)])), ["$.output[1]", "$.output[2][0]"]),
        ([REF, REF, {"x": REF}], ["$.output[0]", "$.output[1]", "$.output[2].x"]),  # each occurrence its own
        ([BAD, REF1], ["$.output[0]", "$.output[1]"]),  # a malformed descriptor has its path too
        ({"e": EMBEDDED, "t": [REF]}, ["$.output.e", "$.output.t[0]"]),
        ({"a" * 1000: REF}, ['$.output["' + "a" * 61 + '..."]']),  # a long key is cut short
    ],
)
def test_tensor_paths(body: Any, paths: list[str | None]) -> None:
    info = describe(_with_body(_body(body)))
    assert [t["path"] for t in info["tensors"]] == paths
    assert [t["index"] for t in info["tensors"]] == list(range(len(paths)))  # body order
    _assert_plain(info)


def test_values_that_are_not_json_are_shown_as_json() -> None:
    items = [float("nan"), msgspec.msgpack.Ext(9, b"zz"), b"raw"]
    body = b"\x81\xa6output\x94" + b"".join(map(msgspec.msgpack.encode, items)) + b"\x81\x92\x01\x02\x01"
    info = describe(_with_body(body))  # the last item: a map with an array as its key
    out = info["body"]["output"]
    assert out[0] == {"$float": "nan"} and out[1] == {"$ext": 9} and out[2] == {"$bytes": 3}
    assert out[3] == {"[1, 2]": 1}
    _assert_plain(info)
    stamp = describe(_with_body(msgspec.msgpack.encode({"t": msgspec.msgpack.Ext(-1, b"\x00" * 4)})))
    assert stamp["body"]["t"] == {"$timestamp": "1970-01-01T00:00:00+00:00"}


def test_descriptor_fields_at_the_ends_of_their_ranges_are_shown_as_they_are() -> None:
    huge = pack_descriptor(
        1, len(DTYPE_NAMES) - 1, [2**64 - 1, 0], [-(2**63), 2**63 - 1], 2**32 - 1, 2**64 - 1, 2**64 - 1
    )
    info = describe(_forged(lambda h: h[4].__setitem__("output", msgspec.msgpack.Ext(1, huge))))
    (tensor,) = info["tensors"]
    assert tensor["kind"] == "ndarray" and tensor["dtype"] == DTYPE_NAMES[-1]
    assert tensor["shape"] == [2**64 - 1, 0] and tensor["strides"] == [-(2**63), 2**63 - 1]
    assert (tensor["buffer"], tensor["offset"], tensor["nbytes"]) == (2**32 - 1, 2**64 - 1, 2**64 - 1)
    assert info["body"]["output"] == {"$tensor": 0}
    _assert_plain(info)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"", r"tensor descriptor of 0 bytes is shorter than its 4-byte head"),
        (b"\x02\x00\x00\x00", r"tensor kind 2 is neither 0 \(tensor\) nor 1 \(ndarray\)"),
        (b"\x00\xff\x00\x00", r"dtype code 255 is not in the wire dtype table"),
        (ext_data(BAD), r"tensor descriptor of 4 bytes, expected 32 for rank 1 and flags 0"),
        (ext_data(REF) + b"\x00", r"tensor descriptor of 41 bytes, expected 40"),
        (ext_data(REF)[:3] + b"\x04" + ext_data(REF)[4:], r"expected \d+ for rank 2 and flags 4"),  # an unknown flag
    ],
)
def test_a_malformed_descriptor_is_shown_by_its_error(payload: bytes, error: str) -> None:
    body = {"x": msgspec.msgpack.Ext(1, payload), "y": REF1}
    info = describe(_with_body(_body(body)))
    bad, good = info["tensors"]
    assert bad["index"] == 0 and bad["path"] == "$.output.x" and re.search(error, bad["error"]), bad
    assert good["path"] == "$.output.y" and good["buffer"] == 1 and "error" not in good
    _assert_plain(info)


@pytest.mark.parametrize(
    ("change", "error", "suffix"),
    [
        pytest.param(None, r"dtype code 255 is not in the wire dtype table.*", r"(\.dtype)?", id="dtype-code"),
        pytest.param(
            {"kind": 1, "dtype": DTYPE_NAMES.index("bfloat16")},
            r"numpy has no dtype 'bfloat16'",
            r"\.dtype",
            id="dtype",
        ),
        pytest.param({"nbytes": 9}, r"9 != prod\(shape\) \* itemsize = 8", r"\.nbytes", id="nbytes"),
        pytest.param({"offset": 2}, r"2 is not a multiple of the itemsize 4", r"\.offset", id="offset"),
        pytest.param({"buffer": 3}, r"3 names no buffer \(the message has 1\)", r"\.buffer", id="buffer"),
    ],
)
def test_a_decode_error_names_the_body_path_the_locator_finds(
    change: dict[str, Any] | None, error: str, suffix: str
) -> None:
    message = rpc.Request(method="m", kwargs={"a b": torch.ones(2)})
    frames = INLINE.encode(message)
    header = head_of(frames[0])
    ext = header[4]["kwargs"]["a b"]
    if change is None:  # a code past the table: the payload itself is malformed
        header[4]["kwargs"]["a b"] = msgspec.msgpack.Ext(1, ext_data(ext)[:1] + b"\xff" + ext_data(ext)[2:])
    else:
        header[4]["kwargs"]["a b"] = edit_descriptor(ext, **change)
    assert describe(frame_of(header))["tensors"][0]["path"] == '$.kwargs["a b"]'
    with pytest.raises(tw.DecodeError, match=rf"^rpc\.Request v1: {error} - at `\$\.kwargs\[\"a b\"\]{suffix}`$"):
        tw.Decoder(REGISTRY).decode([frame_of(header), *frames[1:]])


def test_a_map_that_repeats_a_key_holding_a_tensor_names_no_path_it_cannot_tell() -> None:
    """The body keeps a repeated key's last value, but the decode reads (and numbers) the earlier
    tensors too: a path taken from the body would name another tensor than the one that failed."""
    message = rpc.Request(method="m", kwargs={"k1": torch.zeros(2), "k2": torch.zeros(64), "k3": torch.zeros(2)})
    frames = INLINE.encode(message)
    head = bytes(frames[0])
    assert head.count(b"\xa2k2") == 1
    repeated = head.replace(b"\xa2k2", b"\xa2k1")  # k1: the 2 elements, then the 64 it keeps; k3
    assert tensor_paths(head, REGISTRY) == ["$.kwargs.k1", "$.kwargs.k2", "$.kwargs.k3"]
    assert tensor_paths(repeated, REGISTRY) == [None, None]
    small = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(max_tensor_bytes=100)))
    with pytest.raises(
        tw.DecodeError, match=r"larger than the limit of 100 bytes - at `\$\.<tensor 1>\.shape\[0\]`$"
    ) as info:
        small.decode([repeated, *frames[1:]])
    assert info.value.path == "$.<tensor 1>.shape[0]"  # (it was $.kwargs.k3's)
    with pytest.raises(tw.DecodeError) as info:
        small.decode(frames)
    assert info.value.path == "$.kwargs.k2.shape[0]"  # keys that do not repeat: each its own path


# -- any bytes ------------------------------------------------------------------------------------


def _describes_or_rejects(frame: bytes) -> None:
    try:
        info = describe(frame)
    except tw.DecodeError as exc:
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
    header[3][1][1] = _slot_handle(capability=SECRET)
    return [
        frame_of(header),
        bytes(INLINE.encode(rpc.Request(method="m", args=[1, (2.5, "x")], kwargs={"t": (None, b"b")}))[0]),
        bytes(INLINE.encode(diffusion.Output(output=[torch.zeros(0), (torch.ones(3), {"a b": 1})]))[0]),
        bytes(tw.Encoder().encode(diffusion.Output(output=[np.ones(3), (torch.ones(2, 1).t(), {"a b": 1})]))[0]),
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
    | st.just(EMBEDDED)
    | st.builds(msgspec.msgpack.Ext, st.sampled_from([1, 3]), st.binary(max_size=48))
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4) | st.integers(-5, 5), inner, max_size=4)
    ),
    max_leaves=10,
)
_TARGETS: list[Callable[[list[Any], Any], Any]] = [
    lambda h, v: h.__setitem__(0, v),
    lambda h, v: h.__setitem__(1, v),
    lambda h, v: h.__setitem__(2, v),
    lambda h, v: h[3].__setitem__(0, v),
    lambda h, v: h[3][1].__setitem__(1, v),
    lambda h, v: h[3][1][1].__setitem__("capability", v),
    lambda h, v: h[3][0].__setitem__(0, v),
    lambda h, v: h[3][0].append(v),
    lambda h, v: h.__setitem__(3, v),
    lambda h, v: h[4].__setitem__("output", v),
    lambda h, v: h[4].__setitem__("output", [REF, {"k": v}, REF1]),
    lambda h, v: h.append(v),
    lambda h, v: h.pop(),
]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(_TARGETS), value=_VALUES)
def test_any_value_anywhere_in_a_header(target: Callable[[list[Any], Any], Any], value: Any) -> None:
    header = head_of(VALID[0])
    target(header, value)
    _describes_or_rejects(frame_of(header))


def test_the_fuzzers_structural_cases() -> None:
    """Frame 0 of the decoder fuzzer's cases (each family's structural mutations, byte damage on top
    where a case has it; handles left as their placeholders): described or a DecodeError, and its
    tensors' paths told or a DecodeError."""
    from tools.fuzz.cases import generate
    from tools.fuzz.damage import apply
    from tools.fuzz.seeds import PLAIN

    registry = tw.Registry([*REGISTRY, *PLAIN])
    for index in range(400):
        case = generate(3, index)
        if not case.frames:
            continue
        frame = case.frames[0]
        if case.damage is not None and case.damage.target == 0:
            frame = apply(frame, case.damage)
        _describes_or_rejects(frame)
        try:
            paths = tensor_paths(frame, registry)
        except tw.DecodeError:
            continue
        assert all(path is None or path.startswith("$") for path in paths), case.label
