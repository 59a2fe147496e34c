"""Encoding rejects what the schema does not allow, releases everything on failure, never mutates."""

from __future__ import annotations

import errno
import json
import mmap
import os
from types import SimpleNamespace
from typing import Any

import msgspec
import numpy as np
import pytest
import torch

import tensorwire as tw
import tensorwire.transports._page_layout
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion, media, rpc
from tests.wire_helpers import segments_of

SHM = transports.ShmTransport(pool=False)
OUT_OF_BAND = tw.EncodeOptions(inline_threshold=1, embed_threshold=0)  # every buffer through the transport
ENCODER = tw.Encoder(transport=SHM, options=OUT_OF_BAND)


@pytest.fixture(autouse=True)
def no_segments_left() -> Any:
    before = set(segments_of(os.getpid()))  # other modules may keep some (e.g. quarantined on purpose)
    yield
    assert set(segments_of(os.getpid())) <= before


def _video(**changes: Any) -> Any:
    video = media.Video(
        tensor=torch.zeros(1, 3, 2, 4, 4),
        layout=media.VideoTensorLayout.BCTHW,
        encoding=media.VideoTensorEncoding.NORMALIZED_FLOAT,
        value_range=media.VideoValueRange.ZERO_TO_ONE,
    )
    for name, value in changes.items():
        setattr(video, name, value)  # attribute writes skip __post_init__: encode must catch them
    return video


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (_video(tensor=torch.zeros(1, 3, 2, 4, 4, dtype=torch.int32)), r"dtype int32 is not allowed; expected one of"),
        (_video(tensor=torch.zeros(3, 2, 4, 4)), r"expected rank 5, got shape \(3, 2, 4, 4\)"),
        (_video(layout="sideways"), r"Invalid enum value 'sideways' - at `\$.layout`"),
        (_video(layout=media.VideoTensorLayout.BTHWC), r"rule VIDEO_FLOAT_LAYOUT"),
        (
            _video(tensor=np.zeros((1, 3, 2, 4, 4), dtype=np.float32)),
            r"Expected `Tensor`, got `numpy.ndarray` - at `\$.tensor`",
        ),
        (_video(tensor="pixels"), r"Expected `Tensor`, got `str` - at `\$.tensor`"),
        (diffusion.DpTagged(dp_rank=0, output=diffusion.Output()), None),
        (rpc.Request(method="x" * 257), r"Expected `str` of length <= 256 - at `\$.method`"),
    ],
)
def test_schema_violations_are_encode_errors_naming_the_field(message: Any, error: str | None) -> None:
    if error is None:
        ENCODER.encode(message)  # the control: a valid message encodes
        return
    with pytest.raises(tw.EncodeError, match=error):
        ENCODER.encode(message)


def test_integer_ranges_and_cross_field_constraints() -> None:
    tagged = diffusion.DpTagged(dp_rank=0, output=diffusion.Output())
    tagged.dp_rank = -1
    with pytest.raises(tw.EncodeError, match=r"^diffusion.DpTagged: Expected `int` >= 0 - at `\$.dp_rank`$"):
        ENCODER.encode(tagged)
    output = diffusion.Output(output=torch.zeros(1))
    output.media = media.Media(video=_video())
    with pytest.raises(tw.EncodeError, match=r"at most one of media, output may be set"):
        ENCODER.encode(rpc.Result(method="m", ok=True, payload=output))
    status = rpc.Result(method="m", ok=True)
    status.ok = False
    with pytest.raises(tw.EncodeError, match=r"rule RPC_OK_XOR_ERROR"):
        ENCODER.encode(status)


