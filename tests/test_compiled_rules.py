"""``check_struct`` runs each ``StructRules`` as one compiled function: it breaches exactly where the
reporting walk does, reads every field name safely, and still runs group rules and validators."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire import ValidationError
from tensorwire._breaches import find_breach
from tensorwire._contract import check_struct
from tensorwire.rules import EachCheck, GroupRule, StructRules, TensorCheck, TreeCheck, register_validator
from tests.conftest import write_schemas
from tests.test_rule_paths import CHECKS, TREES

TENSOR_CHECKS = st.builds(
    TensorCheck,
    kind=st.sampled_from(["tensor", "ndarray"]),
    dtypes=st.sampled_from([None, ("float32",), ("int8", "uint8")]),
    shape=st.sampled_from([None, (None,), (2,), (2, None), (None, 3), (2, 3)]),
    devices=st.sampled_from([None, ("cpu",), ("cuda",)]),
    contiguous=st.sampled_from([None, True]),
)
FIELD_CHECKS = st.one_of(
    CHECKS,
    TENSOR_CHECKS,
    st.builds(lambda c: EachCheck(container="nullable", inner=c), TENSOR_CHECKS),
    st.builds(lambda c: EachCheck(container="nullable", inner=c), st.builds(TreeCheck, max_depth=st.integers(0, 2))),
)
SHAPES = st.sampled_from([(2,), (3,), (2, 3), (2, 4), (3, 3), (2, 3, 1)])
TENSORS = st.builds(
    lambda shape, dtype, flip: (
        torch.zeros(shape, dtype=dtype).transpose(0, -1) if flip else torch.zeros(shape, dtype=dtype)
    ),
    SHAPES,
    st.sampled_from([torch.float32, torch.int8, torch.float64]),
    st.booleans(),
)
ARRAYS = st.builds(lambda shape, dtype: np.zeros(shape, dtype=dtype), SHAPES, st.sampled_from(["<f4", "u1", ">f4"]))
VALUES = st.one_of(TREES, TENSORS, ARRAYS)


def _holder(rules: StructRules, **values: Any) -> Any:
    """An object of a fresh class carrying ``rules``, with ``values`` as its attributes."""
    obj = type("Holder", (), {"__tw_rules__": rules})()
    for name, value in values.items():
        setattr(obj, name, value)
    return obj


def _walk_breach(check: Any, value: Any, where: str) -> str | None:
    try:
        find_breach(check, value, where, {})
    except ValidationError as exc:
        return str(exc)
    return None


def _applies(check: Any, value: Any) -> bool:
    """Whether the schema's type check lets ``value`` reach ``check`` (a map rule only ever sees a map)."""
    if isinstance(check, EachCheck) and check.container != "nullable":
        return isinstance(value, dict if check.container == "map" else list | tuple)
    return True


@settings(max_examples=500, deadline=None)
@given(check=FIELD_CHECKS, value=VALUES, other=VALUES, name=st.sampled_from(["f", "class", "a-b", "x; 1/0", "\ufb01"]))
def test_compiled_check_breaches_exactly_where_the_reporting_walk_does(
    check: Any, value: Any, other: Any, name: str
) -> None:
    if not (_applies(check, value) and _applies(check, other)):
        return
    rules = StructRules(type_name="T", fields=((name, check), ("g", check)))
    obj = _holder(rules, **{name: value, "g": other})
    first, second = _walk_breach(check, value, f"T.{name}"), _walk_breach(check, other, "T.g")
    if first is None and second is None:
        check_struct(obj)
        return
    with pytest.raises(ValidationError) as caught:
        check_struct(obj)
    assert caught.value.type_id == "T"
    assert (caught.value.path or "").startswith(f"$.{name}" if first is not None else "$.g")
    assert str(caught.value) == (first if first is not None else second)


