"""The main job (``tensorwire demo``) and ``tensorwire inspect``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

import codec
import transports
from codec.cli import main
from codec.generated import diffusion


def test_demo_sends_a_diffusion_batch_bit_exactly_and_leaves_nothing() -> None:
    from codec.demo import run

    out = io.StringIO()
    assert run(out) == 0, out.getvalue()
    text = out.getvalue()
    assert "$.runner_outputs[0].result.media.video.tensor    bfloat16  1x3x16x480x832" in text
    assert text.count(" pool ") >= 4 and " inline " in text
    assert "bit-exact: all; segments of ours left (in /dev/shm or memfds): 0" in text
    assert "7 tensors in 4 buffers" in text  # the four per-request views share one buffer


def test_inspect_prints_the_header_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    message = diffusion.Output(output=(torch.zeros(2, 3), {"n": torch.ones(600_000)}), error="e")
    shm = transports.ShmTransport()
    encoder = codec.Encoder(transport=shm)
    frames = encoder.encode(message)
    blob = tmp_path / "message.tw"
    blob.write_bytes(codec.join(frames))
    assert main(["inspect", str(blob)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["type"] == "diffusion.Output" and info["version"] == 1
    assert info["fingerprint"] == diffusion.Output.__tw_type__.fingerprint
    assert [(b["transport"], b["nbytes"]) for b in info["buffers"]] == [("inline", 24), ("shm-slot", 2_400_000)]
    assert info["buffers"][1]["handle"]["name"].startswith("tw-")
    assert [t["path"] for t in info["tensors"]] == ["$.output[0]", "$.output[1].n"]
    assert info["body"]["error"] == "e" and info["body"]["output"][0] == {"$tensor": 0}
    assert info["buffers"][1]["handle"]["generation"] == 1
    shm.close()  # nobody received it: closing the pool unlinks its slots


def test_inspect_rejects_what_is_not_a_blob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tw"
    bad.write_bytes(b"not a blob at all")
    assert main(["inspect", str(bad)]) == 2
    assert "not a tensorwire blob" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "cannot read" in capsys.readouterr().err
