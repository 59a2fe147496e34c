"""Errors are data: their parts are attributes, and their text is rendered from them.

Schema errors carry file, line, col and JSON pointer (several problems as a tuple); decode and
encode errors the body path (a map entry by its key), type id and version; validation errors
the struct and the path in it; compat findings typed locations.
"""

from __future__ import annotations

import copy
import json
import pickle
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion, media, rpc
from tensorwire.compat import compare, render
from tensorwire.compat._diff import Finding
from tensorwire.errors import Location, SchemaProblem
from tensorwire.schema import load_dir
from tensorwire.schema._source import read_source
from tests.conftest import CLIP, minimal, write_schemas
from tests.wire_helpers import frame_of, head_of

ENCODER = tw.Encoder()
DECODER = tw.Decoder(REGISTRY)


# -- schema errors ------------------------------------------------------------------------------


def _schema_error(schema_dir: Path, files: dict[str, Any]) -> tw.SchemaError:
    with pytest.raises(tw.SchemaError) as info:
        load_dir(write_schemas(schema_dir, files))
    return info.value


def test_a_meta_schema_error_has_file_line_col_and_pointer(schema_dir: Path) -> None:
    text = '{\n  "$id": "audio.Clip",\n  "x-version": 1,\n  "type": "object",\n  "allOf": [],\n  "properties": {}\n}\n'
    exc = _schema_error(schema_dir, {"audio/Clip.v1.json": text})
    file = str(schema_dir / "audio/Clip.v1.json")
    assert (exc.file, exc.line, exc.col, exc.pointer) == (file, 5, 3, "/allOf")
    assert exc.message.startswith("keyword 'allOf' is not in the tensorwire subset")
    assert exc.location == Location(file, 5, 3)
    assert exc.errors == (SchemaProblem(exc.message, file, 5, 3, "/allOf"),)
    assert str(exc) == f"{file}:5:3: /allOf: {exc.message}"


def test_a_builder_error_has_its_location(schema_dir: Path) -> None:
    doc = minimal("audio.Clip", value={"type": "integer", "minimum": 5, "maximum": 1})
    exc = _schema_error(schema_dir, {"audio/Clip.v1.json": doc})
    assert exc.file == str(schema_dir / "audio/Clip.v1.json")
    assert exc.pointer == "/properties/value"
    assert (exc.line, exc.col) == (6, 14)  # json.dumps(indent=2): the value of "value"
    assert exc.message.startswith("no value fits")
    assert str(exc) == f"{exc.file}:6:14: /properties/value: {exc.message}"


def test_a_root_pointer_is_empty_and_shown_as_slash(schema_dir: Path) -> None:
    exc = _schema_error(schema_dir, {"audio/Clip.v1.json": "[1]"})
    assert exc.pointer == "" and (exc.line, exc.col) == (1, 1)
    assert str(exc) == f"{exc.file}:1:1: /: a schema file holds one JSON object"


def test_invalid_json_has_line_and_col_but_no_pointer(schema_dir: Path) -> None:
    # (a bare word, not a trailing comma: Python 3.13's json words and places that one its own way)
    exc = _schema_error(schema_dir, {"audio/Clip.v1.json": '{"$id": "audio.Clip",\n  "x-version": 1,\n  x}'})
    assert (exc.line, exc.col, exc.pointer) == (3, 3, None)
    assert exc.file == str(schema_dir / "audio/Clip.v1.json")
    assert exc.message == "invalid JSON: Expecting property name enclosed in double quotes"
    assert str(exc) == f"{exc.file}:3:3: {exc.message}"


def test_several_meta_schema_problems_are_a_tuple_in_file_order(schema_dir: Path) -> None:
    doc = copy.deepcopy(CLIP)
    for i in range(7):
        doc["properties"][f"f{i}"] = {"type": "integer", f"x-bad{i}": True}
    exc = _schema_error(schema_dir, {"audio/Clip.v1.json": doc})
    assert len(exc.errors) == 7
    assert [p.pointer for p in exc.errors] == [f"/properties/f{i}/x-bad{i}" for i in range(7)]
    assert all(p.file == exc.file and p.line is not None and p.col is not None for p in exc.errors)
    assert [p.line for p in exc.errors] == sorted(p.line for p in exc.errors if p.line is not None)
    first = exc.errors[0]
    assert (exc.message, exc.line, exc.col, exc.pointer) == (first.message, first.line, first.col, first.pointer)
    assert str(exc).splitlines() == [*(str(p) for p in exc.errors[:5]), "... and 2 more"]


