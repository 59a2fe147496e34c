"""Messages of types that hold no tensor, tree or untyped value take a shorter path: one encode and
the schema check on the way out; on the way in, frame 0 up to the body compared with the type's own,
the body's level openers counted (unless the type is closed and bounds its depth) and the body
decoded alone. Whatever arrives, and whatever the caller passes, the outcome is the full path's:
the same message, or the same error. Every test runs on the types open and closed."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire._plain import unguarded
from tests.conftest import write_schemas

pytestmark = pytest.mark.usefixtures("shorter_paths")  # compiled and in Python

RULE = "plain_path.not_thirteen"
FLAT_RULE = "plain_path.flat_not_thirteen"

TICKET: dict[str, Any] = {
    "$id": "plain.Ticket",
    "x-version": 1,
    "title": "Ticket",
    "description": "Scalars, strings, a list, a map, an enum, a nested struct and a named validator.",
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 16},
        "count": {"type": "integer", "minimum": 0, "maximum": 1000},
        "ratio": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4, "default": []},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}, "default": {}},
        "kind": {"type": "string", "enum": ["a", "b"], "x-enum-name": "TicketKind", "default": "a"},
        "note": {"type": ["string", "null"], "default": None},
        "inner": {"$ref": "Inner.v1.json"},
    },
    "required": ["id", "count", "ratio", "inner"],
    "x-validators": [RULE],
}
INNER: dict[str, Any] = {
    "$id": "plain.Inner",
    "x-version": 1,
    "title": "Inner",
    "description": "A nested struct with a list of lists.",
    "type": "object",
    "properties": {
        "level": {"type": "integer"},
        "rows": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    },
    "required": ["level", "rows"],
}


LABELS: dict[str, Any] = {
    "$id": "plain.Labels",
    "x-version": 1,
    "title": "Labels",
    "description": "A set of strings: written sorted (rewritten on encode), read back as a set.",
    "type": "object",
    "properties": {"labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    "required": ["labels"],
}


FLAT: dict[str, Any] = {
    "$id": "plain.Flat",
    "x-version": 1,
    "title": "Flat",
    "description": "Scalars, strings and a list, with a named validator: no struct inside it.",
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 16},
        "count": {"type": "integer", "minimum": 0, "maximum": 1000},
        "note": {"type": ["string", "null"], "default": None},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
    },
    "required": ["id", "count"],
    "x-validators": [FLAT_RULE],
}


MANY: dict[str, Any] = {
    "$id": "plain.Many",
    "x-version": 1,
    "title": "Many",
    "description": "A list of structs: as many level openers as items, and more.",
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"$ref": "Inner.v1.json"}}},
    "required": ["items"],
}


@tw.register_validator(RULE)
def _not_thirteen(ticket: Any) -> None:
    if ticket.count == 13:
        raise tw.rules.violation("plain.Ticket", "THIRTEEN", "count is 13")


@tw.register_validator(FLAT_RULE)
def _flat_not_thirteen(flat: Any) -> None:
    if flat.count == 13:
        raise tw.rules.violation("plain.Flat", "THIRTEEN", "count is 13")


def _load(root: Path, closed: bool) -> tw.Registry:
    """The plain types, open (unknown fields skipped) or closed (``additionalProperties: false``)."""
    docs = {
        "plain/Ticket.v1.json": TICKET,
        "plain/Inner.v1.json": INNER,
        "plain/Labels.v1.json": LABELS,
        "plain/Flat.v1.json": FLAT,
        "plain/Many.v1.json": MANY,
    }
    if closed:
        docs = {name: {**doc, "additionalProperties": False} for name, doc in docs.items()}
    return tw.load_schemas(write_schemas(root, docs))


@pytest.fixture(scope="module", params=["open", "closed"])
def registry(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tw.Registry:
    """The plain types, open and closed: a closed type's body is not counted (its type bounds its depth)."""
    return _load(tmp_path_factory.mktemp(request.param), request.param == "closed")


def _closed(registry: tw.Registry) -> bool:
    return bool(registry.type("plain.Ticket").__struct_config__.forbid_unknown_fields)


def _ticket(registry: tw.Registry, **fields: Any) -> Any:
    inner = registry.type("plain.Inner")(level=1, rows=[[1, 2], [3]])
    values: dict[str, Any] = {"id": "t-1", "count": 3, "ratio": 0.5, "inner": inner, "tags": ["x"], "attrs": {"k": 1}}
    values.update(fields)
    return registry.type("plain.Ticket")(**values)


