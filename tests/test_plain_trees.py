"""Messages of types that hold tensors only in their trees (``rpc.Request``'s ``args`` and ``kwargs``,
an ``rpc.Value``, an ``rpc.Result`` or a ``diffusion.RunnerOutput`` with no struct in it) take the
shorter paths when their trees hold lists and maps of plain leaves: one encode and the schema check
on the way out (``TypePlan.trees``), the body counted and decoded alone on the way in, its tree
tuples read as tuples. Whatever the message holds and whatever arrives, the outcome is the full
paths': the same frames, message or error."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire import _encoder
from tensorwire._plan import type_plan
from tensorwire._prepare import AS_IS
from tensorwire.builtins import REGISTRY, diffusion, media, rpc
from tests.conftest import write_schemas
from tests.test_plain_path import _damaged, _full_decoder, _full_encoder

pytestmark = pytest.mark.usefixtures("shorter_paths")  # compiled and in Python


class _FullPath(BaseException):
    """Raised where the encoder's full path starts (not an ``Exception``: nothing swallows it)."""


def _no_full_path(*args: Any, **kwargs: Any) -> Any:
    raise _FullPath


def _comparable(value: Any) -> Any:
    """``value`` as data that compares by what it holds: tensors by dtype, shape and bytes, tuples
    apart from lists, NaN equal to NaN, structs by type and fields."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.contiguous().view(torch.uint8).tolist())
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, tuple):
        return ("tuple", [_comparable(v) for v in value])
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {("key", type(k).__name__, k): _comparable(v) for k, v in value.items()}
    if isinstance(value, msgspec.Struct):
        return (type(value).__name__, _comparable(msgspec.structs.asdict(value)))
    return (type(value).__name__, value)


def _outcome(call: Callable[[], Any]) -> Any:
    """What ``call()`` gives: frames by their bytes, a message by what it holds, or an error's fields."""
    try:
        value = call()
    except (tw.EncodeError, tw.DecodeError) as exc:
        return ("error", type(exc), exc.message, exc.path, exc.type_id, exc.version)
    if isinstance(value, list) and value and isinstance(value[0], bytes | bytearray | memoryview):
        return ("frames", [bytes(frame) for frame in value])
    return ("value", _comparable(value))


def _request(args: Any = None, kwargs: Any = None) -> Any:
    """An ``rpc.Request`` holding ``args`` and ``kwargs`` as given (set after building it: the
    class's own check is not what these tests test)."""
    message = rpc.Request(method="m", rpc_id="r-1")
    if args is not None:
        message.args = args
    if kwargs is not None:
        message.kwargs = kwargs
    return message


PLAIN_TREES = [
    ([], {}),
    ([1, "a", None, 2.5, True, b"\x00\xff"], {"x": 1}),
    ([[1, [2, {"k": "v"}]], {"a": [None, b""]}], {"stop": ["\n"], "opts": {"n": 1, "m": [1.0, []]}}),
    ([], {"deep": [[[[[[1]]]]]]}),
]


@pytest.mark.parametrize("cls", [rpc.Request, rpc.Value, rpc.Result, diffusion.RunnerOutput])
def test_types_with_tensors_only_in_trees_or_optional_structs_have_the_check(cls: type) -> None:
    plan = type_plan(cls)
    assert plan.tensors and plan.plain is None and plan.trees is not None


@pytest.mark.parametrize("cls", [diffusion.Output, diffusion.RunnerBatch, media.Video])
def test_types_with_a_tensor_field_do_not(cls: type) -> None:
    assert type_plan(cls).trees is None


def test_a_type_with_a_set_beside_its_tree_does_not(tmp_path: Path) -> None:
    registry = tw.load_schemas(
        write_schemas(
            tmp_path,
            {
                "t/Tagged.v1.json": {
                    "$id": "t.Tagged",
                    "x-version": 1,
                    "type": "object",
                    "properties": {
                        "tree": {"x-tree": {}, "default": None},
                        "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "default": []},
                    },
                    "required": [],
                }
            },
        )
    )
    assert type_plan(registry.type("t.Tagged")).trees is None  # a set is written sorted: the full path


@pytest.mark.parametrize(("args", "kwargs"), PLAIN_TREES)
def test_a_request_whose_trees_hold_plain_leaves_takes_the_shorter_paths(
    monkeypatch: pytest.MonkeyPatch, args: Any, kwargs: Any
) -> None:
    message = _request(args, kwargs)
    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    full = _full_encoder(encoder).encode(message)
    monkeypatch.setattr(_encoder, "Outgoing", _no_full_path)
    frames = encoder.encode(message)
    assert frames == full and len(frames) == 1
    got = decoder.decode(frames)
    assert not decoder._free  # the full decode's frame 0 decoders (pooled): never made
    assert _comparable(got) == _comparable(message) == _comparable(_full_decoder(decoder).decode(frames))
    assert message.args is args and message.kwargs is kwargs  # the caller's message untouched