def test_a_field_name_is_read_never_run() -> None:
    """A name that is Python text (from a hostile schema) is only ever an attribute name."""
    check = TensorCheck(kind="tensor", dtypes=("float32",), shape=(2,))
    name = "f\n    raise SystemExit(3)"
    rules = StructRules(type_name="T", fields=((name, check),))
    check_struct(_holder(rules, **{name: torch.zeros(2)}))
    with pytest.raises(ValidationError, match="dim 0 must be 2, got shape") as caught:
        check_struct(_holder(rules, **{name: torch.zeros(3)}))
    assert caught.value.type_id == "T"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (torch.zeros(2, 3), None),
        (None, None),
        (torch.zeros(2, 4), "dim 1 must be 3, got shape"),
        (torch.zeros(2, 2), "dim 1 must be 3, got shape"),
        (torch.zeros(2), "expected rank 2, got shape"),
        (torch.zeros(2, 3, dtype=torch.int8), "dtype int8 is not allowed; expected one of float32"),
        (np.zeros((2, 3), dtype=np.float32), "expected torch.Tensor, got ndarray"),
        ([1, 2], "expected torch.Tensor, got list"),
        (torch.zeros(3, 2).t(), "must be contiguous"),
        (torch.zeros(2, 3, device="meta"), "device meta is not allowed; expected cpu"),
    ],
)
def test_a_nullable_tensor_field_with_every_tensor_rule(value: Any, reason: str | None) -> None:
    check = EachCheck(
        container="nullable",
        inner=TensorCheck(kind="tensor", dtypes=("float32",), shape=(None, 3), devices=("cpu",), contiguous=True),
    )
    rules = StructRules(type_name="T", fields=(("x", check),))
    obj = _holder(rules, x=value)
    if reason is None:
        check_struct(obj)
        return
    with pytest.raises(ValidationError, match=reason) as caught:
        check_struct(obj)
    assert (caught.value.type_id, caught.value.path) == ("T", "$.x")


_SHAPED = TensorCheck(kind="tensor", dtypes=("float32",), shape=(None, 3))  # no device or contiguity rule


@pytest.mark.parametrize("container", ["field", "array", "map"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (torch.zeros(2, 3), None),
        (torch.zeros(2, 4), "dim 1 must be 3, got shape"),
        (torch.zeros(2, 2), "dim 1 must be 3, got shape"),
        (torch.zeros(2, 3, 1), "expected rank 2, got shape"),
        (torch.zeros(2), "expected rank 2, got shape"),
        (torch.zeros(2, 3, dtype=torch.float64), "dtype float64 is not allowed; expected one of float32"),
    ],
)
def test_a_tensor_rule_of_shape_and_dtype_alone_holds_in_a_field_and_inside_containers(
    container: str, value: Any, reason: str | None
) -> None:
    """A tensor rule naming no device or contiguity is checked by its compiled predicate alone:
    every dim it fixes, its rank (more dims as well as fewer) and its dtypes, whether the tensor is
    a field's value or an item of a list or map after one that passes."""
    check: Any = _SHAPED if container == "field" else EachCheck(container=container, inner=_SHAPED)
    good = torch.zeros(1, 3)
    held: Any = {"field": value, "array": [good, value], "map": {"a": good, "b": value}}[container]
    path = {"field": "$.x", "array": "$.x[1]", "map": "$.x.b"}[container]
    obj = _holder(StructRules(type_name="T", fields=(("x", check),)), x=held)
    if reason is None:
        check_struct(obj)
        return
    with pytest.raises(ValidationError, match=reason) as caught:
        check_struct(obj)
    assert (caught.value.type_id, caught.value.path) == ("T", path)


_JSON_TREE = TreeCheck(max_depth=2, json_only=True)


@pytest.mark.parametrize(
    ("check", "value", "path"),
    [
        (_JSON_TREE, [], None),
        (_JSON_TREE, (), "$.x"),  # not a list: an empty tuple is still no JSON tree
        (_JSON_TREE, [()], "$.x[0]"),
        (EachCheck(container="map", inner=_JSON_TREE), {}, None),
        (EachCheck(container="map", inner=_JSON_TREE), {"a": ()}, "$.x.a"),
        (EachCheck(container="array", inner=_JSON_TREE), [], None),
        (EachCheck(container="array", inner=_JSON_TREE), ((),), "$.x[0]"),
        (EachCheck(container="array", inner=_JSON_TREE), [()], "$.x[0]"),
    ],
)
def test_an_empty_list_or_map_passes_at_once_and_nothing_else_does(check: Any, value: Any, path: str | None) -> None:
    """The compiled check lets an empty list (or map, where the rule is one per value) through
    without looking further; an empty tuple, or a container holding one, is still looked at."""
    obj = _holder(StructRules(type_name="T", fields=(("x", check),)), x=value)
    if path is None:
        check_struct(obj)
        return
    with pytest.raises(ValidationError, match="tuple") as caught:
        check_struct(obj)
    assert (caught.value.type_id, caught.value.path) == ("T", path)
    assert str(caught.value) == _walk_breach(check, value, "T.x")