def test_nested_field_paths() -> None:
    batch = diffusion.RunnerBatch(runner_outputs=[diffusion.RunnerOutput(request_id="a")])
    batch.runner_outputs[0].step_index = -3
    with pytest.raises(tw.EncodeError, match=r"- at `\$.runner_outputs\[0\].step_index`$"):
        ENCODER.encode(batch)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({1, 2}, r"set is not allowed in a tree"),
        (object(), r"object is not allowed in a tree"),
        (np.float32(1.0), r"float32 is not allowed in a tree"),
        (np.array(["a"], dtype=object), r"numpy dtype '\|O' \(object\) is not in the wire dtype table"),
        (np.zeros(2, dtype=[("a", "<i4")]), r"is not in the wire dtype table"),
        (np.zeros(2, dtype=">f4"), r"numpy dtype '>f4' \(>f4\) is not in the wire dtype table"),
        (
            np.zeros(2, dtype="datetime64[s]"),
            r"numpy dtype '<M8\[s\]' \(datetime64\[s\]\) is not in the wire dtype table",
        ),
        (torch.zeros(2, dtype=torch.float8_e4m3fnuz), r"dtype torch.float8_e4m3fnuz is not in the wire dtype table"),
        (torch.zeros([1] * 9), r"rank 9 is over the limit of 8"),
        (torch.zeros(2).to_sparse(), r"only strided tensors travel"),
    ],
)
def test_values_that_cannot_travel(value: Any, error: str) -> None:
    message = diffusion.Output()
    message.output = [torch.ones(3), value]  # set after construction: only encode can catch it
    with pytest.raises(tw.EncodeError, match=error):
        ENCODER.encode(message)


@pytest.mark.parametrize("encoder", [tw.Encoder(), ENCODER], ids=["inside frame 0", "through shared memory"])
@pytest.mark.parametrize("view", ["whole", "every other column", "rows from the third"])
def test_a_tensor_whose_storage_was_shrunk_under_it_is_refused_not_read_past(encoder: Any, view: str) -> None:
    """``untyped_storage().resize_`` leaves views whose elements lie past the storage's end:
    reading them would send whatever memory follows, so the encoder refuses them by field path."""
    base = torch.randn(16, 16)
    tensor = {"whole": base, "every other column": base[:, ::2], "rows from the third": base[2:]}[view]
    base.untyped_storage().resize_(16)
    message = diffusion.Output()
    message.output = [tensor]
    with pytest.raises(tw.EncodeError, match=r"into a storage of 16 bytes \(a storage resized under") as caught:
        encoder.encode(message)
    assert caught.value.path == "$.output[0]" and caught.value.type_id == "diffusion.Output"


_SHRINKING: list[bool] = [False]


def _shrinking_registry(tmp_path: Any) -> Any:
    """A registry of ``shrink.M`` (a tensor ``a``, a list of tensors ``b``) whose named validator
    empties the storage of ``a`` while ``_SHRINKING[0]`` is set, as a caller's validator can."""
    from tests.conftest import minimal, write_schemas

    name = "shrink.storage_of_a"
    if name not in tw.rules.known_validators():

        @tw.register_validator(name)
        def storage_of_a(message: Any) -> None:
            if _SHRINKING[0]:
                message.a.untyped_storage().resize_(0)

    doc = minimal("shrink.M", a={"x-tensor": {"dtypes": ["float32"]}}, b={"type": "array", "items": {"x-tensor": {}}})
    doc["x-validators"] = [name]
    return tw.load_schemas(write_schemas(tmp_path / "schemas", {"shrink/M.v1.json": doc}))


@pytest.mark.parametrize("size", [5, 1 << 20], ids=["inside frame 0", "a buffer"])
@pytest.mark.parametrize("out_of_band", [False, True], ids=["inline", "shared memory"])
@pytest.mark.parametrize("shared", [False, True], ids=["one view", "views sharing a storage"])
def test_a_storage_a_validator_resizes_after_its_tensor_was_looked_at_is_refused_not_read(
    tmp_path: Any, size: int, out_of_band: bool, shared: bool
) -> None:
    """The bounds of a tensor's storage were checked as the body was written; a named validator,
    which runs after, could empty the storage: the encoder then sent freed memory, or crashed
    (SIGSEGV). Its memory is looked at again once the caller's code has run: an ``EncodeError``
    naming the field, nothing exported."""
    message_type = _shrinking_registry(tmp_path).type("shrink.M")
    base = torch.full((size * 2,), 1.5)
    a = base[:size] if shared else torch.full((size,), 1.5)
    message = message_type(a=a, b=[base[size:]] if shared else [])
    before = set(segments_of(os.getpid()))
    with transports.ShmTransport() as shm:
        encoder = tw.Encoder(transport=shm, options=OUT_OF_BAND) if out_of_band else tw.Encoder()
        _SHRINKING[0] = True
        try:
            with pytest.raises(tw.EncodeError, match=r"storage was resized or moved while the message was encoded"):
                encoder.encode(message)
        finally:
            _SHRINKING[0] = False
        with pytest.raises(tw.EncodeError, match=r"\(a storage resized under its view cannot travel\)") as caught:
            encoder.encode(message)  # emptied: now refused as it is written, as before
        assert caught.value.path == "$.a"
        assert shm.pool is None or all(
            slot.state == tensorwire.transports._page_layout.FREE for slot in shm.pool.slots()
        )
    assert set(segments_of(os.getpid())) <= before