def test_errors_without_a_location(tmp_path: Path, schema_dir: Path) -> None:
    with pytest.raises(tw.SchemaError) as info:
        load_dir(tmp_path / "missing")
    exc = info.value
    assert (exc.file, exc.line, exc.col, exc.pointer) == (None, None, None, None)
    assert exc.message == str(exc) == f"{tmp_path / 'missing'}: not a schema directory"
    assert exc.location is None
    named = _schema_error(schema_dir, {"audio/clip.json": CLIP})  # a file, but no place in it
    assert named.file == str(schema_dir / "audio/clip.json") and named.line is None and named.pointer is None
    assert str(named) == f"{named.file}: {named.message}"


def test_a_schema_error_is_still_made_from_text_and_keeps_its_fields_through_pickle() -> None:
    plain = tw.SchemaError("no schemas here")
    assert str(plain) == "no schemas here" and plain.file is None and len(plain.errors) == 1
    located = tw.SchemaError("bad", file="a.json", line=2, col=3, pointer="/x")
    copied = pickle.loads(pickle.dumps(located))
    assert (copied.file, copied.line, copied.col, copied.pointer, copied.message) == ("a.json", 2, 3, "/x", "bad")
    assert str(copied) == str(located) == "a.json:2:3: /x: bad"


def test_source_positions_are_numbers(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"a": {"b": [1, 2]}}\n', encoding="utf-8")
    source = read_source(path, "x.json")
    assert source.position("/a/b/1") == (1, 17)
    assert source.position("/a/b", key=True) == (1, 8)
    assert source.location("/a") == Location("x.json", 1, 7)
    assert source.where("/a") == "x.json:1:7"


# -- decode errors ------------------------------------------------------------------------------


def _decode_error(message: Any, change: Any, decoder: tw.Decoder = DECODER) -> tw.DecodeError:
    frames = ENCODER.encode(message)
    head = head_of(frames[0])
    change(head)
    with pytest.raises(tw.DecodeError) as info:
        decoder.decode([frame_of(head), *frames[1:]])
    return info.value


def _batch() -> Any:
    return diffusion.RunnerBatch(
        runner_outputs=[
            diffusion.RunnerOutput(request_id="a"),
            diffusion.RunnerOutput(request_id="b", result=diffusion.Output(stage_durations={"x": 1.0})),
        ]
    )


def _video() -> Any:
    return media.Video(
        tensor=torch.zeros(1, 3, 2, 4, 4),
        layout=media.VideoTensorLayout.BCTHW,
        encoding=media.VideoTensorEncoding.NORMALIZED_FLOAT,
        value_range=media.VideoValueRange.ZERO_TO_ONE,
    )


def test_a_wrong_type_in_a_nested_field() -> None:
    exc = _decode_error(_batch(), lambda h: h[4]["runner_outputs"][0].__setitem__("step_index", "x"))
    assert (exc.path, exc.type_id, exc.version) == ("$.runner_outputs[0].step_index", "diffusion.RunnerBatch", 1)
    assert exc.message == "Expected `int | null`, got `str`"
    assert str(exc) == f"diffusion.RunnerBatch v1: {exc.message} - at `$.runner_outputs[0].step_index`"


@pytest.mark.parametrize(
    ("key", "segment"),
    [("ok", ".ok"), ("a key", '["a key"]'), ("k" * 100, '["' + "k" * 61 + '"...]')],
)
def test_a_map_value_is_named_by_its_key(key: str, segment: str) -> None:
    exc = _decode_error(_batch(), lambda h: h[4]["runner_outputs"][1]["result"]["stage_durations"].update({key: "s"}))
    assert exc.path == f"$.runner_outputs[1].result.stage_durations{segment}"
    assert exc.message == "Expected `float`, got `str`" and exc.type_id == "diffusion.RunnerBatch"