def test_named_dims_are_compared_across_fields() -> None:
    check = TensorCheck(kind="tensor", shape=("n",))
    rules = StructRules(type_name="T", fields=(("a", check), ("b", check)))
    check_struct(_holder(rules, a=torch.zeros(4), b=torch.zeros(4)))
    with pytest.raises(ValidationError, match=r"dim 'n' is 5, but 4 in T.a \(named dims must agree\)") as caught:
        check_struct(_holder(rules, a=torch.zeros(4), b=torch.zeros(5)))
    assert (caught.value.type_id, caught.value.path) == ("T", "$.b")


def test_named_dims_are_those_of_the_object_that_declares_them(tmp_path: Path) -> None:
    """A name is compared across the tensors of one object's fields, through its lists; a nested
    object's names are its own, on encode and on decode alike."""
    inner = {"type": "object", "properties": {"b": {"x-tensor": {"shape": ["n"]}}}, "required": ["b"]}
    doc = {
        "$id": "t.Dims",
        "x-version": 1,
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"x-tensor": {"shape": ["n"]}}},
            "inner": {"$ref": "#/$defs/Inner"},
        },
        "required": ["a", "inner"],
        "$defs": {"Inner": inner},
    }
    registry = tw.load_schemas(write_schemas(tmp_path, {"t/Dims.v1.json": doc}))
    dims = registry.type("t.Dims")
    message = dims(a=[torch.zeros(2)], inner=msgspec.convert({"b": torch.zeros(3)}, dims.__annotations__["inner"]))
    out = tw.Decoder(registry).decode(tw.Encoder().encode(message))
    assert (out.a[0].shape, out.inner.b.shape) == ((2,), (3,))
    with pytest.raises(ValidationError, match=r"^t\.Dims\.a\[1\]: dim 'n' is 3, but 2 in t\.Dims\.a\[0\] "):
        dims(a=[torch.zeros(2), torch.zeros(3)], inner=message.inner)


_SEEN: list[Any] = []


@register_validator("tests.compiled_positive")
def _positive(obj: Any) -> None:
    _SEEN.append(obj)
    if obj.a is not None and obj.a < 0:
        raise ValidationError("a must not be negative", type_id="T")


def test_group_rules_and_validators_run_after_the_fields() -> None:
    _SEEN.clear()
    rules = StructRules(
        type_name="T",
        fields=(("t", TreeCheck(max_depth=1)),),
        groups=(GroupRule(rule="exactly_one_of", fields=("a", "b")),),
        validators=("tests.compiled_positive",),
    )
    ok = _holder(rules, t=[1], a=1, b=None)
    check_struct(ok)
    assert _SEEN == [ok]
    with pytest.raises(ValidationError, match="exactly one of a, b must be set; got a, b") as caught:
        check_struct(_holder(rules, t=[1], a=1, b=2))
    assert caught.value.type_id == "T"
    with pytest.raises(ValidationError, match="a must not be negative"):
        check_struct(_holder(rules, t=[1], a=-1, b=None))
    with pytest.raises(ValidationError, match=r"tree is deeper than its limit of 1"):
        check_struct(_holder(rules, t=[[1]], a=1, b=None))
    unknown = StructRules(type_name="T", validators=("tests.compiled_nobody",))
    with pytest.raises(ValidationError, match=r"no validator named 'tests\.compiled_nobody' is registered"):
        check_struct(_holder(unknown))


