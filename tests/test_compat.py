"""The compatibility checker: every rule fires on its change, modes pick sides, CLI formats and git."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

import tensorwire as tw
from tensorwire.cli import main
from tensorwire.compat import RULES, compare, reader_accepts
from tensorwire.dtypes import DTYPE_NAMES, DTYPES
from tensorwire.errors import printable
from tensorwire.schema import load_dir
from tests.compat_cases import BASE, CASES, _props, _thing, _variant
from tests.conftest import write_schemas


def _dirs(tmp_path: Path, change: Callable[[dict[str, Any]], Any]) -> tuple[Any, Any]:
    new_docs = copy.deepcopy(BASE)
    change(new_docs)
    return load_dir(write_schemas(tmp_path / "old", copy.deepcopy(BASE))), load_dir(
        write_schemas(tmp_path / "new", new_docs)
    )


@pytest.mark.parametrize(("rule_id", "change"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_fires_on_its_change(tmp_path: Path, rule_id: str, change: Callable[[dict[str, Any]], Any]) -> None:
    old, new = _dirs(tmp_path, change)
    findings = compare(old, new, "full")
    fired = {f.rule for f in findings}
    assert rule_id in fired, [(f.rule, f.message) for f in findings]
    finding = next(f for f in findings if f.rule == rule_id)
    assert finding.side == _side(finding, findings) and finding.severity == RULES[rule_id].severity
    if RULES[rule_id].severity == "error" and finding.type_id == "t.Thing" and finding.version == 1:
        assert "VERSION_NOT_BUMPED" in fired


def _side(finding: Any, findings: list[Any]) -> str:
    """The side a finding must name: its rule's, but VERSION_NOT_BUMPED names what its type's
    breaking changes break."""
    if finding.rule != "VERSION_NOT_BUMPED":
        return RULES[finding.rule].side
    broken = {
        f.side for f in findings if f.severity == "error" and f.rule != finding.rule and f.type_id == finding.type_id
    }
    return "both" if "both" in broken or len(broken) == 2 else broken.pop()


FIXTURES = sorted(p for p in (Path(__file__).parent / "compat").iterdir() if p.is_dir())


@pytest.mark.parametrize("pair", FIXTURES, ids=[p.name for p in FIXTURES])
def test_every_fixture_pair_fires_its_rule(pair: Path) -> None:
    findings = compare(load_dir(pair / "old"), load_dir(pair / "new"), "full")
    matching = [f for f in findings if f.rule == pair.name]
    assert matching, [(f.rule, f.message) for f in findings]
    assert matching[0].side == _side(matching[0], findings) and matching[0].severity == RULES[pair.name].severity


def test_there_is_a_fixture_pair_for_every_rule_and_they_are_current(tmp_path: Path) -> None:
    from tests import compat_cases

    assert {p.name for p in FIXTURES} == set(RULES)
    compat_cases.write(tmp_path / "compat")  # the committed fixtures are what the cases produce
    fresh = {p.relative_to(tmp_path / "compat"): p.read_text() for p in (tmp_path / "compat").rglob("*.json")}
    committed = {
        p.relative_to(Path(__file__).parent / "compat"): p.read_text()
        for p in (Path(__file__).parent / "compat").rglob("*.json")
    }
    assert fresh == committed


def test_the_catalogue_is_large_and_every_rule_is_documented() -> None:
    assert len(RULES) >= 35
    assert all(r.purpose and r.severity in ("error", "warning", "info") for r in RULES.values())
    tested = {c[0] for c in CASES}
    assert len(tested) >= 35


def test_an_unchanged_directory_is_clean(tmp_path: Path) -> None:
    old, new = _dirs(tmp_path, lambda d: None)
    assert compare(old, new) == []


def test_modes_pick_the_side_that_breaks(tmp_path: Path) -> None:
    old, new = _dirs(tmp_path, _thing(lambda t: t["$defs"]["Mode"]["enum"].append("eco")))  # breaks old readers
    assert {f.rule for f in compare(old, new, "forward")} == {"ENUM_MEMBER_ADDED", "VERSION_NOT_BUMPED"}
    assert compare(old, new, "backward") == []
    assert compare(old, new, "none") == []
    assert reader_accepts(new, old) == []  # new readers accept what old writers write
    # the old reader, seen from the new writer: the old schema lacks a member the writer sends
    assert [f.rule for f in reader_accepts(old, new)] == ["ENUM_MEMBER_REMOVED", "VERSION_NOT_BUMPED"]


def test_suppressions_keep_the_finding_visible(tmp_path: Path) -> None:
    def change(docs: dict[str, Any]) -> None:
        thing = docs["t/Thing.v1.json"]
        thing["$defs"]["Mode"]["enum"].append("eco")
        _props(thing)["mode"]["x-compat-ignore"] = [
            {"rule": "ENUM_MEMBER_ADDED", "reason": "all readers upgraded first"}
        ]

    old, new = _dirs(tmp_path, change)
    findings = compare(old, new)
    assert [(f.rule, f.severity, f.suppressed) for f in findings] == [
        ("ENUM_MEMBER_ADDED", "info", "all readers upgraded first")
    ]


def test_a_suppression_s_reason_is_shown_escaped_in_the_text_and_github_formats(tmp_path: Path) -> None:
    """The reason of an ``x-compat-ignore`` was printed as written: a newline in it forged a line
    that reads as a finding of another file, and ESC and bidirectional overrides reached the
    terminal."""
    from tensorwire.compat._report import render

    reason = "ok\nschemas/other.json:1:1: FORGED_FINDING [breaks old readers] \x1b]0;title\x07\u202e"

    def change(docs: dict[str, Any]) -> None:
        thing = docs["t/Thing.v1.json"]
        thing["$defs"]["Mode"]["enum"].append("eco")
        _props(thing)["mode"]["x-compat-ignore"] = [{"rule": "ENUM_MEMBER_ADDED", "reason": reason}]

    old, new = _dirs(tmp_path, change)
    findings = compare(old, new)
    assert [f.suppressed for f in findings] == [reason]  # the finding keeps it as written (JSON escapes it)
    for fmt in ("text", "github"):
        shown = render(findings, fmt)
        assert "\n" not in shown and "\x1b" not in shown and "\u202e" not in shown, fmt
        assert "suppressed: ok\\nschemas/other.json:1:1: FORGED_FINDING" in shown, fmt
        assert "\\x1b]0;title\\x07\\u202e]" in shown, fmt


def test_a_suppression_of_a_retired_rule_covers_the_rules_that_replaced_it(tmp_path: Path) -> None:
    """``SET_SEMANTICS_CHANGED`` became ``ARRAY_MADE_SET`` and ``SET_MADE_ARRAY``: a schema that
    ignored it keeps its change accepted, for the same reason."""

    def change(docs: dict[str, Any]) -> None:
        tags = _props(docs["t/Thing.v1.json"])["tags"]
        tags["uniqueItems"] = True
        tags["x-compat-ignore"] = [{"rule": "SET_SEMANTICS_CHANGED", "reason": "no writer repeats a tag"}]

    old, new = _dirs(tmp_path, change)
    assert [(f.rule, f.severity, f.suppressed) for f in compare(old, new)] == [
        ("ARRAY_MADE_SET", "info", "no writer repeats a tag")
    ]
    back = [(f.rule, f.severity, f.suppressed) for f in compare(new, old)]  # (the ignore is new's alone)
    assert back == [("SET_MADE_ARRAY", "error", None), ("VERSION_NOT_BUMPED", "error", None)]


def test_a_suppression_is_read_in_the_file_that_declares_the_changed_type(tmp_path: Path) -> None:
    """A change inside a type of another file's ``$defs`` was looked up at its pointer in the
    message's own file: an ignore there, on an unrelated entry of the same name, accepted it (exit
    0 for a field old readers require), and one where the type is declared was not read."""
    integer = {"type": "integer"}
    part: dict[str, Any] = {"type": "object", "properties": {"a": integer, "b": integer}, "required": ["a", "b"]}
    decoy: dict[str, Any] = {"type": "object", "properties": {"z": integer}, "required": ["z"]}
    decoy["x-compat-ignore"] = [{"rule": "FIELD_DELETED", "reason": "another type"}]
    lib = {**_msg({"n": {"type": "integer"}}, ["n"]), "$id": "t.Lib", "$defs": {"Part": part}}
    msg = {**_msg({"p": {"$ref": "Lib.v1.json#/$defs/Part"}}, ["p"]), "$id": "t.Msg", "$defs": {"Part": decoy}}
    old = load_dir(write_schemas(tmp_path / "old", {"t/Lib.v1.json": lib, "t/Msg.v1.json": msg}))
    new_part = copy.deepcopy(part)
    del new_part["properties"]["a"]
    new_part["required"] = ["b"]
    new_lib = {**lib, "$defs": {"Part": new_part}}
    new = load_dir(write_schemas(tmp_path / "new", {"t/Lib.v1.json": new_lib, "t/Msg.v1.json": msg}))
    found = [(f.type_id, f.rule, f.suppressed) for f in compare(old, new)]
    assert found == [("t.Msg", "FIELD_DELETED", None), ("t.Msg", "VERSION_NOT_BUMPED", None)]
    new_part["x-compat-ignore"] = [{"rule": "FIELD_DELETED", "reason": "no reader reads a"}]
    new = load_dir(write_schemas(tmp_path / "new", {"t/Lib.v1.json": new_lib, "t/Msg.v1.json": msg}))
    assert [(f.type_id, f.rule, f.suppressed) for f in compare(old, new)] == [
        ("t.Msg", "FIELD_DELETED", "no reader reads a")
    ]


def test_a_suppression_on_a_variant_declared_in_place_covers_its_changes_alone(tmp_path: Path) -> None:
    """A finding's pointer into a ``oneOf`` list was not followed: an ignore on a variant declared
    in the list itself was never read. It now covers that variant's changes, not its sibling's."""

    def variant(tag: str, fields: dict[str, Any]) -> dict[str, Any]:
        props = {"kind": {"const": tag}, "n": {"type": "integer"}, **fields}
        return {"type": "object", "properties": props, "required": ["n", *fields]}

    def doc(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return _msg({"u": {"oneOf": [a, b], "discriminator": {"propertyName": "kind"}}}, ["u"])

    size = {"size": {"type": "integer"}}
    old = load_dir(write_schemas(tmp_path / "old", {"p/Msg.v1.json": doc(variant("a", {}), variant("b", {}))}))
    accepted = {**variant("a", size), "x-compat-ignore": [{"rule": "FIELD_ADDED_REQUIRED", "reason": "no writer left"}]}
    new_dir = write_schemas(tmp_path / "new", {"p/Msg.v1.json": doc(accepted, variant("b", size))})
    found = [(f.rule, f.pointer, f.suppressed) for f in compare(old, load_dir(new_dir), "backward")]
    assert found == [
        ("FIELD_ADDED_REQUIRED", "/properties/u/oneOf/0/properties/size", "no writer left"),
        ("FIELD_ADDED_REQUIRED", "/properties/u/oneOf/1/properties/size", None),
        ("VERSION_NOT_BUMPED", "/x-version", None),
    ]


def test_a_suppression_needs_a_reason(tmp_path: Path) -> None:
    docs = copy.deepcopy(BASE)
    _props(docs["t/Thing.v1.json"])["mode"]["x-compat-ignore"] = [{"rule": "ENUM_MEMBER_ADDED", "reason": ""}]
    with pytest.raises(tw.SchemaError, match=r"x-compat-ignore/0/reason: '' should be non-empty"):
        load_dir(write_schemas(tmp_path, docs))


# -- behaviour: what the rules predict is what decoding does --------------------------------------


def test_an_unbumped_version_names_the_side_its_changes_break(tmp_path: Path) -> None:
    def removed_member(d: dict[str, Any]) -> None:  # breaks old writers only
        d["t/Thing.v1.json"]["$defs"]["Mode"]["enum"].pop()

    def both(d: dict[str, Any]) -> None:  # and a new required field breaks old writers, a deleted one old readers
        removed_member(d)
        del d["t/Thing.v1.json"]["properties"]["ratio"]
        d["t/Thing.v1.json"]["required"].remove("ratio")

    for change, side, text in ((removed_member, "old writers", "1 breaking"), (both, "both", "2 breaking")):
        old, new = _dirs(tmp_path / side, change)
        bumped = [f for f in compare(old, new, "full") if f.rule == "VERSION_NOT_BUMPED"]
        assert [(f.side, f.message.split(" change")[0]) for f in bumped] == [(side, f"t.Thing v1 has {text}")]


def test_reordering_or_reformatting_a_file_is_no_change_and_a_description_is_documentation(tmp_path: Path) -> None:
    def reorder(d: dict[str, Any]) -> None:
        thing = d["t/Thing.v1.json"]
        thing["properties"]["image"]["x-tensor"]["dtypes"].reverse()
        thing["properties"] = dict(reversed(list(thing["properties"].items())))
        d["t/Thing.v1.json"] = dict(reversed(list(thing.items())))

    old, new = _dirs(tmp_path / "a", reorder)
    assert compare(old, new, "full") == []

    def group(fields: list[str]) -> Any:
        return _dirs(
            tmp_path / "/".join(fields), _thing(lambda t: t.update({"x-constraints": {"at_most_one_of": fields}}))
        )[1]

    assert compare(group(["note", "extra"]), group(["extra", "note"]), "full") == []  # a group's fields are a set
    old, new = _dirs(tmp_path / "b", lambda d: d["t/Thing.v1.json"]["properties"]["name"].update(title="Name"))
    assert [(f.rule, f.message) for f in compare(old, new, "full")] == [
        ("DOC_CHANGED", "t.Thing v1: documentation changed")
    ]


def test_a_new_major_version_says_whether_it_replaced_the_old_one(tmp_path: Path) -> None:
    v2 = {**_variant("t.A", "a"), "x-version": 2}
    old, new = _dirs(tmp_path / "beside", lambda d: d.update({"t/A.v2.json": v2}))
    added = [f.message for f in compare(old, new, "full") if f.rule == "MAJOR_VERSION_ADDED"]
    assert added == ["t.A v2 added beside v1"]
    c1, c2 = _variant("t.C", "c"), {**_variant("t.C", "c"), "x-version": 2}  # a type nothing else refers to
    c2["properties"] = {**c2["properties"], "extra": {"type": "integer", "default": 0}}  # not a renamed twin
    old = load_dir(write_schemas(tmp_path / "instead" / "old", {**copy.deepcopy(BASE), "t/C.v1.json": c1}))
    new = load_dir(write_schemas(tmp_path / "instead" / "new", {**copy.deepcopy(BASE), "t/C.v2.json": c2}))
    findings = compare(old, new, "full")
    assert [f.message for f in findings if f.rule == "MAJOR_VERSION_ADDED"] == [
        "t.C v2 added in place of v1, which was removed"
    ]
    assert [f.message for f in findings if f.rule == "TYPE_DELETED"] == ["t.C v1 was removed"]


def _registry(root: Path, docs: dict[str, Any]) -> tw.Registry:
    return tw.load_schemas(write_schemas(root, docs))


@pytest.mark.parametrize(
    ("rule_id", "change", "old_sends", "new_sends"),
    [
        ("FIELD_ADDED_OPTIONAL", _thing(lambda t: _props(t).update(size={"type": "integer", "default": 1})), {}, {}),
        (
            "FIELD_ADDED_REQUIRED",
            _thing(lambda t: (_props(t).update(size={"type": "integer"}), t["required"].append("size"))),
            {},
            {"size": 2},
        ),
        (
            "ENUM_MEMBER_ADDED",
            _thing(lambda t: t["$defs"]["Mode"]["enum"].append("eco")),
            {"mode": "fast"},
            {"mode": "eco"},
        ),
        ("RANGE_TIGHTENED", _thing(lambda t: _props(t)["count"].update(maximum=50)), {"count": 75}, {"count": 25}),
        (
            "RANGE_TIGHTENED",
            _thing(lambda t: _props(t)["count"].update(exclusiveMaximum=100)),
            {"count": 100},
            {"count": 99},
        ),
        ("RANGE_TIGHTENED", _thing(lambda t: _props(t)["count"].update(multipleOf=5)), {"count": 7}, {"count": 10}),
        ("RANGE_LOOSENED", _thing(lambda t: _props(t)["name"].update(maxLength=20)), {"name": "x"}, {"name": "y" * 15}),
        ("CONST_ADDED", _thing(lambda t: _props(t)["level"].update(const=0)), {"level": 5}, {"level": 0}),
        ("PATTERN_ADDED", _thing(lambda t: _props(t)["name"].update(pattern="^[a-z]*$")), {"name": "A"}, {"name": "a"}),
        (
            "DEFAULT_CHANGED",
            _thing(lambda t: _props(t)["mode"].update(default="slow")),
            {"mode": "fast"},
            {"mode": "slow"},
        ),
    ],
)
def test_rules_agree_with_decoding(
    tmp_path: Path,
    rule_id: str,
    change: Callable[[dict[str, Any]], Any],
    old_sends: dict[str, Any],
    new_sends: dict[str, Any],
) -> None:
    """Old writer -> new reader fails exactly when the rule breaks old writers; new -> old likewise for readers."""
    import torch

    new_docs = copy.deepcopy(BASE)
    change(new_docs)
    old_reg, new_reg = _registry(tmp_path / "o", copy.deepcopy(BASE)), _registry(tmp_path / "n", new_docs)

    def travels(writer: tw.Registry, reader: tw.Registry, extra: dict[str, Any]) -> bool:
        cls = writer.type("t.Thing")
        values = {"name": "x", "count": 1, "ratio": 0.5, "image": torch.zeros(1, 2, 2), **extra}
        message = cls(**{k: _coerce(cls, k, v) for k, v in values.items()})
        try:
            out = tw.Decoder(reader).decode(tw.Encoder().encode(message))
        except tw.DecodeError:
            return False
        shared = [k for k in values if k != "image" and hasattr(out, k)]
        return all(_plain(getattr(out, k)) == _plain(values[k]) for k in shared)

    side = RULES[rule_id].side
    assert travels(old_reg, new_reg, old_sends) == (side not in ("old writers", "both"))  # BACKWARD
    assert travels(new_reg, old_reg, new_sends) == (side not in ("old readers", "both"))  # FORWARD


def _coerce(cls: type, name: str, value: Any) -> Any:
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    field = next(f for f in info.fields if f.name == name)
    if isinstance(field.type, msgspec.inspect.EnumType):
        return field.type.cls(value)
    return value


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


def _msg(props: dict[str, Any], required: list[str], **extra: Any) -> dict[str, Any]:
    return {"$id": "p.Msg", "x-version": 1, "type": "object", "properties": props, "required": required, **extra}


def _union(b_fields: dict[str, Any], b_required: list[str]) -> dict[str, Any]:
    """``p.Msg`` with a union of two variants declared in its ``$defs``, ``B`` with these fields."""
    variant = {"type": "object", "properties": {"kind": {"const": "b"}, **b_fields}, "required": b_required}
    union = {"oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}], "discriminator": {"propertyName": "kind"}}
    a_fields = {"kind": {"const": "a"}, "n": {"type": "integer"}}
    defs = {"A": {"type": "object", "properties": a_fields, "required": ["n"]}, "B": {**variant, "title": "B"}}
    return _msg({"u": union}, ["u"], **{"$defs": defs})


def _retitled(title: str, b_fields: dict[str, Any]) -> dict[str, Any]:
    """``_union`` with its variant ``B`` titled ``title`` (its class name)."""
    doc = _union(b_fields, ["n"])
    doc["$defs"]["B"]["title"] = title
    return doc


_N, _S = {"n": {"type": "integer"}}, {"s": {"type": "string"}}


def _tagged(**variants: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """``p.Msg`` with a union ``u`` of variants declared in its ``$defs``: name=(tag, fields)."""
    defs = {
        name: {"type": "object", "title": name, "properties": {"kind": {"const": tag}, **fields}, "required": [*fields]}
        for name, (tag, fields) in variants.items()
    }
    union = {"oneOf": [{"$ref": f"#/$defs/{name}"} for name in defs], "discriminator": {"propertyName": "kind"}}
    return _msg({"u": union}, ["u"], **{"$defs": defs})


def _variant_alone(tag: str, fields: dict[str, Any]) -> dict[str, Any]:
    """``p.Msg`` whose field ``u`` is struct ``A`` of its ``$defs``, tagged ``kind=tag``: no union."""
    variant = {"type": "object", "title": "A", "properties": {"kind": {"const": tag}, **fields}, "required": [*fields]}
    return _msg({"u": {"$ref": "#/$defs/A"}}, ["u"], **{"$defs": {"A": variant}})


def _each_variant(registry: tw.Registry) -> list[Any]:
    """A ``p.Msg`` holding each variant of its union ``u`` (``n=2**63 - 1`` or ``s="héllo"``)."""
    out = []
    for name in sorted(registry.nested_types()):
        cls = registry.type(name)
        fields = {f.name for f in msgspec.structs.fields(cls)}
        out.append(registry.type("p.Msg")(u=cls(**({"n": 2**63 - 1} if "n" in fields else {"s": "héllo"}))))
    return out


def _one_of(registry: tw.Registry, *names: str) -> Any:
    """The nested type of ``registry`` by the one of ``names`` it has."""
    return next(registry.type(n) for n in names if n in registry.nested_types())


def _nested(registry: tw.Registry, name: str, **values: Any) -> Any:
    """An instance of the nested type ``p.<name>`` of ``registry``."""
    return registry.type(f"p.{name}")(**values)


def _transposed(registry: tw.Registry) -> Any:
    """A ``p.Msg`` holding a transposed tensor, which travels with its strides (not contiguous)."""
    import torch

    return registry.type("p.Msg")(t=torch.zeros(4, 4).t())


def _cpu_tensor() -> Any:
    return _tensor(2)


def _tensor(*shape: int) -> Any:
    import torch

    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)


def _every_dtype(registry: tw.Registry) -> list[Any]:
    """A ``p.Msg`` for each dtype its tensor ``t`` may have: every dtype of the table (numpy's, for
    an ``x-ndarray``)."""
    import numpy as np

    cls = registry.type("p.Msg")
    tensor = next(f for f in msgspec.structs.fields(cls) if f.name == "t").type
    if "ndarray" in repr(tensor):
        return [cls(t=np.arange(3).astype(d.numpy_name)) for d in DTYPES.values() if d.numpy_name]
    return [cls(t=_tensor(3).sub(1).to(_torch_dtype(name))) for name in DTYPE_NAMES]


def _tensors(shape: list[Any]) -> dict[str, Any]:
    """An array of tensors of this shape."""
    return {"type": "array", "items": {"x-tensor": {"shape": shape}}}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, DTYPES[name].torch_name)


# (id, old p.Msg, new p.Msg, mode, the rule it breaks, the message its writer side sends)
UNSOUND: list[tuple[str, dict[str, Any], dict[str, Any], str, str, Callable[[tw.Registry], Any]]] = [
    (
        "inline-union-variant-field-retyped",
        _union({"n": {"type": "integer"}}, ["n"]),
        _union({"n": {"type": "string"}}, ["n"]),
        "backward",
        "TYPE_CHANGED",
        lambda reg: reg.type("p.Msg")(u=_nested(reg, "B", n=3)),
    ),
    (
        "integer-widened-to-a-number-with-a-higher-minimum",
        _msg({"x": {"type": "integer", "minimum": 0}}, ["x"]),
        _msg({"x": {"type": "number", "minimum": 50}}, ["x"]),
        "backward",
        "RANGE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(x=10),
    ),
    (
        "number-narrowed-to-an-integer-with-a-higher-maximum",
        _msg({"x": {"type": "number", "maximum": 10}}, ["x"]),
        _msg({"x": {"type": "integer", "maximum": 100}}, ["x"]),
        "forward",
        "RANGE_LOOSENED",
        lambda reg: reg.type("p.Msg")(x=50),
    ),
    (
        "integer-above-2**53-widened-to-a-number",  # 2**53 + 1 decodes as the float 2**53
        _msg({"x": {"type": "integer"}}, ["x"]),
        _msg({"x": {"type": "number"}}, ["x"]),
        "backward",
        "TYPE_WIDENED_LOSSY",
        lambda reg: reg.type("p.Msg")(x=2**53 + 1),
    ),
    (
        "number-narrowed-to-an-integer-above-2**53",
        _msg({"x": {"type": "number"}}, ["x"]),
        _msg({"x": {"type": "integer", "minimum": 0}}, ["x"]),
        "forward",
        "TYPE_NARROWED_LOSSY",
        lambda reg: reg.type("p.Msg")(x=2**53 + 1),
    ),
    (
        "array-made-a-set",  # ["a", "a"] decodes as {"a"}
        _msg({"x": {"type": "array", "items": {"type": "string"}}}, ["x"]),
        _msg({"x": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}, ["x"]),
        "backward",
        "ARRAY_MADE_SET",
        lambda reg: reg.type("p.Msg")(x=["a", "a"]),
    ),
    (
        "set-made-an-array",
        _msg({"x": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}, ["x"]),
        _msg({"x": {"type": "array", "items": {"type": "string"}}}, ["x"]),
        "forward",
        "SET_MADE_ARRAY",
        lambda reg: reg.type("p.Msg")(x=["a", "a"]),
    ),
    (
        "tensor-devices-shrunk",  # a decoder refuses a tensor on a device its schema does not list
        _msg({"t": {"x-tensor": {"devices": ["cpu", "cuda"]}}}, ["t"]),
        _msg({"t": {"x-tensor": {"devices": ["cuda"]}}}, ["t"]),
        "backward",
        "TENSOR_DEVICES_SHRUNK",
        lambda reg: reg.type("p.Msg")(t=_cpu_tensor()),
    ),
    (
        "tensor-devices-grown",
        _msg({"t": {"x-tensor": {"devices": ["cuda"]}}}, ["t"]),
        _msg({"t": {"x-tensor": {"devices": ["cpu", "cuda"]}}}, ["t"]),
        "forward",
        "TENSOR_DEVICES_GROWN",
        lambda reg: reg.type("p.Msg")(t=_cpu_tensor()),
    ),
    (
        "named-dim-renamed-in-one-of-two-tensors",  # u's size no longer has to agree with t's
        _msg({"t": {"x-tensor": {"shape": ["c", "h"]}}, "u": {"x-tensor": {"shape": ["c"]}}}, ["t", "u"]),
        _msg({"t": {"x-tensor": {"shape": ["k", "h"]}}, "u": {"x-tensor": {"shape": ["c"]}}}, ["t", "u"]),
        "forward",
        "TENSOR_SHAPE_LOOSENED",
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 3), u=_tensor(5)),
    ),
    (
        "named-dim-renamed-onto-another-that-kept-its-name",  # t's and u's sizes now have to agree
        _msg({"t": {"x-tensor": {"shape": ["a", "a"]}}, "u": {"x-tensor": {"shape": ["b", "b"]}}}, ["t", "u"]),
        _msg({"t": {"x-tensor": {"shape": ["b", "b"]}}, "u": {"x-tensor": {"shape": ["b", "b"]}}}, ["t", "u"]),
        "backward",
        "TENSOR_SHAPE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 2), u=_tensor(3, 3)),
    ),
    (
        "free-dim-of-a-kept-field-made-a-name-other-axes-have",  # u's size now has to agree with t's
        _msg({"t": {"x-tensor": {"shape": ["a", "a"]}}, "u": {"x-tensor": {"shape": [None]}}}, ["t", "u"]),
        _msg({"t": {"x-tensor": {"shape": ["b", "b"]}}, "u": {"x-tensor": {"shape": ["b"]}}}, ["t", "u"]),
        "backward",
        "TENSOR_SHAPE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 2), u=_tensor(3)),
    ),
    (
        "inline-union-variant-retitled-and-its-field-retyped",
        _retitled("B", {"n": {"type": "integer"}}),
        _retitled("Bee", {"n": {"type": "string"}}),
        "backward",
        "TYPE_CHANGED",
        lambda reg: reg.type("p.Msg")(u=_nested(reg, "B", n=3)),
    ),
    (
        "tie-of-one-tensor-split",  # old readers want a square
        _msg({"t": {"x-tensor": {"shape": ["a", "a"]}}}, ["t"]),
        _msg({"t": {"x-tensor": {"shape": ["a", "b"]}}}, ["t"]),
        "forward",
        "TENSOR_SHAPE_LOOSENED",
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 3)),
    ),
    (
        "free-dim-of-the-tensors-of-an-array-named",  # the items' sizes must now agree
        _msg({"t": {"type": "array", "items": {"x-tensor": {"shape": [None]}}}}, ["t"]),
        _msg({"t": {"type": "array", "items": {"x-tensor": {"shape": ["n"]}}}}, ["t"]),
        "backward",
        "TENSOR_SHAPE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(t=[_tensor(2), _tensor(3)]),
    ),
    (
        "enum-made-a-string-that-rejects-a-member",
        _msg({"x": {"type": "string", "enum": ["a", "bb"], "x-enum-name": "Mode"}}, ["x"]),
        _msg({"x": {"type": "string", "maxLength": 1}}, ["x"]),
        "backward",
        "TYPE_CHANGED",
        lambda reg: msgspec.convert({"x": "bb"}, reg.type("p.Msg")),
    ),
    (
        "tuple-made-a-shorter-array",
        _msg({"x": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}]}}, ["x"]),
        _msg({"x": {"type": "array", "items": {"type": "integer"}, "maxItems": 1}}, ["x"]),
        "backward",
        "TYPE_CHANGED",
        lambda reg: msgspec.convert({"x": [1, 2]}, reg.type("p.Msg")),
    ),
    (
        "float-step-divided-by-three",  # 0.3 is not three times 0.1 in binary: fmod(0.3, 0.1) != 0
        _msg({"x": {"type": "number", "multipleOf": 0.3}}, ["x"]),
        _msg({"x": {"type": "number", "multipleOf": 0.1}}, ["x"]),
        "backward",
        "RANGE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(x=0.3),
    ),
    (
        "struct-tag-value-changed",
        _msg({"kind": {"const": "a"}, "n": {"type": "integer"}}, ["n"]),
        _msg({"kind": {"const": "b"}, "n": {"type": "integer"}}, ["n"]),
        "backward",
        "CONST_CHANGED",
        lambda reg: reg.type("p.Msg")(n=1),
    ),
    (
        "tag-added-to-a-closed-struct",
        _msg({"n": {"type": "integer"}}, ["n"], additionalProperties=False),
        _msg({"kind": {"const": "a"}, "n": {"type": "integer"}}, ["n"], additionalProperties=False),
        "forward",
        "FIELD_ADDED_TO_CLOSED",
        lambda reg: reg.type("p.Msg")(n=1),
    ),
    (
        "tag-removed-from-a-closed-struct",
        _msg({"kind": {"const": "a"}, "n": {"type": "integer"}}, ["n"], additionalProperties=False),
        _msg({"n": {"type": "integer"}}, ["n"], additionalProperties=False),
        "backward",
        "FIELD_DELETED_FROM_CLOSED",
        lambda reg: reg.type("p.Msg")(n=1),
    ),
    (
        "field-made-the-tag",
        _msg({"kind": {"type": "string", "default": "a"}, "n": {"type": "integer"}}, ["n"]),
        _msg({"kind": {"const": "a"}, "n": {"type": "integer"}}, ["n"]),
        "backward",
        "CONST_ADDED",
        lambda reg: reg.type("p.Msg")(kind="z", n=1),
    ),
    (
        "string-const-made-an-enum-holding-it",  # old readers take "a" alone
        _msg({"kind": {"const": "t"}, "x": {"type": "string", "const": "a"}}, ["x"]),
        _msg({"kind": {"const": "t"}, "x": {"type": "string", "enum": ["a", "b"], "x-enum-name": "Two"}}, ["x"]),
        "forward",
        "CONST_REMOVED",
        lambda reg: msgspec.convert({"x": "b"}, reg.type("p.Msg")),
    ),
    (
        "struct-made-a-union-beside-another",  # old readers know no tag "b"
        _variant_alone("a", _N),
        _tagged(A=("a", _N), B=("b", _S)),
        "forward",
        "UNION_VARIANT_ADDED",
        lambda reg: _each_variant(reg)[-1],
    ),
    (
        "union-made-one-of-its-variants",  # new readers know no tag "b"
        _tagged(A=("a", _N), B=("b", _S)),
        _variant_alone("a", _N),
        "backward",
        "UNION_VARIANT_REMOVED",
        lambda reg: _each_variant(reg)[-1],
    ),
    (
        "tag-made-a-field-of-another-type",  # old writers send the tag "a" where new readers want an integer
        _msg({"kind": {"const": "a"}, "n": {"type": "integer"}}, ["n"]),
        _msg({"kind": {"type": "integer", "default": 0}, "n": {"type": "integer"}}, ["n"]),
        "backward",
        "TYPE_CHANGED",
        lambda reg: reg.type("p.Msg")(n=1),
    ),
    (
        "tag-made-a-string-field",  # old readers take no value but their tag there
        _msg({"kind": {"const": "a"}, "n": {"type": "integer"}}, ["n"]),
        _msg({"kind": {"type": "string", "default": "a"}, "n": {"type": "integer"}}, ["n"]),
        "forward",
        "CONST_REMOVED",
        lambda reg: reg.type("p.Msg")(kind="z", n=1),
    ),
    (
        "field-of-another-type-made-the-tag",  # new writers send the tag "a" where old readers want an integer
        _msg({"kind": {"type": "integer", "default": 0}, "n": {"type": "integer"}}, ["n"]),
        _msg({"kind": {"const": "a"}, "n": {"type": "integer"}}, ["n"]),
        "forward",
        "TYPE_CHANGED",
        lambda reg: reg.type("p.Msg")(n=1),
    ),
    (
        "tensor-contiguity-dropped",
        _msg({"t": {"x-tensor": {"contiguous": True}}}, ["t"]),
        _msg({"t": {"x-tensor": {}}}, ["t"]),
        "forward",
        "TENSOR_CONTIGUITY_DROPPED",
        _transposed,
    ),
    (
        "integer-made-a-number-on-tenths",  # fmod(3, 0.1) is not 0: 0.1 is no divisor of 1 in binary
        _msg({"x": {"type": "integer", "minimum": 0, "maximum": 100}}, ["x"]),
        _msg({"x": {"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.1}}, ["x"]),
        "backward",
        "RANGE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(x=3),
    ),
    (
        "integer-made-a-number-on-steps-of-1.5",
        _msg({"x": {"type": "integer", "minimum": 0, "maximum": 100}}, ["x"]),
        _msg({"x": {"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 1.5}}, ["x"]),
        "backward",
        "RANGE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(x=1),
    ),
    (
        "integer-const-made-a-range-without-it",
        _msg({"x": {"type": "integer", "const": 5}}, ["x"]),
        _msg({"x": {"type": "integer", "minimum": 6, "maximum": 10}}, ["x"]),
        "backward",
        "RANGE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "integer-const-made-a-number-on-a-step-it-misses",
        _msg({"x": {"type": "integer", "const": 5}}, ["x"]),
        _msg({"x": {"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 2}}, ["x"]),
        "backward",
        "RANGE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "range-made-a-const-outside-it",
        _msg({"x": {"type": "integer", "minimum": 0, "maximum": 4}}, ["x"]),
        _msg({"x": {"type": "integer", "const": 5}}, ["x"]),
        "forward",
        "RANGE_LOOSENED",
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "range-of-one-made-another-const",
        _msg({"x": {"type": "integer", "minimum": 5, "maximum": 5}}, ["x"]),
        _msg({"x": {"type": "integer", "const": 6}}, ["x"]),
        "backward",
        "CONST_ADDED",
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "fixed-dims-3-and-4-named-alike",  # old writers' sizes differ where the name ties them
        _msg({"t": _tensors([3]), "u": _tensors([4])}, ["t", "u"]),
        _msg({"t": _tensors(["n"]), "u": _tensors(["n"])}, ["t", "u"]),
        "backward",
        "TENSOR_SHAPE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(t=[_tensor(3)], u=[_tensor(4)]),
    ),
    (
        "fixed-and-free-dims-named-alike",
        _msg({"t": _tensors([3]), "u": {"x-tensor": {"shape": [None]}}}, ["t", "u"]),
        _msg({"t": _tensors(["n"]), "u": {"x-tensor": {"shape": ["n"]}}}, ["t", "u"]),
        "backward",
        "TENSOR_SHAPE_TIGHTENED",
        lambda reg: reg.type("p.Msg")(t=[_tensor(3)], u=_tensor(4)),
    ),
    (
        "fixed-dim-of-the-tensors-of-an-array-named-read-by-old-readers",  # 5 is not 3
        _msg({"t": _tensors([3, None])}, ["t"]),
        _msg({"t": _tensors(["n", None])}, ["t"]),
        "forward",
        "TENSOR_SHAPE_LOOSENED",
        lambda reg: reg.type("p.Msg")(t=[_tensor(5, 1), _tensor(5, 2)]),
    ),
    (
        "array-of-arrays-made-a-tree-one-level-deep",  # [[1]] is two levels
        _msg({"x": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}}, ["x"]),
        _msg({"x": {"x-tree": {"max_depth": 1}}}, ["x"]),
        "backward",
        "TYPE_CHANGED",
        lambda reg: reg.type("p.Msg")(x=[[1]]),
    ),
    (
        "array-of-tensors-made-a-json-tree",
        _msg({"x": _tensors([None])}, ["x"]),
        _msg({"x": {"x-tree": {"json": True}}}, ["x"]),
        "backward",
        "TYPE_CHANGED",
        lambda reg: reg.type("p.Msg")(x=[_tensor(2)]),
    ),
    (
        "tree-made-an-array",  # old writers' trees may be maps
        _msg({"x": {"x-tree": {}}}, ["x"]),
        _msg({"x": {"type": "array", "items": {"type": "integer"}}}, ["x"]),
        "backward",
        "TYPE_NARROWED",
        lambda reg: reg.type("p.Msg")(x={"a": 1}),
    ),
    (
        "union-variant-retagged-onto-a-tag-of-other-fields",  # tag "a" now means s, not n
        _tagged(A=("a", _N), B=("b", _S)),
        _tagged(B=("a", _S), C=("b", _N)),
        "backward",
        "FIELD_ADDED_REQUIRED",
        lambda reg: reg.type("p.Msg")(u=_nested(reg, "A", n=3)),
    ),
    (
        "union-variant-retagged-onto-a-removed-variants-tag",  # nothing reads tag "b" any more
        _tagged(A=("a", _N), B=("b", _N)),
        _tagged(B=("a", _N)),
        "backward",
        "UNION_VARIANT_REMOVED",
        lambda reg: reg.type("p.Msg")(u=_nested(reg, "B", n=3)),
    ),
    (
        "tensor-dtypes-unset-made-all-but-one",  # the list leaves float8_e5m2 out
        _msg({"t": {"x-tensor": {}}}, ["t"]),
        _msg({"t": {"x-tensor": {"dtypes": [d for d in DTYPE_NAMES if d != "float8_e5m2"]}}}, ["t"]),
        "backward",
        "TENSOR_DTYPES_SHRUNK",
        lambda reg: reg.type("p.Msg")(t=_tensor(2).to(_torch_dtype("float8_e5m2"))),
    ),
    (
        "tree-default-changed-from-1-to-true",  # 1 == True: the writer omits 1, the reader fills in True
        _msg({"x": {"x-tree": {}, "default": 1}}, []),
        _msg({"x": {"x-tree": {}, "default": True}}, []),
        "backward",
        "DEFAULT_CHANGED",
        lambda reg: reg.type("p.Msg")(x=1),
    ),
]


@pytest.mark.parametrize(
    ("old_doc", "new_doc", "mode", "rule_id", "message"), [c[1:] for c in UNSOUND], ids=[c[0] for c in UNSOUND]
)
def test_a_change_whose_bytes_do_not_decode_is_an_error_in_its_mode(
    tmp_path: Path,
    old_doc: dict[str, Any],
    new_doc: dict[str, Any],
    mode: str,
    rule_id: str,
    message: Callable[[tw.Registry], Any],
) -> None:
    """The writer side's bytes fail to decode on the reader side (or decode to another value), and
    the checker reports the change as an error in that mode."""
    old_dir = write_schemas(tmp_path / "old", {"p/Msg.v1.json": old_doc})
    new_dir = write_schemas(tmp_path / "new", {"p/Msg.v1.json": new_doc})
    writer, reader = (old_dir, new_dir) if mode == "backward" else (new_dir, old_dir)
    sent = message(tw.load_schemas(writer))
    try:
        got = tw.Decoder(tw.load_schemas(reader)).decode(tw.Encoder().encode(sent))
    except tw.DecodeError:
        pass
    else:
        fields = msgspec.structs.asdict  # every field, defaults too; JSON tells 1 from true
        assert msgspec.json.encode(fields(got)) != msgspec.json.encode(fields(sent))
    errors = [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), mode) if f.severity == "error"]
    assert rule_id in errors


def test_an_integer_bounded_within_2_53_changes_kind_without_loss(tmp_path: Path) -> None:
    """Every integer in [-2**53, 2**53] is a float too: the change loses nothing there."""
    bounded = {"minimum": -(2**53), "maximum": 2**53}
    integer = _msg({"x": {"type": "integer", **bounded}}, ["x"])
    number = _msg({"x": {"type": "number", **bounded}}, ["x"])
    fixed = _msg({"x": {"type": "integer", "const": 2**53}, "n": {"type": "integer"}}, ["x", "n"])
    unbounded = _msg({"x": {"type": "number"}, "n": {"type": "integer"}}, ["x", "n"])
    for old_doc, new_doc, mode in (
        (integer, number, "backward"),
        (number, integer, "forward"),
        (fixed, unbounded, "backward"),
        (unbounded, fixed, "forward"),
    ):
        old_dir = write_schemas(tmp_path / mode / str(len(old_doc["properties"])) / "old", {"p/Msg.v1.json": old_doc})
        new_dir = write_schemas(tmp_path / mode / str(len(old_doc["properties"])) / "new", {"p/Msg.v1.json": new_doc})
        writer, reader = (old_dir, new_dir) if mode == "backward" else (new_dir, old_dir)
        sent = msgspec.convert({"x": 2**53, "n": 0}, tw.load_schemas(writer).type("p.Msg"))
        got = tw.Decoder(tw.load_schemas(reader)).decode(tw.Encoder().encode(sent))
        assert got.x == 2**53
        assert [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), mode) if f.severity == "error"] == []


def _two_tensors(t: list[Any], u: list[Any]) -> dict[str, Any]:
    return _msg({"t": {"x-tensor": {"shape": t}}, "u": {"x-tensor": {"shape": u}}}, ["t", "u"])


# (id, old p.Msg, new p.Msg, a message either side sends, or a list of them)
KEPT: list[tuple[str, dict[str, Any], dict[str, Any], Callable[[tw.Registry], Any]]] = [
    (
        "one-member-enum-made-its-const",  # (the first string const is the tag: kind)
        _msg({"kind": {"const": "t"}, "x": {"type": "string", "enum": ["a"], "x-enum-name": "One"}}, ["x"]),
        _msg({"kind": {"const": "t"}, "x": {"type": "string", "const": "a"}}, ["x"]),
        lambda reg: msgspec.convert({"x": "a"}, reg.type("p.Msg")),
    ),
    (
        "ndarray-pinned-to-the-cpu",  # a numpy array lives on the cpu: the same as no devices
        _msg({"t": {"x-ndarray": {}}}, ["t"]),
        _msg({"t": {"x-ndarray": {"devices": ["cpu"]}}}, ["t"]),
        lambda reg: reg.type("p.Msg")(t=_tensor(3).numpy()),
    ),
    (
        "named-dim-renamed",  # a name only says which sizes agree
        _two_tensors(["c", "h"], ["c"]),
        _two_tensors(["k", "h"], ["k"]),
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 3), u=_tensor(2)),
    ),
    (
        "named-dims-renamed-along-a-chain",  # a -> b while b -> c: each size agrees with the same others
        _two_tensors(["a", "a"], ["b", "b"]),
        _two_tensors(["b", "b"], ["c", "c"]),
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 2), u=_tensor(3, 3)),
    ),
    (
        "named-dims-swapped-between-tensors",
        _two_tensors(["a", "a"], ["b", "b"]),
        _two_tensors(["b", "b"], ["a", "a"]),
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 2), u=_tensor(3, 3)),
    ),
    (
        "free-dim-named",  # a name on one axis of one tensor ties no sizes together
        _two_tensors([None, "h"], ["w"]),
        _two_tensors(["c", "h"], [None]),
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 3), u=_tensor(4)),
    ),
    (
        "union-variant-retitled",  # the wire names a variant by its tag
        _retitled("B", {"n": {"type": "integer"}}),
        _retitled("Bee", {"n": {"type": "integer"}}),
        lambda reg: reg.type("p.Msg")(u=_one_of(reg, "p.B", "p.Bee")(n=3)),
    ),
    (
        "tensor-dtypes-unset-made-every-dtype",  # unset allows every dtype of the table
        _msg({"t": {"x-tensor": {}}}, ["t"]),
        _msg({"t": {"x-tensor": {"dtypes": list(reversed(DTYPE_NAMES))}}}, ["t"]),
        _every_dtype,
    ),
    (
        "union-variants-swapped-tags",  # each tag keeps its fields; only the names moved
        _tagged(A=("a", _N), B=("b", _S)),
        _tagged(A=("b", _S), B=("a", _N)),
        _each_variant,
    ),
    (
        "union-variants-renamed-onto-each-others-tags",
        _tagged(A=("a", _N), B=("b", _S)),
        _tagged(B=("a", _N), C=("b", _S)),
        _each_variant,
    ),
    (
        "integer-range-of-one-made-its-const",  # both sides send 5 alone
        _msg({"x": {"type": "integer", "minimum": 5, "maximum": 5}}, ["x"]),
        _msg({"x": {"type": "integer", "const": 5}}, ["x"]),
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "integer-bounds-at-the-ends-of-the-wire-added",  # no integer the wire carries is past them
        _msg({"x": {"type": "integer"}}, ["x"]),
        _msg({"x": {"type": "integer", "minimum": -(2**63), "maximum": 2**64 - 1}}, ["x"]),
        lambda reg: [reg.type("p.Msg")(x=x) for x in (-(2**63), 0, 2**64 - 1)],
    ),
    (
        "integer-bounds-past-the-ends-of-the-wire-removed",
        _msg({"x": {"type": "integer", "exclusiveMinimum": -(2**63) - 1, "maximum": 2**70}}, ["x"]),
        _msg({"x": {"type": "integer"}}, ["x"]),
        lambda reg: [reg.type("p.Msg")(x=x) for x in (-(2**63), 0, 2**64 - 1)],
    ),
    (
        "integer-from-0-made-format-uint64",  # its upper bound is the wire's
        _msg({"x": {"type": "integer", "minimum": 0}}, ["x"]),
        _msg({"x": {"type": "integer", "format": "uint64"}}, ["x"]),
        lambda reg: [reg.type("p.Msg")(x=x) for x in (0, 2**64 - 1)],
    ),
    (
        "ndarray-dtypes-unset-made-every-numpy-dtype",  # numpy has no bfloat16 or float8
        _msg({"t": {"x-ndarray": {}}}, ["t"]),
        _msg({"t": {"x-ndarray": {"dtypes": [d.name for d in DTYPES.values() if d.numpy_name]}}}, ["t"]),
        _every_dtype,
    ),
]


@pytest.mark.parametrize(("old_doc", "new_doc", "message"), [c[1:] for c in KEPT], ids=[c[0] for c in KEPT])
def test_a_change_whose_bytes_decode_the_same_both_ways_is_no_error(
    tmp_path: Path, old_doc: dict[str, Any], new_doc: dict[str, Any], message: Callable[[tw.Registry], Any]
) -> None:
    old_dir = write_schemas(tmp_path / "old", {"p/Msg.v1.json": old_doc})
    new_dir = write_schemas(tmp_path / "new", {"p/Msg.v1.json": new_doc})
    for writer, reader in ((old_dir, new_dir), (new_dir, old_dir)):
        made = message(tw.load_schemas(writer))
        for sent in made if isinstance(made, list) else [made]:
            got = tw.Decoder(tw.load_schemas(reader)).decode(tw.Encoder().encode(sent))
            assert _value(got) == _value(sent)
    assert [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), "full") if f.severity == "error"] == []


def test_a_nested_message_made_a_struct_of_its_fields_is_no_change(tmp_path: Path) -> None:
    """A message type nested in another travels as its struct: declared in place instead, or the
    reverse, its fields are compared, not called another type."""
    nested = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    docs = {"p/A.v1.json": {"$id": "p.A", "x-version": 1, **nested}}
    ref = _msg({"s": {"$ref": "A.v1.json"}}, ["s"])
    inline = _msg({"s": nested}, ["s"])
    for i, (old_doc, new_doc) in enumerate(((ref, inline), (inline, ref))):
        old_dir = write_schemas(tmp_path / str(i) / "old", {**docs, "p/Msg.v1.json": old_doc})
        new_dir = write_schemas(tmp_path / str(i) / "new", {**docs, "p/Msg.v1.json": new_doc})
        for writer, reader in ((old_dir, new_dir), (new_dir, old_dir)):
            sent = msgspec.convert({"s": {"n": 3}}, tw.load_schemas(writer).type("p.Msg"))
            assert _value(tw.Decoder(tw.load_schemas(reader)).decode(tw.Encoder().encode(sent))) == {"s": {"n": 3}}
        assert [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), "full") if f.severity != "info"] == []


def test_an_integer_and_a_number_default_are_compared_by_value(tmp_path: Path) -> None:
    """An old writer omits its default 0; a new reader fills in 0.0, the same value."""
    bounded = {"minimum": 0, "maximum": 10}
    old_dir = write_schemas(
        tmp_path / "old", {"p/Msg.v1.json": _msg({"x": {"type": "integer", "default": 0, **bounded}}, [])}
    )
    new_dir = write_schemas(
        tmp_path / "new", {"p/Msg.v1.json": _msg({"x": {"type": "number", "default": 0, **bounded}}, [])}
    )
    got = tw.Decoder(tw.load_schemas(new_dir)).decode(tw.Encoder().encode(tw.load_schemas(old_dir).type("p.Msg")(x=0)))
    assert got.x == 0
    assert [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), "backward")] == []
    big = {"x": {"type": "integer", "default": 2**53 + 1}}
    old_dir = write_schemas(tmp_path / "big" / "old", {"p/Msg.v1.json": _msg(big, [])})
    new_dir = write_schemas(
        tmp_path / "big" / "new", {"p/Msg.v1.json": _msg({"x": {"type": "integer", "default": 2**53}}, [])}
    )
    assert "DEFAULT_CHANGED" in [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), "backward")]


def test_a_dim_name_moved_to_another_axis_is_a_reorder(tmp_path: Path) -> None:
    """The sizes decode alike, but each side reads another meaning into each axis."""
    for old_shape, new_shape in (([None, "c"], ["c", None]), (["c", "h"], ["h", "w"]), (["c", "h"], ["h", "c"])):
        old_dir = write_schemas(
            tmp_path / str(old_shape + new_shape) / "old", {"p/Msg.v1.json": _two_tensors(old_shape, [])}
        )
        new_dir = write_schemas(
            tmp_path / str(old_shape + new_shape) / "new", {"p/Msg.v1.json": _two_tensors(new_shape, [])}
        )
        rules = [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), "backward")]
        assert "TENSOR_DIMS_REORDERED" in rules, (old_shape, new_shape)


_MODE = {"type": "string", "enum": ["a", "b"], "x-enum-name": "Mode"}

# (id, old p.Msg, new p.Msg, the mode that keeps working, a message its writer side sends, or a list)
KEPT_ONE_WAY: list[tuple[str, dict[str, Any], dict[str, Any], str, Callable[[tw.Registry], Any]]] = [
    (
        "enum-made-a-string",  # a member travels as its string
        _msg({"x": _MODE}, ["x"]),
        _msg({"x": {"type": "string", "maxLength": 1}}, ["x"]),
        "backward",
        lambda reg: msgspec.convert({"x": "b"}, reg.type("p.Msg")),
    ),
    (
        "nullable-integer-made-a-tree",  # a tree holds any scalar, and null
        _msg({"x": {"type": ["integer", "null"]}}, ["x"]),
        _msg({"x": {"x-tree": {"json": True, "max_depth": 1}}}, ["x"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x=2**60),
    ),
    (
        "tree-made-an-enum",
        _msg({"x": {"x-tree": {}}}, ["x"]),
        _msg({"x": _MODE}, ["x"]),
        "forward",
        lambda reg: msgspec.convert({"x": "b"}, reg.type("p.Msg")),
    ),
    (
        "tuple-made-an-array",  # a tuple travels as a list of its items
        _msg({"x": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}]}}, ["x"]),
        _msg({"x": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}}, ["x"]),
        "backward",
        lambda reg: msgspec.convert({"x": [1, 2]}, reg.type("p.Msg")),
    ),
    (
        "array-made-a-tuple",
        _msg({"x": {"type": "array", "items": {"type": "integer"}, "minItems": 1}}, ["x"]),
        _msg({"x": {"type": "array", "prefixItems": [{"type": "integer"}]}}, ["x"]),
        "forward",
        lambda reg: msgspec.convert({"x": [7]}, reg.type("p.Msg")),
    ),
    (
        "integer-made-a-number-on-halves",  # every integer is a multiple of 0.5
        _msg({"x": {"type": "integer", "minimum": -1000, "maximum": 1000}}, ["x"]),
        _msg({"x": {"type": "number", "minimum": -1000, "maximum": 1000, "multipleOf": 0.5}}, ["x"]),
        "backward",
        lambda reg: [reg.type("p.Msg")(x=x) for x in (-1000, -1, 0, 7, 1000)],
    ),
    (
        "integer-made-a-number-on-quarters-within-2**53",
        _msg({"x": {"type": "integer", "minimum": -(2**53), "maximum": 2**53}}, ["x"]),
        _msg({"x": {"type": "number", "minimum": -(2**53), "maximum": 2**53, "multipleOf": 0.25}}, ["x"]),
        "backward",
        lambda reg: [reg.type("p.Msg")(x=x) for x in (-(2**53), 3, 2**53 - 1, 2**53)],
    ),
    (
        "number-on-halves-made-an-integer",
        _msg({"x": {"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.5}}, ["x"]),
        _msg({"x": {"type": "integer", "minimum": 0, "maximum": 100}}, ["x"]),
        "forward",
        lambda reg: [reg.type("p.Msg")(x=x) for x in (0, 1, 99, 100)],
    ),
    (
        "integer-const-made-a-range-holding-it",  # old writers send 5 alone
        _msg({"x": {"type": "integer", "const": 5}}, ["x"]),
        _msg({"x": {"type": "integer", "minimum": 0, "maximum": 9}}, ["x"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "range-made-a-const-inside-it",  # new writers send 5 alone
        _msg({"x": {"type": "integer", "minimum": 0, "maximum": 9}}, ["x"]),
        _msg({"x": {"type": "integer", "const": 5}}, ["x"]),
        "forward",
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "integer-const-made-a-number-range-holding-it",
        _msg({"x": {"type": "integer", "const": 5}}, ["x"]),
        _msg({"x": {"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 0.5}}, ["x"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x=5),
    ),
    (
        "string-const-made-a-pattern-it-matches",  # (the first string const is the tag: kind)
        _msg({"kind": {"const": "k"}, "x": {"type": "string", "const": "abc"}}, ["x"]),
        _msg({"kind": {"const": "k"}, "x": {"type": "string", "pattern": "^a", "maxLength": 3}}, ["x"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x="abc"),
    ),
    (
        "fixed-dim-of-the-tensors-of-an-array-named",  # old writers' items all agree on 3
        _msg({"t": _tensors([3, None])}, ["t"]),
        _msg({"t": _tensors(["n", None])}, ["t"]),
        "backward",
        lambda reg: reg.type("p.Msg")(t=[_tensor(3, 1), _tensor(3, 4)]),
    ),
    (
        "fixed-dim-of-the-tensors-of-a-map-named",
        _msg({"t": {"type": "object", "additionalProperties": {"x-tensor": {"shape": [3]}}}}, ["t"]),
        _msg({"t": {"type": "object", "additionalProperties": {"x-tensor": {"shape": ["n"]}}}}, ["t"]),
        "backward",
        lambda reg: reg.type("p.Msg")(t={"a": _tensor(3), "b": _tensor(3)}),
    ),
    (
        "fixed-dims-of-an-array-and-a-tensor-named-alike",  # both were 3
        _msg({"t": _tensors([3]), "u": {"x-tensor": {"shape": [3, None]}}}, ["t", "u"]),
        _msg({"t": _tensors(["n"]), "u": {"x-tensor": {"shape": ["n", None]}}}, ["t", "u"]),
        "backward",
        lambda reg: reg.type("p.Msg")(t=[_tensor(3), _tensor(3)], u=_tensor(3, 2)),
    ),
    (
        "array-of-integers-made-a-tree",  # a list travels as one and a tree decodes it as one
        _msg({"x": {"type": "array", "items": {"type": "integer"}}}, ["x"]),
        _msg({"x": {"x-tree": {"json": True, "max_depth": 1}}}, ["x"]),
        "backward",
        lambda reg: [reg.type("p.Msg")(x=x) for x in ([1, -2, 2**63 - 1, 2**64 - 1], [])],
    ),
    (
        "map-of-nullable-numbers-made-a-tree",
        _msg({"x": {"type": "object", "additionalProperties": {"type": ["number", "null"]}}}, ["x"]),
        _msg({"x": {"x-tree": {"json": True}}}, ["x"]),
        "backward",
        lambda reg: [reg.type("p.Msg")(x=x) for x in ({"a": 1.5, "b": None, "c": -math.inf}, {})],
    ),
    (
        "map-of-arrays-of-tensors-and-bytes-made-a-tree",
        _msg(
            {
                "x": {"type": "object", "additionalProperties": _tensors([None])},
                "b": {"type": "array", "items": {"type": "string", "format": "bytes"}},
            },
            ["x", "b"],
        ),
        _msg({"x": {"x-tree": {"max_depth": 2}}, "b": {"x-tree": {"max_depth": 1}}}, ["x", "b"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x={"a": [_tensor(2), _tensor(3)], "b": []}, b=[b"\x00\xff", b""]),
    ),
    (
        "tie-of-one-tensor-split",  # no dim name left its axis: a square is a shape [a, b]
        _msg({"t": {"x-tensor": {"shape": ["a", "a"]}}}, ["t"]),
        _msg({"t": {"x-tensor": {"shape": ["a", "b"]}}}, ["t"]),
        "backward",
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 2)),
    ),
    (
        "tree-made-an-array-of-strings",
        _msg({"x": {"x-tree": {}}}, ["x"]),
        _msg({"x": {"type": "array", "items": {"type": "string"}}}, ["x"]),
        "forward",
        lambda reg: reg.type("p.Msg")(x=["a", ""]),
    ),
    (
        "union-variant-retagged-onto-a-removed-variants-tag",  # tag "a", n: as before
        _tagged(A=("a", _N), B=("b", _N)),
        _tagged(B=("a", _N)),
        "forward",
        _each_variant,
    ),
    (
        "string-made-an-enum",
        _msg({"x": {"type": "string", "pattern": "^[ab]$"}}, ["x"]),
        _msg({"x": _MODE}, ["x"]),
        "forward",
        lambda reg: msgspec.convert({"x": "b"}, reg.type("p.Msg")),
    ),
    (
        "string-const-made-an-enum-holding-it",
        _msg({"kind": {"const": "t"}, "x": {"type": "string", "const": "a"}}, ["x"]),
        _msg({"kind": {"const": "t"}, "x": {"type": "string", "enum": ["a", "b"], "x-enum-name": "Two"}}, ["x"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x="a"),
    ),
    (
        "struct-made-a-union-beside-another",  # its tag names it among the variants
        _variant_alone("a", _N),
        _tagged(A=("a", _N), B=("b", _S)),
        "backward",
        _each_variant,
    ),
    (
        "union-made-one-of-its-variants",
        _tagged(A=("a", _N), B=("b", _S)),
        _variant_alone("a", _N),
        "forward",
        _each_variant,
    ),
    (
        "named-dim-ties-merged",  # what new writers send agrees in every old tie
        _two_tensors(["a", "a"], ["b", "b"]),
        _two_tensors(["b", "b"], ["b", "b"]),
        "forward",
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 2), u=_tensor(2, 2)),
    ),
    (
        "named-dim-tie-split",  # what old writers send agrees in every new tie
        _two_tensors(["c", "c"], ["c", "c"]),
        _two_tensors(["a", "a"], ["b", "b"]),
        "backward",
        lambda reg: reg.type("p.Msg")(t=_tensor(2, 2), u=_tensor(2, 2)),
    ),
    (
        "bytes-made-a-tree",  # a tree that is not JSON-only holds bytes as they are
        _msg({"x": {"type": "string", "format": "bytes"}}, ["x"]),
        _msg({"x": {"x-tree": {}}}, ["x"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x=b"\x00\xff"),
    ),
    (
        "tensor-made-a-tree",  # ... and tensors
        _msg({"x": {"x-tensor": {}}}, ["x"]),
        _msg({"x": {"x-tree": {}}}, ["x"]),
        "backward",
        lambda reg: reg.type("p.Msg")(x=_tensor(3)),
    ),
    (
        "tree-made-a-tensor",
        _msg({"x": {"x-tree": {}}}, ["x"]),
        _msg({"x": {"x-tensor": {}}}, ["x"]),
        "forward",
        lambda reg: reg.type("p.Msg")(x=_tensor(3)),
    ),
]


@pytest.mark.parametrize(
    ("old_doc", "new_doc", "mode", "message"), [c[1:] for c in KEPT_ONE_WAY], ids=[c[0] for c in KEPT_ONE_WAY]
)
def test_a_change_whose_bytes_decode_the_same_in_one_mode_is_no_error_there(
    tmp_path: Path, old_doc: dict[str, Any], new_doc: dict[str, Any], mode: str, message: Callable[[tw.Registry], Any]
) -> None:
    old_dir = write_schemas(tmp_path / "old", {"p/Msg.v1.json": old_doc})
    new_dir = write_schemas(tmp_path / "new", {"p/Msg.v1.json": new_doc})
    writer, reader = (old_dir, new_dir) if mode == "backward" else (new_dir, old_dir)
    made = message(tw.load_schemas(writer))
    for sent in made if isinstance(made, list) else [made]:
        assert _value(tw.Decoder(tw.load_schemas(reader)).decode(tw.Encoder().encode(sent))) == _value(sent)
    assert [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), mode) if f.severity == "error"] == []


def test_a_field_replaced_by_an_optional_one_of_its_type_is_a_deletion_and_an_addition(tmp_path: Path) -> None:
    """Only a required field replaced by a required one breaks both sides as a rename: where
    either is optional, each side decodes the other's messages as the deletion and the addition say
    (the optional field falls back to its default), and only those are reported."""
    optional = {"type": "integer", "default": 0}
    required = {"type": "integer"}
    for old_required, new_required, errors in (
        (False, False, {"backward": [], "forward": []}),
        (True, False, {"backward": [], "forward": ["FIELD_DELETED"]}),
        (False, True, {"backward": ["FIELD_ADDED_REQUIRED"], "forward": []}),
        (True, True, {"backward": ["FIELD_RENAMED"], "forward": ["FIELD_RENAMED"]}),
    ):
        root = tmp_path / f"{old_required}-{new_required}"
        old_doc = _msg({"a": required if old_required else optional}, ["a"] if old_required else [])
        new_doc = _msg({"b": required if new_required else optional}, ["b"] if new_required else [])
        old_dir = write_schemas(root / "old", {"p/Msg.v1.json": old_doc})
        new_dir = write_schemas(root / "new", {"p/Msg.v1.json": new_doc})
        for mode, writer, reader, name in (("backward", old_dir, new_dir, "a"), ("forward", new_dir, old_dir, "b")):
            found = compare(load_dir(old_dir), load_dir(new_dir), mode)
            assert [f.rule for f in found if f.severity == "error" and f.rule != "VERSION_NOT_BUMPED"] == errors[mode]
            sent = tw.load_schemas(writer).type("p.Msg")(**{name: 5})
            if not errors[mode]:
                got = tw.Decoder(tw.load_schemas(reader)).decode(tw.Encoder().encode(sent))
                assert _value(got) == {"b" if name == "a" else "a": 0}
        if not old_required:
            assert [f.rule for f in found if f.severity == "warning"] == ["FIELD_DELETED_OPTIONAL"]


@pytest.mark.parametrize(
    "field",
    [
        {"type": "integer", "const": 5},
        {"type": "integer", "minimum": 3, "maximum": 3, "default": 3},
        {"type": "boolean", "const": False},
        {"type": "string", "enum": ["only"], "x-enum-name": "One", "default": "only"},
    ],
    ids=["const", "bounds-of-one-value", "boolean-const", "one-member-enum"],
)
def test_an_optional_field_of_one_value_added_to_or_removed_from_a_closed_struct_is_no_error(
    tmp_path: Path, field: dict[str, Any]
) -> None:
    """A writer omits a field at its default, and such a field holds nothing else: no message
    carries it, so a reader that rejects unknown fields never meets it."""
    without = _msg({"a": {"type": "integer"}}, ["a"], additionalProperties=False)
    with_it = _msg({"a": {"type": "integer"}, "b": field}, ["a"], additionalProperties=False)
    for name, old_doc, new_doc in (("added", without, with_it), ("removed", with_it, without)):
        old_dir = write_schemas(tmp_path / name / "old", {"p/Msg.v1.json": old_doc})
        new_dir = write_schemas(tmp_path / name / "new", {"p/Msg.v1.json": new_doc})
        for writer, reader in ((old_dir, new_dir), (new_dir, old_dir)):
            sent = tw.load_schemas(writer).type("p.Msg")(a=1)
            got = tw.Decoder(tw.load_schemas(reader)).decode(tw.Encoder().encode(sent))
            assert got.a == 1
        errors = [f.rule for f in compare(load_dir(old_dir), load_dir(new_dir), "full") if f.severity == "error"]
        assert errors == [], name


def _value(value: Any) -> Any:
    """A message as plain data: its structs' fields (not their class names), tensors' values, a
    tuple's items as a list's."""
    if isinstance(value, msgspec.Struct):
        return {k: _value(v) for k, v in msgspec.structs.asdict(value).items()}
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return (str(value.dtype), list(value.shape), value.tolist())
    return value


# -- the command line ------------------------------------------------------------------------------


def _write_pair(tmp_path: Path) -> tuple[Path, Path]:
    new_docs = copy.deepcopy(BASE)
    _props(new_docs["t/Thing.v1.json"]).pop("ratio")
    new_docs["t/Thing.v1.json"]["required"].remove("ratio")
    return write_schemas(tmp_path / "old", copy.deepcopy(BASE)), write_schemas(tmp_path / "new", new_docs)


def test_cli_text_json_github_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path)
    assert main(["compat", str(old), str(new)]) == 1
    text = capsys.readouterr().out.splitlines()
    assert (
        text[0].startswith(f"{old}/t/Thing.v1.json:")
        and ": FIELD_DELETED [breaks old readers] field 'ratio' removed from t.Thing v1" in text[0]
    )
    assert main(["compat", str(old), str(new), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    import jsonschema

    from tensorwire.compat._report import JSON_SCHEMA

    jsonschema.validate(report, JSON_SCHEMA)
    assert report["findings"][0]["rule"] == "FIELD_DELETED" and report["findings"][0]["pointer"] == "/properties/ratio"
    assert main(["compat", str(old), str(new), "--format", "github"]) == 1
    github = capsys.readouterr().out.splitlines()[0]
    assert (
        github.startswith(f"::error file={old}/t/Thing.v1.json,line=")
        and ",title=FIELD_DELETED::field 'ratio'" in github
    )
    assert main(["compat", str(old), str(new), "--mode", "backward"]) == 0  # a deleted field only breaks old readers
    capsys.readouterr()
    assert main(["compat", str(old), str(old)]) == 0 and capsys.readouterr().out == ""


def test_cli_reports_the_same_findings_in_the_same_order_whatever_the_hash_seed(tmp_path: Path) -> None:
    """The fields both versions have are compared in the file's order: a set's order changed the
    report from one run to the next."""
    fields = {f"f{i}": {"type": "integer", "maximum": 10} for i in range(30)}
    old = write_schemas(tmp_path / "old", {"p/Msg.v1.json": _msg(fields, list(fields))})
    tighter = {name: {"type": "integer", "maximum": 5} for name in fields}
    new = write_schemas(tmp_path / "new", {"p/Msg.v1.json": _msg(tighter, list(fields))})
    script = "import sys\nfrom tensorwire.cli import main\nsys.exit(main(['compat', sys.argv[1], sys.argv[2]]))\n"
    reports = [
        subprocess.run(
            [sys.executable, "-c", script, str(old), str(new)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    assert reports[0] == reports[1]
    named = [line.split("field '")[1].split("'")[0] for line in reports[0].splitlines() if "RANGE_TIGHTENED" in line]
    assert named == list(fields)


def test_cli_fail_on_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new_docs = copy.deepcopy(BASE)
    _props(new_docs["t/Thing.v1.json"]).pop("note")
    old, new = write_schemas(tmp_path / "o", copy.deepcopy(BASE)), write_schemas(tmp_path / "n", new_docs)
    assert main(["compat", str(old), str(new)]) == 0
    assert main(["compat", str(old), str(new), "--fail-on", "warning"]) == 1
    assert "FIELD_DELETED_OPTIONAL" in capsys.readouterr().out


def test_cli_rules_and_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["compat", "--list-rules", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == len(RULES) and {"id", "side", "severity", "purpose"} <= set(listed[0])
    assert main(["compat", "--explain", "FIELD_DELETED"]) == 0
    assert capsys.readouterr().out.startswith("FIELD_DELETED (error, breaks old readers):")
    assert main(["compat", "--explain", "NOPE"]) == 2
    assert main(["compat", str(tmp_path)]) == 2
    assert "needs OLD_DIR NEW_DIR" in capsys.readouterr().err
    bad = write_schemas(tmp_path / "bad", {"t/X.v1.json": {"$id": "t.X"}})
    assert main(["compat", str(bad), str(bad)]) == 2


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )


def test_cli_against_a_git_revision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    write_schemas(repo / "schemas", copy.deepcopy(BASE))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "schemas")
    thing = repo / "schemas" / "t" / "Thing.v1.json"
    doc = json.loads(thing.read_text())
    doc["$defs"]["Mode"]["enum"].append("eco")
    thing.write_text(json.dumps(doc, indent=2))
    monkeypatch.chdir(repo)
    assert main(["compat", "--against", "HEAD"]) == 1
    out = capsys.readouterr().out
    assert "schemas/t/Thing.v1.json:" in out and "ENUM_MEMBER_ADDED [breaks old readers]" in out
    assert main(["compat", "--against", "HEAD", "schemas", "--mode", "backward"]) == 0
    capsys.readouterr()
    assert main(["compat", "--against", "origin/main"]) == 2
    assert (
        "revision 'origin/main' is not in this clone; fetch it first: git fetch origin main" in capsys.readouterr().err
    )
    for flags in (["--against=--output=x"], ["--against=-h", "--transitive"]):  # never handed to git as an option
        assert main(["compat", *flags]) == 2
        rev = flags[0].removeprefix("--against=")
        assert f"revision '{rev}' starts with '-': git would read it as an option" in capsys.readouterr().err
    assert not (repo / "x").exists()
    (repo / "schemas" / "t" / "C.v1.json").write_text(json.dumps(_variant("t.C", "c")))
    assert main(["compat", "--against", "HEAD", "--mode", "backward"]) == 0
    assert "TYPE_ADDED" in capsys.readouterr().out


def test_cli_against_a_revision_reads_files_whose_names_git_would_quote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """git lists a name with a non-ASCII letter, a tab or a newline quoted; such a file at the
    revision was left out, as if the revision did not hold it. The revision is now read as the
    working tree is, and a bad name there is the loader's error, as it would be here."""
    repo = tmp_path / "repo"
    write_schemas(repo / "schemas", copy.deepcopy(BASE))
    _git(repo, "init", "-q")
    for odd in ("Thïng.v1.json", "Tab\tbed.v1.json", "New\nline.v1.json"):
        (repo / "schemas" / "t" / odd).write_text("{}")
        _git(repo, "add", ".")
        _git(repo, "commit", "-qm", "an odd file name")
        (repo / "schemas" / "t" / odd).unlink()  # the working tree is valid
        monkeypatch.chdir(repo)
        assert main(["compat", "--against", "HEAD"]) == 2
        assert capsys.readouterr().err == (
            f"tensorwire: HEAD:schemas/t/{printable(odd)}: file name must be <Name>.v<N>.json, e.g. Video.v1.json\n"
        )
        _git(repo, "rm", "-q", "--cached", f"schemas/t/{odd}")
        _git(repo, "commit", "-qm", "gone")