def _frame_0(message: Any) -> bytes:
    """Frame 0 of ``message``, as the encoder writes it."""
    head = tw.Encoder().encode(message)[0]
    assert type(head) is bytes
    return head


def _head(registry: tw.Registry, **fields: Any) -> bytes:
    """Frame 0 of a ticket."""
    return _frame_0(_ticket(registry, **fields))


def _full_decoder(decoder: tw.Decoder) -> tw.Decoder:
    """``decoder`` with the shorter path switched off: every frame takes the full decode."""
    return _with_plain(tw.Decoder(decoder.registry, options=decoder.options), {})


def _with_plain(decoder: tw.Decoder, table: dict[bytes, Any]) -> tw.Decoder:
    """``decoder`` reading the bodies of ``table`` on its shorter path (``Decoder._plain``), in
    Python and compiled alike."""
    object.__setattr__(decoder, "_plain", table)
    if decoder._native is not None:
        object.__setattr__(decoder, "_native", (table, *decoder._native[1:]))
    return decoder


def _python_decoder(decoder: tw.Decoder) -> tw.Decoder:
    """``decoder`` taking its shorter path in Python (as where ``tensorwire._speedups`` is not built)."""
    python = tw.Decoder(decoder.registry, options=decoder.options)
    object.__setattr__(python, "_native", None)
    return python


def _full_encoder(encoder: tw.Encoder) -> tw.Encoder:
    """``encoder`` with the shorter path switched off (the full path still checks the schema)."""
    full = tw.Encoder(options=encoder.options)
    object.__setattr__(full, "_plain_levels", -1)  # (the levels the one-encode path takes: none)
    object.__setattr__(full, "_native", None)  # (nor that path compiled)
    assert full.options.validate
    return full


def _python_encoder(encoder: tw.Encoder) -> tw.Encoder:
    """``encoder`` taking its one-encode path in Python (as where ``tensorwire._speedups`` is not built)."""
    python = tw.Encoder(options=encoder.options)
    object.__setattr__(python, "_native", None)
    return python


def _outcome(call: Callable[[], Any]) -> Any:
    """What ``call()`` gives: its value's type and msgpack bytes (equal where NaNs are, and for
    frames: their bytes), or its error's type and fields."""
    try:
        value = call()
        return ("value", type(value), msgspec.msgpack.encode(value))
    except (tw.EncodeError, tw.DecodeError) as exc:
        return ("error", type(exc), exc.message, exc.path, exc.type_id, exc.version)


