"""The encoder and the decoder agree, and so do both back ends, on generated schemas and values.

Each example is a message type built from the keywords of the schema language (integers and
numbers with bounds, exclusive bounds, multiples and widths; strings and bytes with lengths and
patterns; enums, consts, nullable fields, defaults; lists, sets, maps and tuples with counts; a
nested struct, a tagged union, tensors and arrays with their specs, trees, a group rule and a named
validator) and values that fit it but for at most one field, whose value lies at, just inside or
just outside one of its limits. Then:

- what the encoder sends decodes to what was sent; what it refuses, written by an encoder that
  checks nothing, the decoder refuses with the same words and path;
- the generated-source class and the run-time class write the same bytes, read each other's into
  equal messages and refuse the same values with the same error;
- the decoder's shorter path and the encoder's one-encode path give what the full paths give.

``TW_AGREEMENT_EXAMPLES`` sets how many schemas and values each property tries (derandomized:
the same ones on every run; set ``TW_AGREEMENT_SEED`` to try others).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import numpy as np
import torch
from hypothesis import HealthCheck, given, reject, seed, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire.gen import generate
from tensorwire.schema._scalars import INT_FORMATS
from tests.conftest import write_schemas
from tests.test_plain_path import _full_decoder, _full_encoder
from tests.wire_helpers import same

EXAMPLES = int(os.environ.get("TW_AGREEMENT_EXAMPLES", "40"))
SEED = os.environ.get("TW_AGREEMENT_SEED")
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
RULE = "agree.not_thirteen"


@tw.register_validator(RULE)
def _not_thirteen(message: Any) -> None:
    if message.tally == 13:
        raise tw.rules.violation("agree.M", "THIRTEEN", "tally is 13")


def _seeded(test: Callable[..., None]) -> Callable[..., None]:
    return test if SEED is None else seed(int(SEED))(test)


# -- fields: a schema, a value that fits it and values near its limits -------------------------

INT_EDGES = [-(2**63), -(2**63) + 1, -(2**31), -1, 0, 1, 2, 3, 7, 2**31 - 1, 2**53 + 1, 2**63 - 1]
FLOAT_EDGES = [-1e300, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, 1e300]
TEXT = st.lists(
    st.sampled_from(["a", "z", "A", "_", "0", " ", "\u00e9", "\ufb01", "fi", "\U0001f600", "\U0001d518"]), max_size=4
).map("".join)


class Field:
    """One field: its schema, a value that fits it, the values tried in its place (data: a nested
    struct as a dict) and whether it is required."""

    def __init__(self, schema: dict[str, Any], good: Any, tried: st.SearchStrategy[Any], required: bool = True):
        self.schema, self.good, self.tried, self.required = schema, good, tried, required


def _near(values: list[Any]) -> list[Any]:
    """Each int of ``values`` and its neighbours; each float and the doubles next to it."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            out += [v - 1, v, v + 1]
        else:
            out += [math.nextafter(v, -math.inf), v, math.nextafter(v, math.inf)]
    return out


@st.composite
def int_field(draw: st.DrawFn) -> Field:
    schema: dict[str, Any] = {"type": "integer"}
    fmt = draw(st.sampled_from([None, "int8", "uint8", "int32", "uint64", "int64"]))
    if fmt:
        schema["format"] = fmt
    floor, ceiling = INT_FORMATS.get(fmt or "", (-(2**63), 2**64 - 1))
    low = draw(st.sampled_from([None, *(e for e in INT_EDGES[1:-1] if floor < e < ceiling)]))
    high = draw(st.sampled_from([None, *(e for e in INT_EDGES[1:-1] if floor < e < ceiling)]))
    if low is not None and high is not None and low >= high:
        low, high = high, None if low == high else low
    if low is not None:
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
    if high is not None:
        room = high - (floor if low is None else low) > 2  # room for both bounds to be exclusive
        schema["exclusiveMaximum" if room and draw(st.booleans()) else "maximum"] = high
    if draw(st.booleans()):
        schema["multipleOf"] = draw(st.sampled_from([1, 2, 3, 7]))
    edges = [*INT_EDGES, 2**64 - 1, 2**64, -(2**63) - 1, *(b for b in (low, high) if b is not None)]
    return Field(schema, None, st.one_of(st.sampled_from(_near(edges)), st.integers(), st.sampled_from([1.0, True])))


