"""Named validators: registered once per name, run on build and on decode, known to the schema loader."""

from __future__ import annotations

import copy
import functools
import uuid
from pathlib import Path
from typing import Any

import pytest

import tensorwire as tw
from tensorwire.rules import known_validators, validator
from tests.conftest import CLIP, write_schemas


def _name() -> str:
    return f"audio.rule_{uuid.uuid4().hex[:8]}"  # each test its own name: the registry is process-wide


def test_a_name_cannot_be_registered_to_a_second_function() -> None:
    name = _name()

    @tw.register_validator(name)
    def first(obj: Any) -> None:
        pass

    with pytest.raises(ValueError, match=rf"a validator named '{name}' is already registered \(.*first\)"):

        @tw.register_validator(name)
        def second(obj: Any) -> None:
            pass

    assert validator(name) is first
    assert tw.register_validator(name)(first) is first  # the same function again: no change


@pytest.mark.parametrize(
    ("name", "fn", "error", "words"),
    [
        (None, len, TypeError, r"a validator's name must be a str, got None"),
        (1, len, TypeError, r"a validator's name must be a str, got 1"),
        ("", len, ValueError, r"a validator's name must be namespace\.rule_name .*, got ''"),
        ("Audio.Rule", len, ValueError, r"a validator's name must be namespace\.rule_name .*, got 'Audio\.Rule'"),
        ("audio.rule\n", len, ValueError, r"a validator's name must be namespace\.rule_name .*, got 'audio\.rule\\n'"),
        ("audio.not_callable", 5, TypeError, r"the validator 'audio\.not_callable' must be callable, got 5"),
    ],
)
def test_a_validator_no_schema_could_run_is_refused_when_registered(
    name: Any, fn: Any, error: type[Exception], words: str
) -> None:
    """Registered, a name that is not a str would break the loader's list of known names (sorted in
    its errors), and a value that is not callable would fail every message built."""
    with pytest.raises(error, match=rf"^{words}$"):
        tw.register_validator(name)(fn)
    assert all(isinstance(known, str) for known in known_validators())
    assert validator("audio.not_callable") is None


async def _async_rule(obj: Any) -> None:
    raise AssertionError("never runs: a call makes a coroutine")


def _generator_rule(obj: Any) -> Any:
    yield obj


@pytest.mark.parametrize("fn", [_async_rule, _generator_rule, functools.partial(_async_rule)])
def test_a_validator_whose_body_a_call_does_not_run_is_refused_when_registered(fn: Any) -> None:
    """Called, an async or generator function returns a coroutine or generator and raises nothing:
    registered, every message would pass it."""
    name = _name()
    words = rf"^the validator '{name}' must be a plain function: .* is an async or generator function"
    with pytest.raises(TypeError, match=words):
        tw.register_validator(name)(fn)
    assert validator(name) is None


def test_the_built_in_validators_are_known_without_the_runtime() -> None:
    assert {"media.video_contract", "media.media_contract", "rpc.ok_xor_error"} <= known_validators()


def test_a_registered_validator_runs_on_build_and_on_decode(tmp_path: Path) -> None:
    name = _name()
    seen: list[int] = []

    @tw.register_validator(name)
    def positive_rate(clip: Any) -> None:
        seen.append(clip.sample_rate)
        if clip.sample_rate > 96_000:
            raise tw.rules.violation("audio.Clip", "RATE_TOO_HIGH", f"got {clip.sample_rate}")

    doc = copy.deepcopy(CLIP)
    doc["x-validators"] = [name]
    clip_type = tw.load_schemas(write_schemas(tmp_path, {"audio/Clip.v1.json": doc})).type("audio.Clip")
    import torch

    clip = clip_type(samples=torch.zeros(2, 8), sample_rate=48_000, window=(0, 8))
    frames = tw.Encoder().encode(clip)
    decoder = tw.Decoder(tw.Registry([clip_type]))
    assert decoder.decode(frames).sample_rate == 48_000
    assert seen == [48_000, 48_000, 48_000]  # built, checked by the encoder, checked again on decode
    with pytest.raises(tw.ValidationError, match=r"^audio.Clip: rule RATE_TOO_HIGH: got 192000$"):
        clip_type(samples=torch.zeros(2, 8), sample_rate=192_000, window=(0, 8))