def test_the_full_encoder_here_does_not_take_the_one_encode_path(
    registry: tw.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The encoders these tests compare take two paths: ``_full_encoder`` never takes the one-encode
    path (``TypePlan.plain``), which ``tw.Encoder()`` takes for a valid message."""
    from tensorwire import _encoder

    class Taken(BaseException):  # (not an ``Exception``: the one-encode path does not swallow it)
        pass

    def taken(body: bytes) -> None:
        raise Taken

    message = _ticket(registry)
    encoder = tw.Encoder()
    frames = encoder.encode(message)
    plan = _encoder._PLANS[type(message)]
    assert plan.plain is not None
    monkeypatch.setitem(_encoder._PLANS, type(message), dataclasses.replace(plan, plain=taken))
    monkeypatch.setitem(_encoder._ONE_ENCODE, type(message), (taken, plan.levels, plan.bare))  # (compiled)
    with pytest.raises(Taken):
        encoder.encode(message)
    assert _full_encoder(encoder).encode(message) == frames


def test_a_plain_message_decodes_without_the_full_decoder(registry: tw.Registry) -> None:
    encoder, decoder = tw.Encoder(), tw.Decoder(registry)
    message = _ticket(registry)
    frames = encoder.encode(message)
    assert decoder.decode(frames) == message
    assert decoder.decode([bytearray(frames[0])]) == message  # frame 0 not bytes: copied, then the same
    full = _full_decoder(decoder)
    assert full.decode(frames) == message
    assert not decoder._free and full._free  # the full decode's frame 0 decoders (pooled): never made


def test_a_set_is_rewritten_on_encode_and_read_on_the_plain_path(registry: tw.Registry) -> None:
    from tensorwire._plan import type_plan

    labels = registry.type("plain.Labels")
    assert type_plan(labels).plain is None  # a set is written sorted: the encoder's full path
    message = labels(labels={"b", "c", "a"})
    frames = tw.Encoder().encode(message)
    assert bytes(frames[0]).endswith(msgspec.msgpack.encode({"labels": ["a", "b", "c"]}))
    decoder = tw.Decoder(registry)
    assert _outcome(lambda: decoder.decode(frames)) == _outcome(lambda: _full_decoder(decoder).decode(frames))
    assert decoder.decode(frames) == message and not decoder._free  # read on the plain path


@pytest.mark.parametrize("strict", [False, True])
def test_frames_that_are_not_as_encoders_write_them_get_the_full_paths_answer(
    registry: tw.Registry, strict: bool
) -> None:
    decoder = tw.Decoder(registry, options=tw.DecodeOptions(strict_fingerprint=strict))
    full = _full_decoder(decoder)
    head = _head(registry)
    bare_end = head.index(b"\xc4\x00\x90") + 3
    body = msgspec.msgpack.decode(head[bare_end:])
    other_fingerprint = head.replace(head[bare_end - 67 : bare_end - 3], b"0" * 64)
    cases = {
        "as written": [head],
        "another fingerprint": [other_fingerprint],
        "a second frame": [head, b"abc"],
        "data in frame 0": [head[: bare_end - 3] + b"\xc4\x01z\x90" + head[bare_end:]],
        "a buffer table": [head[: bare_end - 1] + b"\x91\x92\x01\x81\xa9transport\xa6inline" + head[bare_end:]],
        "a wrong field type": [head[:bare_end] + msgspec.msgpack.encode({**body, "count": "3"})],
        "out of range": [head[:bare_end] + msgspec.msgpack.encode({**body, "count": 1001})],
        "a rule broken": [head[:bare_end] + msgspec.msgpack.encode({**body, "count": 13})],
        "not an enum member": [head[:bare_end] + msgspec.msgpack.encode({**body, "kind": "c"})],
        "a required field missing": [
            head[:bare_end] + msgspec.msgpack.encode({k: v for k, v in body.items() if k != "id"})
        ],
        "an unknown field": [head[:bare_end] + msgspec.msgpack.encode({**body, "new": [1, {"a": 2}]})],
        "bytes after the body": [head + b"\xc0"],
        "cut short": [head[:-3]],
        "cut in frame 0's start": [head[: bare_end - 2]],
        "an empty frame 0": [b""],
        "a tag's length past the frame's end": [head[:1] + b"\xbf" + head[2:80]],  # the body would be at 99
        "a long tag's length past the frame's end": [head[:1] + b"\xd9\xff" + head[3:100]],  # at 324
    }
    outcomes = {name: _outcome(partial(decoder.decode, frames)) for name, frames in cases.items()}
    for name, frames in cases.items():
        assert outcomes[name] == _outcome(partial(full.decode, frames)), name
    assert outcomes["as written"][0] == "value"
    if _closed(registry):
        assert outcomes["an unknown field"][2:4] == ("Object contains unknown field `new`", "$")
    else:
        assert outcomes["an unknown field"][0] == "value"  # skipped, as an older reader does
    assert outcomes["out of range"][2:4] == ("Expected `int` <= 1000", "$.count")
    assert outcomes["a rule broken"][2:4] == ("plain.Ticket: rule THIRTEEN: count is 13", "$")
    assert outcomes["another fingerprint"][0] == ("error" if strict else "value")


@pytest.mark.parametrize("depth", range(60, 70))
def test_an_unknown_field_nesting_past_the_limit_is_refused(registry: tw.Registry, depth: int) -> None:
    """frame 0 (1) and the body (2) are levels, then the unknown field's arrays (``depth`` of them)."""
    decoder = tw.Decoder(registry)
    head = _head(registry)
    bare_end = head.index(b"\xc4\x00\x90") + 3
    nested: Any = 0
    for _ in range(depth):
        nested = [nested]
    body = {**msgspec.msgpack.decode(head[bare_end:]), "zz": nested}
    frames = [head[:bare_end] + msgspec.msgpack.encode(body)]
    got = _outcome(lambda: decoder.decode(frames))
    assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))
    if 2 + depth > 64 + 2:
        assert got[0] == "error" and "nest" in got[2], got
    elif _closed(registry):  # the nesting within the limit: the closed type's own verdict
        assert got[2:4] == ("Object contains unknown field `zz`", "$"), got
    else:
        assert got[0] == "value"