def test_the_error_for_a_storage_a_validator_resized_names_the_field_and_the_type(tmp_path: Any) -> None:
    message = _shrinking_registry(tmp_path).type("shrink.M")(a=torch.full((5,), 1.5), b=[])
    _SHRINKING[0] = True
    try:
        with pytest.raises(tw.EncodeError) as caught:
            tw.Encoder().encode(message)
    finally:
        _SHRINKING[0] = False
    assert str(caught.value) == (
        "shrink.M: the tensor's storage was resized or moved while the message was encoded (by a named "
        "validator, or a tensor subclass's code): its bytes are not there to send - at `$.a`"
    )
    assert (caught.value.path, caught.value.type_id) == ("$.a", "shrink.M")


def test_a_storage_a_tensor_subclass_resizes_as_the_body_is_written_is_refused_not_read() -> None:
    """A tensor subclass's ``__torch_function__`` runs as the encoder reads it, after an earlier
    tensor of the message was looked at: it could empty that tensor's storage."""
    victim = torch.full((5,), 1.5)

    class Emptying(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            victim.untyped_storage().resize_(0)
            return super().__torch_function__(func, types, args, kwargs or {})  # type: ignore[no-untyped-call]

    message = diffusion.Output(output=[victim, torch.ones(3).as_subclass(Emptying)])
    with pytest.raises(tw.EncodeError, match=r"storage was resized or moved while the message") as caught:
        tw.Encoder().encode(message)
    assert caught.value.path == "$.output[0]"


def test_a_tensor_with_no_data_is_refused_by_field_path_before_any_export() -> None:
    """A meta tensor has a shape and a dtype but no memory: an ``EncodeError`` naming its field,
    raised before any of the message's other buffers goes to the transport."""
    message = diffusion.Output(
        output={"a": torch.ones(1000), "b": torch.ones(2000), "bad": torch.empty(10, device="meta")}
    )
    error = r"^diffusion\.Output: a tensor on device meta has no data to send \(its storage has no memory\)"
    counting = _FailingShm(fail_at=0)  # counts its exports, fails none
    try:
        for encoder in (tw.Encoder(), tw.Encoder(transport=counting, options=OUT_OF_BAND)):
            with pytest.raises(tw.EncodeError, match=error + r" - at `\$\.output\.bad`$") as caught:
                encoder.encode(message)
            assert caught.value.path == "$.output.bad"
        assert counting.calls == 0
    finally:
        counting.close()
    assert tw.Encoder().encode(diffusion.Output(output=torch.empty(0, 3, device="meta")))  # no bytes to read


def test_trees_deeper_than_the_limit_and_cycles() -> None:
    deep: Any = 1
    for _ in range(70):
        deep = (deep,)
    message = diffusion.Output()
    message.output = deep
    with pytest.raises(tw.EncodeError, match=r"nesting deeper than the limit of 64"):
        ENCODER.encode(message)
    cycle: list[Any] = []
    cycle.append(cycle)
    message = diffusion.Output()
    message.output = cycle
    with pytest.raises(tw.EncodeError, match=r"deeper than"):
        ENCODER.encode(message)


def _batch_holding(output: Any) -> Any:
    return diffusion.RunnerBatch(
        runner_outputs=[diffusion.RunnerOutput(request_id="a", result=diffusion.Output(output=output))]
    )


@pytest.mark.parametrize(
    ("max_depth", "leaf", "container", "path"),
    [
        (3, _batch_holding(torch.ones(2)), _batch_holding([torch.ones(2)]), "$.runner_outputs[0].result.output"),
        (3, _batch_holding(1.5), _batch_holding({"k": 1.5}), "$.runner_outputs[0].result.output"),
        (1, rpc.Request(method="m", kwargs={"a": 1}), rpc.Request(method="m", kwargs={"a": [1]}), "$.kwargs.a"),
    ],
)
def test_a_leaf_at_the_depth_limit_adds_no_level(max_depth: int, leaf: Any, container: Any, path: str) -> None:
    """A scalar or a tensor in a field at the limit is no level, as a decoder counts: the encoder
    sends what a decoder with the same limits reads, and refuses a container there."""
    limits = tw.Limits(max_depth=max_depth)
    encoder = tw.Encoder(options=tw.EncodeOptions(limits=limits))
    decoder = tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=limits))
    assert type(decoder.decode(encoder.encode(leaf))) is type(leaf)
    with pytest.raises(tw.EncodeError, match=rf"nesting deeper than the limit of {max_depth} - at") as caught:
        encoder.encode(container)
    assert caught.value.path == path
    with pytest.raises(tw.DecodeError, match=r"nesting deeper than the limit"):
        decoder.decode(tw.Encoder().encode(container))


