"""Values that cannot travel are EncodeErrors naming the field: ints msgpack cannot hold, ndarray subclasses.

The path comes from ``tensorwire._locate``, an iterative walk run only once encoding has failed.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion, media, rpc

pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
ENCODER = tw.Encoder()
DECODER = tw.Decoder(REGISTRY)
FITS = r"does not fit the wire \(msgpack holds -2\*\*63 \.\. 2\*\*64-1\)"


def _request(**fields: Any) -> Any:
    request = rpc.Request(method="m")
    for name, value in fields.items():
        setattr(request, name, value)  # set after construction: only encode can catch it
    return request


def _batch_with_step(step: int) -> Any:
    batch = diffusion.RunnerBatch(
        runner_outputs=[diffusion.RunnerOutput(request_id="a"), diffusion.RunnerOutput(request_id="b")]
    )
    batch.runner_outputs[1].step_index = step
    return batch


@pytest.mark.parametrize(
    ("message", "value", "path"),
    [
        (rpc.Request(method="m", kwargs={"x": [1, 2, 2**64]}), 2**64, r"\$\.kwargs\.x\[2\]"),
        (rpc.Request(method="m", kwargs={"x": [1, 2, -(2**63) - 1]}), -(2**63) - 1, r"\$\.kwargs\.x\[2\]"),
        (rpc.Request(method="m", args=(1, (2, [3, (2**70,)]))), 2**70, r"\$\.args\[1\]\[1\]\[1\]\[0\]"),
        (rpc.Request(method="m", kwargs={"a b": {"c": [0, 10**30]}}), 10**30, r'\$\.kwargs\["a b"\]\.c\[1\]'),
        (_request(kwargs={"y": {2**64: 1}}), 2**64, r"\$\.kwargs\.y\[18446744073709551616\]"),  # a dict key
        (_request(unique_reply_rank=2**64), 2**64, r"\$\.unique_reply_rank"),
        (_batch_with_step(2**65), 2**65, r"\$\.runner_outputs\[1\]\.step_index"),
        (diffusion.Output(output=(torch.zeros(2), {"n": [True, -(2**100)]})), -(2**100), r"\$\.output\[1\]\.n\[1\]"),
        (rpc.Result(method="m", ok=True, payload=rpc.Value(value=[2**64])), 2**64, r"\$\.payload\.value\[0\]"),
    ],
)
def test_an_int_that_does_not_fit_the_wire_is_an_encode_error_naming_its_field(
    message: Any, value: int, path: str
) -> None:
    type_id = re.escape(type(message).__tw_type__.type_id)
    with pytest.raises(tw.EncodeError, match=rf"^{type_id}: integer {value} {FITS} - at `{path}`$"):
        ENCODER.encode(message)


def test_the_ints_at_the_ends_of_the_range_travel() -> None:
    message = rpc.Request(method="m", kwargs={"x": [2**64 - 1, -(2**63)], "t": (2**63, -1)})
    assert DECODER.decode(ENCODER.encode(message)).kwargs == message.kwargs


@pytest.mark.parametrize(
    ("make", "name", "path"),
    [
        (lambda tmp: np.ma.masked_array([1.0, 2.0], mask=[False, True]), r"numpy\.ma\.MaskedArray", r"\$\.output\[1\]"),
        (lambda tmp: np.matrix([[1, 2]]), r"numpy\.matrix", r"\$\.output\[1\]"),
        (
            lambda tmp: np.memmap(tmp / "m.bin", dtype=np.float32, mode="w+", shape=(4,)),
            r"numpy\.memmap",
            r"\$\.output\[1\]",
        ),
        (lambda tmp: np.zeros(3).view(_Tagged), r"tests\.hostile\.test_encode_values\._Tagged", r"\$\.output\[1\]"),
        (lambda tmp: np.zeros(2).view(np.recarray), r"numpy\.recarray", r"\$\.output\[1\]"),
    ],
)
def test_ndarray_subclasses_are_encode_errors_naming_the_field_and_the_type(
    tmp_path: Path, make: Any, name: str, path: str
) -> None:
    message = diffusion.Output(output=(torch.zeros(1), make(tmp_path)))
    error = (
        rf"^diffusion\.Output: {name} is a subclass of numpy\.ndarray and cannot travel \(its extra state would be"
        rf" lost\); send numpy\.asarray\(value\) for its data - at `{path}`$"
    )
    with pytest.raises(tw.EncodeError, match=error):
        ENCODER.encode(message)


class _Tagged(np.ndarray):
    """An ndarray subclass of the kind a library might define."""


def test_a_subclass_in_a_typed_field_or_a_map_names_its_path() -> None:
    masked = np.ma.masked_array(np.zeros((2, 2, 3), np.uint8), mask=False)
    output = diffusion.Output(trajectory_decoded=[np.zeros((2, 2, 3), np.uint8)])
    output.trajectory_decoded = [np.zeros((2, 2, 3), np.uint8), masked]
    with pytest.raises(
        tw.EncodeError, match=r"numpy\.ma\.MaskedArray is a subclass .* - at `\$\.trajectory_decoded\[1\]`$"
    ):
        ENCODER.encode(output)
    request = rpc.Request(method="m", kwargs={"mask": np.matrix([[1.0]])})
    with pytest.raises(tw.EncodeError, match=r"^rpc\.Request: numpy\.matrix is a subclass .* - at `\$\.kwargs\.mask`$"):
        ENCODER.encode(request)


def test_the_data_of_a_subclass_travels_as_a_plain_array() -> None:
    masked = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    out = DECODER.decode(ENCODER.encode(diffusion.Output(output=np.asarray(masked)))).output
    assert type(out) is np.ndarray and out.tolist() == [1.0, 2.0, 3.0]


def test_torch_tensor_subclasses_are_left_as_they_are() -> None:
    parameter = torch.nn.Parameter(torch.ones(2))
    out = DECODER.decode(ENCODER.encode(diffusion.Output(output=[parameter]))).output
    assert torch.equal(out[0], torch.ones(2))


def _nested(*tensors: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # torch's note that the API is a prototype
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.nested_tensor(list(tensors))


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (torch.zeros([1] * 9), r"rank 9 is over the limit of 8"),
        (torch.zeros(2, dtype=torch.float8_e4m3fnuz), r"dtype torch\.float8_e4m3fnuz is not in the wire dtype table"),
        (np.zeros(2, dtype=">f4"), r"numpy dtype '>f4' \(>f4\) is not in the wire dtype table"),
        (torch.zeros(2).to_sparse(), r"only strided tensors travel, got layout torch\.sparse_coo"),
        (
            _nested(torch.ones(2), torch.ones(3)),
            r"a nested tensor cannot travel; send its tensors \(tensor\.unbind\(\)\)",
        ),
        (  # torch refuses to read its memory: its words, named as the tensor's
            torch._efficientzerotensor(3),
            r"this tensor cannot be read: Attempted to access the data pointer on an invalid python storage\.",
        ),
    ],
)
def test_every_tensor_the_encoder_refuses_names_its_path(value: Any, error: str) -> None:
    message = diffusion.Output(output={"ok": torch.ones(3), "bad": [1, value]})
    with pytest.raises(tw.EncodeError, match=rf"^diffusion\.Output: {error} - at `\$\.output\.bad\[1\]`$"):
        ENCODER.encode(message)


# -- the locator ------------------------------------------------------------------------------------


def _locate(message: Any, match: Any, max_depth: int = 64) -> tuple[str, Any] | None:
    from tensorwire._locate import locate  # imported here: the module is new, the tests above run without it

    return locate(message, match, max_depth)


class _Point(msgspec.Struct, rename="camel"):
    x_value: int
    inner: Any = None


def test_paths_of_fields_items_and_keys() -> None:
    def is_big(value: Any) -> bool:
        return isinstance(value, int) and value > 100

    assert _locate(_Point(x_value=101), is_big) == ("$.xValue", 101)  # a struct field by its wire name
    assert _locate(_Point(x_value=1, inner=[0, (1, 200)]), is_big) == ("$.inner[1][1]", 200)
    assert _locate(_Point(x_value=1, inner={"a": {"b c": [300]}}), is_big) == ('$.inner.a["b c"][0]', 300)
    assert _locate(_Point(x_value=1, inner={7: 0, 400: 1}), is_big) == ("$.inner[400]", 400)  # a key
    assert _locate(_Point(x_value=1, inner={5, 500, 3}), is_big) == ("$.inner[2]", 500)  # sets in sorted order
    assert _locate(_Point(x_value=1, inner=[1, 2]), is_big) is None
    assert _locate(1000, is_big) == ("$", 1000)


def test_the_first_match_in_encoding_order_wins() -> None:
    found = _locate({"a": [1, {"b": 2}], "c": 3}, lambda v: v in (2, 3) and isinstance(v, int))
    assert found == ("$.a[1].b", 2)


def test_the_walk_stops_at_the_depth_limit_and_survives_cycles() -> None:
    deep: Any = 101
    for _ in range(10):
        deep = [deep]
    assert _locate(deep, lambda v: v == 101, max_depth=9) == ("$" + "[0]" * 10, 101)  # 9 lists below the root
    assert _locate(deep, lambda v: v == 101, max_depth=8) is None
    cycle: list[Any] = [1]
    cycle.append(cycle)
    assert _locate(cycle, lambda v: v == 2, max_depth=10**6) is None


def test_the_walk_is_iterative() -> None:
    deep: Any = "needle"
    for _ in range(200_000):
        deep = {"k": [deep]}
    found = _locate(deep, lambda v: v == "needle", max_depth=10**6)
    assert found is not None and found[0] == "$" + ".k[0]" * 200_000


def test_a_shared_container_is_walked_once() -> None:
    shared: list[Any] = list(range(10))
    wide: Any = shared
    for _ in range(60):  # 2**60 paths through one list each level: visited once each
        wide = [wide, wide]
    calls = 0

    def count(value: Any) -> bool:
        nonlocal calls
        calls += 1
        return False

    assert _locate(wide, count) is None
    assert calls < 1000


# -- the caller's own code raising, and values msgspec writes past the encoder ---------------------


class _Unprintable:
    """A hashable key whose repr raises (e.g. a proxy whose repr needs a closed resource)."""

    def __repr__(self) -> str:
        raise ZeroDivisionError("repr failed")


class _Unreadable(dict[str, Any]):
    """A dict whose entries cannot be listed, e.g. a lazily loaded config that failed to load."""

    def items(self) -> Any:
        raise LookupError("not loaded")


def test_a_key_whose_repr_raises_never_replaces_the_error() -> None:
    """The locator walks past such a key (its segment is written only for the path it returns) or
    names it by its type; the error it locates is what the caller gets."""
    message = diffusion.Output()
    message.output = [{_Unprintable(): 1}, torch.ones(2), object()]
    with pytest.raises(
        tw.EncodeError, match=r"^diffusion\.Output: object is not allowed in a tree - at `\$\.output\[2\]`$"
    ):
        ENCODER.encode(message)
    request = _request(args=[{_Unprintable(): 1}, "\ud800"])
    error = (
        r"^rpc\.Request: Encoding objects of type _Unprintable is unsupported"
        r" - at `\$\.args\[0\]\[<unprintable _Unprintable>\]`$"
    )
    with pytest.raises(tw.EncodeError, match=error) as caught:
        ENCODER.encode(request)
    assert caught.value.path == "$.args[0][<unprintable _Unprintable>]"
    assert _locate({_Unprintable(): 1, "b": 200}, lambda v: v == 200) == ("$.b", 200)


def test_a_container_that_raises_while_located_leaves_the_error_unlocated() -> None:
    request = _request(args=[_Unreadable(a=1), 2**64])  # msgspec writes the dict without ``items``
    with pytest.raises(
        tw.EncodeError, match=r"^rpc\.Request: can't serialize ints < -2\*\*63 or > 2\*\*64 - 1$"
    ) as caught:
        ENCODER.encode(request)
    assert caught.value.path is None
    assert _locate([_Unreadable(a=1), 200], lambda v: v == 200) is None


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (msgspec.msgpack.Ext(1, b"\x00"), r"msgspec\.msgpack\.Ext"),
        (msgspec.msgpack.Ext(3, b""), r"msgspec\.msgpack\.Ext"),
        (msgspec.Raw(msgspec.msgpack.encode(msgspec.msgpack.Ext(1, b""))), r"msgspec\.Raw"),
    ],
)
@pytest.mark.parametrize("first", [True, False], ids=["before the array", "after the array"])
def test_an_ext_or_raw_in_a_typed_tensor_field_is_an_encode_error_naming_it(value: Any, name: str, first: bool) -> None:
    """msgspec writes an ``Ext`` or a ``Raw`` as it is, past the encoder's hook: the schema check
    finds an extension the encoder did not write, and the error names where it is."""
    message = diffusion.Output()
    message.trajectory_decoded = [value, np.ones(2)] if first else [np.ones(2), value]
    path = rf"\$\.trajectory_decoded\[{0 if first else 1}\]"
    error = (
        rf"^diffusion\.Output: a {name} is not a value of the schema"
        rf" \(the encoder writes the body's extensions\) - at `{path}`$"
    )
    with pytest.raises(tw.EncodeError, match=error) as caught:
        ENCODER.encode(message)
    assert caught.value.path == f"$.trajectory_decoded[{0 if first else 1}]"


def _output(value: Any) -> Any:
    output = diffusion.Output()
    output.output = value  # set after construction: only encode can catch it
    return output


def test_an_ext_or_raw_anywhere_else_is_refused_with_its_path() -> None:
    """In a tree it is no tree leaf; in another typed field the schema check reads it as what it is."""
    ext = msgspec.msgpack.Ext(1, b"\x00")
    with pytest.raises(tw.EncodeError, match=r"^rpc\.Request: Ext is not allowed in a tree - at `\$\.kwargs\.x`$"):
        ENCODER.encode(_request(kwargs={"x": ext}))
    with pytest.raises(
        tw.EncodeError, match=r"^diffusion\.Output: Raw is not allowed in a tree - at `\$\.output\[1\]`$"
    ):
        ENCODER.encode(_output([torch.ones(2), msgspec.Raw(b"\x01")]))
    with pytest.raises(tw.EncodeError, match=r"^rpc\.Request: Expected `str`, got `ext` - at `\$\.method`$"):
        ENCODER.encode(_request(method=ext))


class _Lazy(dict[str, Any]):
    """A dict whose item access goes through a loader that fails."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)