def _damaged(data: st.DataObject, head: bytes) -> bytes:
    """``head`` with one to three bytes set, inserted or deleted, or cut short, as ``data`` draws."""
    damaged = bytearray(head)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        edit = data.draw(st.sampled_from(["set", "insert", "delete", "cut"]))
        byte = data.draw(st.integers(0, 255))
        if edit == "set":
            damaged[at] = byte
        elif edit == "insert":
            damaged.insert(at, byte)
        elif edit == "delete":
            del damaged[at]
        else:
            del damaged[at:]
        if not damaged:
            break
    return bytes(damaged)


_TEXT = st.text(max_size=20) | st.just("\udc80")  # a lone surrogate is not UTF-8
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "id": _TEXT | st.integers(),
        "count": st.integers(min_value=-5, max_value=2**70) | st.just(13) | st.floats() | st.booleans(),
        "ratio": st.floats() | st.text(max_size=3),
        "tags": st.lists(_TEXT, max_size=6) | st.integers(),
        "attrs": st.dictionaries(_TEXT, st.integers() | st.text(max_size=3), max_size=3),
        "kind": st.sampled_from(["a", "b", "c"]),
        "note": st.none() | _TEXT | st.integers(),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=_FIELDS)
def test_encoding_any_field_values_gives_the_full_paths_frames_or_error(
    registry: tw.Registry, fields: dict[str, Any]
) -> None:
    message = _ticket(registry)
    for name, value in fields.items():  # set after building: the class's own check is not what is tested
        setattr(message, name, value)
    encoder = tw.Encoder()
    got = _outcome(lambda: encoder.encode(message))
    assert got == _outcome(lambda: _full_encoder(encoder).encode(message))
    if got[0] == "value":
        decoder = tw.Decoder(registry)  # what was sent decodes, the same way both paths
        frames = encoder.encode(message)
        back = _outcome(lambda: decoder.decode(frames))
        assert back[0] == "value" and back == _outcome(lambda: _full_decoder(decoder).decode(frames))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decoding_damaged_frames_gives_the_full_paths_message_or_error(
    registry: tw.Registry, data: st.DataObject
) -> None:
    note = data.draw(st.sampled_from(["n", "n" * 2100]))  # frame 0 under 2 KiB (counted) or over (walked)
    frames = [_damaged(data, _head(registry, note=note, count=data.draw(st.integers(0, 12))))]
    decoder = tw.Decoder(registry)
    got = _outcome(lambda: decoder.decode(frames))
    assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))


def test_a_nan_ratio_travels(registry: tw.Registry) -> None:
    message = _ticket(registry, ratio=math.nan)
    out = tw.Decoder(registry).decode(tw.Encoder().encode(message))
    assert math.isnan(out.ratio) and out.id == message.id


def test_frame_0_over_the_limit_is_refused_by_both_paths(registry: tw.Registry, tmp_path: Path) -> None:
    message = _ticket(registry, id="x" * 16, tags=["y" * 200] * 4)
    size = len(tw.Encoder().encode(message)[0])
    options = tw.EncodeOptions(limits=tw.Limits(max_header_bytes=size - 1))
    encoder = tw.Encoder(options=options)
    got = _outcome(lambda: encoder.encode(message))
    assert got == _outcome(lambda: _full_encoder(encoder).encode(message))
    assert got[0:3] == (
        "error",
        tw.EncodeError,
        f"frame 0 of {size} bytes is over the limit of {size - 1} (limit max_header_bytes)",
    )
    limited = tw.Decoder(registry, options=tw.DecodeOptions(limits=tw.Limits(max_header_bytes=size - 1)))
    frames = tw.Encoder().encode(message)
    got = _outcome(lambda: limited.decode(frames))
    assert got == _outcome(lambda: _full_decoder(limited).decode(frames))
    assert got[0:3] == ("error", tw.DecodeError, f"header frame of {size} bytes is over the limit of {size - 1}")


def test_a_closed_type_bounds_the_levels_of_its_body(registry: tw.Registry) -> None:
    """Ticket: its map, Inner's map, its rows and each row (its tags and attrs: two levels);
    Labels: its map and the set. An open type bounds nothing (an unknown field may nest)."""
    from tensorwire._plan import type_plan

    depths = {name: type_plan(registry.type(name)).depth for name in ("plain.Ticket", "plain.Inner", "plain.Labels")}
    if _closed(registry):
        assert depths == {"plain.Ticket": 4, "plain.Inner": 3, "plain.Labels": 2}
    else:
        assert depths == {"plain.Ticket": None, "plain.Inner": None, "plain.Labels": None}