def _levels_cases() -> list[Any]:
    return [
        diffusion.Output(stage_durations={"a": 1.0}),
        _batch_holding(1),
        _batch_holding([1]),
        diffusion.RunnerBatch(
            runner_outputs=[diffusion.RunnerOutput(request_id="a", result=diffusion.Output(stage_durations={"a": 1.0}))]
        ),
        rpc.Request(method="m", kwargs={"a": [1]}),
        rpc.Result(method="m", ok=True, rank_statuses=[rpc.RankStatus(rank=0, ok=True)]),
        rpc.Result(method="m", ok=True, payload=rpc.Value(value=[1])),
    ]


@pytest.mark.parametrize("max_depth", range(5))
@pytest.mark.parametrize("message", _levels_cases(), ids=lambda m: type(m).__name__)
def test_the_encoder_sends_exactly_what_a_decoder_with_the_same_limits_reads(message: Any, max_depth: int) -> None:
    """Typed fields (a map, a list of structs) count as levels as a tree does: the encoder refused
    none of them, and a decoder with the same ``max_depth`` refused what it sent."""
    limits = tw.Limits(max_depth=max_depth)
    frames = tw.Encoder().encode(message)
    try:
        tw.Decoder(REGISTRY, options=tw.DecodeOptions(limits=limits)).decode(frames)
        read = True
    except tw.DecodeError as exc:
        assert "nesting deeper than the limit" in str(exc)
        read = False
    try:
        tw.Encoder(options=tw.EncodeOptions(limits=limits)).encode(message)
        sent = True
    except tw.EncodeError as exc:
        assert (
            exc.message == f"nesting deeper than the limit of {max_depth}"
            and exc.type_id == message.__tw_type__.type_id
        )
        sent = False
    assert sent == read


def _nested_arrays(tmp_path: Any, levels: int) -> Any:
    """A loaded type ``t.Deep`` whose one field ``v`` is ``levels`` arrays nested, of integers."""
    items: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        items = {"type": "array", "items": items}
    schema = {"$id": "t.Deep", "x-version": 1, "type": "object", "properties": {"v": items}, "required": ["v"]}
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "Deep.v1.json").write_text(json.dumps(schema))
    return tw.load_schemas(tmp_path)