def test_a_bad_map_key_is_named_at_its_entry() -> None:
    exc = _decode_error(
        diffusion.Output(stage_durations={"a": 1.0}), lambda h: h[4]["stage_durations"].update({7: 1.0})
    )
    assert exc.path == "$.stage_durations[7]"
    assert exc.message == "invalid map key: Expected `str`, got `int`"
    assert (exc.type_id, exc.version) == ("diffusion.Output", 1)


def test_a_bad_enum_member() -> None:
    exc = _decode_error(_video(), lambda h: h[4].__setitem__("layout", "sideways"))
    assert (exc.path, exc.type_id, exc.version) == ("$.layout", "media.Video", 1)
    assert exc.message == "Invalid enum value 'sideways'"


def test_a_hostile_header_names_its_place_but_no_type() -> None:
    exc = _decode_error(diffusion.Output(), lambda h: h.__setitem__(0, "pickle:2:evil.Type:1"))
    assert (exc.path, exc.type_id, exc.version) == ("$[0]", None, None)
    assert exc.message == "not a tensorwire message: tag 'pickle:2:evil.Type:1'"
    with pytest.raises(tw.DecodeError) as info:
        DECODER.decode([b"\x01"])
    assert info.value.message.startswith("invalid header: ") and info.value.type_id is None


def test_a_bad_tensor_descriptor_has_its_tensor_path() -> None:
    exc = _decode_error(
        diffusion.Output(output=[torch.zeros(2)]),
        lambda h: h[4].__setitem__("output", [msgspec.msgpack.Ext(3, b"\x00\xc8\x01\x00")]),
    )
    assert exc.path == "$.output[0]" and exc.type_id == "diffusion.Output" and exc.version == 1
    assert exc.message.startswith("dtype code 200 is not in the wire dtype table")


def _newer(head: list[Any], bad: Any = None) -> None:
    """The body of a ``RunnerOutput`` with fields of a newer writer ahead of the known ones, in it
    and in its result, each holding a tensor (the decode skips their values unread); ``bad``, if
    given, stands for the result's ``output``."""
    body = head[4]
    result = body.pop("result")
    latents = result["trajectory_latents"]
    if bad is not None:
        result["output"] = bad
    head[4] = {"added": [latents], **body, "result": {"added": latents, **result}}


def test_a_bad_tensor_behind_fields_the_reader_does_not_know_has_its_own_path() -> None:
    result = diffusion.Output(output=torch.zeros(2), trajectory_latents=torch.zeros(3))
    exc = _decode_error(
        diffusion.RunnerOutput(request_id="a", result=result),
        lambda h: _newer(h, msgspec.msgpack.Ext(3, b"\x00\xc8\x01\x00")),
    )
    assert (exc.path, exc.type_id) == ("$.result.output", "diffusion.RunnerOutput")
    assert exc.message.startswith("dtype code 200 is not in the wire dtype table")


def test_a_decode_error_keeps_its_fields_through_pickle() -> None:
    exc = tw.DecodeError("bad", path="$.a", type_id="t.T", version=2)
    copied = pickle.loads(pickle.dumps(exc))
    assert (copied.message, copied.path, copied.type_id, copied.version) == ("bad", "$.a", "t.T", 2)
    assert str(copied) == "t.T v2: bad - at `$.a`"
    assert str(tw.DecodeError("plain")) == "plain" and tw.DecodeError("plain").path is None