@pytest.mark.parametrize("length", [100, 1100])
def test_a_closed_types_body_is_decoded_uncounted(registry: tw.Registry, length: int) -> None:
    """A note of U+0090 holds as many bytes 0x90, each of which could open an array: counted, the
    body is over what it may hold. A closed type's body is not counted and is decoded alone, in a
    frame 0 of under 2 KiB (whose openers the decoder counts) and over it (which it walks); the
    open type's is decoded by its closed mirror first, then alone, in place of the full decode's
    walk. The same message either way."""
    message = _ticket(registry, note="\x90" * length)
    frames = tw.Encoder().encode(message)
    assert bytes(frames[0]).count(0x90) > length and (len(frames[0]) > 2048) == (length > 1000)
    decoder = tw.Decoder(registry)
    assert decoder.decode(frames) == message == _full_decoder(decoder).decode(frames)
    assert not decoder._free  # never the full decode, whose frame 0 decoders are pooled
    assert decoder.decode([bytearray(frames[0])]) == message  # not bytes: copied when small, else walked
    assert bool(decoder._free) is (length > 1000 and decoder._native is None)  # (compiled: read in place)


@pytest.mark.parametrize("max_depth", [2, 3])
def test_a_limit_below_a_closed_types_depth_counts_its_body(registry: tw.Registry, max_depth: int) -> None:
    """A Ticket's frame 0 may nest 1 + 4 levels: within a limit of 3 (plus frame 0 and the body: 5),
    not within 2, where its body is counted as an open type's is. Both give the full path's answer."""
    from tensorwire._plan import type_plan

    limits = tw.Limits(max_depth=max_depth)
    decoder = tw.Decoder(registry, options=tw.DecodeOptions(limits=limits))
    _, bounded, twin_of, guard = decoder._plain[type_plan(registry.type("plain.Ticket")).bare]
    assert twin_of is None  # open: Inner inside it lets unknown fields through; closed: its own class
    assert (guard is not unguarded) is (not _closed(registry) and max_depth == 3)  # its mirror's depth: Ticket's
    assert bounded is (_closed(registry) and max_depth == 3)
    inner = registry.type("plain.Inner")
    flat = tw.Encoder(options=tw.EncodeOptions(limits=limits)).encode(_ticket(registry, inner=inner(level=1, rows=[])))
    deep = tw.Encoder().encode(_ticket(registry))  # a row: frame 0, the body, inner, rows, the row
    for frames, expected in ((flat, "value"), (deep, "value" if max_depth == 3 else "error")):
        got = _outcome(lambda: decoder.decode(frames))  # noqa: B023
        assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))  # noqa: B023
        assert got[0] == expected, got
    if max_depth == 2:
        assert _outcome(lambda: decoder.decode(deep))[2] == "nesting deeper than the limit of 2"


def _flat(registry: tw.Registry, **fields: Any) -> Any:
    values: dict[str, Any] = {"id": "f-1", "count": 3, "tags": ["x", "y"]}
    values.update(fields)
    return registry.type("plain.Flat")(**values)


def _flat_head(registry: tw.Registry, **fields: Any) -> bytes:
    """Frame 0 of a Flat."""
    return _frame_0(_flat(registry, **fields))


@pytest.mark.parametrize("name", ["plain.Flat", "plain.Inner", "plain.Labels", "plain.Ticket"])
def test_an_open_type_with_no_open_struct_inside_is_read_as_its_closed_twin(registry: tw.Registry, name: str) -> None:
    """Flat, Inner and Labels hold no struct: open, each is read as its closed twin, which bounds
    its depth as the closed type does; Ticket holds Inner, which lets unknown fields through."""
    from tensorwire._plan import type_plan

    cls = registry.type(name)
    read, bounded, twin_of, guard = tw.Decoder(registry)._plain[type_plan(cls).bare]
    twinned = name != "plain.Ticket" and not _closed(registry)
    assert twin_of is (cls if twinned else None)
    assert bounded is (twinned or _closed(registry))
    assert (guard is not unguarded) is (name == "plain.Ticket" and not _closed(registry))  # counted, else guarded
    decodes_as = read.__self__.type  # type: ignore[attr-defined]  # (a msgspec Decoder's decode)
    assert (decodes_as is cls) is not twinned
    assert issubclass(decodes_as, cls) and decodes_as.__struct_config__.forbid_unknown_fields is (
        twinned or _closed(registry)
    )


