"""Hostile nesting: every kind of container and tree tuple, 100,000 levels deep, on a small stack.

Each deep frame is decoded (and described) in a child process, on a 256 KiB thread with the
recursion limit raised, so that a recursion in C or Python crashes the child (its signal fails
the test) rather than pytest. Frames are built as bytes, from the inside out, in linear time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

import tensorwire as tw
from tensorwire._plain import unguarded
from tensorwire._scan import OPENERS, OTHERS, check_depth, nesting_path, walk
from tensorwire._wire import data_span
from tensorwire.builtins import REGISTRY, diffusion, media, rpc
from tensorwire.inspection import describe
from tests.test_plain_path import _full_decoder
from tests.wire_helpers import frame_of, head_of, tensor_exts

DECODER = tw.Decoder(REGISTRY)
INLINE = tw.Encoder()
NESTING = "nesting deeper than the limit of 64"


def nested(type_id: str, path: str) -> str:
    """A pattern of the refusal of a message of ``type_id`` (v1) nested past the limit at ``path``
    or below it, as the error's text renders its fields."""
    return rf"^{re.escape(type_id)} v1: {NESTING} - at `{re.escape(path)}[^`]*`$"


DEEP = 100_000

# -- frames, from the inside out -----------------------------------------------------------------

Wrap = Callable[[int], tuple[bytes, bytes]]  # the inner value's length -> (bytes before it, bytes after it)


def ext_header(code: int, length: int) -> bytes:
    """The msgpack header of an extension of ``length`` payload bytes (the shortest form)."""
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    if length in fixed:
        return bytes([fixed[length], code])
    if length < 2**8:
        return bytes([0xC7, length, code])
    if length < 2**16:
        return b"\xc8" + length.to_bytes(2, "big") + bytes([code])
    return b"\xc9" + length.to_bytes(4, "big") + bytes([code])


def _array(n: int) -> tuple[bytes, bytes]:
    return b"\x91", b""


def _map(n: int) -> tuple[bytes, bytes]:
    return b"\x81\xa1k", b""


def _ext_in_ext(n: int) -> tuple[bytes, bytes]:
    return ext_header(2, n), b""


def _tuple(n: int) -> tuple[bytes, bytes]:  # ext(2, [inner]): an ext inside an array inside an ext
    return ext_header(2, n + 1) + b"\x91", b""


def _map_of_array(n: int) -> tuple[bytes, bytes]:
    return b"\x81\xa1k\x91", b""


def _array_key(n: int) -> tuple[bytes, bytes]:  # {[inner]: nil}: the nesting is in a map key
    return b"\x81\x91", b"\xc0"


def _array16(n: int) -> tuple[bytes, bytes]:
    return b"\xdc\x00\x01", b""


def _array32(n: int) -> tuple[bytes, bytes]:
    return b"\xdd\x00\x00\x00\x01", b""


def _map16(n: int) -> tuple[bytes, bytes]:
    return b"\xde\x00\x01\xa1k", b""


def _map32(n: int) -> tuple[bytes, bytes]:
    return b"\xdf\x00\x00\x00\x01\xa1k", b""


# name -> (wraps applied in turn, levels each wrap adds)
KINDS: dict[str, tuple[Sequence[Wrap], int]] = {
    "arrays": ((_array,), 1),
    "maps": ((_map,), 1),
    "ext-in-ext": ((_ext_in_ext,), 1),
    "tuples (ext in array in ext)": ((_tuple,), 1),
    "maps of arrays": ((_map_of_array,), 2),
    "array keys": ((_array_key,), 2),
    "arrays and maps with 16- and 32-bit headers": ((_array16, _map16, _array32, _map32), 1),
    "ext, array, map and tuple in turn": ((_ext_in_ext, _array, _map, _tuple), 1),
    "everything": ((_array, _map, _ext_in_ext, _tuple, _ext_in_ext), 1),
}
ONE_TENSOR = tw.Encoder(options=tw.EncodeOptions(embed_threshold=0)).encode(diffusion.Output(output=torch.zeros(1)))
TENSOR = msgspec.msgpack.encode(tensor_exts(head_of(ONE_TENSOR[0])[4])[0])  # the descriptor of its tensor in frame 1
LEAVES = {"int": b"\x01", "tensor": TENSOR, "empty map": b"\x80"}
LEAF_LEVELS = {"int": 0, "tensor": 0, "empty map": 1}  # an empty container is a level of its own


def nest(levels: int, leaf: bytes, wraps: Sequence[Wrap]) -> bytes:
    """``leaf`` inside ``levels`` wraps (the innermost first), without recursion and in linear time."""
    before: list[bytes] = []
    after: list[bytes] = []
    size = len(leaf)
    for i in range(levels):
        head, tail = wraps[i % len(wraps)](size)
        before.append(head)
        after.append(tail)
        size += len(head) + len(tail)
    return b"".join(reversed(before)) + leaf + b"".join(after)


def frames_with_body(value: bytes) -> list[Any]:
    """A real message's frames (one tensor) whose body's ``output`` is the raw msgpack ``value``."""
    head = head_of(ONE_TENSOR[0])
    head[4] = msgspec.Raw(b"\x81\xa6output" + value)
    return [frame_of(head), *ONE_TENSOR[1:]]


def deep_frames(kind: str, leaf: str, wraps_count: int) -> list[Any]:
    wraps, _ = KINDS[kind]
    return frames_with_body(nest(wraps_count, LEAVES[leaf], wraps))


# rpc.Request holds tensors only in its trees: a frame 0 with no data and no buffers has its body
# read on the decoder's shorter path (counted first), up to 2 KiB; a larger one is walked.
RPC_BARE = bytes(tw.Encoder().encode(rpc.Request(method="m"))[0])[: -len(msgspec.msgpack.encode({"method": "m"}))]


