"""Loading schema directories: built-ins, the authoring example, fingerprints and the IR."""

from __future__ import annotations

import copy
import json
import keyword
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire.schema import load_dir
from tensorwire.schema.ir import ArrayT, EnumT, MessageRefT, NullableT, StructT, TensorT, UnionT
from tests.conftest import BUILTIN_SCHEMAS, CLIP, minimal, write_schemas

BUILTIN_IDS = {
    "media.Video",
    "media.Media",
    "diffusion.Output",
    "diffusion.RunnerOutput",
    "diffusion.RunnerBatch",
    "diffusion.DpTagged",
    "rpc.Request",
    "rpc.Result",
    "rpc.Value",
}


def test_every_builtin_schema_loads_with_a_sha256_fingerprint() -> None:
    schemas = load_dir(BUILTIN_SCHEMAS)
    assert {m.type_id for m in schemas.messages} == BUILTIN_IDS
    for message in schemas.messages:
        assert re.fullmatch(r"[0-9a-f]{64}", message.fingerprint)
        assert message.version == 1
    assert len({m.fingerprint for m in schemas.messages}) == len(BUILTIN_IDS)


def test_a_registry_finds_each_type_by_its_schema_fingerprint() -> None:
    from tensorwire.builtins import REGISTRY

    for message in load_dir(BUILTIN_SCHEMAS).messages:
        cls = REGISTRY.by_fingerprint(message.fingerprint)
        assert cls is REGISTRY.type(message.type_id, message.version)
        assert cls.__tw_type__.fingerprint == message.fingerprint
    assert REGISTRY.by_fingerprint("0" * 64) is None


class _NotAStruct:
    """Carries a message's identity, but is no msgspec Struct."""

    __tw_type__ = tw.TypeInfo("media.Video", 1, "0" * 64)