@pytest.mark.parametrize("length", [100, 1100])
def test_a_twin_read_body_is_decoded_uncounted_into_the_class_itself(registry: tw.Registry, length: int) -> None:
    """As the closed types' bodies are (see above): a note of U+0090 would count as too many
    openers; read as the twin, the body is decoded alone, and the message is of the class itself."""
    import gc

    message = _flat(registry, note="\x90" * length)
    frames = tw.Encoder().encode(message)
    decoder = tw.Decoder(registry)
    got = decoder.decode(frames)
    assert type(got) is type(message) and got == message == _full_decoder(decoder).decode(frames)
    assert not decoder._free  # never the full decode
    assert gc.is_tracked(got) == gc.is_tracked(_full_decoder(decoder).decode(frames))
    assert got.__struct_config__.forbid_unknown_fields is _closed(registry)


@pytest.mark.parametrize("depth", [1, 63, 64, 65, 66])
def test_an_unknown_field_in_a_twin_read_body_gets_the_full_paths_answer(registry: tw.Registry, depth: int) -> None:
    """Only a sender of other fields writes one: the twin refuses it, and the full decode reads the
    frame as the class (skipping the field, or counting it too deep), or refuses it, closed."""
    decoder = tw.Decoder(registry)
    head = _flat_head(registry)
    bare_end = head.index(b"\xc4\x00\x90") + 3
    body = head[bare_end:]
    assert body[0] == 0x83  # a map of three entries (id, count, tags): a fourth before its end
    frames = [head[:bare_end] + b"\x84" + body[1:] + b"\xa2zz" + b"\x91" * depth + b"\x00"]
    got = _outcome(lambda: decoder.decode(frames))
    assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))
    if 2 + depth > 64 + 2:
        assert got[0:3] == ("error", tw.DecodeError, "nesting deeper than the limit of 64"), got
    elif _closed(registry):
        assert got[2:4] == ("Object contains unknown field `zz`", "$"), got
    else:
        assert got == _outcome(lambda: _flat(registry)), got  # the field skipped
        assert type(decoder.decode(frames)) is registry.type("plain.Flat")


def test_frames_of_a_twin_read_type_not_as_encoders_write_them_get_the_full_paths_answer(
    registry: tw.Registry,
) -> None:
    decoder = tw.Decoder(registry)
    full = _full_decoder(decoder)
    head = _flat_head(registry)
    bare_end = head.index(b"\xc4\x00\x90") + 3
    body = msgspec.msgpack.decode(head[bare_end:])
    cases = {
        "as written": [head],
        "a wrong field type": [head[:bare_end] + msgspec.msgpack.encode({**body, "count": "3"})],
        "out of range": [head[:bare_end] + msgspec.msgpack.encode({**body, "count": 1001})],
        "a rule broken": [head[:bare_end] + msgspec.msgpack.encode({**body, "count": 13})],
        "too long": [head[:bare_end] + msgspec.msgpack.encode({**body, "id": "x" * 17})],
        "a required field missing": [head[:bare_end] + msgspec.msgpack.encode({"count": 1})],
        "an unknown field": [head[:bare_end] + msgspec.msgpack.encode({**body, "new": [1, {"a": 2}]})],
        "an unknown field before a wrong type": [
            head[:bare_end] + msgspec.msgpack.encode({"new": [1], **body, "count": "3"})
        ],
        "a list where the map is": [head[:bare_end] + msgspec.msgpack.encode(list(body.values()))],
        "bytes after the body": [head + b"\xc0"],
        "cut short": [head[:-3]],
    }
    outcomes = {name: _outcome(partial(decoder.decode, frames)) for name, frames in cases.items()}
    for name, frames in cases.items():
        assert outcomes[name] == _outcome(partial(full.decode, frames)), name
    assert outcomes["as written"][0:2] == ("value", registry.type("plain.Flat"))
    assert outcomes["a rule broken"][2:4] == ("plain.Flat: rule THIRTEEN: count is 13", "$")
    assert outcomes["out of range"][2:4] == ("Expected `int` <= 1000", "$.count")
    assert outcomes["an unknown field before a wrong type"][2:4] == (  # the twin's refusal is not the answer
        ("Object contains unknown field `new`", "$") if _closed(registry) else ("Expected `int`, got `str`", "$.count")
    )
    assert outcomes["an unknown field"][0] == ("error" if _closed(registry) else "value")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decoding_damaged_frames_of_a_twin_read_type_gives_the_full_paths_message_or_error(
    registry: tw.Registry, data: st.DataObject
) -> None:
    note = data.draw(st.sampled_from([None, "n", "n" * 2100]))  # frame 0 counted, or over 2 KiB (walked)
    frames = [_damaged(data, _flat_head(registry, note=note, count=data.draw(st.integers(0, 12))))]
    decoder = tw.Decoder(registry)
    got = _outcome(lambda: decoder.decode(frames))
    assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))