def rpc_frames(value: bytes) -> list[bytes]:
    """An ``rpc.Request`` frame 0 as encoders write one with no tensor, its ``args`` the raw msgpack ``value``."""
    return [RPC_BARE + b"\x82\xa6method\xa1m\xa4args" + value]


def rpc_deep_frames(kind: str, leaf: str, size: str) -> list[bytes]:
    """``rpc_frames`` of ``DEEP`` wraps (``size`` "large") or of as many as 2 KiB holds ("small")."""
    wraps, _ = KINDS[kind]
    if size == "large":
        return rpc_frames(nest(DEEP, LEAVES[leaf], wraps))
    levels = 2048
    while len(frames := rpc_frames(nest(levels, LEAVES[leaf], wraps))[0]) > 2048:
        levels -= 1 + (len(frames) - 2048) // 8
    return [frames]


def outcome(call: Callable[[], Any]) -> str:
    """``"ok"`` or the codec error's message; any other exception is reported by its type."""
    try:
        call()
    except tw.DecodeError as exc:
        return str(exc)
    except Exception as exc:
        return f"LEAK {type(exc).__name__}: {exc}"
    return "ok"


# A registry none of whose types can nest past the limit: msgspec still recurses where it skips a
# value it has no field for, or reads the buffer table raw, so its frames are walked too.
BOUNDED = tw.Decoder(tw.Registry([media.Video]))
VIDEO = INLINE.encode(
    media.Video(
        tensor=torch.zeros(1, 2, 4, 6, 3, dtype=torch.uint8),
        layout=media.VideoTensorLayout.BTHWC,
        encoding=media.VideoTensorEncoding.UINT8_FRAMES,
        value_range=media.VideoValueRange.ZERO_TO_255,
    )
)


def bounded_frames(where: str, value: bytes) -> list[Any]:
    """A ``media.Video`` frame 0 with the raw msgpack ``value`` as an unknown field of its body,
    as its buffer table, in place of its data, or as a sixth item of frame 0."""
    head = head_of(VIDEO[0])
    if where == "unknown field":
        body = msgspec.msgpack.encode(head[4])
        assert 0x80 <= body[0] < 0x8F
        head[4] = msgspec.Raw(bytes([body[0] + 1]) + body[1:] + b"\xa7unknown" + value)
    elif where == "buffer table":
        head[3] = msgspec.Raw(value)
    elif where == "data":
        head[2] = msgspec.Raw(value)
    else:
        head.append(msgspec.Raw(value))
    return [frame_of(head)]


BOUNDED_PLACES = ("unknown field", "buffer table", "data", "sixth item")
BOUNDED_PATHS = {"unknown field": "$.unknown", "buffer table": "$.buffers", "data": "$.data", "sixth item": "$[5]"}


# Closed types with no tensor: the decoder reads a closed.Plain body without counting it (msgspec
# rejects an unknown field before its value, and every other field is typed), and counts a
# closed.Either one (msgspec skips the fields before a union's tag to find it).
def _closed_type(type_id: str, properties: dict[str, Any]) -> dict[str, Any]:
    doc = {"$id": type_id, "x-version": 1, "description": "A closed type.", "type": "object"}
    return {**doc, "properties": properties, "required": list(properties), "additionalProperties": False}


CLOSED_SCHEMAS = {
    "closed/Point.v1.json": _closed_type("closed.Point", {"x": {"type": "number"}}),
    "closed/Plain.v1.json": _closed_type(
        "closed.Plain",
        {
            "name": {"type": "string"},
            "rows": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            "point": {"$ref": "Point.v1.json"},
        },
    ),
    "closed/Circle.v1.json": _closed_type("closed.Circle", {"kind": {"const": "circle"}, "r": {"type": "number"}}),
    "closed/Square.v1.json": _closed_type("closed.Square", {"kind": {"const": "square"}, "side": {"type": "number"}}),
    "closed/Either.v1.json": _closed_type(
        "closed.Either",
        {
            "shape": {
                "oneOf": [{"$ref": "Circle.v1.json"}, {"$ref": "Square.v1.json"}],
                "discriminator": {"propertyName": "kind"},
            }
        },
    ),
}
CLOSED_PLACES = ("unknown field", "a typed field", "a union's field before its tag")
CLOSED_PATHS = {
    "unknown field": ("closed.Plain", "$.unknown"),
    "a typed field": ("closed.Plain", "$.rows"),
    "a union's field before its tag": ("closed.Either", "$.shape.r"),
}

# An open type with no struct inside it: the decoder reads an open.Flat body as its closed twin,
# uncounted; an unknown field makes the twin refuse it, and the full decode bounds the frame.
OPEN_SCHEMAS = {
    "open/Flat.v1.json": {
        "$id": "open.Flat",
        "x-version": 1,
        "description": "An open type holding no struct.",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "rows": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        },
        "required": ["name", "rows"],
    }
}
OPEN_PLACES = ("unknown field", "a typed field")
# An open type holding a list of open structs: a body with more of them than levels allowed is
# decoded by the type's closed mirror first; an unknown field in an item makes the mirror refuse it.
OPEN_SCHEMAS["open/Many.v1.json"] = {
    "$id": "open.Many",
    "x-version": 1,
    "description": "An open type holding a list of open structs.",
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"$ref": "Flat.v1.json"}}},
    "required": ["items"],
}
MANY_ITEMS = 80  # more level openers than the limit: the count alone would refuse the body


def closed_registry(root: Path) -> tw.Registry:
    from tests.conftest import write_schemas

    return tw.load_schemas(write_schemas(root, {**CLOSED_SCHEMAS, **OPEN_SCHEMAS}))