def _frames_of(error: BaseException | None) -> list[str]:
    """The functions in the tracebacks of ``error`` and of the errors it was raised from or during."""
    names: list[str] = []
    while error is not None:
        tb = error.__traceback__
        while tb is not None:
            names.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        error = error.__cause__ or error.__context__
    return names


def _raise_own(marker: object) -> None:
    raise KeyError("the caller's own error")


def _caught_earlier(marker: object) -> KeyError:
    """An error raised and caught before any decode (its frames finished), handed back."""
    try:
        _raise_own(marker)
    except KeyError as error:
        return error
    raise AssertionError("not raised")


def _clip_checked_by(tmp_path: Path, name: str) -> Any:
    """``audio.Clip`` with the named validator."""
    doc = copy.deepcopy(CLIP)
    doc["x-validators"] = [name]
    return tw.load_schemas(write_schemas(tmp_path, {"audio/Clip.v1.json": doc})).type("audio.Clip")


def _rate_forged(frames: list[Any]) -> list[Any]:
    """``frames`` with the clip's sample rate set to 192,000: within the schema, refused by the
    validators here (after the clip, and its tensor, are built)."""
    from tests.wire_helpers import frame_of, head_of

    head = head_of(frames[0])
    head[4]["sample_rate"] = 192_000
    return [frame_of(head), *frames[1:]]


def test_a_kept_decode_error_holds_no_tensor_of_the_message(tmp_path: Path) -> None:
    """The validator's frame held the message (its tensor a view of the sender's slot): the error
    keeps the lines of the failed frames, not their locals; an error the caller was handling when
    it called decode keeps its locals."""
    import torch

    from tensorwire import transports
    from tensorwire.transports._page_layout import CLAIMED, FREE

    name = _name()

    @tw.register_validator(name)
    def rate(clip: Any) -> None:
        if clip.sample_rate > 96_000:
            raise tw.rules.violation("audio.Clip", "RATE_TOO_HIGH", f"got {clip.sample_rate}")

    clip_type = _clip_checked_by(tmp_path, name)
    sender, receiver = transports.ShmTransport(), transports.ShmTransport(pool=False)
    try:
        options = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)
        frames = tw.Encoder(transport=sender, options=options).encode(
            clip_type(samples=torch.zeros(2, 8000), sample_rate=48_000, window=(0, 8))
        )
        decoder = tw.Decoder(tw.Registry([clip_type]), transports=[receiver])
        marker = object()
        try:
            _raise_own(marker)
        except KeyError as own:
            with pytest.raises(tw.DecodeError, match=r"rule RATE_TOO_HIGH: got 192000") as caught:
                decoder.decode(_rate_forged(frames))
            assert own.__traceback__ is not None and own.__traceback__.tb_next is not None
            assert own.__traceback__.tb_next.tb_frame.f_locals["marker"] is marker  # the caller's: untouched
        assert sender.pool is not None and [s.state for s in sender.pool.slots()] == [FREE]
        assert "rate" in _frames_of(caught.value)  # the failed frames stay in the chain, their lines printable
        again = clip_type(samples=torch.ones(2, 8000), sample_rate=48_000, window=(0, 8))
        out = decoder.decode(tw.Encoder(transport=sender, options=options).encode(again))
        assert [s.state for s in sender.pool.slots()] == [CLAIMED] and float(out.samples[0, 0]) == 1.0
        del out
    finally:
        sender.close()
        receiver.close()