def _many(registry: tw.Registry, count: int) -> Any:
    inner = registry.type("plain.Inner")
    return registry.type("plain.Many")(items=[inner(level=i, rows=[[i]]) for i in range(count)])


@pytest.mark.parametrize("count", [10, 100, 1000])
def test_a_long_list_of_structs_is_read_by_the_mirror_not_walked(registry: tw.Registry, count: int) -> None:
    """More structs than levels allowed are more level openers than the count lets through: an open
    type's body is decoded by its closed mirror (which bounds its depth) and then as its class,
    instead of the full decode walking every value in Python; a closed type's is not counted."""
    message = _many(registry, count)
    frames = tw.Encoder().encode(message)
    assert (bytes(frames[0]).count(0x82) > 66) is (count > 10)  # each Inner a map of two entries
    decoder = tw.Decoder(registry)
    got = decoder.decode(frames)
    assert type(got) is type(message) and got == message == _full_decoder(decoder).decode(frames)
    assert all(type(item) is registry.type("plain.Inner") for item in got.items)
    assert not decoder._free  # never the full decode


@pytest.mark.parametrize("depth", [1, 60, 61, 62, 63, 100_000])
@pytest.mark.parametrize("at", [0, 99])
def test_an_unknown_field_in_a_long_list_gets_the_full_paths_answer(registry: tw.Registry, depth: int, at: int) -> None:
    """An unknown field nested ``depth`` deep in item ``at`` of a list of 100 structs (frame 0, the
    body, the list and the item are four levels): the mirror refuses it before reading its value,
    and the full decode skips it (open), refuses it (closed) or finds it too deep."""
    head = _frame_0(_many(registry, 100))
    item = msgspec.msgpack.encode(_many(registry, 100).items[at])
    assert item[0] == 0x82 and head.count(item) == 1
    changed = b"\x83" + item[1:] + b"\xa2zz" + b"\x91" * depth + b"\x00"
    frames = [head.replace(item, changed)]
    decoder = tw.Decoder(registry)
    got = _outcome(lambda: decoder.decode(frames))
    assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))
    if 4 + depth > 64 + 2:
        assert got[0:3] == ("error", tw.DecodeError, "nesting deeper than the limit of 64"), got
    elif _closed(registry):
        assert got[2:4] == ("Object contains unknown field `zz`", f"$.items[{at}]"), got
    else:
        assert got == _outcome(lambda: _many(registry, 100)), got


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decoding_damaged_long_lists_gives_the_full_paths_message_or_error(
    registry: tw.Registry, data: st.DataObject
) -> None:
    frames = [_damaged(data, _frame_0(_many(registry, data.draw(st.sampled_from([70, 300])))))]
    decoder = tw.Decoder(registry)
    got = _outcome(lambda: decoder.decode(frames))
    assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))


def test_a_failed_swap_to_the_class_takes_the_full_decode(registry: tw.Registry) -> None:
    """If making the twin's instance one of the class fails (a class of another layout, here put in
    by hand), the decode still gives the class's message, from the full decode."""
    from tensorwire._plan import type_plan

    decoder = tw.Decoder(registry)
    bare = type_plan(registry.type("plain.Flat")).bare
    read, bounded, become, guard = decoder._plain[bare]
    if _closed(registry):
        assert become is None  # closed: decoded as the class itself, nothing to swap
        return
    _with_plain(decoder, {**decoder._plain, bare: (read, bounded, registry.type("plain.Inner"), guard)})
    message = _flat(registry)
    got = decoder.decode(tw.Encoder().encode(message))
    assert type(got) is type(message) and got == message
    assert decoder._free  # the full decode's pooled frame 0 decoder: it read the frame