def closed_frames(registry: tw.Registry, where: str, value: bytes) -> list[Any]:
    """A closed.Plain or closed.Either frame 0 with the raw msgpack ``value`` in its body ``where``."""
    point = registry.type("closed.Point")(x=1.0)
    if where == "a union's field before its tag":
        head = bytes(INLINE.encode(registry.type("closed.Either")(shape=registry.type("closed.Circle")(r=1.0)))[0])
        body = b"\x81\xa5shape\x82\xa1r" + value + b"\xa4kind\xa6circle"
    else:
        head = bytes(INLINE.encode(registry.type("closed.Plain")(name="n", rows=[], point=point))[0])
        entries = b"\xa4name\xa1n\xa5point" + msgspec.msgpack.encode(point)
        extra = b"\xa7unknown" if where == "unknown field" else b"\xa4rows"
        body = (b"\x84\xa4rows\x90" if where == "unknown field" else b"\x83") + entries + extra + value
    bare = head[: head.index(b"\xc4\x00\x90") + 3]
    return [bare + body]


def many_frames(registry: tw.Registry, value: bytes) -> list[Any]:
    """An open.Many frame 0 of ``MANY_ITEMS`` items, the last with the raw msgpack ``value`` in an
    unknown field."""
    flat = registry.type("open.Flat")
    head = bytes(INLINE.encode(registry.type("open.Many")(items=[flat(name="n", rows=[])] * MANY_ITEMS))[0])
    item = b"\x82\xa4name\xa1n\xa4rows\x90"
    assert head.endswith(item)
    return [head[: -len(item)] + b"\x83\xa4name\xa1n\xa4rows\x90\xa7unknown" + value]


def open_frames(registry: tw.Registry, where: str, value: bytes) -> list[Any]:
    """An open.Flat frame 0 with the raw msgpack ``value`` in its body ``where``."""
    head = bytes(INLINE.encode(registry.type("open.Flat")(name="n", rows=[]))[0])
    if where == "unknown field":
        body = b"\x83\xa4name\xa1n\xa4rows\x90\xa7unknown" + value
    else:
        body = b"\x82\xa4name\xa1n\xa4rows" + value
    bare = head[: head.index(b"\xc4\x00\x90") + 3]
    return [bare + body]


# -- the child process -----------------------------------------------------------------------------


def _limit_messages() -> dict[str, Any]:
    """Messages the encoder makes at exactly the depth limit (64 levels below the message)."""
    wraps: dict[str, list[Callable[[Any], Any]]] = {
        "lists": [lambda v: [v]],
        "dicts": [lambda v: {"k": v}],
        "tuples": [lambda v: (v,)],
        "mixed": [lambda v: [v], lambda v: {"k": v}, lambda v: (v,)],
    }
    messages: dict[str, Any] = {}
    for name, turns in wraps.items():
        value: Any = torch.arange(3)
        for i in range(64):
            value = turns[i % len(turns)](value)
        messages[name] = value
    return messages


def _roundtrip(frames: list[Any], sent: Any) -> None:
    got = DECODER.decode(frames).output
    while not isinstance(sent, torch.Tensor):
        assert type(got) is type(sent), (type(got), type(sent))
        sent, got = (sent["k"], got["k"]) if isinstance(sent, dict) else (sent[0], got[0])
    assert torch.equal(got, sent)