def _raw_map(pairs: bytes, count: int) -> msgspec.Raw:
    return msgspec.Raw(bytes([0x80 | count]) + pairs)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (_raw_map(b"\x81\x01\x02\xcb" + bytes(8), 1), "$.stage_durations"),  # a map as a key: not hashable
        (_raw_map(b"\x92\x01\x02\xcb" + bytes(8), 1), "$.stage_durations[(1, 2)]"),  # an array as a key
        (_raw_map(b"\xc0\xcb" + bytes(8), 1), "$.stage_durations[None]"),
        (_raw_map(b"\xd4\x05\x00\xcb" + bytes(8), 1), None),  # an extension as a key
        (_raw_map(b"\xc4\x03abc\xcb" + bytes(8), 1), "$.stage_durations[b'abc']"),
        (_raw_map(b"\xdb\x00\x10\x00\x00" + b"k" * 0x100000 + b"\xa1x", 1), None),  # a huge key, a bad value
        (_raw_map(b"\xa1a\xcb" + bytes(8) + b"\x02\xcb" + bytes(8), 2), "$.stage_durations[2]"),
    ],
)
def test_malformed_map_keys_are_decode_errors(raw: msgspec.Raw, path: str | None) -> None:
    exc = _decode_error(
        diffusion.Output(stage_durations={"a": 1.0}), lambda h: h[4].__setitem__("stage_durations", raw)
    )
    assert exc.type_id == "diffusion.Output"
    assert exc.path is not None and exc.path.startswith("$.stage_durations")
    assert len(exc.path) < 200  # a key is shown cut short
    if path is not None:
        assert exc.path == path


_KEYS = st.one_of(
    st.text(max_size=80), st.integers(-(2**63), 2**63), st.none(), st.binary(max_size=4), st.tuples(st.integers(0, 3))
)
_VALUES = st.one_of(
    st.floats(allow_nan=False), st.text(max_size=3), st.lists(st.integers(-(2**63), 2**63), max_size=2), st.none()
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.dictionaries(_KEYS, _VALUES, max_size=6), deep=st.booleans())
def test_hostile_map_entries_only_ever_raise_decode_errors(entries: dict[Any, Any], deep: bool) -> None:
    message = _batch() if deep else diffusion.Output()
    head = head_of(ENCODER.encode(message)[0])
    body = head[4]["runner_outputs"][1]["result"] if deep else head[4]
    body["stage_durations"] = entries
    try:
        DECODER.decode([frame_of(head)])
    except tw.DecodeError as exc:
        assert exc.type_id == type(message).__tw_type__.type_id and exc.version == 1
        at = "$.runner_outputs[1].result.stage_durations" if deep else "$.stage_durations"
        assert exc.path is not None and exc.path.startswith(at) and "[...]" not in exc.path
        assert str(exc).endswith(f" - at `{exc.path}`")


def _scores_registry(tmp_path: Path) -> tw.Registry:
    clip = {
        "type": "object",
        "title": "Clip",
        "properties": {"samples": {"x-tensor": {}}, "rate": {"type": "integer", "minimum": 1}},
        "required": ["samples", "rate"],
    }
    scores = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
    doc = minimal(
        "t.Scores",
        scores={"type": "object", "additionalProperties": scores, "default": {}},
        clips={"type": "object", "additionalProperties": {"$ref": "#/$defs/Clip"}, "default": {}},
    )
    doc["$defs"] = {"Clip": clip}
    return tw.load_schemas(write_schemas(tmp_path / "schemas", {"t/Scores.v1.json": doc}))


def test_entries_of_nested_maps_and_maps_of_structs_with_tensors(tmp_path: Path) -> None:
    registry = _scores_registry(tmp_path)
    scores, clip = registry.type("t.Scores"), registry.type("t.Clip")
    decoder = tw.Decoder(registry)
    message = scores(
        scores={"a": {"b": 1}},
        clips={"x": clip(samples=torch.zeros(2), rate=3), "y z": clip(samples=torch.ones(2), rate=4)},
    )
    exc = _decode_error(message, lambda h: h[4]["scores"]["a"].update(c=-2), decoder)
    assert (exc.path, exc.message, exc.type_id) == ("$.scores.a.c", "Expected `int` >= 0", "t.Scores")
    exc = _decode_error(message, lambda h: h[4]["clips"]["y z"].update(rate=0), decoder)
    assert exc.path == '$.clips["y z"].rate'
    exc = _decode_error(message, lambda h: h[4]["scores"]["a"].update({9: 1}), decoder)
    assert exc.path == "$.scores.a[9]" and exc.message.startswith("invalid map key: ")
    with pytest.raises(tw.EncodeError) as info:
        ENCODER.encode(scores(scores={"a": {"b": 1}, "q": {"ok": 1, "no good": -1}}))
    assert info.value.path == '$.scores.q["no good"]'
    with pytest.raises(tw.EncodeError) as info:
        ENCODER.encode(scores(clips={"x": clip(samples=torch.zeros(2), rate=0)}))
    assert (info.value.path, info.value.type_id, info.value.version) == ("$.clips.x.rate", "t.Scores", 1)