@st.composite
def number_field(draw: st.DrawFn) -> Field:
    schema: dict[str, Any] = {"type": "number"}
    low = draw(st.sampled_from([None, *FLOAT_EDGES[1:-1]]))
    high = draw(st.sampled_from([None, *FLOAT_EDGES[1:-1]]))
    if low is not None and high is not None and low > high:
        low, high = high, low
    exclusive = (draw(st.booleans()), draw(st.booleans()))
    if low is not None and high is not None and low == high and any(exclusive):
        high = None
    if low is not None:
        schema["exclusiveMinimum" if exclusive[0] else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum" if exclusive[1] else "maximum"] = high
    if draw(st.booleans()):
        schema["multipleOf"] = draw(st.sampled_from([0.5, 0.1, 3, 1e-300]))
    edges = [*FLOAT_EDGES, *(float(b) for b in (low, high) if b is not None)]
    special = [math.nan, -math.nan, math.inf, -math.inf, 5e-324, 1.5, 0.30000000000000004]
    return Field(schema, None, st.one_of(st.sampled_from(_near(edges) + special), st.floats()))


@st.composite
def string_field(draw: st.DrawFn) -> Field:
    schema: dict[str, Any] = {"type": "string"}
    low, high = draw(st.sampled_from([None, 0, 1, 2])), draw(st.sampled_from([None, 2, 3]))
    if low is not None:
        schema["minLength"] = low
    if high is not None:
        schema["maxLength"] = high
    if draw(st.booleans()):
        schema["pattern"] = draw(st.sampled_from(["^[a-z]*$", "a", "^\\w*$", "^.{0,2}$", "fi", "^\U0001f600"]))
    near = ["", "a", "ab", "abc", "\U0001f600", "\U0001f600\U0001f600", "\ufb01", "fi", "a\U0001d518z", "A_0"]
    return Field(schema, None, st.one_of(st.sampled_from(near), TEXT))


@st.composite
def bytes_field(draw: st.DrawFn) -> Field:
    schema: dict[str, Any] = {"type": "string", "format": "bytes"}
    low, high = draw(st.sampled_from([None, 1, 2])), draw(st.sampled_from([None, 2, 3]))
    if low is not None:
        schema["minLength"] = low
    if high is not None:
        schema["maxLength"] = high
    return Field(schema, None, st.one_of(st.binary(max_size=4), st.sampled_from(["ab", bytearray(b"ab")])))


ENUM = {"type": "string", "enum": ["a", "b", "\ufb01", "\U0001f600"], "x-enum-name": "Letter"}


def enum_field() -> st.SearchStrategy[Field]:
    return st.just(
        Field({"$ref": "#/$defs/Letter"}, None, st.sampled_from(["a", "b", "\ufb01", "fi", "A", "\U0001f600", 1]))
    )


def const_field() -> st.SearchStrategy[Field]:
    consts = st.sampled_from([3, -(2**63), 2**63 - 1, "px", True, False])  # a string const is a tag: ASCII
    return consts.map(lambda c: Field({"const": c}, c, st.sampled_from([c, 3, 4, "px", "py", True, False, 1, 0])))


@st.composite
def array_field(draw: st.DrawFn) -> Field:
    unique = draw(st.booleans())
    items = draw(st.sampled_from([{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 2}]))
    schema: dict[str, Any] = {"type": "array", "items": items}
    if unique:
        schema["uniqueItems"] = True
    low, high = draw(st.sampled_from([None, 1, 2])), draw(st.sampled_from([None, 2, 3]))
    if low is not None:
        schema["minItems"] = low
    if high is not None:
        schema["maxItems"] = high
    item = st.integers(-1, 10) if items["type"] == "integer" else st.sampled_from(["", "a", "ab", "abc", "\U0001f600"])
    lists = st.lists(item, max_size=4)
    repeated = lists.map(lambda items: items + items[:1])  # for a set: an item given twice
    tried = st.one_of(lists.map(frozenset), lists, repeated) if unique else st.one_of(lists, lists.map(tuple))
    good = list(range(low or 0)) if items["type"] == "integer" else ["a", "b"][: low or 0]
    return Field(schema, frozenset(good) if unique else good, tried)


@st.composite
def map_field(draw: st.DrawFn) -> Field:
    schema: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "integer", "maximum": 5}}
    low, high = draw(st.sampled_from([None, 1, 2])), draw(st.sampled_from([None, 2, 3]))
    if low is not None:
        schema["minProperties"] = low
    if high is not None:
        schema["maxProperties"] = high
    keys = st.sampled_from(["", "a", "b c", "\U0001f600", "\ufb01", "fi"])
    tried = st.dictionaries(st.one_of(keys, st.integers(0, 1)), st.integers(4, 6), max_size=4)
    return Field(schema, {"a": 0, "b": 0} if low == 2 else {"a": 0} if low else {}, tried)