def _git_out(repo: Path, *args: str, stdin: bytes = b"") -> str:
    done = subprocess.run(["git", *args], cwd=repo, input=stdin, check=True, capture_output=True)
    return done.stdout.decode().strip()


def _committed_schemas(tmp_path: Path) -> tuple[Path, bytes]:
    """A git repository at ``tmp_path / "repo"`` whose one commit holds ``BASE``'s schemas, and the
    bytes of its ``schemas/t/Thing.v1.json``."""
    repo = tmp_path / "repo"
    write_schemas(repo / "schemas", copy.deepcopy(BASE))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "schemas")
    return repo, (repo / "schemas" / "t" / "Thing.v1.json").read_bytes()


def _commit_tree(repo: Path, tree: dict[str, Any]) -> str:
    """A commit of ``tree`` (name -> bytes, or name -> a tree of its own), built with git's plumbing:
    names git would refuse to check out (``..``) are kept as they are."""

    def build(node: dict[str, Any]) -> str:
        lines = []
        for name, value in node.items():
            if isinstance(value, dict):
                lines.append(f"040000 tree {build(value)}\t{name}\n")
            else:
                lines.append(f"100644 blob {_git_out(repo, 'hash-object', '-w', '--stdin', stdin=value)}\t{name}\n")
        return _git_out(repo, "mktree", stdin="".join(lines).encode())

    return _git_out(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit-tree", build(tree), "-m", "crafted")


def test_cli_against_a_crafted_revision_writes_nothing_outside_its_directory_and_reads_no_large_blob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revision can hold trees git itself would never check out: a path through ``..`` was
    written outside the temporary directory (any ``.json`` file the user can write), and a blob
    was read whole into memory before its size was checked (a few MiB in git, GiBs read)."""
    repo, thing = _committed_schemas(tmp_path)
    escape = {"..": {"..": {"planted.json": b"{}"}}}  # from <tmp>/tensorwire-compat-*/0: <tmp>
    monkeypatch.chdir(repo)
    for tree, error in (
        (
            {"schemas": {"t": {"Thing.v1.json": thing}, **escape}},
            "tensorwire: {rev}:schemas/../../planted.json: a path with a '.' or '..' component; "
            "git would not check it out\n",
        ),
        (
            {"schemas": {"t": {"Thing.v1.json": thing, "Big.v1.json": b" " * 65}}},
            "tensorwire: {rev}:schemas/t/Big.v1.json: cannot read schema file: 65 bytes is over the limit of 64\n",
        ),
    ):
        rev = _commit_tree(repo, tree)
        monkeypatch.setattr("tensorwire.compat._git.MAX_FILE_BYTES", 64, raising=False)
        assert main(["compat", "--against", rev]) == 2
        assert capsys.readouterr().err == error.format(rev=rev)
        monkeypatch.undo()
        monkeypatch.chdir(repo)
    assert not (Path(tempfile.gettempdir()) / "planted.json").exists()


def test_cli_against_a_revision_whose_tree_holds_a_file_and_a_folder_of_one_name_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crafted tree can hold a file and a folder of the same name, or one name twice: writing
    them out to read them raised ``FileExistsError`` (an internal error, exit 3)."""
    repo, thing = _committed_schemas(tmp_path)
    blob = _git_out(repo, "hash-object", "-w", "--stdin", stdin=thing)
    inner = _git_out(repo, "mktree", stdin=f"100644 blob {blob}\tThing.v1.json\n".encode())
    monkeypatch.chdir(repo)
    for entries in (
        f"100644 blob {blob}\tThing.v1.json\n040000 tree {inner}\tThing.v1.json\n",  # a file and a folder
        f"100644 blob {blob}\tThing.v1.json\n100644 blob {blob}\tThing.v1.json\n",  # one name twice
    ):
        t = _git_out(repo, "mktree", stdin=entries.encode())
        schemas = _git_out(repo, "mktree", stdin=f"040000 tree {t}\tt\n".encode())
        top = _git_out(repo, "mktree", stdin=f"040000 tree {schemas}\tschemas\n".encode())
        rev = _git_out(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit-tree", top, "-m", "crafted")
        assert main(["compat", "--against", rev]) == 2
        assert capsys.readouterr().err == (
            f"tensorwire: {rev}:schemas/t/Thing.v1.json: named twice, or both a file and a folder;"
            " no checkout holds that tree\n"
        )


def test_cli_against_a_revision_with_a_name_no_file_system_here_takes_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree can hold a name longer than a file name may be here (300 bytes): writing it out to
    read it raised ``OSError`` (an internal error, exit 3)."""
    repo, thing = _committed_schemas(tmp_path)
    long = "L" * 300 + ".v1.json"
    rev = _commit_tree(repo, {"schemas": {"t": {"Thing.v1.json": thing, long: b"{}"}}})
    monkeypatch.chdir(repo)
    assert main(["compat", "--against", rev]) == 2
    assert (
        capsys.readouterr().err
        == f"tensorwire: {rev}:schemas/t/{long}: cannot write it to read it: File name too long\n"
    )


def test_cli_against_a_revision_runs_from_any_directory_of_the_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    write_schemas(repo / "schemas", copy.deepcopy(BASE))
    (repo / "docs").mkdir()
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "schemas")
    for where in (repo / "schemas", repo / "schemas" / "t", repo / "docs"):
        monkeypatch.chdir(where)
        assert main(["compat", "--against", "HEAD"]) == 0, capsys.readouterr()
    monkeypatch.chdir(tmp_path)  # outside any repository, with no schemas/ here
    assert main(["compat", "--against", "HEAD"]) == 2
    assert capsys.readouterr().err == (
        "tensorwire: schema directory schemas does not exist (give DIR, or run in the repository)\n"
    )


def test_cli_transitive_checks_every_earlier_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A: note is a string; B: note removed (fine against A for new readers); C: note back as an integer."""
    repo = tmp_path / "repo"
    docs = copy.deepcopy(BASE)
    write_schemas(repo / "schemas", docs)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "A")
    thing = repo / "schemas" / "t" / "Thing.v1.json"
    doc = json.loads(thing.read_text())
    doc["properties"].pop("note")
    thing.write_text(json.dumps(doc))
    _git(repo, "commit", "-qam", "B")
    doc["properties"]["note"] = {"type": ["integer", "null"], "default": None}
    thing.write_text(json.dumps(doc))
    monkeypatch.chdir(repo)
    assert main(["compat", "--against", "HEAD"]) == 0  # against B alone: an optional field was added
    assert "FIELD_ADDED_OPTIONAL" in capsys.readouterr().out
    assert main(["compat", "--against", "HEAD", "--transitive"]) == 1  # against A too: note changed type
    out = capsys.readouterr().out
    assert "TYPE_CHANGED" in out and "changed from str to int" in out
    assert main(["compat", str(repo / "schemas"), str(repo / "schemas"), "--transitive"]) == 2


def test_github_annotations_escape_what_would_end_or_change_the_command(tmp_path: Path) -> None:
    """A pattern holding % or a file path holding a comma or a colon cannot cut a workflow command short."""
    from tensorwire.compat import render

    def docs(pattern: str) -> dict[str, Any]:
        new = copy.deepcopy(BASE)
        _props(new["t/Thing.v1.json"])["name"]["pattern"] = pattern
        return new

    old = load_dir(write_schemas(tmp_path / "a,b:c" / "old", docs("^a%0Ab$")))
    new = load_dir(write_schemas(tmp_path / "a,b:c" / "new", docs("^[a-z]%$")))
    (line,) = [x for x in render(compare(old, new), "github").splitlines() if "PATTERN_CHANGED" in x]
    assert line.startswith(f"::error file={tmp_path}/a%2Cb%3Ac/new/t/Thing.v1.json,line=")
    assert ",title=PATTERN_CHANGED::" in line
    assert "pattern '^a%250Ab$' -> '^[a-z]%25$'" in line