# -- encode errors ------------------------------------------------------------------------------


def _encode_error(message: Any) -> tw.EncodeError:
    with pytest.raises(tw.EncodeError) as info:
        ENCODER.encode(message)
    return info.value


def test_a_bad_value_in_a_nested_list() -> None:
    batch = _batch()
    batch.runner_outputs[1].step_index = -3
    exc = _encode_error(batch)
    assert (exc.path, exc.type_id, exc.version) == ("$.runner_outputs[1].step_index", "diffusion.RunnerBatch", 1)
    assert exc.message == "Expected `int` >= 0"
    assert str(exc) == "diffusion.RunnerBatch: Expected `int` >= 0 - at `$.runner_outputs[1].step_index`"


def test_a_bad_map_value_is_named_by_its_key() -> None:
    output = diffusion.Output()
    output.stage_durations = {"a": 1.0, "b c": "slow"}  # type: ignore[dict-item]
    exc = _encode_error(output)
    assert (exc.path, exc.type_id, exc.message) == (
        '$.stage_durations["b c"]',
        "diffusion.Output",
        "Expected `float`, got `str`",
    )


def test_an_int_out_of_range() -> None:
    output = diffusion.Output()
    output.output = [1, {"deep": [2**70]}]
    exc = _encode_error(output)
    assert exc.path == "$.output[1].deep[0]" and exc.type_id == "diffusion.Output"
    assert exc.message == "integer 1180591620717411303424 does not fit the wire (msgpack holds -2**63 .. 2**64-1)"


def test_an_int_out_of_range_in_a_message_without_tensors(tmp_path: Path) -> None:
    doc = minimal("t.Plain", counts={"type": "array", "items": {"type": "integer"}})
    plain = tw.load_schemas(write_schemas(tmp_path / "schemas", {"t/Plain.v1.json": doc})).type("t.Plain")
    exc = _encode_error(plain(counts=[1, 2, -(2**64)]))
    assert (exc.path, exc.type_id, exc.version) == ("$.counts[2]", "t.Plain", 1)


def test_a_tensor_that_cannot_travel_has_its_path() -> None:
    output = diffusion.Output()
    output.output = [torch.ones(3), {"k": torch.zeros(2).to_sparse()}]
    exc = _encode_error(output)
    assert exc.path == "$.output[1].k" and exc.message.startswith("only strided tensors travel")


def _request(**changes: Any) -> Any:
    """An rpc.Request changed after construction (only the encoder sees the changes)."""
    request = rpc.Request(method="m")
    for name, value in changes.items():
        setattr(request, name, value)
    return request


@pytest.mark.parametrize(
    ("changes", "message", "path"),
    [
        ({"method": object()}, "Encoding objects of type object is unsupported", "$.method"),
        ({"rpc_id": np.float32(1.0)}, "Encoding objects of type float32 is unsupported", "$.rpc_id"),
        (
            {"wave_request_ids": ["a", object()]},
            "Encoding objects of type object is unsupported",
            "$.wave_request_ids[1]",
        ),
        ({"kwargs": {"a": np.float32(1.0)}}, "float32 is not allowed in a tree", "$.kwargs.a"),
        ({"kwargs": {"a": [1, {"b c": {3}}]}}, "set is not allowed in a tree", '$.kwargs.a[1]["b c"]'),
        ({"args": (1, [2, object()])}, "object is not allowed in a tree", "$.args[1][1]"),
    ],
    ids=["a field", "an optional field", "a list item", "a tree", "deep in a tree", "in a tree tuple"],
)
def test_a_value_with_no_wire_form_has_its_path(changes: dict[str, Any], message: str, path: str) -> None:
    """Found before anything is written (a tree) or as the body is written (any other field);
    either way the caller's message is left as it was."""
    request = _request(**changes)
    before = copy.copy(request)
    exc = _encode_error(request)
    assert (exc.message, exc.path, exc.type_id, exc.version) == (message, path, "rpc.Request", 1)
    assert str(exc) == f"rpc.Request: {message} - at `{path}`"
    assert all(getattr(request, name) is getattr(before, name) for name in changes)