def _child_checks() -> dict[str, str]:
    results: dict[str, str] = {}
    for kind, (_, per_wrap) in KINDS.items():
        for leaf in LEAVES:
            frames = deep_frames(kind, leaf, DEEP)
            results[f"decode {kind} / {leaf}"] = outcome(partial(DECODER.decode, frames))
            results[f"describe {kind} / {leaf}"] = outcome(partial(describe, frames[0]))
            at_limit = deep_frames(kind, leaf, (64 - LEAF_LEVELS[leaf]) // per_wrap)
            results[f"at the limit {kind} / {leaf}"] = outcome(partial(DECODER.decode, at_limit))
            results[f"describe at the limit {kind} / {leaf}"] = outcome(partial(describe, at_limit[0]))
            for size in ("small", "large"):
                frames = rpc_deep_frames(kind, leaf, size)
                results[f"rpc.Request {size} {kind} / {leaf}"] = outcome(partial(DECODER.decode, frames))
            at_limit = rpc_frames(nest((64 - LEAF_LEVELS[leaf]) // per_wrap, LEAVES[leaf], KINDS[kind][0]))
            results[f"rpc.Request at the limit {kind} / {leaf}"] = outcome(partial(DECODER.decode, at_limit))
    for where in BOUNDED_PLACES:
        deep = nest(DEEP, b"\x01", [_array, _map])
        results[f"bounded registry, {where}"] = outcome(partial(BOUNDED.decode, bounded_frames(where, deep)))
    for name, value in _limit_messages().items():
        frames = INLINE.encode(diffusion.Output(output=value))
        results[f"roundtrip at the limit: {name}"] = outcome(partial(_roundtrip, frames, value))
    return results


CLOSED_LEVELS = 1_900  # as deep as a frame 0 read by the decoder's shorter path (up to 2 KiB) holds
CLOSED_STACK = 64 * 1024  # a stack msgspec's recursion through CLOSED_LEVELS overflows


def _closed_checks(closed: tw.Decoder) -> dict[str, str]:
    results = {}
    for size, levels in (("small", CLOSED_LEVELS), ("large", DEEP)):  # counted or walked, if read in full
        deep = nest(levels, b"\x01", [_array])
        for where in CLOSED_PLACES:
            frames = closed_frames(closed.registry, where, deep)
            assert (len(frames[0]) <= 2048) == (size == "small")
            results[f"closed type, {size} frame, {where}"] = outcome(partial(closed.decode, frames))
        for where in OPEN_PLACES:
            frames = open_frames(closed.registry, where, deep)
            results[f"open type read as its twin, {size} frame, {where}"] = outcome(partial(closed.decode, frames))
        frames = many_frames(closed.registry, deep)
        results[f"open type guarded by its mirror, {size} frame"] = outcome(partial(closed.decode, frames))
    return results


def child_main() -> None:
    """Run every check on a 256 KiB thread with the recursion limit at 10**6, and those of closed
    types on a ``CLOSED_STACK`` thread; print the results."""
    sys.setrecursionlimit(10**6)
    with tempfile.TemporaryDirectory() as root:
        closed = tw.Decoder(closed_registry(Path(root)))
    results: dict[str, str] = {}
    # the smaller stack first: a thread may be given a larger stack a finished one left behind
    for stack, checks in ((CLOSED_STACK, partial(_closed_checks, closed)), (256 * 1024, _child_checks)):
        threading.stack_size(stack)
        worker = threading.Thread(target=lambda checks=checks: results.update(checks()))
        worker.start()
        worker.join()
    from tensorwire._native import SPEEDUPS

    results["shorter paths"] = "python" if SPEEDUPS is None else "compiled"
    print(json.dumps(results))


@pytest.fixture(scope="module", params=["compiled", "python"])
def child_results(request: pytest.FixtureRequest) -> dict[str, str]:
    """What the child found, its shorter paths compiled (``tensorwire._speedups``) or in Python."""
    from tensorwire._native import SPEEDUPS

    if request.param == "compiled" and SPEEDUPS is None:
        pytest.skip("tensorwire._speedups is not built here")
    root = Path(__file__).absolute().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    env["TENSORWIRE_PURE_PYTHON"] = "1" if request.param == "python" else ""
    proc = subprocess.run(
        [sys.executable, __file__], capture_output=True, text=True, timeout=600, env=env, cwd=root, check=False
    )
    if proc.returncode < 0:
        pytest.fail(f"the child process died of signal {-proc.returncode}; stderr:\n{proc.stderr[-2000:]}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    results: dict[str, str] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["shorter paths"] == request.param
    return results


@pytest.mark.parametrize("leaf", list(LEAVES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_100000_levels_are_a_decode_error_on_a_small_stack(child_results: dict[str, str], kind: str, leaf: str) -> None:
    assert re.fullmatch(nested("diffusion.Output", "$.output"), child_results[f"decode {kind} / {leaf}"])
    assert child_results[f"describe {kind} / {leaf}"] == child_results[f"decode {kind} / {leaf}"]


@pytest.mark.parametrize("leaf", list(LEAVES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_frames_at_the_limit_do_not_crash_a_small_stack(child_results: dict[str, str], kind: str, leaf: str) -> None:
    for check in ("at the limit", "describe at the limit"):
        result = child_results[f"{check} {kind} / {leaf}"]
        assert "nesting deeper" not in result and not result.startswith("LEAK"), (check, result)


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("leaf", list(LEAVES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_tree_read_on_the_shorter_path_nested_too_deep_is_refused_on_a_small_stack(
    child_results: dict[str, str], kind: str, leaf: str, size: str
) -> None:
    """An ``rpc.Request`` with no data and no buffers is read on the decoder's shorter path, up to
    2 KiB (counted first, then read in full), past that walked as any frame."""
    assert len(rpc_deep_frames(kind, leaf, size)[0]) <= 2048 if size == "small" else True
    assert re.fullmatch(nested("rpc.Request", "$.args"), child_results[f"rpc.Request {size} {kind} / {leaf}"])


@pytest.mark.parametrize("leaf", list(LEAVES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_tree_read_on_the_shorter_path_at_the_limit_does_not_crash_a_small_stack(
    child_results: dict[str, str], kind: str, leaf: str
) -> None:
    result = child_results[f"rpc.Request at the limit {kind} / {leaf}"]
    assert "nesting deeper" not in result and not result.startswith("LEAK"), result


@pytest.mark.parametrize("where", BOUNDED_PLACES)
def test_a_registry_of_bounded_types_still_bounds_every_frame(child_results: dict[str, str], where: str) -> None:
    assert re.fullmatch(nested("media.Video", BOUNDED_PATHS[where]), child_results[f"bounded registry, {where}"])


@pytest.mark.parametrize("where", BOUNDED_PLACES)
def test_a_bounded_type_frame_at_the_limit_gets_msgspec_s_verdict(where: str) -> None:
    levels = 66 - (2 if where == "unknown field" else 1)  # frame 0 is a level, and so is the body
    fits = bounded_frames(where, nest(levels, b"\x01", [_array]))  # within the limit: msgspec decides
    result = outcome(partial(BOUNDED.decode, fits))
    if where == "unknown field":
        assert result == "ok"
    else:
        assert "nesting deeper" not in result and not result.startswith("LEAK"), result
    with pytest.raises(tw.DecodeError, match=nested("media.Video", BOUNDED_PATHS[where])):
        BOUNDED.decode(bounded_frames(where, nest(levels + 1, b"\x01", [_array])))


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("where", CLOSED_PLACES)
def test_a_closed_type_reads_nothing_deeper_than_itself_on_a_small_stack(
    child_results: dict[str, str], where: str, size: str
) -> None:
    """1,900 levels in a closed type's body (a frame 0 of under 2 KiB, whose openers the decoder
    counts), and 100,000 (one it walks): refused, and nothing crashed the child, whose stack would
    not hold msgspec recursing into them (the Plain body was read uncounted, unwalked, as its type
    bounds it; the Either body was bounded first: read as the Plain one is, it crashes the child)."""
    type_id, path = CLOSED_PATHS[where]
    assert re.fullmatch(nested(type_id, path), child_results[f"closed type, {size} frame, {where}"])


@pytest.mark.parametrize("where", CLOSED_PLACES)
def test_a_closed_type_at_the_limit_gets_the_full_paths_verdict(tmp_path: Path, where: str) -> None:
    """Which bodies are read uncounted, and within the limit (frame 0 and the body are two levels)
    the answer the full decode gives: the closed type's own error."""
    from tensorwire._plan import type_plan

    decoder = tw.Decoder(closed_registry(tmp_path))
    union = where == "a union's field before its tag"
    kind = decoder.registry.type("closed.Either" if union else "closed.Plain")
    assert decoder._plain[type_plan(kind).bare][1] is not union  # read uncounted: bounded by its type
    full = _full_decoder(decoder)
    fits = closed_frames(decoder.registry, where, nest(64 if where == "unknown field" else 63, b"\x01", [_array]))
    expected = {
        "unknown field": "closed.Plain v1: Object contains unknown field `unknown` - at `$`",
        "a typed field": "closed.Plain v1: Expected `int`, got `array` - at `$.rows[0][0]`",
        "a union's field before its tag": "closed.Either v1: Expected `float`, got `array` - at `$.shape.r`",
    }
    assert outcome(partial(decoder.decode, fits)) == outcome(partial(full.decode, fits))
    assert outcome(partial(decoder.decode, fits)) == expected[where]


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("where", OPEN_PLACES)
def test_an_open_type_read_as_its_closed_twin_reads_nothing_deeper_than_itself_on_a_small_stack(
    child_results: dict[str, str], where: str, size: str
) -> None:
    """As the closed type's: the twin refuses the unknown field before its value (then the full
    decode bounds the frame) and reads a typed field no deeper than its type."""
    path = "$.unknown" if where == "unknown field" else "$.rows"
    assert re.fullmatch(nested("open.Flat", path), child_results[f"open type read as its twin, {size} frame, {where}"])


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_long_list_of_open_structs_is_bounded_on_a_small_stack(child_results: dict[str, str], size: str) -> None:
    """The mirror refuses the unknown field in the last item before reading its value (then the
    full decode bounds the frame): nothing crashed the child."""
    result = child_results[f"open type guarded by its mirror, {size} frame"]
    assert re.fullmatch(nested("open.Many", f"$.items[{MANY_ITEMS - 1}].unknown"), result)


def test_a_long_list_of_open_structs_at_the_limit_gets_the_full_paths_verdict(tmp_path: Path) -> None:
    from tensorwire._plan import type_plan

    decoder = tw.Decoder(closed_registry(tmp_path))
    _, bounded, twin_of, guard = decoder._plain[type_plan(decoder.registry.type("open.Many")).bare]
    assert not bounded and twin_of is None and guard is not unguarded  # counted; too many openers: guarded
    full = _full_decoder(decoder)
    deeper = f"open.Many v1: {NESTING} - at `$.items[{MANY_ITEMS - 1}].unknown{'[0]' * 62}`"
    for levels, expected in ((62, "ok"), (63, deeper)):  # frame 0, the body, the list, the item: 4
        frames = many_frames(decoder.registry, nest(levels, b"\x01", [_array]))
        assert outcome(partial(decoder.decode, frames)) == outcome(partial(full.decode, frames)) == expected


@pytest.mark.parametrize("where", OPEN_PLACES)
def test_an_open_type_read_as_its_twin_at_the_limit_gets_the_full_paths_verdict(tmp_path: Path, where: str) -> None:
    from tensorwire._plan import type_plan

    decoder = tw.Decoder(closed_registry(tmp_path))
    flat = decoder.registry.type("open.Flat")
    _, bounded, twin_of, _ = decoder._plain[type_plan(flat).bare]
    assert bounded and twin_of is flat  # read uncounted, as its closed twin
    full = _full_decoder(decoder)
    levels = 64 if where == "unknown field" else 63  # frame 0 and the body are two levels
    fits = open_frames(decoder.registry, where, nest(levels, b"\x01", [_array]))
    expected = {
        "unknown field": "ok",  # skipped by the full decode, as the open type does
        "a typed field": "open.Flat v1: Expected `int`, got `array` - at `$.rows[0][0]`",
    }
    assert outcome(partial(decoder.decode, fits)) == outcome(partial(full.decode, fits)) == expected[where]
    deeper = open_frames(decoder.registry, where, nest(levels + 1, b"\x01", [_array]))
    assert outcome(partial(decoder.decode, deeper)) == outcome(partial(full.decode, deeper))
    if where == "unknown field":
        assert outcome(partial(decoder.decode, deeper)) == f"open.Flat v1: {NESTING} - at `$.unknown{'[0]' * 64}`"


def _with_data(frames: list[Any], data: bytes, body: bytes | None = None) -> list[Any]:
    head = head_of(frames[0])
    head[2] = data
    if body is not None:
        head[4] = msgspec.Raw(body)
    return [frame_of(head), *frames[1:]]


@pytest.mark.parametrize("kind", ["arrays", "maps", "tuples (ext in array in ext)"])
def test_a_depth_limit_past_what_the_stack_holds_still_gets_a_decode_error(kind: str) -> None:
    """A receiver may set ``max_depth`` above what its stack holds (Python's recursion limit, or
    from 3.12 on its separate limit on recursion in C: 10,000 levels on 3.13): a frame that deep
    passes the count, and msgspec's recursion (or the tuple hook's) ended in a ``RecursionError``,
    not a codec error."""
    limits = tw.Limits(max_depth=10**6, max_header_bytes=2**30)
    frames = deep_frames(kind, "int", DEEP)
    got = outcome(lambda: tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=limits)).decode(frames))
    expected = (
        "nesting deeper than this process can decode (past Python's recursion limit); "
        "a max_depth of 1000000 is more than it holds"
    )
    assert got in (expected, f"diffusion.Output v1: {expected}")  # typed where the tag could still be read
    assert outcome(lambda: describe(frames[0], max_depth=10**6)) == expected


@pytest.mark.parametrize("kind", ["bytes", "views"])
@pytest.mark.parametrize("size", [100, 1000, 3000, 200_000])
def test_frame_0_data_full_of_level_openers_is_never_counted_as_nesting(size: int, kind: str) -> None:
    """Tensor bytes in frame 0's data may look like containers: only what follows the data is
    bounded, so a frame whose data is all array headers decodes, and a body nested one level past
    the limit behind such data is still refused (frames of up to 512 bytes, up to 2,048 and more
    take different ways to the bound)."""
    frames = INLINE.encode(diffusion.Output(output=torch.arange(6.0)))
    data = head_of(frames[0])[2] + b"\x91" * size
    assert (len(_with_data(frames, data)[0]) <= 2048) == (size <= 1000)
    assert torch.equal(DECODER.decode(_as(kind, _with_data(frames, data))).output, torch.arange(6.0))
    body = msgspec.msgpack.encode(head_of(frames[0])[4])
    assert 0x80 <= body[0] < 0x8F
    unknown = bytes([body[0] + 1]) + body[1:] + b"\xa7unknown"  # frame 0 and the body are two levels
    assert torch.equal(
        DECODER.decode(_as(kind, _with_data(frames, data, unknown + nest(64, b"\x01", [_array])))).output,
        torch.arange(6.0),
    )
    with pytest.raises(tw.DecodeError, match=nested("diffusion.Output", "$.unknown" + "[0]" * 63)):
        DECODER.decode(_as(kind, _with_data(frames, data, unknown + nest(65, b"\x01", [_array]))))


@pytest.mark.parametrize("kind", ["bytes", "views"])
def test_the_fewest_bytes_that_nest_too_deep_behind_data_are_counted(kind: str) -> None:
    """Behind data of more than 64 bytes, in a frame of 512 to 2,048 bytes, only what follows the data
    is counted, and only if it has as many bytes as levels allowed: the shortest body past the limit
    (66 arrays, one byte each, after the empty buffer table) is refused, one array less is read."""
    frames = INLINE.encode(diffusion.Output(output=torch.arange(150.0)))
    data = head_of(frames[0])[2]
    past = _with_data(frames, data, b"\x91" * 65 + b"\x90")  # the body's level and 65 more: 67 with frame 0's
    assert 512 < len(past[0]) <= 2048 and len(past) == 1 and len(data) == 600
    with pytest.raises(tw.DecodeError, match=nested("diffusion.Output", "$" + "[0]" * 64)):
        DECODER.decode(_as(kind, past))
    at_limit = outcome(lambda: DECODER.decode(_as(kind, _with_data(frames, data, b"\x91" * 64 + b"\x90"))))
    assert at_limit == "diffusion.Output v1: Expected `object`, got `array` - at `$`", at_limit


@pytest.mark.parametrize("kind", ["bytes", "views"])
@pytest.mark.parametrize(("items", "item"), [(80, 1), (80, "abcdefghij"), (200, "abcdefghij")])
def test_many_shallow_containers_are_not_nesting(items: int, item: Any, kind: str) -> None:
    """More bytes that could open a level than the limit, in frames of under 512, 512-2,048 and over
    2,048 bytes with a small tensor's data: the count only says when to look closer, and the look
    finds the frame shallow; one level past the limit behind them is still refused."""
    tensor = torch.arange(6.0)
    shallow = [tensor, *([item] for _ in range(items))]
    frames = INLINE.encode(diffusion.Output(output=shallow))
    size = len(frames[0])
    assert len(frames) == 1 and (size < 512, size <= 2048) == (item == 1, items == 80)
    out = DECODER.decode(_as(kind, frames)).output
    assert torch.equal(out[0], tensor) and out[1:] == shallow[1:]
    body = msgspec.msgpack.encode(head_of(frames[0])[4])
    unknown = bytes([body[0] + 1]) + body[1:] + b"\xa7unknown"  # frame 0 and the body are two levels
    with pytest.raises(tw.DecodeError, match=nested("diffusion.Output", "$.unknown" + "[0]" * 63)):
        DECODER.decode(_as(kind, _with_data(frames, head_of(frames[0])[2], unknown + nest(65, b"\x01", [_array]))))


@pytest.mark.parametrize("claimed", [9, 2**16, 2**32 - 1])
def test_a_data_item_claiming_more_bytes_than_frame_0_holds_is_a_decode_error(claimed: int) -> None:
    """Frame 0's data claims more bytes than it has (8 bytes, a bin8): the claim swallows the rest of
    the frame or runs past it; decoding and describing it are decode errors."""
    frame = INLINE.encode(diffusion.Output(output=torch.zeros(2)))[0]
    assert isinstance(frame, bytes)
    span = data_span(frame)
    assert span is not None and frame[span[0] - 2 : span[0]] == b"\xc4\x08"
    forged = frame[: span[0] - 2] + b"\xc6" + claimed.to_bytes(4, "big") + frame[span[0] :]
    for decode in (DECODER.decode, lambda frames: describe(frames[0])):
        with pytest.raises(tw.DecodeError, match=r"^invalid header: .*truncated"):
            decode([forged])


def _as(kind: str, frames: list[Any]) -> list[Any]:
    """``frames`` as ``bytes`` or as the writable views ``tw.split`` gives of a joined blob."""
    return frames if kind == "bytes" else tw.split(bytearray(tw.join(frames)))


@pytest.mark.parametrize("kind", ["bytes", "views"])
@pytest.mark.parametrize("values", [10, 300, 5000])
def test_depth_past_many_values_of_a_large_frame_is_found(values: int, kind: str) -> None:
    """A large frame is walked a few hundred values at a time before its openers are counted: the
    nesting is found wherever it sits, in a frame of bytes or a view of a blob."""
    flat = b"\xdc" + values.to_bytes(2, "big") + b"\xa7abcdefg" * values  # many values, one level
    deep = nest(70, b"\x01", [_array])
    framed = b"\x92" + flat + deep
    assert len(framed) > 2048 or values == 10
    with pytest.raises(tw.DecodeError, match=nested("diffusion.Output", "$.output[1]" + "[0]" * 63)):
        DECODER.decode(_as(kind, frames_with_body(framed)))
    fits = b"\x92" + flat + nest(60, b"\x01", [_array])
    result = outcome(partial(DECODER.decode, _as(kind, frames_with_body(fits))))
    assert "nesting deeper" not in result and not result.startswith("LEAK"), result


@pytest.mark.parametrize("name", ["lists", "dicts", "tuples", "mixed"])
def test_messages_at_the_limit_decode_on_a_small_stack(child_results: dict[str, str], name: str) -> None:
    assert child_results[f"roundtrip at the limit: {name}"] == "ok"


# -- exact counting, in this process ---------------------------------------------------------------


@pytest.mark.parametrize("leaf", list(LEAVES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_level_counts_and_one_more_is_rejected(kind: str, leaf: str) -> None:
    per_wrap = KINDS[kind][1]
    fits = (64 - LEAF_LEVELS[leaf]) // per_wrap
    at_limit = outcome(lambda: DECODER.decode(deep_frames(kind, leaf, fits)))
    assert "nesting deeper" not in at_limit and not at_limit.startswith("LEAK"), at_limit
    past = fits + 1
    with pytest.raises(tw.DecodeError, match=nested("diffusion.Output", "$.output")) as decoded:
        DECODER.decode(deep_frames(kind, leaf, past))
    with pytest.raises(tw.DecodeError, match=nested("diffusion.Output", "$.output")) as described:
        describe(deep_frames(kind, leaf, past)[0])
    got, expected = described.value, decoded.value
    assert (got.message, got.path, got.type_id, got.version) == (
        expected.message,
        expected.path,
        expected.type_id,
        expected.version,
    )


def test_the_limit_counts_ext_in_ext_levels() -> None:
    chain = nest(5, b"\xc0", [_ext_in_ext])
    check_depth(chain, 5)
    with pytest.raises(tw.DecodeError, match=r"^nesting deeper than the limit of 4$"):
        check_depth(chain, 4)
    tuples = nest(5, b"\xc0", [_tuple])  # a tuple and its array are one level, as the encoder counts them
    check_depth(tuples, 5)
    with pytest.raises(tw.DecodeError, match=r"^nesting deeper than the limit of 4$"):
        check_depth(tuples, 4)


# A string whose UTF-8 holds 100 bytes that could open a level: the walk cannot take its fast path.
_PADDING = msgspec.msgpack.encode("\u0410" * 100)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (ext_header(2, 2) + b"\x01\x02", r"^a tree tuple's payload has 1 bytes left after its value$"),
        (ext_header(2, 3) + b"\x91\x01\x02", r"^a tree tuple's payload has 1 bytes left after its value$"),
        (ext_header(2, 2) + b"\x92\x01" + b"\x02", r"^a value runs past the end of its tree tuple's payload$"),
        (ext_header(2, 2) + b"\xa3ab" + b"c", r"^a value runs past the end of its tree tuple's payload$"),
        (ext_header(2, 1) + b"\xcd" + b"\x00\x01", r"^a value runs past the end of its tree tuple's payload$"),
        (ext_header(2, 1) + ext_header(2, 2) + b"\x01\x01", r"^a value runs past the end of its tree tuple's payload$"),
        (ext_header(2, 0), r"^a value runs past the end of its tree tuple's payload$"),
        (b"\x92\x01", r"^header frame is truncated$"),
        (b"\xdc\x00", r"^header frame is truncated$"),  # a length header cut short at the frame's end
        (b"\xdb\x00\x00\x00", r"^header frame is truncated$"),
        (b"\xc1", r"^invalid msgpack byte 0xc1 in header frame$"),
    ],
)
def test_a_tuple_payload_must_hold_exactly_one_value(value: bytes, error: str) -> None:
    framed = b"\x92" + _PADDING + value
    with pytest.raises(tw.DecodeError, match=error):
        check_depth(framed, 3)
    with pytest.raises(tw.DecodeError, match=error):  # the decoder walks frame 0 first
        DECODER.decode(frames_with_body(framed))


@pytest.mark.parametrize(
    ("message", "depth"),
    [
        (diffusion.Output(output=(b"\x91" * 100, [2, (3, {"a": (4,)})], ()), stage_durations={"x": 1.0}), 7),
        (diffusion.Output(output={"t": (torch.ones(2), [torch.zeros(0)]), "b": b"\x91" * 200}), 5),
        (diffusion.Output(output=[(i, [i]) for i in range(100)]), 5),  # a tuple's level ends with it
    ],
)
def test_well_formed_frames_pass_the_walk_at_their_depth(message: Any, depth: int) -> None:
    frames = INLINE.encode(message)  # the bytes values hold openers: the walk runs, never the fast path
    check_depth(frames[0], depth)
    with pytest.raises(tw.DecodeError, match=rf"^nesting deeper than the limit of {depth - 1}$"):
        check_depth(frames[0], depth - 1)
    assert DECODER.decode(frames).output is not None


# One value of each msgpack form, padded with a byte no msgpack value starts with (0xc1): a size
# misread by even one byte reads it as a value. Fixints at both ends of both ranges, nil, bools,
# floats and ints of every width, strings and bins with every length header, fixexts of each size
# and ext8/16/32 of a tensor's code (leaves whose payload is never parsed), and arrays and maps
# with 16- and 32-bit headers.
_PAD = b"\xc1"
EVERY_FORM = [
    b"\x00",
    b"\x7f",
    b"\xe0",
    b"\xff",
    b"\xc0",
    b"\xc2",
    b"\xc3",
    b"\xca" + _PAD * 4,
    b"\xcb" + _PAD * 8,
    b"\xcc" + _PAD,
    b"\xcd" + _PAD * 2,
    b"\xce" + _PAD * 4,
    b"\xcf" + _PAD * 8,
    b"\xd0" + _PAD,
    b"\xd1" + _PAD * 2,
    b"\xd2" + _PAD * 4,
    b"\xd3" + _PAD * 8,
    b"\xa0",
    b"\xbf" + _PAD * 31,
    b"\xd9\x02" + _PAD * 2,
    b"\xda\x00\x02" + _PAD * 2,
    b"\xdb\x00\x00\x00\x02" + _PAD * 2,
    b"\xc4\x02" + _PAD * 2,
    b"\xc5\x00\x02" + _PAD * 2,
    b"\xc6\x00\x00\x00\x02" + _PAD * 2,
    b"\xd4\x01" + _PAD,
    b"\xd5\x01" + _PAD * 2,
    b"\xd6\x01" + _PAD * 4,
    b"\xd7\x01" + _PAD * 8,
    b"\xd8\x01" + _PAD * 16,
    b"\xc7\x02\x01" + _PAD * 2,
    b"\xc8\x00\x02\x01" + _PAD * 2,
    b"\xc9\x00\x00\x00\x02\x01" + _PAD * 2,
    b"\xdc\x00\x01\x01",
    b"\xdd\x00\x00\x00\x01\x01",
    b"\xde\x00\x01\x01\x02",
    b"\xdf\x00\x00\x00\x01\x01\x02",
]


def test_every_msgpack_form_is_walked_to_its_end() -> None:
    """Each form is skipped by its exact size: a map16 holding an array32 of every form (two
    levels, three with the containers among them) walks to the frame's last byte at a limit of 3,
    and is one level too deep for 2."""
    frame = b"\xde\x00\x01\xa1k\xdd" + len(EVERY_FORM).to_bytes(4, "big") + b"".join(EVERY_FORM)
    assert walk(frame, 3) == len(frame)
    check_depth(frame, 3)
    with pytest.raises(tw.DecodeError, match=r"^nesting deeper than the limit of 2$"):
        check_depth(frame, 2)


def test_both_counts_of_level_openers_agree() -> None:
    # the decoder deletes OPENERS from small frames and OTHERS from larger ones: the same count
    assert set(OPENERS).isdisjoint(OTHERS) and set(OPENERS) | set(OTHERS) == set(range(256))
    every = bytes(range(256)) * 9
    for frame in (b"", every, every[::-1], os.urandom(4096), bytes(OPENERS) * 50, bytes(OTHERS) * 20):
        assert len(frame.translate(None, OTHERS)) == len(frame) - len(frame.translate(None, OPENERS))


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_path_of_a_refused_frame_is_found_where_the_walk_refuses_it(kind: str) -> None:
    """``nesting_path`` names a frame exactly when the walk refuses it for its nesting, at a limit of
    each number of levels."""
    frame = frames_with_body(nest(70, b"\x01", KINDS[kind][0]))[0]
    for limit in range(1, 80):
        try:
            walk(frame, limit)
            refused = False
        except tw.DecodeError as exc:
            refused = exc.message.startswith("nesting deeper")
        assert (nesting_path(frame, limit) is not None) == refused, limit


def test_the_path_is_looked_for_within_a_budget_of_values() -> None:
    padded = frames_with_body(b"\x92\xdc\x01\x00" + b"\x80" * 256 + nest(70, b"\x01", [_array]))[0]
    assert nesting_path(padded, 66) == "$[4].output[1]" + "[0]" * 63
    assert nesting_path(padded, 66, budget=200) is None


def _tagged_frame(tag: str, body: bytes) -> bytes:
    """A frame 0 whose tag is ``tag`` and whose body is the raw msgpack ``body``."""
    head = head_of(ONE_TENSOR[0])
    head[0], head[4] = tag, msgspec.Raw(body)
    return frame_of(head)


@pytest.mark.parametrize(
    ("tag", "label"),
    [
        ("tensorwire:3:media.Unknown:7", "media.Unknown v7: "),  # no registry: any type id its tag names
        ("tensorwire:3:a\x1b[31m\nb:1", "a\\x1b[31m\\nb v1: "),  # written as its escapes
        ("tensorwire:3:" + "\x1b" * 100 + ":1", "\\x1b" * 15 + "\\... v1: "),  # cut to 64 characters
        ("tensorwire:2:media.Video:1", ""),  # another wire format's tag names no type
        ("not a tag", ""),
    ],
)
def test_describe_names_the_type_its_tag_names_and_the_path_of_a_frame_nested_too_deep(tag: str, label: str) -> None:
    frame = _tagged_frame(tag, b"\x81\xa6output\x92\x01" + nest(70, b"\x01", [_map]))
    with pytest.raises(tw.DecodeError) as caught:
        describe(frame)
    path = "$.output[1]" + ".k" * 63
    assert str(caught.value) == f"{label}{NESTING} - at `{path}`"
    assert caught.value.path == path and caught.value.message == NESTING
    table = head_of(ONE_TENSOR[0])  # too deep in the buffer table
    table[3] = msgspec.Raw(b"\x91" + nest(70, b"\x01", [_array]))
    expected = f"diffusion.Output v1: {NESTING} - at `$.buffers{'[0]' * 65}`"
    assert (
        outcome(partial(describe, frame_of(table))) == outcome(partial(DECODER.decode, [frame_of(table)])) == expected
    )


def test_describe_looks_for_the_path_within_the_decoder_s_budget_of_values() -> None:
    """Behind a million values (the walk's budget) the path is not looked for further, as a decode
    does not look for it: the type is still named; behind fewer, the path is found."""
    for values, path in ((1 << 20, None), ((1 << 20) - 100, "$.output[1]" + "[0]" * 63)):
        padding = b"\xdd" + values.to_bytes(4, "big") + b"\x01" * values
        frame = _tagged_frame(
            "tensorwire:3:diffusion.Output:1", b"\x81\xa6output\x92" + padding + nest(70, b"\x01", [_array])
        )
        with pytest.raises(tw.DecodeError) as caught:
            describe(frame)
        assert caught.value.path == path and caught.value.type_id == "diffusion.Output", values
        assert outcome(partial(DECODER.decode, [frame])) == str(caught.value)


if __name__ == "__main__":
    child_main()