def tuple_field() -> st.SearchStrategy[Field]:
    schema = {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0}, {"type": "string", "maxLength": 1}]}
    return st.just(
        Field(schema, (0, "a"), st.tuples(st.integers(-1, 1), st.sampled_from(["", "a", "ab"])) | st.just([0, "a"]))
    )


def nullable_field() -> st.SearchStrategy[Field]:
    schema = {"type": ["integer", "null"], "minimum": 0, "default": None}
    return st.just(Field(schema, None, st.sampled_from([None, -1, 0, 1]), required=False))


INNER = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"]}


INNERS = st.builds(lambda n: {"n": n}, st.integers(-1, 10))


def struct_field() -> st.SearchStrategy[Field]:
    return st.just(Field({"$ref": "#/$defs/Inner"}, {"n": 0}, INNERS))


def structs_field() -> st.SearchStrategy[Field]:
    """A list of structs, a map of them, or a nullable one."""
    listed = {"type": "array", "items": {"$ref": "#/$defs/Inner"}, "maxItems": 2}
    mapped = {"type": "object", "additionalProperties": {"$ref": "#/$defs/Inner"}}
    nullable = {"oneOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}], "default": None}
    return st.sampled_from(
        [
            Field(listed, [], st.lists(INNERS, max_size=3)),
            Field(mapped, {}, st.dictionaries(st.sampled_from(["a", "\ufb01", "b c"]), INNERS, max_size=2)),
            Field(nullable, None, st.none() | INNERS, required=False),
        ]
    )


VARIANTS = {
    "Cat": {
        "type": "object",
        "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "maximum": 9}},
        "required": ["lives"],
    },
    "Dog": {
        "type": "object",
        "properties": {"kind": {"const": "dog"}, "name": {"type": "string", "minLength": 1}},
        "required": ["name"],
    },
}


def union_field() -> st.SearchStrategy[Field]:
    schema = {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "discriminator": {"propertyName": "kind"}}
    tried = st.one_of(
        st.builds(lambda n: {"kind": "cat", "lives": n}, st.sampled_from([8, 9, 10, -(2**63)])),
        st.builds(lambda s: {"kind": "dog", "name": s}, st.sampled_from(["", "rex", "\U0001f600"])),
    )
    return st.just(Field(schema, {"kind": "cat", "lives": 1}, tried))


DTYPES = {"float32": torch.float32, "int8": torch.int8, "bfloat16": torch.bfloat16, "float64": torch.float64}


@st.composite
def tensor_field(draw: st.DrawFn) -> Field:
    ndarray = draw(st.booleans())
    spec: dict[str, Any] = {}
    allowed = draw(st.sampled_from([None, ["float32"], ["int8", "float64"]]))
    if allowed is not None:
        spec["dtypes"] = allowed
    spec["shape"] = draw(st.sampled_from([None, [2, None], ["n", 3], [None]]))
    if spec["shape"] is None:
        spec.pop("shape")
        if draw(st.booleans()):
            spec["rank"] = 2
    if draw(st.booleans()):
        spec["contiguous"] = True
    devices = None if ndarray else draw(st.sampled_from([None, ["cpu"], ["cuda"]]))
    if devices is not None:
        spec["devices"] = devices
    dtypes = [">f4", "float32", "int8", "float64"] if ndarray else list(DTYPES)

    def make(shape: tuple[int, ...], dtype: str, flip: bool) -> Any:
        if ndarray:
            value = np.zeros(shape, dtype=dtype)
            return value.T if flip else value
        tensor = torch.arange(math.prod(shape), dtype=torch.float64).to(DTYPES[dtype]).reshape(shape)
        return tensor.transpose(0, -1) if flip else tensor

    shapes = st.sampled_from([(2, 3), (3, 3), (2,), (3,), (2, 3, 1), (0, 3)])
    tried = st.builds(make, shapes, st.sampled_from(dtypes), st.booleans())
    fits = tuple(2 if d is None or isinstance(d, str) else d for d in spec.get("shape", [2, 3]))
    schema: dict[str, Any] = {"x-ndarray" if ndarray else "x-tensor": spec}
    if devices == ["cuda"]:  # no cuda tensor here to build a message with: nullable, set afterwards
        return Field({"oneOf": [schema, {"type": "null"}], "default": None}, None, tried, required=False)
    return Field(schema, make(fits, allowed[0] if allowed else "float32", False), tried)


LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT, st.binary(max_size=2))
TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.lists(inner, max_size=2).map(tuple), st.dictionaries(TEXT, inner, max_size=2)
    ),
    max_leaves=6,
)