def test_an_error_chain_that_loops_still_ends_in_a_decode_error(tmp_path: Path) -> None:
    """A validator may raise an error whose causes loop (set by hand): the decode clears what it
    can and raises its DecodeError instead of walking the loop for ever."""
    import threading

    import torch

    name = _name()

    @tw.register_validator(name)
    def looping(clip: Any) -> None:
        if clip.sample_rate > 96_000:
            try:
                raise ValueError("second")
            except ValueError as caught:
                second = caught  # raised and caught here, inside the decode: its chain is walked
            first = ValueError("first")
            first.__cause__, second.__cause__ = second, first
            raise first

    clip_type = _clip_checked_by(tmp_path, name)
    frames = _rate_forged(tw.Encoder().encode(clip_type(samples=torch.zeros(2, 8), sample_rate=48_000, window=(0, 8))))
    decoder = tw.Decoder(tw.Registry([clip_type]))
    outcome: list[BaseException] = []

    def decode() -> None:
        try:
            decoder.decode(frames)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=decode, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the decode walked the looping chain for ever"
    assert len(outcome) == 1 and isinstance(outcome[0], tw.DecodeError), outcome
    assert outcome[0].type_id == "audio.Clip" and outcome[0].path == "$"
    assert str(outcome[0]).startswith("audio.Clip v1: first - at `$`"), str(outcome[0])


def test_an_error_a_validator_chains_from_elsewhere_keeps_its_locals(tmp_path: Path) -> None:
    """Only what was raised inside the decode is cleared: an error caught earlier, elsewhere, that
    a validator names as its cause keeps the locals of its frames."""
    import torch

    marker = object()
    stored = _caught_earlier(marker)
    name = _name()

    @tw.register_validator(name)
    def chaining(clip: Any) -> None:
        if clip.sample_rate > 96_000:
            raise tw.rules.violation("audio.Clip", "RATE_TOO_HIGH", f"got {clip.sample_rate}") from stored

    clip_type = _clip_checked_by(tmp_path, name)
    frames = _rate_forged(tw.Encoder().encode(clip_type(samples=torch.zeros(2, 8), sample_rate=48_000, window=(0, 8))))
    with pytest.raises(tw.DecodeError, match=r"rule RATE_TOO_HIGH: got 192000") as caught:
        tw.Decoder(tw.Registry([clip_type])).decode(frames)
    chain = _frames_of(caught.value)
    assert "chaining" in chain and chain[-2:] == ["_caught_earlier", "_raise_own"]  # stored is in the chain
    assert stored.__traceback__ is not None and stored.__traceback__.tb_next is not None
    assert stored.__traceback__.tb_next.tb_frame.f_locals["marker"] is marker


def test_a_validator_that_raises_an_error_of_its_own_is_a_codec_error_naming_it(tmp_path: Path) -> None:
    """A validator's KeyError on what a peer sent is a DecodeError (nothing of the message kept, its
    slot handed back), a ValidationError when the message is built and an EncodeError (nothing
    exported) when it is sent: each names the validator and what it raised."""
    import re

    import torch

    from tensorwire import transports
    from tensorwire.transports._page_layout import FREE

    name = _name()

    @tw.register_validator(name)
    def rates(clip: Any) -> None:
        {48_000: "ok"}[clip.sample_rate]  # a lookup that fails on a rate it does not know

    clip_type = _clip_checked_by(tmp_path, name)
    words = f"validator '{name}' raised KeyError: 192000"
    with pytest.raises(tw.ValidationError, match=rf"^audio\.Clip: {re.escape(words)}$"):
        clip_type(samples=torch.zeros(2, 8), sample_rate=192_000, window=(0, 8))
    sender, receiver = transports.ShmTransport(), transports.ShmTransport(pool=False)
    try:
        options = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)
        encoder = tw.Encoder(transport=sender, options=options)
        frames = encoder.encode(clip_type(samples=torch.zeros(2, 8000), sample_rate=48_000, window=(0, 8)))
        with pytest.raises(tw.DecodeError, match=rf"^audio\.Clip v1: audio\.Clip: {re.escape(words)} - at `\$`$"):
            tw.Decoder(tw.Registry([clip_type]), transports=[receiver]).decode(_rate_forged(frames))
        assert sender.pool is not None and [s.state for s in sender.pool.slots()] == [FREE]
        unchecked = clip_type(samples=torch.zeros(2, 8000), sample_rate=48_000, window=(0, 8))
        unchecked.sample_rate = 192_000  # set after the check at build
        with pytest.raises(tw.EncodeError, match=rf"^audio\.Clip: audio\.Clip: {re.escape(words)}$"):
            encoder.encode(unchecked)
        assert [s.state for s in sender.pool.slots()] == [FREE]
    finally:
        sender.close()
        receiver.close()
