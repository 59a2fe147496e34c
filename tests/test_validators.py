"""Named validators: registered once per name, run on build and on decode, known to the schema loader."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import CLIP, write_schemas

import tensorwire as tw
from tensorwire.rules import known_validators, validator


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