@st.composite
def tree_field(draw: st.DrawFn) -> Field:
    spec = {"max_depth": draw(st.integers(1, 3)), "json": draw(st.booleans())}
    return Field({"x-tree": spec, "default": None}, None, TREES | st.just(torch.zeros(2)), required=False)


@st.composite
def defaulted(draw: st.DrawFn, field: st.SearchStrategy[Field]) -> Field:
    """``field`` with a default drawn from its values (one that does not fit: the schema is refused,
    and the example with it)."""
    made = draw(field)
    default = draw(made.tried)
    if (isinstance(default, float) and not math.isfinite(default)) or isinstance(default, bool | bytearray):
        return made
    schema = {**made.schema, "default": default, "$comment": "a drawn default"}
    return Field(schema, None, made.tried | st.just(default), required=False)


FIELDS = st.one_of(
    int_field(),
    number_field(),
    string_field(),
    bytes_field(),
    defaulted(int_field()),
    defaulted(number_field()),
    defaulted(string_field()),
    enum_field(),
    const_field(),
    array_field(),
    map_field(),
    tuple_field(),
    nullable_field(),
    struct_field(),
    structs_field(),
    union_field(),
    tensor_field(),
    tree_field(),
)


@st.composite
def message_type(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Field]]:
    """A schema of up to three generated fields (some with extras: a group rule, a validator)."""
    fields = {f"f{i}": f for i, f in enumerate(draw(st.lists(FIELDS, min_size=1, max_size=3)))}
    fields["n"] = Field({"type": "integer"}, 0, st.integers())  # a field besides a tag
    doc: dict[str, Any] = {"$id": "agree.M", "x-version": 1, "type": "object", "properties": {}}
    if draw(st.booleans()):
        doc["additionalProperties"] = False
    group = draw(st.sampled_from([None, "at_most_one_of", "exactly_one_of"]))
    if group is not None:  # a group rule over two optional fields
        for name in ("p", "q"):
            fields[name] = Field(
                {"type": ["integer", "null"], "default": None}, None, st.sampled_from([None, 1]), False
            )
        doc["x-constraints"] = {group: ["p", "q"] if group == "at_most_one_of" else [["p", "q"]]}
        if group == "exactly_one_of":
            fields["p"] = Field(fields["p"].schema, 1, fields["p"].tried, False)
    if draw(st.booleans()):
        fields["tally"] = Field({"type": "integer", "default": 0}, 0, st.sampled_from([0, 12, 13]), False)
        doc["x-validators"] = [RULE]
    inner = {**INNER, "additionalProperties": False} if draw(st.booleans()) else INNER
    defs: dict[str, Any] = {"Letter": ENUM, "Inner": inner, **VARIANTS}
    doc["$defs"] = defs
    for name, field in fields.items():
        doc["properties"][name] = field.schema
    doc["required"] = [name for name, f in fields.items() if f.required]
    return doc, fields