def test_a_value_a_tree_may_not_hold_is_named_inside_nested_structs() -> None:
    runner = diffusion.RunnerOutput(request_id="a", result=diffusion.Output())
    batch = diffusion.RunnerBatch(runner_outputs=[diffusion.RunnerOutput(request_id="b"), runner])
    assert runner.result is not None
    runner.result.output = [1, (2, object())]
    exc = _encode_error(batch)
    assert (exc.message, exc.path, exc.type_id) == (
        "object is not allowed in a tree",
        "$.runner_outputs[1].result.output[1][1]",
        "diffusion.RunnerBatch",
    )


def test_nesting_past_the_limit_is_named_where_it_goes_too_deep() -> None:
    deep: Any = 1
    for _ in range(70):
        deep = (deep,)
    exc = _encode_error(_request(kwargs={"a": deep}))
    assert (exc.message, exc.path) == ("nesting deeper than the limit of 64", "$.kwargs.a" + "[0]" * 63)
    cycle: list[Any] = []
    cycle.append(cycle)
    exc = _encode_error(_request(args=[1, cycle]))
    assert (exc.message, exc.path, exc.type_id) == ("nesting deeper than the limit of 64", "$.args[1]", "rpc.Request")


def test_a_container_nested_too_deep_is_named_and_a_scalar_at_the_limit_is_no_level() -> None:
    """Found by identity, a container's place is told. A scalar where a container would be one
    level too deep is no level (as a decoder counts): it travels."""
    shallow = tw.Encoder(options=tw.EncodeOptions(limits=tw.Limits(max_depth=1)))
    assert shallow.encode(rpc.Request(method="m", args=[1], kwargs={"a": 1}))
    with pytest.raises(tw.EncodeError) as info:
        shallow.encode(rpc.Request(method="m", args=[1], kwargs={"a": [1]}))
    assert (info.value.message, info.value.path) == ("nesting deeper than the limit of 1", "$.kwargs.a")


def _nested_plain(tmp_path: Path) -> tuple[Any, Any]:
    """``t.Plain`` (a list of ``t.Item`` structs with a string) and ``t.Item``: no tensors, no trees."""
    item = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    doc = minimal("t.Plain", items={"type": "array", "items": {"$ref": "#/$defs/Item"}})
    doc["$defs"] = {"Item": item}
    registry = tw.load_schemas(write_schemas(tmp_path / "schemas", {"t/Plain.v1.json": doc}))
    return registry.type("t.Plain"), registry.nested_types()["t.Item"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (object(), "Encoding objects of type object is unsupported"),
        ("x\ud800", "string is not valid UTF-8: surrogates not allowed (character 1, '\\ud800')"),
    ],
    ids=["no wire form", "not UTF-8"],
)
def test_a_value_past_where_paths_are_looked_for_keeps_its_words_without_a_path(
    bad: Any, message: str, tmp_path: Path
) -> None:
    """Paths are looked for no deeper than the depth limit: below it, the same words and no path."""
    plain, item = _nested_plain(tmp_path)
    value = plain(items=[item(name="a")])
    value.items[0].name = bad
    exc = _encode_error(value)
    assert (exc.message, exc.path, exc.type_id) == (message, "$.items[0].name", "t.Plain")
    shallow = tw.Encoder(options=tw.EncodeOptions(limits=tw.Limits(max_depth=1)))
    with pytest.raises(tw.EncodeError) as info:
        shallow.encode(value)
    assert (info.value.message, info.value.path, info.value.type_id) == (message, None, "t.Plain")


def test_a_failed_search_for_a_value_with_no_wire_form_keeps_msgspecs_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value is looked for by encoding once more; if that fails otherwise, msgspec's own words stand."""
    plain, item = _nested_plain(tmp_path)
    value = plain(items=[item(name="a")])
    value.items[0].name = object()

    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise ValueError("injected")

    monkeypatch.setattr(msgspec.msgpack, "encode", broken)  # (the encoder's own encode is its Encoder's)
    exc = _encode_error(value)
    assert (exc.message, exc.path, exc.type_id) == ("Encoding objects of type object is unsupported", None, "t.Plain")