@pytest.mark.parametrize(
    ("values", "breach"),
    [
        ({"a": 1, "class": None, "x-y": 1, "c": None}, None),
        ({"a": None, "class": None, "x-y": 1, "c": None}, None),  # at most one: none is fine
        ({"a": 1, "class": 2, "x-y": 1, "c": None}, "at most one of a, class may be set; got a, class"),
        ({"a": 1, "class": None, "x-y": None, "c": None}, "exactly one of x-y, c must be set; got none"),
        ({"a": 0, "class": None, "x-y": 0, "c": 0}, "exactly one of x-y, c must be set; got x-y, c"),
        ({"a": 1, "class": 2, "x-y": 1, "c": 1}, "at most one of a, class may be set; got a, class"),  # the first
    ],
)
def test_group_rules_are_counted_inline_in_declared_order(values: dict[str, Any], breach: str | None) -> None:
    """Falsy values count as set (only None is unset); fields named with a keyword or a dash are read
    with getattr; the first group broken is the one reported."""
    rules = StructRules(
        type_name="T",
        groups=(
            GroupRule(rule="at_most_one_of", fields=("a", "class")),
            GroupRule(rule="exactly_one_of", fields=("x-y", "c")),
        ),
    )
    holder = _holder(rules, **values)
    if breach is None:
        check_struct(holder)
        return
    with pytest.raises(ValidationError, match=f"^T: {breach}$") as caught:
        check_struct(holder)
    assert (caught.value.type_id, caught.value.path) == ("T", None)


def test_a_group_rule_of_no_fields_is_checked_as_the_general_walk_checks_it() -> None:
    for rule, breach in (("at_most_one_of", None), ("exactly_one_of", "exactly one of  must be set; got none")):
        holder = _holder(StructRules(type_name="T", groups=(GroupRule(rule=rule, fields=()),)))
        if breach is None:
            check_struct(holder)
            continue
        with pytest.raises(ValidationError, match=f"^T: {breach}$"):
            check_struct(holder)


def test_a_generated_type_with_a_group_rule_checks_it_in_its_one_call() -> None:
    from tensorwire.builtins.diffusion import Output
    from tools.bench.calls import count_calls

    tensor = torch.zeros(2)
    Output(output=tensor)
    assert count_calls(lambda: Output(output=tensor)) == 1  # fields and group rule, no call of the rest
    message = Output(output=tensor)
    message.media = object()  # type: ignore[assignment]  # only None-ness counts for a group rule
    breach = r"^diffusion\.Output: at most one of media, output may be set; got media, output$"
    with pytest.raises(ValidationError, match=breach) as caught:
        message.__post_init__()
    assert caught.value.type_id == "diffusion.Output"


def test_rules_with_nothing_to_check_accept_anything() -> None:
    check_struct(_holder(StructRules(type_name="T")))


def test_past_the_cache_bound_rules_are_still_checked_without_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorwire import _contract

    full: dict[int, Any] = {-i: (None, None) for i in range(1, 4097)}  # ids no rules object has
    monkeypatch.setattr(_contract, "_COMPILED", full)
    for field in (TensorCheck(kind="tensor", shape=(2,)), TensorCheck(kind="tensor", shape=("n",))):
        rules = StructRules(
            type_name="T", fields=(("x", field),), groups=(GroupRule(rule="at_most_one_of", fields=("a", "b")),)
        )
        check_struct(_holder(rules, x=torch.zeros(2), a=1, b=None))
        with pytest.raises(ValidationError, match="expected rank 1, got shape") as caught:
            check_struct(_holder(rules, x=torch.zeros(2, 2), a=1, b=None))
        assert (caught.value.type_id, caught.value.path) == ("T", "$.x")
        with pytest.raises(ValidationError, match="at most one of a, b may be set; got a, b"):
            check_struct(_holder(rules, x=torch.zeros(2), a=1, b=2))
    assert len(full) == 4096


