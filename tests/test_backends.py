"""Generated source and run-time types agree: same type information, rules and wire bytes."""

from __future__ import annotations

import enum
import gc
import importlib
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

import tensorwire as tw
import tensorwire.builtins
from tensorwire.gen import generate
from tensorwire.registry import Registry
from tests.conftest import BUILTIN_SCHEMAS, CLIP, write_schemas


def _norm(value: Any) -> Any:
    """A comparable description of msgspec type info (classes by name, enums by members)."""
    if isinstance(value, mi.StructType):
        cls = value.cls
        return (
            "struct",
            cls.__name__,
            inspect.cleandoc(cls.__doc__ or ""),
            vars(cls).get("__tw_type__"),
            vars(cls).get("__tw_rules__"),
            value.tag_field,
            value.tag,
            value.forbid_unknown_fields,
            value.array_like,
            cls.__struct_config__.omit_defaults,
            cls.__struct_config__.frozen,
            cls.__struct_config__.gc,
            tuple(_norm(f) for f in value.fields),
        )
    if isinstance(value, mi.EnumType):
        return (
            "enum",
            value.cls.__name__,
            inspect.cleandoc(value.cls.__doc__ or ""),
            tuple((m.name, m.value) for m in value.cls),
        )
    if isinstance(value, mi.Field):
        factory = None if value.default_factory is msgspec.NODEFAULT else _norm(value.default_factory())
        return (value.name, value.encode_name, value.required, _norm(value.default), factory, _norm(value.type))
    if isinstance(value, msgspec.Struct):
        return (type(value).__name__, tuple((f, _norm(getattr(value, f))) for f in value.__struct_fields__))
    if isinstance(value, list | tuple):
        return tuple(_norm(v) for v in value)
    if isinstance(value, frozenset):
        return ("frozenset", tuple(sorted(_norm(v) for v in value)))
    if isinstance(value, dict):
        return ("dict", tuple((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    return value


def _pairs(generated: Registry, runtime: Registry) -> Iterator[tuple[type[Any], type[Any]]]:
    assert [i for i in generated.infos()] == [i for i in runtime.infos()]
    for info in generated.infos():
        yield generated.type(info.type_id, info.version), runtime.type(info.type_id, info.version)


def test_builtin_back_ends_give_the_same_type_information() -> None:
    runtime = tw.load_schemas(BUILTIN_SCHEMAS)
    pairs = list(_pairs(tw.builtins.REGISTRY, runtime))
    assert len(pairs) == 9
    for gen_cls, run_cls in pairs:
        assert gen_cls is not run_cls
        assert _norm(mi.type_info(gen_cls)) == _norm(mi.type_info(run_cls)), gen_cls.__name__


def test_the_comparison_notices_a_difference() -> None:
    """The normalizer is not blind: two distinct built-in types compare unequal."""
    reg = tw.builtins.REGISTRY
    assert _norm(mi.type_info(reg.type("rpc.Request"))) != _norm(mi.type_info(reg.type("rpc.Result")))
    a = msgspec.defstruct("T", [("x", int)], kw_only=True)
    b = msgspec.defstruct("T", [("x", int, 0)], kw_only=True)
    assert _norm(mi.type_info(a)) != _norm(mi.type_info(b))


SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "rpc.Request",
        {"method": "add_lora", "args": [1, "x", [2.5, None]], "kwargs": {"scale": 0.5}, "exec_all_ranks": True},
    ),
    (
        "rpc.Result",
        {
            "method": "ping",
            "ok": False,
            "error": "boom",
            "error_type": "RuntimeError",
            "payload": {"kind": "rpc.Value", "value": {"a": [1, 2]}},
            "rank_statuses": [{"rank": 0, "ok": True, "bool_result": True}, {"rank": 1, "ok": False, "error": "x"}],
        },
    ),
    (
        "diffusion.RunnerBatch",
        {
            "runner_outputs": [
                {
                    "request_id": "a",
                    "step_index": 3,
                    "result": {"output": {"frames": [1, 2]}, "stage_durations": {"vae": 0.25}},
                },
                {
                    "request_id": "b",
                    "finished": True,
                    "result": {"error": "oom", "error_status_code": 500, "aborted": True},
                },
            ]
        },
    ),
    ("diffusion.DpTagged", {"dp_rank": 2, "output": {"chunk_index": 1, "total_chunks": 3, "finished": False}}),
]


@pytest.mark.parametrize(("type_id", "data"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_both_back_ends_write_identical_bytes(type_id: str, data: dict[str, Any]) -> None:
    gen_cls = tw.builtins.REGISTRY.type(type_id)
    run_cls = tw.load_schemas(BUILTIN_SCHEMAS).type(type_id)
    gen_msg, run_msg = msgspec.convert(data, gen_cls), msgspec.convert(data, run_cls)
    gen_bytes, run_bytes = msgspec.msgpack.encode(gen_msg), msgspec.msgpack.encode(run_msg)
    assert gen_bytes == run_bytes
    # and each back-end reads the other's bytes into an equal message
    assert msgspec.msgpack.encode(msgspec.msgpack.decode(gen_bytes, type=run_cls)) == gen_bytes
    assert msgspec.msgpack.encode(msgspec.msgpack.decode(run_bytes, type=gen_cls)) == run_bytes


@contextmanager
def _generated(root: Path, files: dict[str, Any], package: str, namespace: str) -> Iterator[tuple[Any, Registry]]:
    """The generated module of ``namespace`` (package ``package`` under ``root``) and the run-time
    registry of the same schema ``files``; the package is forgotten afterwards."""
    schema_dir = write_schemas(root / "schemas", files)
    generate(schema_dir, root / package)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(f"{package}.{namespace}"), tw.load_schemas(schema_dir)
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.startswith(package)]:
            del sys.modules[name]


@pytest.fixture
def generated_clip(tmp_path: Path) -> Iterator[tuple[Any, Registry]]:
    with _generated(tmp_path, {"audio/Clip.v1.json": CLIP}, "twgen_clip", "audio") as pair:
        yield pair


def test_a_user_schema_generates_the_same_type_as_run_time(generated_clip: tuple[Any, Registry]) -> None:
    module, runtime = generated_clip
    assert module.__all__ == ["AudioCodec", "Clip"]
    assert _norm(mi.type_info(module.Clip)) == _norm(mi.type_info(runtime.type("audio.Clip")))


def test_generated_source_carries_header_and_fingerprint(tmp_path: Path) -> None:
    schema_dir = write_schemas(tmp_path / "schemas", {"audio/Clip.v1.json": CLIP})
    generate(schema_dir, tmp_path / "out")
    text = (tmp_path / "out" / "audio.py").read_text()
    fingerprint = tw.load_schemas(schema_dir).type("audio.Clip").__tw_type__.fingerprint
    assert text.startswith("# Code generated by tensorwire from the schemas of audio. DO NOT EDIT.\n")
    assert f"# audio.Clip v1 sha256:{fingerprint}\n" in text
    # deterministic: a second generation changes nothing
    assert generate(schema_dir, tmp_path / "out") == []


LEAVES_AND_CONTAINERS = {
    "$id": "gcx.Holder",
    "x-version": 1,
    "type": "object",
    "properties": {
        "flat": {"$ref": "#/$defs/Flat"},
        "listed": {"$ref": "#/$defs/Listed"},
        "nested": {"$ref": "#/$defs/Nested"},
    },
    "required": ["flat", "listed", "nested"],
    "$defs": {
        "Flat": {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "x": {"type": ["number", "null"], "default": None},
                "s": {"type": "string"},
                "mode": {"type": "string", "enum": ["a", "b"], "x-enum-name": "Mode"},
            },
            "required": ["n", "s", "mode"],
        },
        "Listed": {
            "type": "object",
            "properties": {"names": {"type": "array", "items": {"type": "string"}, "default": []}},
        },
        "Nested": {"type": "object", "properties": {"flat": {"$ref": "#/$defs/Flat"}}, "required": ["flat"]},
    },
}


def _struct_class(t: mi.Type) -> type[msgspec.Struct]:
    assert isinstance(t, mi.StructType)
    return t.cls


def test_only_structs_of_leaves_skip_the_garbage_collector(tmp_path: Path) -> None:
    """A struct whose fields hold only scalars, enum members or None cannot be in a reference cycle:
    both back-ends make it ``gc=False``; one with a list or a nested struct stays tracked."""
    with _generated(tmp_path, {"gcx/Holder.v1.json": LEAVES_AND_CONTAINERS}, "twgen_gcx", "gcx") as (module, reg):
        runtime = reg.type("gcx.Holder")
        for holder in (module.Holder, runtime):
            info = mi.type_info(holder)
            assert isinstance(info, mi.StructType)
            kinds = {f.name: _struct_class(f.type).__struct_config__.gc for f in info.fields}
            assert kinds == {"flat": False, "listed": True, "nested": True}, holder
            assert holder.__struct_config__.gc is True
            flat = msgspec.convert({"n": 1, "s": "x", "mode": "a"}, _struct_class(info.fields[0].type))
            assert not gc.is_tracked(flat)
            listed = msgspec.convert({"names": ["a"]}, _struct_class(info.fields[1].type))
            assert gc.is_tracked(listed)
        assert _norm(mi.type_info(module.Holder)) == _norm(mi.type_info(runtime))
    assert tw.builtins.REGISTRY.type("rpc.Request").__struct_config__.gc is True  # args and kwargs are trees
    assert tw.load_schemas(BUILTIN_SCHEMAS).type("rpc.Result").__struct_config__.gc is True


ASTRAL: dict[str, Any] = {  # characters past U+FFFF wherever a schema's string reaches generated code
    "$id": "astral.Note",
    "x-version": 1,
    "type": "object",
    "properties": {
        "kind": {"const": "astral.Note", "description": "tagged \U0001f600"},
        "mood": {
            "type": "string",
            "enum": ["glad\U0001f600", "sad"],
            "x-enum-name": "Mood",
            "default": "glad\U0001f600",
        },
        "text": {"type": "string", "pattern": "^\U0001d518+$", "default": "\U0001d518\U0001d518"},
        "tally": {"type": "object", "additionalProperties": {"type": "integer"}, "default": {"\U0001f600": 1}},
        "extra": {"x-tree": {}, "default": {"\U0001f600": ["\U0001f600"]}},
    },
}


def test_characters_past_the_basic_plane_are_the_same_in_generated_code(tmp_path: Path) -> None:
    """JSON writes such a character as a surrogate pair, which a Python literal reads as two lone
    surrogates: the generated module failed at import (``UnicodeEncodeError``), and its enum
    member, defaults and pattern were not the schema's."""
    with _generated(tmp_path, {"astral/Note.v1.json": ASTRAL}, "twgen_astral", "astral") as (module, runtime):
        assert _norm(mi.type_info(module.Note)) == _norm(mi.type_info(runtime.type("astral.Note")))
        note = module.Note()
        assert (note.mood.value, note.text, note.tally, note.extra) == (
            "glad\U0001f600",
            "\U0001d518\U0001d518",
            {"\U0001f600": 1},
            {"\U0001f600": ["\U0001f600"]},
        )
        assert msgspec.msgpack.encode(note) == msgspec.msgpack.encode(runtime.type("astral.Note")())


def test_a_tuple_default_holding_a_list_or_a_map_is_fresh_per_instance(tmp_path: Path) -> None:
    """msgspec makes a fresh copy of a default only for an empty list or map; a tuple default
    holding one was shared by every instance in both back ends, so changing one instance's list
    changed the default of every later instance."""
    doc = {
        "$id": "tup.Pair",
        "x-version": 1,
        "type": "object",
        "properties": {
            "listed": {
                "type": "array",
                "prefixItems": [{"type": "array", "items": {"type": "integer"}}, {"type": "integer"}],
                "default": [[1], 2],
            },
            "mapped": {
                "type": "array",
                "prefixItems": [{"type": "object", "additionalProperties": {"type": "integer"}}],
                "default": [{}],
            },
        },
    }
    with _generated(tmp_path, {"tup/Pair.v1.json": doc}, "twgen_tup", "tup") as (module, runtime):
        for cls in (module.Pair, runtime.type("tup.Pair")):
            changed = cls()
            changed.listed[0].append(3)
            changed.mapped[0]["a"] = 1
            assert (cls().listed, cls().mapped) == (([1], 2), ({},)), cls
        assert _norm(mi.type_info(module.Pair)) == _norm(mi.type_info(runtime.type("tup.Pair")))


def test_a_value_equal_to_a_string_default_is_written_alike_by_both_back_ends(tmp_path: Path) -> None:
    """msgspec leaves a field out where its value is the default object itself. Generated source
    holds a default of ASCII letters, digits and underscores as an interned constant, so the
    caller's equal literal is that object and the field was left out; the run-time class held the
    string JSON gave, another object, and wrote it: the same message made other bytes."""
    doc = {
        "$id": "dflt.Mode",
        "x-version": 1,
        "type": "object",
        "properties": {
            "mode": {"type": "string", "default": "fast_1"},
            "unit": {"type": ["string", "null"], "default": "px"},
            "label": {"type": "string", "default": "a b"},
        },
    }
    with _generated(tmp_path, {"dflt/Mode.v1.json": doc}, "twgen_dflt", "dflt") as (module, runtime):
        values = {"mode": "fast_1", "unit": "px", "label": "a b"}
        written = [msgspec.msgpack.encode(cls(**values)) for cls in (module.Mode, runtime.type("dflt.Mode"))]
        assert written[0] == written[1] == msgspec.msgpack.encode({"label": "a b"})