@st.composite
def case(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A schema and the data of one message: each field a value that fits it where there is one to
    hand (else a drawn one), one field (or none) a value near its limits."""
    doc, fields = draw(message_type())
    data: dict[str, Any] = {}
    odd = draw(st.sampled_from([None, *fields]))
    for name, field in fields.items():
        if name == odd or (field.good is None and field.required):
            data[name] = draw(field.tried)
        elif field.good is not None:
            data[name] = field.good
    fits = {name: f.good for name, f in fields.items() if f.good is not None}
    return doc, data, fits


# -- building messages and comparing outcomes ------------------------------------------------------


@contextmanager
def _registries(doc: dict[str, Any]) -> Iterator[tuple[tw.Registry, tw.Registry]]:
    """The run-time registry of ``doc`` and the one of the code ``tensorwire gen`` writes for it."""
    with tempfile.TemporaryDirectory() as root:
        schema_dir = write_schemas(Path(root) / "schemas", {"agree/M.v1.json": doc})
        runtime = tw.load_schemas(schema_dir)
        generate(schema_dir, Path(root) / "twgen_agree")
        sys.path.insert(0, root)
        try:
            yield runtime, importlib.import_module("twgen_agree").REGISTRY
        finally:
            sys.path.remove(root)
            for name in [n for n in sys.modules if n.startswith("twgen_agree")]:
                del sys.modules[name]


_RUNTIME: dict[str, tw.Registry] = {}


def _runtime(doc: dict[str, Any]) -> tw.Registry:
    """The run-time registry of ``doc`` (an example whose schema is refused is rejected)."""
    key = json.dumps(doc, sort_keys=True)
    if key not in _RUNTIME:
        if len(_RUNTIME) >= 256:  # a long hunt: the registries of earlier schemas are let go
            _RUNTIME.clear()
        with tempfile.TemporaryDirectory() as root:
            try:
                _RUNTIME[key] = tw.load_schemas(write_schemas(Path(root), {"agree/M.v1.json": doc}))
            except tw.SchemaError as exc:  # only a drawn default may not fit
                parts = (exc.pointer or "").split("/")
                field = doc["properties"].get(parts[2], {}) if parts[1:2] == ["properties"] else {}
                assert parts[-1] == "default" and "$comment" in field, exc
                reject()
    return _RUNTIME[key]


def _value(t: mi.Type, data: Any) -> Any:
    """``data`` as a value of type ``t``: a dict where a struct (or a union of structs) is becomes one."""
    if isinstance(t, mi.UnionType) and isinstance(data, dict):
        for option in t.types:
            if isinstance(option, mi.StructType) and option.tag == data.get("kind", option.tag):
                return _struct(option.cls, data)
    if isinstance(t, mi.StructType) and isinstance(data, dict):
        return _struct(t.cls, data)
    if isinstance(t, mi.UnionType) and data is not None:  # a nullable struct
        return _value(next(o for o in t.types if not isinstance(o, mi.NoneType)), data)
    if isinstance(t, mi.ListType) and isinstance(data, list):
        return [_value(t.item_type, item) for item in data]
    if isinstance(t, mi.DictType) and isinstance(data, dict):
        return {key: _value(t.value_type, item) for key, item in data.items()}
    return data


def _struct(cls: Any, data: dict[str, Any]) -> Any:
    """An instance of ``cls`` holding ``data`` as it is: built from the values that fit, then each
    field set (setting a field runs no rule), so that a value its rules refuse reaches the encoder."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    types = {f.name: f.type for f in info.fields}
    fits = {"n": 0, "lives": 1, "name": "x"}
    made = cls(**{k: fits[k] for k in types if k in fits and k in data})
    for name, value in data.items():
        if name != info.tag_field:
            setattr(made, name, _value(types[name], value))
    return made


def _message(registry: tw.Registry, data: dict[str, Any], fits: dict[str, Any]) -> Any:
    """The message of ``data``: built from the values that fit (``fits``, or ``data``'s where none
    is given), then each field of ``data`` set (setting a field runs no rule)."""
    cls = registry.type("agree.M")
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    types = {f.name: f.type for f in info.fields}
    made = cls(
        **{
            f.name: _value(f.type, fits.get(f.name, data.get(f.name)))
            for f in info.fields
            if f.required or f.name in fits
        }
    )
    for name, value in data.items():
        if name != info.tag_field:  # a string const made the type's tag: no field
            setattr(made, name, _value(types[name], value))
    return made


def _outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """What ``call()`` gives: ``("value", value)``, or ``("error", message, path, class)``."""
    try:
        return ("value", call())
    except (tw.EncodeError, tw.DecodeError) as exc:
        return ("error", exc.message, exc.path, type(exc))


def _agrees(sent: Any, got: Any) -> bool:
    """Whether ``got`` (decoded) is what was ``sent``: floats bit for bit (NaN, -0.0), an int sent
    for a float its value, a str sent for an enum its member, tensors by ``same``."""
    if isinstance(sent, torch.Tensor | np.ndarray):
        return same(sent, got)
    if isinstance(sent, float):
        return type(got) is float and ((math.isnan(sent) and math.isnan(got)) or _bits(sent) == _bits(got))
    if isinstance(sent, int) and not isinstance(sent, bool) and type(got) is float:
        return sent == got
    if isinstance(sent, msgspec.Struct):
        return type(sent) is type(got) and all(
            _agrees(getattr(sent, f), getattr(got, f)) for f in sent.__struct_fields__
        )
    if isinstance(sent, tuple | list) and isinstance(got, tuple | list):  # one given for the other: its items
        return len(sent) == len(got) and all(map(_agrees, sent, got))
    if isinstance(sent, list | tuple) and isinstance(got, frozenset):  # a list given for a set
        return frozenset(sent) == got
    if isinstance(sent, dict):
        return type(got) is dict and sent.keys() == got.keys() and all(_agrees(sent[k], got[k]) for k in sent)
    return bool(sent == got) and (type(sent) is type(got) or isinstance(got, str | bytes))


def _bits(value: float) -> bytes:
    """A float as it travels: its 8 bytes (-0.0 is not 0.0)."""
    return msgspec.msgpack.encode(value)


UNCHECKED = tw.EncodeOptions(validate=False)


def _sent(frames: list[Any]) -> list[bytes]:
    return [bytes(memoryview(f)) for f in frames]


# -- the properties ----------------------------------------------------------------------------------


@_seeded
@SETTINGS
@given(case())
def test_what_the_encoder_sends_decodes_and_what_it_refuses_the_decoder_refuses(
    drawn: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    doc, data, fits = drawn
    registry = _runtime(doc)
    message = _message(registry, data, fits)
    decoder = tw.Decoder(registry)
    sent = _outcome(lambda: tw.Encoder().encode(message))
    if sent[0] == "value":
        got = decoder.decode(sent[1])
        assert _agrees(message, got), (message, got)
        assert _agrees(got, decoder.decode(tw.Encoder().encode(got)))  # what arrived fits: it can be sent on
        return
    try:
        forged = tw.Encoder(options=UNCHECKED).encode(message)
    except tw.EncodeError:
        return  # no wire form (an int past 64 bits, bytes for a str): nothing a peer could send
    received = _outcome(lambda: decoder.decode(forged))
    assert received[0] == "error", (sent, received[1])
    assert received[1] == sent[1], (sent, received)
    # a rule's breach (a tensor spec, a group rule, a validator) has no path on encode and the
    # struct's, ``$``, on decode: its text names the field
    assert received[2] == sent[2] or (sent[2] is None and received[2] == "$"), (sent, received)


@_seeded
@settings(SETTINGS, max_examples=max(EXAMPLES // 4, 5))
@given(case())
def test_both_back_ends_write_read_and_refuse_the_same(
    drawn: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    doc, data, fits = drawn
    _runtime(doc)  # (rejects a schema that is refused)
    with _registries(doc) as (runtime, generated):
        run_msg, gen_msg = _message(runtime, data, fits), _message(generated, data, fits)
        for options in (None, UNCHECKED):
            encoder = tw.Encoder(options=options)
            run_out = _outcome(lambda: _sent(encoder.encode(run_msg)))  # noqa: B023
            gen_out = _outcome(lambda: _sent(encoder.encode(gen_msg)))  # noqa: B023
            assert run_out == gen_out
            if run_out[0] != "value":
                continue
            frames = run_out[1]
            run_got = _outcome(lambda: tw.Decoder(runtime).decode(frames))  # noqa: B023
            gen_got = _outcome(lambda: tw.Decoder(generated).decode(frames))  # noqa: B023
            if run_got[0] == "error" or gen_got[0] == "error":
                assert run_got == gen_got
                continue
            assert type(run_got[1]).__name__ == type(gen_got[1]).__name__
            # each message as the other back end's class writes it: the same bytes
            assert _sent(tw.Encoder(options=UNCHECKED).encode(run_got[1])) == _sent(
                tw.Encoder(options=UNCHECKED).encode(gen_got[1])
            )


@_seeded
@SETTINGS
@given(case())
def test_the_shorter_paths_give_what_the_full_paths_give(
    drawn: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    doc, data, fits = drawn
    registry = _runtime(doc)
    message = _message(registry, data, fits)
    decoder = tw.Decoder(registry)
    encoder = tw.Encoder()
    quick = _outcome(lambda: _sent(encoder.encode(message)))
    full = _outcome(lambda: _sent(_full_encoder(encoder).encode(message)))
    assert quick == full
    frames = quick[1] if quick[0] == "value" else None
    if frames is None:
        try:
            frames = _sent(tw.Encoder(options=UNCHECKED).encode(message))
        except tw.EncodeError:
            return
    got, want = _outcome(lambda: decoder.decode(frames)), _outcome(lambda: _full_decoder(decoder).decode(frames))
    assert got[0] == want[0], (got, want)
    if got[0] == "error":
        assert got == want
    else:
        assert _agrees(want[1], got[1]) and type(got[1]) is type(want[1])