class _Stamp:
    """A set item that neither orders nor prints."""

    def __lt__(self, other: Any) -> bool:
        raise LookupError("no order")

    __gt__ = __lt__

    def __repr__(self) -> str:
        raise LookupError("no repr")


def test_exceptions_from_the_callers_dunders_are_encode_errors_naming_the_field() -> None:
    request = _request(args=[_Lazy(a=(1, 2))])  # a tuple inside: the dict is rewritten, read item by item
    with pytest.raises(
        tw.EncodeError, match=r"^rpc\.Request: reading the value raised KeyError: 'a' - at `\$\.args`$"
    ) as caught:
        ENCODER.encode(request)
    assert caught.value.path == "$.args" and isinstance(caught.value.__cause__, KeyError)
    output = diffusion.Output()
    output.output = [torch.ones(2), _Lazy(a=(1,))]
    with pytest.raises(
        tw.EncodeError, match=r"^diffusion\.Output: reading the value raised KeyError: 'a' - at `\$\.output`$"
    ):
        ENCODER.encode(output)


def test_a_set_that_neither_orders_nor_prints_is_sent_as_it_iterates() -> None:
    """Its items are sent (and located) in the order the set iterates in, not an escaping exception."""
    video = media.Video(
        tensor=torch.zeros(1, 1, 1, 1, 3, dtype=torch.uint8),
        layout=media.VideoTensorLayout.BTHWC,
        encoding=media.VideoTensorEncoding.UINT8_FRAMES,
        value_range=media.VideoValueRange.ZERO_TO_255,
    )
    video.pending_float_consumers = frozenset({_Stamp(), _Stamp()})  # type: ignore[arg-type]
    error = r"^media\.Video: Encoding objects of type _Stamp is unsupported - at `\$\.pending_float_consumers\[0\]`$"
    with pytest.raises(tw.EncodeError, match=error):
        ENCODER.encode(video)
    found = _locate(_Point(x_value=1, inner={_Stamp(), _Stamp()}), lambda v: isinstance(v, _Stamp))
    assert found is not None and found[0] == "$.inner[0]"


@pytest.mark.parametrize("raised", [KeyboardInterrupt, MemoryError])
def test_an_interrupt_or_memory_error_from_the_callers_code_is_not_turned_into_an_encode_error(raised: type) -> None:
    class Failing(dict[str, Any]):
        def __getitem__(self, key: str) -> Any:
            raise raised

    with pytest.raises(raised):
        ENCODER.encode(_request(args=[Failing(a=(1,))]))