def test_a_value_with_no_wire_form_in_a_message_without_tensors(tmp_path: Path) -> None:
    doc = minimal("t.Plain", name={"type": "string"}, names={"type": "array", "items": {"type": "string"}})
    plain = tw.load_schemas(write_schemas(tmp_path / "schemas", {"t/Plain.v1.json": doc})).type("t.Plain")
    message = plain(name="a", names=["b", "c"])
    message.names = ["b", {1j}]
    exc = _encode_error(message)
    assert (exc.message, exc.path, exc.type_id) == (
        "Encoding objects of type complex is unsupported",
        "$.names[1][0]",
        "t.Plain",
    )
    message.name = object()
    exc = _encode_error(message)
    assert (exc.message, exc.path, exc.type_id) == (
        "Encoding objects of type object is unsupported",
        "$.name",
        "t.Plain",
    )


@pytest.mark.parametrize(
    ("kwargs", "bad", "path"),
    [
        ({"a": ["ok", "x\udc80y"]}, "'\\udc80'", "$.kwargs.a[1]"),
        ({"k\ud800": 1}, "'\\ud800'", '$.kwargs["k\\ud800"]'),
    ],
    ids=["a value", "a map key"],
)
def test_a_string_that_is_not_utf8_has_its_path(kwargs: dict[str, Any], bad: str, path: str) -> None:
    exc = _encode_error(rpc.Request(method="m", kwargs=kwargs))
    assert (exc.message, exc.path, exc.type_id) == (
        f"string is not valid UTF-8: surrogates not allowed (character 1, {bad})",
        path,
        "rpc.Request",
    )


def test_a_string_that_is_not_utf8_in_a_message_without_tensors(tmp_path: Path) -> None:
    doc = minimal("t.Plain", name={"type": "string"})
    plain = tw.load_schemas(write_schemas(tmp_path / "schemas", {"t/Plain.v1.json": doc})).type("t.Plain")
    exc = _encode_error(plain(name="\ud800"))
    assert (exc.message, exc.path, exc.type_id) == (
        "string is not valid UTF-8: surrogates not allowed (character 0, '\\ud800')",
        "$.name",
        "t.Plain",
    )


def test_a_rule_breach_while_encoding_has_the_type_and_the_field_s_path() -> None:
    """A struct's rule (a tensor spec, a tree key) broken while encoding had no path at the top
    level, and below it only the struct's (msgspec names the struct whose check raised): the rule's
    own path is now added to it."""
    video = _video()
    video.tensor = torch.zeros(1, 3, 2, 4, 4, dtype=torch.int32)
    exc = _encode_error(video)
    assert (exc.type_id, exc.version, exc.path) == ("media.Video", 1, "$.tensor")
    assert exc.message.startswith("media.Video.tensor: dtype int32 is not allowed")
    video.tensor = torch.zeros(3, 2, 4, 4)
    nested = diffusion.Output(media=media.Media(video=video))
    exc = _encode_error(nested)
    assert (exc.type_id, exc.path) == ("diffusion.Output", "$.media.video.tensor")
    assert exc.message.startswith("media.Video.tensor: expected rank 5, got shape (3, 2, 4, 4)")


def test_a_rule_breach_while_decoding_has_the_field_s_path() -> None:
    """The same on decode: the path stopped at the struct whose rule a peer's message broke."""
    video = _video()
    video.tensor = torch.zeros(3, 2, 4, 4)  # rank 4, sent unchecked
    unchecked = tw.Encoder(options=tw.EncodeOptions(validate=False))
    for message, path, type_id in (
        (video, "$.tensor", "media.Video"),
        (diffusion.Output(media=media.Media(video=video)), "$.media.video.tensor", "diffusion.Output"),
    ):
        with pytest.raises(tw.DecodeError) as info:
            DECODER.decode(unchecked.encode(message))
        assert (info.value.type_id, info.value.path) == (type_id, path)
        assert info.value.message == "media.Video.tensor: expected rank 5, got shape (3, 2, 4, 4)"