def _arrays(levels: int) -> Any:
    """``levels`` lists nested, the innermost empty."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_a_typed_field_nested_past_the_limit_is_refused_by_the_encoder_with_its_path(tmp_path: Any) -> None:
    """A schema may nest types deeper than ``Limits.max_depth`` (64): a value that used those
    levels was sent, and every decoder with the same limits refused it."""
    registry = _nested_arrays(tmp_path, 70)
    deep = registry.type("t.Deep")
    at_the_limit = deep(v=_arrays(64))  # 64 levels below the message: sent and read
    assert tw.Decoder(registry).decode(tw.Encoder().encode(at_the_limit)).v == at_the_limit.v
    over = deep(v=_arrays(65))
    with pytest.raises(tw.EncodeError) as caught:
        tw.Encoder().encode(over)
    assert caught.value.message == "nesting deeper than the limit of 64"
    assert caught.value.path == "$.v" + "[0]" * 64 and caught.value.type_id == "t.Deep"
    roomy = tw.Limits(max_depth=70)
    frames = tw.Encoder(options=tw.EncodeOptions(limits=roomy)).encode(over)
    with pytest.raises(tw.DecodeError, match=r"nesting deeper than the limit"):
        tw.Decoder(registry).decode(frames)
    assert tw.Decoder(registry, options=tw.DecodeOptions(limits=roomy)).decode(frames).v == over.v


def test_limits() -> None:
    few = tw.Encoder(options=tw.EncodeOptions(limits=tw.Limits(max_tensors=2)))
    with pytest.raises(tw.EncodeError, match=r"more than 2 tensors in one message \(limit max_tensors\)"):
        few.encode(diffusion.Output(output=[torch.zeros(1), torch.zeros(1), torch.zeros(1)]))
    small = tw.Encoder(options=tw.EncodeOptions(limits=tw.Limits(max_tensor_bytes=100)))
    with pytest.raises(tw.EncodeError, match=r"tensor of 400 bytes is over the limit of 100"):
        small.encode(diffusion.Output(output=torch.zeros(100)))


def test_a_required_field_that_was_deleted() -> None:
    request = rpc.Request(method="x")
    del request.method
    with pytest.raises(tw.EncodeError, match=r"^rpc.Request: Struct field 'method' is unset$"):
        ENCODER.encode(request)


def test_not_a_message_type_is_a_usage_error_and_a_bad_value_a_value_error() -> None:
    with pytest.raises(TypeError, match=r"^dict is not a tensorwire message type \(no __tw_type__\)$") as usage:
        ENCODER.encode({"a": 1})
    assert not isinstance(usage.value, tw.CodecError | ValueError)

    class Lookalike:  # a class given a message type's __tw_type__ (it raised AssertionError)
        __tw_type__ = diffusion.Output.__tw_type__

    with pytest.raises(TypeError, match=r"^Lookalike is not a tensorwire message type \(not a msgspec Struct\)$"):
        ENCODER.encode(Lookalike())
    with pytest.raises(ValueError, match=r"^rpc.Request: Expected `str`, got `int` - at `\$.method`$") as bad:
        ENCODER.encode(rpc.Request(method=3))  # type: ignore[arg-type]
    assert isinstance(bad.value, tw.EncodeError)


class _FailingShm(transports.ShmTransport):
    """Fails the k-th export (1-based) with an OSError, like a full /dev/shm."""

    def __init__(self, fail_at: int, pool: bool = False) -> None:
        super().__init__(pool=pool)
        self.fail_at = fail_at
        self.calls = 0

    def export(self, data: memoryview, frames: list[Any]) -> Any:
        self.calls += 1
        if self.calls == self.fail_at:
            raise tw.TransportError(errno.ENOSPC, f"injected failure at export {self.calls}")
        return super().export(data, frames)


def test_a_failed_export_at_any_buffer_releases_everything_and_mutates_nothing() -> None:
    tensors = [torch.full((256,), float(i)) for i in range(5)]
    message = diffusion.Output(output=(tensors[0], [tensors[1], (tensors[2],)], {"x": tensors[3], "y": tensors[4]}))
    snapshot = [t.clone() for t in tensors]
    before = set(segments_of(os.getpid()))
    for k in range(1, 6):
        transport = _FailingShm(k)
        encoder = tw.Encoder(transport=transport, options=OUT_OF_BAND)
        with pytest.raises(tw.TransportError, match=rf"injected failure at export {k}"):
            encoder.encode(message)
        assert set(segments_of(os.getpid())) <= before, f"segments left after a failure at export {k}"
        assert isinstance(message.output, tuple) and isinstance(message.output[1][1], tuple)
        assert all(torch.equal(t, s) for t, s in zip(tensors, snapshot, strict=True))


def test_a_failed_export_hands_every_pool_slot_back() -> None:
    tensors = [torch.full((256,), float(i)) for i in range(4)]
    message = diffusion.Output(output=tensors)
    before = set(segments_of(os.getpid()))
    for k in range(1, 5):
        transport = _FailingShm(k, pool=True)
        encoder = tw.Encoder(transport=transport, options=OUT_OF_BAND)
        with pytest.raises(tw.TransportError, match=rf"injected failure at export {k}"):
            encoder.encode(message)
        assert transport.pool is not None
        assert all(slot.state == transports._page_layout.FREE for slot in transport.pool.slots())
        transport.close()
    assert set(segments_of(os.getpid())) <= before


def test_a_failed_export_leaves_an_empty_tensors_slot_to_its_tensor() -> None:
    """A pool tensor handed over before a later buffer's export failed is still unsent: its slot
    is not given to the next send (which would write into the caller's tensor), and the tensor
    can be sent again."""
    transport = _FailingShm(2, pool=True)
    encoder = tw.Encoder(transport=transport, options=OUT_OF_BAND)
    decoder = tw.Decoder(REGISTRY, transports=[transport])
    tensor = transport.empty((1024,), torch.float32)
    tensor.fill_(7.0)
    with pytest.raises(tw.TransportError, match=r"injected failure at export 2"):
        encoder.encode(diffusion.Output(output=[tensor, torch.ones(999)]))
    other = decoder.decode(encoder.encode(diffusion.Output(output=[torch.full((1024,), 3.0)])))
    assert torch.equal(tensor, torch.full((1024,), 7.0))
    resent = decoder.decode(encoder.encode(diffusion.Output(output=[tensor])))
    assert torch.equal(resent.output[0], torch.full((1024,), 7.0))
    del other, resent, tensor
    assert transport.pool is not None
    assert all(slot.state == transports._page_layout.FREE for slot in transport.pool.slots())
    transport.close()


def test_an_interrupt_while_the_header_is_built_hands_every_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:

    calls = []
    real = msgspec.msgpack.Encoder()

    def interrupted(value: Any) -> bytes:
        if isinstance(value, list):  # the buffer table, written after every buffer was exported
            calls.append(value)
            raise KeyboardInterrupt
        return real.encode(value)

    monkeypatch.setattr(tw._encoder, "_PLAIN", SimpleNamespace(encode=interrupted))
    before = set(segments_of(os.getpid()))
    transport = transports.ShmTransport()
    encoder = tw.Encoder(transport=transport, options=OUT_OF_BAND)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode(diffusion.Output(output=[torch.ones(256), torch.zeros(256)]))
    assert len(calls) == 1 and len(calls[0]) == 2  # interrupted with both buffers exported
    assert transport.pool is not None and len(transport.pool.slots()) == 2
    assert all(slot.state == transports._page_layout.FREE for slot in transport.pool.slots())
    transport.close()
    assert set(segments_of(os.getpid())) <= before


def test_a_full_dev_shm_is_a_transport_error_before_any_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    copied = []
    real_mmap = mmap.mmap

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def watch_mmap(*args: Any, **kwargs: Any) -> Any:
        copied.append(args)
        return real_mmap(*args, **kwargs)

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    monkeypatch.setattr(mmap, "mmap", watch_mmap)
    with pytest.raises(tw.TransportError, match=r"cannot reserve 8192 bytes in /dev/shm") as info:
        ENCODER.encode(diffusion.Output(output=torch.zeros(1024)))
    assert info.value.errno == errno.ENOSPC
    assert copied == []  # nothing was mapped, nothing copied


def test_a_real_full_filesystem(tmp_path: Any) -> None:
    """On a 1 MiB tmpfs, where the machine lets us mount one, a 2 MiB buffer fails with ENOSPC in a
    named segment; a memfd pool does not live there and takes it."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.system(f"mount -t tmpfs -o size=1m tmpfs {mount} 2>/dev/null") != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        # one-shot segments, and a named pool growing a slot past the budget it was told it has
        named = transports.ShmTransport(mount, backing="named", max_cached_bytes=2**30)
        for shm in (transports.ShmTransport(mount, pool=False), named):
            encoder = tw.Encoder(transport=shm, options=tw.EncodeOptions(inline_threshold=1))
            with pytest.raises(tw.TransportError, match=r"cannot reserve \d+ bytes in .*tiny") as info:
                encoder.encode(diffusion.Output(output=torch.zeros(2**19)))
            assert info.value.errno == errno.ENOSPC
            assert os.listdir(mount) == []
            shm.close()
        memfd = transports.ShmTransport(mount, max_cached_bytes=2**30)
        frames = tw.Encoder(transport=memfd, options=tw.EncodeOptions(inline_threshold=1)).encode(
            diffusion.Output(output=torch.zeros(2**19))
        )
        out = tw.Decoder(REGISTRY, transports=[memfd]).decode(frames)
        assert out.output.shape == (2**19,) and os.listdir(mount) == []
        del out
        memfd.close()
    finally:
        os.system(f"umount {mount}")