@pytest.mark.parametrize(
    ("classes", "message"),
    [
        ([int], r"^Registry takes message classes \(msgspec Structs with a __tw_type__\), got <class 'int'>$"),
        (["media.Video"], r"^Registry takes message classes .*, got 'media\.Video'$"),
        ([_NotAStruct], r"^Registry takes message classes .*, got <class '.*_NotAStruct'>$"),
        (tw.TypeInfo, r"^Registry takes an iterable of message classes, got the class TypeInfo$"),
    ],
)
def test_a_registry_of_what_is_not_a_message_class_is_refused_naming_it(classes: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        tw.Registry(classes)


@pytest.mark.parametrize(
    ("type_id", "version", "message"),
    [
        ("media.Video", True, r"^a version must be an int, got True$"),
        ("media.Video", 1.0, r"^a version must be an int, got 1\.0$"),
        ("media.Video", "1", r"^a version must be an int, got '1'$"),
        (["media.Video"], None, r"^a type id must be a str, got \['media\.Video'\]$"),
    ],
)
def test_a_lookup_by_what_is_no_type_id_or_version_is_refused(type_id: Any, version: Any, message: str) -> None:
    from tensorwire.builtins import REGISTRY

    with pytest.raises(TypeError, match=message):
        REGISTRY.type(type_id, version)


def test_builtin_ir_is_faithful_to_the_video_contract() -> None:
    video = load_dir(BUILTIN_SCHEMAS).message("media.Video", 1).struct
    fields = {f.name: f for f in video.fields}
    tensor = fields["tensor"].type
    assert isinstance(tensor, TensorT) and tensor.rank == 5
    assert set(tensor.dtypes or ()) == {"float16", "bfloat16", "float32", "uint8"}
    enums = {name: fields[name].type for name in ("layout", "encoding", "value_range", "color_model")}
    assert all(isinstance(e, EnumT) for e in enums.values())
    assert [e.values for e in enums.values() if isinstance(e, EnumT)] == [
        ("bcthw", "bthwc"),
        ("normalized_float", "uint8_frames"),
        ("negative_one_to_one", "zero_to_one", "zero_to_255"),
        ("rgb",),
    ]
    pending = fields["pending_float_consumers"].type
    assert isinstance(pending, ArrayT) and isinstance(pending.items, EnumT)
    assert pending.unique and pending.items.values == ("frame_interpolation", "video_guardrails")
    assert video.validators == ("media.video_contract",)


def test_builtin_result_payload_is_a_tagged_union_of_registered_types() -> None:
    result = load_dir(BUILTIN_SCHEMAS).message("rpc.Result", 1).struct
    payload = next(f for f in result.fields if f.name == "payload").type
    assert isinstance(payload, NullableT) and isinstance(payload.inner, UnionT)
    union = payload.inner
    assert union.tag_field == "kind"
    targets = {v.target.type_id for v in union.variants if isinstance(v, MessageRefT)}
    assert targets == {
        "diffusion.Output",
        "diffusion.RunnerOutput",
        "diffusion.RunnerBatch",
        "diffusion.DpTagged",
        "rpc.Value",
    }
    output = load_dir(BUILTIN_SCHEMAS).message("diffusion.Output", 1).struct
    assert [(c.rule, c.fields) for c in output.constraints] == [("at_most_one_of", ("media", "output"))]


def test_the_authoring_example_becomes_a_usable_type_in_one_call(schema_dir: Path) -> None:
    write_schemas(schema_dir, {"audio/Clip.v1.json": CLIP})
    registry = tw.load_schemas(schema_dir)
    Clip = registry.type("audio.Clip")
    clip = Clip(samples=torch.zeros(2, 160), sample_rate=16000, window=(0, 160))
    assert clip.codec.value == "pcm" and clip.tags == {} and clip.extra is None
    assert Clip.__tw_type__.type_id == "audio.Clip" and Clip.__tw_type__.version == 1
    assert registry.type("audio.Clip", 1) is Clip


def test_a_new_namespace_with_cross_file_refs_loads(schema_dir: Path) -> None:
    write_schemas(
        schema_dir,
        {
            "audio/Clip.v1.json": CLIP,
            "speech/Utterance.v1.json": minimal(
                "speech.Utterance",
                clip={"$ref": "../audio/Clip.v1.json"},
                codec={"$ref": "../audio/Clip.v1.json#/$defs/AudioCodec"},
                text={"type": "string", "maxLength": 100},
            ),
        },
    )
    registry = tw.load_schemas(schema_dir)
    Utterance, Clip = registry.type("speech.Utterance"), registry.type("audio.Clip")
    clip = Clip(samples=torch.zeros(1, 4), sample_rate=8000, window=(0, 4))
    codec_enum = type(clip.codec)
    utterance = Utterance(clip=clip, codec=codec_enum("opus"), text="hi")
    assert utterance.clip is clip
    assert utterance.codec is codec_enum.OPUS


def _fingerprint(root: Path, type_id: str = "audio.Clip") -> str:
    return load_dir(root).message(type_id, 1).fingerprint


def test_fingerprint_ignores_docs_and_property_order_but_not_shape(tmp_path: Path) -> None:
    base = _fingerprint(write_schemas(tmp_path / "a", {"audio/Clip.v1.json": CLIP}))
    documented = copy.deepcopy(CLIP)
    documented["description"] = "Other words."
    documented["properties"]["sample_rate"]["description"] = "Hz."
    documented["$comment"] = "note"
    assert _fingerprint(write_schemas(tmp_path / "b", {"audio/Clip.v1.json": documented})) == base
    reordered = copy.deepcopy(CLIP)
    reordered["properties"] = dict(reversed(list(CLIP["properties"].items())))
    assert _fingerprint(write_schemas(tmp_path / "c", {"audio/Clip.v1.json": reordered})) == base
    changes: tuple[Callable[[dict[str, Any]], None], ...] = (
        lambda d: d["properties"]["sample_rate"].update(minimum=2),
        lambda d: d["properties"]["codec"].update(default="opus"),
        lambda d: d["$defs"]["AudioCodec"]["enum"].append("flac"),
        lambda d: d["properties"]["samples"]["x-tensor"].update(dtypes=["float32"]),
    )
    for change in changes:
        changed = copy.deepcopy(CLIP)
        change(changed)
        root = write_schemas(tmp_path / f"d{id(change)}", {"audio/Clip.v1.json": changed})
        assert _fingerprint(root) != base


def test_a_referenced_type_change_changes_the_referencing_fingerprint(tmp_path: Path) -> None:
    holder = minimal("audio.Holder", clip={"$ref": "Clip.v1.json"})
    before = _fingerprint(
        write_schemas(tmp_path / "a", {"audio/Clip.v1.json": CLIP, "audio/Holder.v1.json": holder}), "audio.Holder"
    )
    changed = copy.deepcopy(CLIP)
    changed["properties"]["sample_rate"]["minimum"] = 8000
    after = _fingerprint(
        write_schemas(tmp_path / "b", {"audio/Clip.v1.json": changed, "audio/Holder.v1.json": holder}), "audio.Holder"
    )
    assert before != after


def test_shared_defs_are_built_once(schema_dir: Path) -> None:
    doc = minimal(
        "geo.Path",
        start={"$ref": "#/$defs/Point"},
        end={"$ref": "#/$defs/Point"},
    )
    doc["$defs"] = {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}
    schemas = load_dir(write_schemas(schema_dir, {"geo/Path.v1.json": doc}))
    struct = schemas.message("geo.Path", 1).struct
    start, end = (f.type for f in struct.fields)
    assert isinstance(start, StructT) and start is end and start.name == "Point"
    assert [n.name for n in schemas.named] == ["Point"]


def test_two_versions_get_versioned_class_names(schema_dir: Path) -> None:
    write_schemas(
        schema_dir,
        {
            "audio/Clip.v1.json": minimal("audio.Clip", 1),
            "audio/Clip.v2.json": minimal("audio.Clip", 2, value={"type": "integer"}, extra={"type": "string"}),
        },
    )
    registry = tw.load_schemas(schema_dir)
    assert registry.type("audio.Clip").__name__ == "Clip"
    assert registry.type("audio.Clip", 1).__name__ == "ClipV1"
    assert registry.versions("audio.Clip") == [1, 2]
    with pytest.raises(tw.UnknownTypeError, match=r"unknown version 3 of audio.Clip; known versions: v1, v2"):
        registry.type("audio.Clip", 3)
    with pytest.raises(tw.UnknownTypeError, match=r"unknown type id 'audio.Nope'; known types: audio.Clip"):
        registry.type("audio.Nope")


def test_a_registry_reaches_nested_types_by_their_schema_names(schema_dir: Path) -> None:
    transcript = {
        "$schema": "../meta/tensorwire.v1.json",
        "$id": "asr.Transcript",
        "x-version": 1,
        "title": "Transcript",
        "type": "object",
        "properties": {
            "segments": {"type": "array", "items": {"$ref": "#/$defs/Segment"}},
            "language": {"$ref": "#/$defs/Lang", "default": "en"},
        },
        "required": ["segments"],
        "$defs": {
            "Segment": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "speaker": {"$ref": "#/$defs/Speaker"}},
                "required": ["text", "speaker"],
            },
            "Speaker": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            "Lang": {"type": "string", "enum": ["en", "de"], "x-enum-name": "Language"},  # by its class name
        },
    }
    write_schemas(schema_dir, {"asr/Transcript.v1.json": transcript, "audio/Clip.v1.json": minimal("audio.Clip", 1)})
    registry = tw.load_schemas(schema_dir)
    nested = registry.nested_types()
    assert list(nested) == ["asr.Language", "asr.Segment", "asr.Speaker"]  # not the message types
    Segment, Speaker, Language = (registry.type(f"asr.{n}") for n in ("Segment", "Speaker", "Language"))
    message = registry.type("asr.Transcript")(segments=[Segment(text="hi", speaker=Speaker(name="a"))])
    assert message.language is Language("en") and nested["asr.Segment"] is Segment
    assert type(message.segments[0].speaker) is Speaker
    with pytest.raises(tw.UnknownTypeError, match=r"^asr.Segment is a nested type: it has no version of its own$"):
        registry.type("asr.Segment", 1)
    with pytest.raises(tw.UnknownTypeError, match=r"unknown type id 'asr.Word'; known types: asr.Transcript, audio"):
        registry.type("asr.Word")
    assert [i.type_id for i in registry.infos()] == ["asr.Transcript", "audio.Clip"] and len(registry) == 2


_field_names = st.lists(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda name: not keyword.iskeyword(name)),
    min_size=1,
    max_size=6,
    unique=True,
)  # (a keyword cannot name a field: a schema error of its own)
_field_types: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}, {"type": "number", "minimum": 0}, {"x-tree": {}}]
)


@settings(max_examples=25, deadline=None)
@given(names=_field_names, data=st.data())
def test_fingerprint_is_invariant_under_property_order_and_descriptions(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], data: st.DataObject
) -> None:
    props = {name: dict(data.draw(_field_types)) for name in names}
    doc = {"$id": "p.T", "x-version": 1, "type": "object", "properties": props, "required": names}
    shuffled = data.draw(st.permutations(names))
    other = json.loads(json.dumps(doc))
    other["properties"] = {n: {**props[n], "description": f"about {n}"} for n in shuffled}
    other["required"] = list(reversed(names))
    root = tmp_path_factory.mktemp("prop")
    a = _fingerprint(write_schemas(root / "a", {"p/T.v1.json": doc}), "p.T")
    b = _fingerprint(write_schemas(root / "b", {"p/T.v1.json": other}), "p.T")
    assert a == b