@pytest.mark.parametrize(
    "message",
    [
        rpc.Value(value={"a": [1, {"b": None}]}),
        rpc.Result(method="m", ok=False, error="no such method", error_type="AttributeError"),
        rpc.Result(method="m", ok=True, payload=rpc.Value(value=[1, {"b": [b"x", None]}]), rpc_id="r-1"),
        diffusion.RunnerOutput(request_id="r", finished=True),
    ],
    ids=["value", "result", "result-with-a-value", "runner-output"],
)
def test_other_types_with_tensors_only_in_trees_or_optional_structs_take_them_too(
    monkeypatch: pytest.MonkeyPatch, message: Any
) -> None:
    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    full = _full_encoder(encoder).encode(message)
    monkeypatch.setattr(_encoder, "Outgoing", _no_full_path)
    assert encoder.encode(message) == full
    assert _comparable(decoder.decode(full)) == _comparable(message) and not decoder._free


@pytest.mark.parametrize(
    ("args", "kwargs", "read_plain"),
    [
        ([(1, 2)], {}, True),  # a tuple: rewritten on encode, read as a tuple on the decoder's shorter path
        ([], {"t": ((), [(None,)])}, True),
        ([], {"x": torch.arange(4.0)}, False),  # a tensor: data in frame 0, the full decode
        ([[torch.arange(3)]], {}, False),
        ([], {"empty": torch.empty(0)}, True),  # no data, no buffers: the shorter decode tries and leaves it
        ([], {"e": [torch.empty(0, 3)]}, True),
    ],
)
def test_what_the_shorter_encode_does_not_take_still_travels(args: Any, kwargs: Any, read_plain: bool) -> None:
    message = _request(args, kwargs)
    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    trees = type_plan(rpc.Request).trees
    assert trees is not None and trees(message, 64) is not AS_IS
    frames = encoder.encode(message)
    assert frames == _full_encoder(encoder).encode(message)
    assert _outcome(lambda: decoder.decode(frames)) == ("value", _comparable(message))
    assert _outcome(lambda: _full_decoder(decoder).decode(frames)) == ("value", _comparable(message))
    starts_plain = bytes(frames[0]).startswith(type_plan(rpc.Request).bare)
    assert starts_plain == read_plain


@pytest.mark.parametrize(
    ("payload", "read_plain", "as_is"),
    [
        (rpc.Value(value=(1, [2])), True, False),  # a tuple: rewritten on encode, read as one on the shorter decode
        (rpc.Value(value={"t": torch.arange(3.0)}), False, False),
        (rpc.Value(value=[torch.empty(0)]), True, False),
        (diffusion.Output(output=torch.arange(2.0)), False, False),  # a type with a tensor field
        (diffusion.RunnerOutput(request_id="r", result=diffusion.Output(output=torch.zeros(1))), False, False),
        (diffusion.RunnerOutput(request_id="r"), True, True),  # a struct whose own optional struct is None
    ],
    ids=["tuple", "tensor", "empty-tensor", "output", "runner-output-with-output", "runner-output"],
)
def test_a_result_whose_payload_holds_what_the_shorter_encode_does_not_take_still_travels(
    monkeypatch: pytest.MonkeyPatch, payload: Any, read_plain: bool, as_is: bool
) -> None:
    message = rpc.Result(method="m", ok=True, payload=payload, rpc_id="r-1")
    encoder, decoder = tw.Encoder(), tw.Decoder(REGISTRY)
    trees = type_plan(rpc.Result).trees
    assert trees is not None
    frames = encoder.encode(message)
    assert frames == _full_encoder(encoder).encode(message)
    assert _outcome(lambda: decoder.decode(frames)) == ("value", _comparable(message))
    assert _outcome(lambda: _full_decoder(decoder).decode(frames)) == ("value", _comparable(message))
    assert bytes(frames[0]).startswith(type_plan(rpc.Result).bare) == read_plain
    assert (trees(message, 64) is AS_IS) == as_is
    if as_is:  # the encoder's shorter path: its full path never entered
        monkeypatch.setattr(_encoder, "Outgoing", _no_full_path)
        assert encoder.encode(message) == frames


