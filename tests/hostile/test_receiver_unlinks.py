"""The names a receiver removes: a one-shot segment it claimed or discarded, and a named pool slot
whose creator died, go only while the name still names the file the receiver opened; a file a
same-uid neighbour moved onto the name meanwhile stays."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import _one_shots, _slots
from tensorwire.transports._one_shot_page import claim_file, discard_file

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor out of band
OTHERS = b"another program's data"


def _decoy(directory: Path) -> Path:
    decoy = directory / "not-tensorwire"
    decoy.write_bytes(OTHERS)
    return decoy


def _segment_names(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("tw-"))


@pytest.mark.parametrize("swapped", [False, True])
def test_a_claimed_one_shot_segment_s_name_goes_only_while_it_names_the_file_claimed(
    directory: Path, monkeypatch: pytest.MonkeyPatch, swapped: bool
) -> None:
    """The receiver unlinked the segment's name after its claim, whatever file it named by then."""
    with transports.ShmTransport(directory, pool=False) as sender, transports.ShmTransport(directory) as receiver:
        frames = tw.Encoder(transport=sender, options=OOB).encode(diffusion.Output(output=torch.ones(1024)))
        [name] = _segment_names(directory)
        decoy, claim = _decoy(directory), claim_file

        def claim_as_a_neighbour_moves_a_file_there(fd: int, capability: bytes, what: str) -> None:
            claim(fd, capability, what)
            if swapped:
                os.rename(decoy, directory / name)

        monkeypatch.setattr(_one_shots, "claim_file", claim_as_a_neighbour_moves_a_file_there)
        got = tw.Decoder(REGISTRY, transports=[receiver]).decode(frames).output
        assert torch.equal(got, torch.ones(1024))
        if swapped:
            assert (directory / name).read_bytes() == OTHERS  # the neighbour's file stays
        else:
            assert _segment_names(directory) == []  # the segment read goes


@pytest.mark.parametrize("swapped", [False, True])
def test_a_discarded_one_shot_segment_s_name_goes_only_while_it_names_the_file_discarded(
    directory: Path, monkeypatch: pytest.MonkeyPatch, swapped: bool
) -> None:
    """A message that will not be read (over a limit) discards its segments: their names went
    whatever file they named by then."""
    with transports.ShmTransport(directory, pool=False) as sender, transports.ShmTransport(directory) as receiver:
        frames = tw.Encoder(transport=sender, options=OOB).encode(diffusion.Output(output=torch.ones(1024)))
        [name] = _segment_names(directory)
        decoy, discard = _decoy(directory), discard_file

        def discard_as_a_neighbour_moves_a_file_there(fd: int, capability: bytes, what: str) -> bool:
            done = discard(fd, capability, what)
            if swapped:
                os.rename(decoy, directory / name)
            return done

        monkeypatch.setattr(_one_shots, "discard_file", discard_as_a_neighbour_moves_a_file_there)
        tight = tw.DecodeOptions(limits=tw.Limits(max_message_bytes=1024))
        with pytest.raises(tw.DecodeError, match="4096 buffer bytes is over the limit of 1024"):
            tw.Decoder(REGISTRY, transports=[receiver], options=tight).decode(frames)
        if swapped:
            assert (directory / name).read_bytes() == OTHERS
        else:
            assert _segment_names(directory) == []


@pytest.mark.parametrize("swapped", [False, True])
def test_a_named_slot_whose_creator_died_goes_only_while_its_name_names_the_file_mapped(
    directory: Path, monkeypatch: pytest.MonkeyPatch, swapped: bool
) -> None:
    """A receiver that frees a named pool slot whose creator is gone removes its name: it did so
    whatever file the name named by then."""
    with (
        transports.ShmTransport(directory, backing="named") as sender,
        transports.ShmTransport(directory, backing="named") as receiver,
    ):
        frames = tw.Encoder(transport=sender, options=OOB).encode(diffusion.Output(output=torch.ones(1024)))
        [name] = _segment_names(directory)
        got = tw.Decoder(REGISTRY, transports=[receiver]).decode(frames).output  # a view of the slot
        monkeypatch.setattr(_slots._Mapped, "creator_seen", lambda self: False)  # as if its creator died
        if swapped:
            os.rename(_decoy(directory), directory / name)
        del got
        gc.collect()
        if swapped:
            assert (directory / name).read_bytes() == OTHERS
        else:
            assert _segment_names(directory) == []