def test_a_loaded_type_runs_its_compiled_rules_as_its_post_init(tmp_path: Any) -> None:
    import json

    import tensorwire as tw
    from tools.bench.calls import count_calls

    def tensors(a: list[Any], b: list[Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "a": {"x-tensor": {"dtypes": ["float32"], "shape": a}},
                "b": {"x-tensor": {"dtypes": ["float32"], "shape": b}},
            },
            "required": ["a", "b"],
        }

    (tmp_path / "t").mkdir()
    for name, body in {"Pair": tensors([None], [2]), "Named": tensors(["n"], ["n"])}.items():
        schema = {"$schema": "../meta.json", "$id": f"t.{name}", "x-version": 1, "title": name, **body}
        (tmp_path / "t" / f"{name}.v1.json").write_text(json.dumps(schema))
    registry = tw.load_schemas(tmp_path)
    pair, named = registry.type("t.Pair"), registry.type("t.Named")
    a, b = torch.zeros(3), torch.zeros(2)
    pair(a=a, b=b)  # (nothing is left to compile on first use)
    assert count_calls(lambda: pair(a=a, b=b)) == 1  # the compiled check alone, no dispatch
    with pytest.raises(ValidationError, match=r"^t\.Pair\.b: dim 0 must be 2, got shape \(3,\)$") as info:
        pair(a=torch.zeros(3), b=torch.zeros(3))
    assert (info.value.type_id, info.value.path) == ("t.Pair", "$.b")
    named(a=torch.zeros(3), b=torch.zeros(3))  # named dims: the general walk, as the class's __post_init__
    with pytest.raises(ValidationError, match=r"^t\.Named\.b: dim 'n' is 2, but 3 in t\.Named\.a ") as info:
        named(a=torch.zeros(3), b=torch.zeros(2))
    assert (info.value.type_id, info.value.path) == ("t.Named", "$.b")
    for cls in (pair, named):  # called again as a method, after a change no rule saw
        message = cls(a=torch.zeros(3), b=torch.zeros(2 if cls is pair else 3))
        message.b = torch.zeros(4)
        with pytest.raises(ValidationError, match=r"\.b: "):
            message.__post_init__()
    head = tw.Encoder().encode(pair(a=torch.zeros(3), b=torch.zeros(2)))
    assert tw.Decoder(registry).decode(head).a.shape == (3,)


def test_a_generated_type_runs_its_compiled_rules_as_its_post_init() -> None:
    from tensorwire.builtins.rpc import Request, Value
    from tools.bench.calls import count_calls

    tensor = torch.zeros(2)
    Request(method="m", kwargs={"x": tensor})  # (nothing is left to compile on first use)
    assert count_calls(lambda: Request(method="m", kwargs={"x": tensor})) == 1  # the compiled check alone
    assert vars(Request)["__post_init__"] is not vars(Value)["__post_init__"]  # each class its own rules
    breach = r"^rpc\.Request\.kwargs\['x'\]: object is not allowed in a tree$"
    with pytest.raises(ValidationError, match=breach) as info:
        Request(method="m", kwargs={"x": object()})
    assert (info.value.type_id, info.value.path) == ("rpc.Request", "$.kwargs.x")
    message = Value(value=[1, tensor])
    message.value = {"k": object()}  # a change no rule saw: checked again as a method
    with pytest.raises(ValidationError, match=r"^rpc\.Value\.value\['k'\]: object is not allowed in a tree$") as info:
        message.__post_init__()
    assert (info.value.type_id, info.value.path) == ("rpc.Value", "$.value.k")


def test_fields_named_as_what_the_class_body_reads_leave_the_rules_in_force(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A field's default binds its name in the class body: fields named ``TYPE_CHECKING`` (true) and
    ``struct_check`` must not turn the generated ``__post_init__`` into its stub or call the default."""
    import importlib

    from tensorwire.cli import main
    from tests.conftest import minimal, write_schemas

    fields: dict[str, Any] = {
        "TYPE_CHECKING": {"type": "boolean", "default": True},
        "struct_check": {"type": "integer", "default": 3},
        "t": {"x-tensor": {"dtypes": ["float32"], "shape": [2]}},
    }
    monkeypatch.chdir(tmp_path)  # where no configuration applies
    schemas = write_schemas(tmp_path / "schemas", {"clash/T.v1.json": minimal("clash.T", **fields)})
    assert main(["gen", str(schemas), "-o", str(tmp_path / "clashing_names")]) == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = importlib.import_module("clashing_names.clash").T
    assert cls(t=torch.zeros(2)).struct_check == 3
    with pytest.raises(ValidationError, match=r"^clash\.T\.t: dim 0 must be 2, got shape \(3,\)$"):
        cls(t=torch.zeros(3))