class _Items(list):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ([{1, 2}], {}, "set is not allowed in a tree"),
        ([], {"a": {"b": _Items([object()])}}, "object is not allowed in a tree"),
        ([2**64], {}, "int"),
        ([], {"s": "\udc80"}, "utf-8"),
        ([], {"k": {1: "a"}}, "str"),
        ([[[[[[[[1]]]]]]]], {}, "nesting deeper than the limit of 4"),
    ],
)
def test_what_neither_path_sends_gets_the_same_error(args: Any, kwargs: Any, error: str) -> None:
    message = _request(args, kwargs)
    options = tw.EncodeOptions(limits=tw.Limits(max_depth=4))
    encoder = tw.Encoder(options=options)
    got = _outcome(lambda: encoder.encode(message))
    assert got == _outcome(lambda: _full_encoder(encoder).encode(message))
    assert got[0] == "error" and error in got[2].lower() + str(got[3]).lower(), got


def _nested_frame(levels: int) -> list[bytes]:
    """Frame 0 of an ``rpc.Request`` whose ``args`` nests ``levels`` lists deep, as a sender with a
    larger limit writes it."""
    head = tw.Encoder().encode(rpc.Request(method="m"))[0]
    bare = type_plan(rpc.Request).bare
    assert bytes(head).startswith(bare)
    body = msgspec.msgpack.encode({"method": "m", "args": 0})
    assert body.endswith(b"\x00")  # (the 0, which the lists go around)
    return [bare + body[:-1] + b"\x91" * levels + b"\x00"]


@pytest.mark.parametrize("max_depth", [10, 64])
@pytest.mark.parametrize("levels", [1, 6, 7, 8, 9, 12, 40, 62, 63, 64, 65, 100, 5000])
def test_a_tree_nested_past_the_limit_is_refused_as_the_full_decode_refuses_it(levels: int, max_depth: int) -> None:
    """The body is counted before it is read: the tree's own rule (64 levels) does not stand in for
    the decoder's limit, nor does msgspec's recursion guard."""
    decoder = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(max_depth=max_depth)))
    frames = _nested_frame(levels)
    got = _outcome(lambda: decoder.decode(frames))
    assert got == _outcome(lambda: _full_decoder(decoder).decode(frames))
    if levels <= max_depth - 4:
        assert got[0] == "value"
    elif levels > max_depth:
        assert got[0] == "error" and "nest" in got[2], got


_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats()
    | st.text(max_size=4)
    | st.just("\udc80")
    | st.binary(max_size=4)
    | st.builds(lambda n: torch.arange(float(n)), st.integers(0, 3))
)
_TREES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.dictionaries(st.text(max_size=2) | st.integers(0, 3), inner, max_size=3)
        | st.frozensets(st.integers(0, 3), max_size=2)
    ),
    max_leaves=10,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    args=_TREES,
    kwargs=st.dictionaries(st.text(max_size=2), _TREES, max_size=3) | _TREES,
    max_depth=st.sampled_from([1, 2, 3, 64]),
)
def test_encoding_any_trees_gives_the_full_paths_frames_or_error_and_decodes_the_same_way(
    args: Any, kwargs: Any, max_depth: int
) -> None:
    for message in (_request(args, kwargs), _result(args)):
        _encodes_and_decodes_as_the_full_paths(message, max_depth)


def _result(value: Any) -> Any:
    """An ``rpc.Result`` whose payload is an ``rpc.Value`` holding ``value`` (set after building it)."""
    payload = rpc.Value(value=None)
    payload.value = value
    return rpc.Result(method="m", ok=True, payload=payload, rpc_id="r-1")


def _encodes_and_decodes_as_the_full_paths(message: Any, max_depth: int) -> None:
    encoder = tw.Encoder(options=tw.EncodeOptions(limits=tw.Limits(max_depth=max_depth)))
    got = _outcome(lambda: encoder.encode(message))
    assert got == _outcome(lambda: _full_encoder(encoder).encode(message))
    if got[0] == "frames":
        frames = got[1]
        decoder = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=tw.Limits(max_depth=max_depth)))
        back = _outcome(lambda: decoder.decode(frames))
        assert back == _outcome(lambda: _full_decoder(decoder).decode(frames))
        assert back == ("value", _comparable(message))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decoding_damaged_frames_gives_the_full_paths_message_or_error(data: st.DataObject) -> None:
    args, kwargs = data.draw(st.sampled_from([*PLAIN_TREES, ([(1, "a")], {"t": ([],)})]))
    head = tw.Encoder().encode(_request(args, kwargs))[0]
    frames = [_damaged(data, bytes(head))]
    decoder = tw.Decoder(REGISTRY)
    assert _outcome(lambda: decoder.decode(frames)) == _outcome(lambda: _full_decoder(decoder).decode(frames))
