"""Property: what the checker calls compatible decodes across the versions; what it calls breaking can fail."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire.compat import compare
from tensorwire.schema import load_dir
from tests.conftest import write_schemas
from tools.compat_diff import trial

FIELDS = ["a", "b", "c"]


def _base(
    lo: list[int], hi: list[int], members: list[str], steps: tuple[int, ...] = (1, 1, 1), text: tuple[int, int] = (0, 8)
) -> dict[str, Any]:
    props: dict[str, Any] = {
        f: {"type": "integer", "minimum": lo[i], "maximum": hi[i], "multipleOf": steps[i]} for i, f in enumerate(FIELDS)
    }
    props["mode"] = {"type": "string", "enum": members, "x-enum-name": "Mode"}
    props["s"] = {"type": "string", "minLength": text[0], "maxLength": text[1], "pattern": "^[a-z]*$"}
    return {
        "$id": "p.Msg",
        "x-version": 1,
        "type": "object",
        "additionalProperties": False,
        "properties": props,
        "required": [*FIELDS, "mode", "s"],
    }


@st.composite
def evolutions(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """An old schema and a new one made by changes that keep BACKWARD compatibility (new reads old)."""
    lo = [draw(st.integers(-50, 0)) for _ in FIELDS]
    hi = [draw(st.integers(1, 50)) for _ in FIELDS]
    steps = tuple(draw(st.sampled_from([1, 2, 4, 6])) for _ in FIELDS)
    text = (draw(st.integers(0, 3)), draw(st.integers(3, 8)))
    old = _base(lo, hi, ["x", "y"], steps, text)
    new = copy.deepcopy(old)
    ops = ["add_optional", "loosen", "add_member", "docs", "divide_step", "exclusive", "loosen_text", "open"]
    for op in draw(st.lists(st.sampled_from(ops), max_size=4)):
        i = draw(st.integers(0, len(FIELDS) - 1))
        props = new["properties"]
        if op == "divide_step":  # every multiple of 4 is one of 2: the new schema accepts more
            step = props[FIELDS[i]]["multipleOf"]
            props[FIELDS[i]]["multipleOf"] = draw(st.sampled_from([d for d in range(1, step + 1) if step % d == 0]))
        elif op == "exclusive":  # x <= hi is x < hi + 1 for an integer: the same values
            field = props[FIELDS[i]]
            if "maximum" in field:
                field["exclusiveMaximum"] = field.pop("maximum") + 1
        elif op == "loosen_text":
            props["s"]["minLength"] = max(0, props["s"]["minLength"] - draw(st.integers(0, 2)))
            props["s"]["maxLength"] += draw(st.integers(0, 4))
            if draw(st.booleans()):
                props["s"].pop("pattern", None)
        elif op == "open":
            new.pop("additionalProperties", None)
        elif op == "add_optional":
            name = f"extra{len(props)}"
            props[name] = {"type": "integer", "default": draw(st.integers(-5, 5))}
        elif op == "loosen":
            props[FIELDS[i]]["minimum"] -= draw(st.integers(0, 10))
            upper = "maximum" if "maximum" in props[FIELDS[i]] else "exclusiveMaximum"
            props[FIELDS[i]][upper] += draw(st.integers(0, 10))
        elif op == "add_member":
            members = props["mode"]["enum"]
            members.append(f"m{len(members)}")
        else:
            props[FIELDS[i]]["description"] = "documented"
    return old, new


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=evolutions(), data=st.data())
def test_backward_compatible_changes_decode_old_messages(
    tmp_path_factory: pytest.TempPathFactory, pair: Any, data: st.DataObject
) -> None:
    old_doc, new_doc = pair
    root = tmp_path_factory.mktemp("evo")
    old_dir = write_schemas(root / "old", {"p/Msg.v1.json": old_doc})
    new_dir = write_schemas(root / "new", {"p/Msg.v1.json": new_doc})
    findings = compare(load_dir(old_dir), load_dir(new_dir), "backward")
    assert [f for f in findings if f.severity == "error"] == []
    old_cls = tw.load_schemas(old_dir).type("p.Msg")
    new_reg = tw.load_schemas(new_dir)
    props = old_doc["properties"]
    values = {
        f: props[f]["multipleOf"]
        * data.draw(
            st.integers(
                -(-props[f]["minimum"] // props[f]["multipleOf"]), props[f]["maximum"] // props[f]["multipleOf"]
            )
        )
        for f in FIELDS
    }
    mode = data.draw(st.sampled_from(props["mode"]["enum"]))
    s = data.draw(st.text("abcxyz", min_size=props["s"]["minLength"], max_size=props["s"]["maxLength"]))
    message = old_cls(**values, mode=mode, s=s)  # the encoder checks every value against the old schema
    out = tw.Decoder(new_reg).decode(tw.Encoder().encode(message))
    assert {f: getattr(out, f) for f in FIELDS} == values and out.mode.value == mode and out.s == s


def test_a_sample_of_breaking_changes_do_fail(tmp_path: Path) -> None:
    old_doc = _base([0, 0, 0], [10, 10, 10], ["x", "y"])
    tightened = copy.deepcopy(old_doc)
    tightened["properties"]["a"]["maximum"] = 5
    removed = copy.deepcopy(old_doc)
    removed["properties"]["mode"]["enum"] = ["x"]
    stepped = copy.deepcopy(old_doc)
    stepped["properties"]["b"]["multipleOf"] = 2
    exclusive = copy.deepcopy(old_doc)
    exclusive["properties"]["c"]["exclusiveMaximum"] = exclusive["properties"]["c"].pop("maximum")
    patterned = copy.deepcopy(old_doc)
    patterned["properties"]["s"]["pattern"] = "^[a-c]*$"
    shorter = copy.deepcopy(old_doc)
    shorter["properties"]["s"]["maxLength"] = 2
    for name, new_doc, values in (
        ("range", tightened, {"a": 9}),
        ("enum", removed, {"mode": "y"}),
        ("step", stepped, {"b": 3}),
        ("exclusive", exclusive, {"c": 10}),
        ("pattern", patterned, {"s": "xyz"}),
        ("length", shorter, {"s": "abc"}),
    ):
        old_dir = write_schemas(tmp_path / name / "old", {"p/Msg.v1.json": old_doc})
        new_dir = write_schemas(tmp_path / name / "new", {"p/Msg.v1.json": new_doc})
        assert any(f.severity == "error" for f in compare(load_dir(old_dir), load_dir(new_dir), "backward"))
        old_cls = tw.load_schemas(old_dir).type("p.Msg")
        fields: dict[str, Any] = {"a": 1, "b": 1, "c": 1, "mode": "x", "s": "", **values}
        message = old_cls(**fields)
        with pytest.raises(tw.DecodeError):
            tw.Decoder(tw.load_schemas(new_dir)).decode(tw.Encoder().encode(message))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_a_change_the_checker_passes_decodes_both_ways_it_passes(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    """A few trials of ``tools/compat_diff``: a random schema changed at random, whose messages in
    each mode where the checker finds no error decode with every shared field unchanged."""
    misses = [line for line in trial(random.Random(seed), tmp_path_factory.mktemp("diff"), 40) if "MISS" in line]
    assert misses == []