# -- validation errors --------------------------------------------------------------------------


def test_validation_errors_carry_their_struct_and_path() -> None:
    with pytest.raises(tw.ValidationError) as info:
        media.Video(
            tensor=torch.zeros(1, 3, 2, 4, 4, dtype=torch.int32),
            layout=media.VideoTensorLayout.BCTHW,
            encoding=media.VideoTensorEncoding.NORMALIZED_FLOAT,
            value_range=media.VideoValueRange.ZERO_TO_ONE,
        )
    exc = info.value
    assert (exc.type_id, exc.path, exc.where, exc.rule) == ("media.Video", "$.tensor", "media.Video.tensor", None)
    assert str(exc) == f"media.Video.tensor: {exc.message}"
    with pytest.raises(tw.ValidationError) as info:
        media.Media(video=_video(), metadata={"a b": [torch.zeros(1)]})
    exc = info.value
    assert (exc.path, exc.where) == ('$.metadata["a b"][0]', "media.Media.metadata['a b'][0]")
    assert exc.message == "Tensor is not allowed in a JSON tree"
    with pytest.raises(tw.ValidationError) as info:
        media.Media(video=_video(), metadata={"internal": 1})
    exc = info.value
    assert (exc.type_id, exc.rule, exc.path) == ("media.Media", "MEDIA_METADATA_INTERNAL", None)
    assert str(exc) == f"media.Media: rule MEDIA_METADATA_INTERNAL: {exc.message}"


# -- compat findings ----------------------------------------------------------------------------


def test_findings_have_typed_locations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new_doc = copy.deepcopy(CLIP)
    del new_doc["properties"]["extra"]
    old = load_dir(write_schemas(tmp_path / "old", {"audio/Clip.v1.json": CLIP}))
    new = load_dir(write_schemas(tmp_path / "new", {"audio/Clip.v1.json": new_doc}))
    finding = next(f for f in compare(old, new) if f.rule == "FIELD_DELETED_OPTIONAL")
    old_at, new_at = finding.old_location, finding.new_location
    assert old_at is not None and new_at is not None
    assert old_at.file == old.sources[old_at.file].path and isinstance(old_at.line, int) and isinstance(old_at.col, int)
    assert (old_at.line, old_at.col) == old.sources[old_at.file].position("/properties/extra")
    assert finding.location == old_at  # a field that is gone: the old file
    assert finding.old == str(old_at) and finding.where == str(old_at)
    shown = json.loads(render([finding], "json"))["findings"][0]
    assert (shown["old"], shown["new"]) == (str(old_at), str(new_at))
    assert f"file={old_at.file},line={old_at.line},col={old_at.col}," in render([finding], "github")
    assert render([finding], "text").startswith(f"{old_at}: FIELD_DELETED_OPTIONAL ")


def test_a_finding_without_a_line_points_at_line_one() -> None:
    finding = Finding("TYPE_ADDED", "info", "none", "t.T v1 added", "t.T", 1, "", None, Location("t/T.v1.json"))
    assert finding.where == "t/T.v1.json" and finding.new == "t/T.v1.json" and finding.old is None
    assert render([finding], "github").startswith("::notice file=t/T.v1.json,line=1,col=1,title=TYPE_ADDED::")
    nowhere = Finding("TYPE_ADDED", "info", "none", "m", "t.T", 1, "", None, None)
    assert render([nowhere], "github").startswith("::notice file=,line=1,col=1,")
    assert render([nowhere], "text").startswith(": TYPE_ADDED ")


def test_library_code_does_not_take_its_own_messages_apart() -> None:
    """No error's text is split, prefix-matched or rewritten: its parts are its attributes."""
    root = Path(tw.__file__).resolve().parent
    pattern = re.compile(r"str\((?:exc|error|e)\)\s*\.\s*(?:split|rsplit|startswith|partition|replace)\b")
    for path in sorted(root.rglob("*.py")):
        assert not pattern.search(path.read_text(encoding="utf-8")), path
