"""Golden wire fixtures: bytes written by every released schema version still decode, exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO

import tensorwire as tw
from tensorwire.builtins import REGISTRY
from tensorwire.builtins.golden import cases
from tensorwire.golden import MANIFEST, describe, manifest_lines, read_manifest, record

GOLDEN = REPO / "tests" / "golden"
FIXTURES = sorted(GOLDEN.rglob("*.bin"))


def test_the_manifest_pins_every_fixture() -> None:
    pinned, current = read_manifest(GOLDEN), manifest_lines(GOLDEN)
    assert pinned == current, "a released fixture was added, edited or removed without the manifest"
    assert len(FIXTURES) >= 13


@pytest.mark.parametrize("path", FIXTURES, ids=[p.relative_to(GOLDEN).as_posix() for p in FIXTURES])
def test_every_fixture_decodes_to_its_described_value(path: Path) -> None:
    message = tw.Decoder(REGISTRY).decode(tw.split(path.read_bytes()))
    expected = json.loads(path.with_suffix(".json").read_text())
    assert json.loads(json.dumps(describe(message), sort_keys=True)) == expected
    type_id, version = path.parent.parent.name, int(path.parent.name[1:])
    assert type(message).__tw_type__.type_id == type_id and type(message).__tw_type__.version == version


def test_todays_encoder_writes_the_released_bytes_of_every_case() -> None:
    """Encoding is deterministic and unchanged: the same message gives the fixture's exact bytes."""
    encoder, compared = tw.Encoder(), 0
    for type_id, builders in cases().items():
        for case, build in builders:
            message = build()
            path = GOLDEN / type_id / f"v{type(message).__tw_type__.version}" / f"{case}.bin"
            if path.exists():
                assert tw.join(encoder.encode(message)) == path.read_bytes(), path
                compared += 1
    assert compared >= 13


def test_every_builtin_type_version_has_fixtures_including_bf16_and_trees() -> None:
    covered = {(p.parent.parent.name, int(p.parent.name[1:])) for p in FIXTURES}
    assert covered == {(i.type_id, i.version) for i in REGISTRY.infos()}
    texts = "".join(p.with_suffix(".json").read_text() for p in FIXTURES)
    assert '"$tensor": "bfloat16"' in texts and '"$tuple"' in texts and '"$ndarray": "int16"' in texts


def test_record_adds_only_what_is_missing_and_refuses_edited_fixtures(tmp_path: Path) -> None:
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    assert record(root, cases()) == []  # everything released is already there
    (root / "rpc.Value" / "v1" / "tree.bin").unlink()
    (root / MANIFEST).write_text(
        "".join(
            line + "\n" for line in (root / MANIFEST).read_text().splitlines() if "rpc.Value/v1/tree.bin" not in line
        )
    )
    assert [p.name for p in record(root, cases())] == ["tree.bin", "tree.json"]
    assert read_manifest(root) == manifest_lines(root)
    victim = root / "media.Video" / "v1" / "uint8_frames.bin"
    victim.write_bytes(victim.read_bytes()[:-1] + b"\xff")
    with pytest.raises(ValueError, match=r"released fixtures were edited or removed: media.Video/v1/uint8_frames.bin"):
        record(root, cases())


def test_an_edited_fixture_fails_the_manifest_check(tmp_path: Path) -> None:
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)
    target = root / "rpc.Request" / "v1" / "collective.json"
    target.write_text(target.read_text().replace("add_lora", "add_lorax"))
    assert read_manifest(root) != manifest_lines(root)
