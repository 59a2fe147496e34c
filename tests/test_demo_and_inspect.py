"""The main job (``tensorwire demo``) and ``tensorwire inspect``."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import diffusion
from tensorwire.cli import main
from tests.conftest import NOT_REGULAR, make_not_regular


def test_demo_sends_a_diffusion_batch_bit_exactly_and_leaves_nothing() -> None:
    from tensorwire.builtins.demo import run

    out = io.StringIO()
    assert run(out) == 0, out.getvalue()
    text = out.getvalue()
    assert "$.runner_outputs[0].result.media.video.tensor    bfloat16  1x3x16x480x832" in text
    assert text.count(" pool ") >= 6  # the video, the latents and the four per-request views
    (timesteps,) = [line for line in text.splitlines() if line.startswith("$.runner_outputs[0].result.trajectory_t")]
    assert "float32" in timesteps and " 50 " in timesteps and " pool " not in timesteps  # inside frame 0
    assert timesteps.split()[-1] == "yes"
    assert "bit-exact: all; segments of ours left (in /dev/shm or memfds): 0" in text
    assert "7 tensors in 3 buffers" in text  # the four per-request views share one buffer


def _inspect(frames: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    blob = tmp_path / "message.tw"
    blob.write_bytes(tw.join(frames))
    assert main(["inspect", str(blob)]) == 0
    info: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert info["type"] == "diffusion.Output" and info["version"] == 1
    assert info["wire"] == 3 and info["tag"] == "tensorwire:3:diffusion.Output:1"
    assert info["fingerprint"] == diffusion.Output.__tw_type__.fingerprint
    assert [t["path"] for t in info["tensors"]] == ["$.output[0]", "$.output[1].n"]
    assert [(t["kind"], t["dtype"], t["shape"], t["strides"]) for t in info["tensors"]] == [
        ("tensor", "float32", [2, 3], None),
        ("tensor", "float32", [600_000], None),
    ]
    assert [t["nbytes"] for t in info["tensors"]] == [24, 2_400_000]
    assert info["body"]["error"] == "e" and info["body"]["output"][0] == {"$tensor": 0}
    assert info["body"]["output"][1] == {"n": {"$tensor": 1}}
    return info


def test_inspect_prints_the_header_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    message = diffusion.Output(output=(torch.zeros(2, 3), {"n": torch.ones(600_000)}), error="e")
    shm = transports.ShmTransport()
    # every tensor in a buffer: the small one in an inline frame, the large one in a pool slot
    info = _inspect(
        tw.Encoder(transport=shm, options=tw.EncodeOptions(embed_threshold=0)).encode(message), tmp_path, capsys
    )
    assert [(b["index"], b["transport"], b["nbytes"]) for b in info["buffers"]] == [
        (0, "inline", 24),
        (1, "shm-slot", 2_400_000),
    ]
    assert info["buffers"][0]["handle"] == {"transport": "inline", "frame": 1}
    assert info["buffers"][1]["handle"]["name"].startswith("tw-")
    assert info["buffers"][1]["handle"]["generation"] == 1
    assert [(t["buffer"], t["offset"]) for t in info["tensors"]] == [(0, 0), (1, 0)]
    # by default the small one travels inside frame 0
    info = _inspect(tw.Encoder(transport=shm).encode(message), tmp_path, capsys)
    assert [(b["index"], b["transport"], b["nbytes"]) for b in info["buffers"]] == [(0, "shm-slot", 2_400_000)]
    assert [(t["buffer"], t["offset"]) for t in info["tensors"]] == [(None, 0), (0, 0)]  # in frame 0's data
    assert info["data"] == info["tensors"][0]["nbytes"]
    shm.close()  # nobody received it: closing the pool unlinks its slots


def test_inspect_gives_each_view_of_a_shared_buffer_its_offset() -> None:
    from tensorwire.inspection import describe

    storage = torch.arange(64, dtype=torch.float32)
    message = diffusion.Output(output=[storage[:16], storage[32:48]])  # two views of one storage
    info = describe(tw.Encoder().encode(message)[0])
    assert [(b["index"], b["transport"]) for b in info["buffers"]] == [(0, "inline")]
    assert [(t["path"], t["buffer"], t["offset"], t["nbytes"]) for t in info["tensors"]] == [
        ("$.output[0]", 0, 0, 64),
        ("$.output[1]", 0, 128, 64),
    ]


def test_inspect_holds_little_besides_the_header_and_its_description() -> None:
    """A frame 0 of many empty containers decodes into ~64 bytes of objects per byte, and its
    description takes as much again; the walk between them keeps one entry per level, not one
    per value (it took as much as both again: a 4 MiB frame, 1 GiB of RSS)."""
    import tracemalloc

    from tensorwire.inspection import describe

    body = [[[]] * 300_000 + [{}, [[{}]] * 3], {1: [{}], "k": []}]
    frame = msgspec.msgpack.encode(["x", b"", b"", [], body])
    tracemalloc.start()
    try:
        info = describe(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info["body"][0][-3:] == [[], {}, [[{}]] * 3] and info["body"][1] == {"1": [{}], "k": []}
    assert len(info["body"][0]) == 300_002
    assert peak < 160 * len(frame), f"describe of a {len(frame)}-byte frame 0 held {peak} bytes at its peak"


def test_inspect_gives_a_nested_tensor_its_path_among_containers() -> None:
    from tensorwire.inspection import describe

    x = torch.arange(4, dtype=torch.float32)
    info = describe(tw.Encoder().encode(diffusion.Output(output=[{"a": [], "b": [x, {}]}, [], (x,)]))[0])
    assert [t["path"] for t in info["tensors"]] == ["$.output[0].b[0]", "$.output[2][0]"]


def test_inspect_makes_the_text_of_a_map_key_once_however_many_tensors_lie_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The JSON text of a key that is not a string was made again for the path of every tensor
    under it: a 100 KB blob, a key of 100,000 items over 1,000 tensors, took minutes."""
    from tensorwire import inspection

    keys: list[Any] = []
    key_text = inspection._key

    def counted(key: Any) -> str:
        keys.append(key)
        return key_text(key)

    monkeypatch.setattr(inspection, "_key", counted)
    broken = msgspec.msgpack.Ext(1, b"")  # a tensor whose descriptor does not read still has a path
    frame = msgspec.msgpack.encode(["x", b"", b"", [], {(0, 1): [broken] * 50}])
    info = inspection.describe(frame)
    assert [t["path"] for t in info["tensors"]] == [f"$[[0, 1]][{i}]" for i in range(50)]
    assert info["body"] == {"[0, 1]": [{"$tensor": i} for i in range(50)]}
    assert keys == [(0, 1)]


def test_inspect_refuses_more_tensors_than_a_message_holds_before_describing_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each tensor's entry repeats its path, of up to 64 keys of 64 characters: a 300 KB blob of
    100,000 three-byte tensors under such a path took 1.8 GB of RSS to describe and 460 MB of
    output, and a 64 MiB one would have taken some 400 GB."""
    from tensorwire.inspection import describe

    broken = msgspec.msgpack.Ext(1, b"")
    tree = msgspec.msgpack.Ext(2, msgspec.msgpack.encode([broken, broken]))  # a tree tuple's count too
    frame = msgspec.msgpack.encode(["x", b"", b"", [], {"a": [broken, tree]}])
    assert [t["path"] for t in describe(frame, max_tensors=3)["tensors"]] == ["$.a[0]", "$.a[1][0]", "$.a[1][1]"]
    with pytest.raises(tw.DecodeError, match=r"^more than 2 tensors in one message \(limit max_tensors\)$"):
        describe(frame, max_tensors=2)
    path = tmp_path / "many.tw"
    path.write_bytes(tw.join([msgspec.msgpack.encode(["x", b"", b"", [], {"k" * 64: [broken] * 65537}])]))
    assert main(["inspect", str(path)]) == 2
    assert capsys.readouterr() == ("", "tensorwire: more than 65536 tensors in one message (limit max_tensors)\n")


def test_inspect_shows_every_entry_of_a_map_whose_keys_read_alike() -> None:
    """A key that is not a string is named by its JSON text, and an entry whose name another had
    already was dropped from the description: bin keys of one length (``{"$bytes": 2}``), and
    ``1`` beside ``"1"``, showed one entry of several."""
    from tensorwire.inspection import describe

    broken = msgspec.msgpack.Ext(1, b"")
    body = {b"ab": "a", b"cd": "c", 1: "int", "1": "str", b"ef": {"t": broken}, '{"$bytes": 2} #3': "s"}
    info = describe(msgspec.msgpack.encode(["x", b"", b"", [], body]))
    assert info["body"] == {
        '{"$bytes": 2}': "a",
        '{"$bytes": 2} #2': "c",
        "1 #2": "int",
        "1": "str",
        '{"$bytes": 2} #4': {"t": {"$tensor": 0}},
        '{"$bytes": 2} #3': "s",
    }
    assert info["tensors"][0]["path"] == '$[{"$bytes": 2}].t'


def test_inspect_refuses_more_buffers_than_a_message_holds_before_describing_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each entry of the buffer table, three bytes, was described (a map of four entries, a line of
    JSON each): a 6 MB blob of 2,000,000 took 920 MB of RSS and printed 200 MB."""
    from tensorwire.inspection import describe

    frame = msgspec.msgpack.encode(["x", b"", b"", [[0, {}]] * 3, {}])
    assert [b["index"] for b in describe(frame, max_buffers=3)["buffers"]] == [0, 1, 2]
    with pytest.raises(tw.DecodeError, match=r"^3 buffers is over the limit of 2 - at `\$\.buffers`$") as info:
        describe(frame, max_buffers=2)
    assert info.value.path == "$.buffers"
    path = tmp_path / "many.tw"
    path.write_bytes(tw.join([msgspec.msgpack.encode(["x", b"", b"", [[0, {}]] * 4097, {}])]))
    assert main(["inspect", str(path)]) == 2
    assert capsys.readouterr() == ("", "tensorwire: 4097 buffers is over the limit of 4096 - at `$.buffers`\n")


def test_inspect_prints_a_float_json_cannot_hold_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A NaN or infinite float in frame 0 was printed as ``NaN`` or ``Infinity``, which no JSON
    reader takes."""
    body = {"loss": float("nan"), "range": [float("inf"), float("-inf")], "ok": 1.5}
    frame = msgspec.msgpack.encode(["tensorwire:3:h.Msg:1", "f" * 64, b"", [], body])
    blob = tmp_path / "message.tw"
    blob.write_bytes(tw.join([frame]))
    assert main(["inspect", str(blob)]) == 0

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    info = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert info["body"] == {
        "loss": {"$float": "nan"},
        "range": [{"$float": "inf"}, {"$float": "-inf"}],
        "ok": 1.5,
    }


def test_inspect_rejects_what_is_not_a_blob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tw"
    bad.write_bytes(b"not a blob at all")
    assert main(["inspect", str(bad)]) == 2
    assert "not a tensorwire blob" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_inspect_reads_only_a_regular_file(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO would block the read and /dev/zero never end it: refused before a byte is read."""
    path = tmp_path / "blob.tw"
    make_not_regular(path, kind)
    assert main(["inspect", str(path)]) == 2
    assert capsys.readouterr().err == f"tensorwire: cannot read {path}: not a regular file\n"


def _sparse_blob(path: Path, frame0: bytes, lengths: list[int]) -> None:
    """A blob of ``frame0`` then frames of ``lengths`` zero bytes, left as holes in the file."""
    table = struct.pack(f"<4sI{1 + len(lengths)}Q", b"TWB1", 1 + len(lengths), len(frame0), *lengths)
    head = table + bytes(-len(table) % 64) + frame0
    end = len(head)
    for length in lengths:
        end += -end % 64 + length
    with path.open("wb") as file:
        file.write(head)
        file.truncate(end)


def _inspect_in_a_small_address_space(
    path: Path, limit: int = 1 << 30, out: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``tensorwire inspect path`` in ``limit`` bytes of address space; its output in ``out``, if given."""
    script = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
        "from tensorwire.cli import main\n"
        "sys.exit(main(['inspect', sys.argv[1]]))\n"
    )
    if out is None:
        return subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    with out.open("w") as file:
        return subprocess.run(
            [sys.executable, "-c", script, str(path)], stdout=file, stderr=subprocess.PIPE, text=True, timeout=120
        )


def test_inspect_reads_frame_0_and_not_the_frames_after_it(tmp_path: Path) -> None:
    """The whole file was read: a 4 GiB blob needed 4 GiB of memory (a MemoryError, exit 3, in a
    1 GiB address space)."""
    frame0 = tw.Encoder().encode(diffusion.Output(error="e"))[0]
    path = tmp_path / "big.tw"
    _sparse_blob(path, bytes(frame0), [4 << 30])
    done = _inspect_in_a_small_address_space(path)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["type"] == "diffusion.Output"


def test_inspect_prints_a_large_description_without_holding_its_text(tmp_path: Path) -> None:
    """The JSON text was made whole before it was printed, as large again as the description: 30,000
    tensors under 62 keys of 64 characters (a 100 KB blob, 130 MB of text) did not fit in 500 MiB
    of address space (a MemoryError, exit 3); they now print in 250."""
    body: Any = [msgspec.msgpack.Ext(1, b"")] * 30_000
    for _ in range(62):
        body = {"k" * 64: body}
    path, out = tmp_path / "many.tw", tmp_path / "out.json"
    path.write_bytes(tw.join([msgspec.msgpack.encode(["x", b"", b"", [], body])]))
    done = _inspect_in_a_small_address_space(path, 400 << 20, out)
    assert (done.returncode, done.stderr) == (0, "")
    with out.open("rb") as file:
        assert file.read(2) == b"{\n"
        file.seek(-2, os.SEEK_END)
        assert file.read() == b"}\n"
        assert file.tell() > 30_000 * 62 * 66


def test_inspect_refuses_a_frame_0_over_the_header_limit_before_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "big.tw"
    _sparse_blob(path, b"", [])
    with path.open("r+b") as file:  # frame 0 claims 8 GiB, all of them holes
        file.write(struct.pack("<4sIQ", b"TWB1", 1, 8 << 30))
        file.truncate(64 + (8 << 30))
    done = _inspect_in_a_small_address_space(path)
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr
        == f"tensorwire: frame 0 of {8 << 30} bytes is over the limit of {64 << 20} (limit max_header_bytes)\n"
    )


@pytest.mark.parametrize(
    ("lengths", "error"),
    [
        ([0] * 4097, "blob of 4098 frames is over the limit of 4097 (frame 0 and max_buffers inline buffers)"),
        ([100], "blob truncated: frame 1 needs 100 bytes at 128, blob has 227\n"),
    ],
)
def test_inspect_checks_the_frame_table_as_split_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lengths: list[int], error: str
) -> None:
    path = tmp_path / "bad.tw"
    _sparse_blob(path, b"\x90", lengths)
    if error.startswith("blob truncated"):
        path.write_bytes(path.read_bytes()[:-1])
    assert main(["inspect", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"tensorwire: {error}")


def test_inspect_names_the_type_and_the_path_of_a_frame_nested_too_deep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a decode names them; invalid input: exit 2, one line, nothing on stdout."""
    frames = tw.Encoder().encode(diffusion.Output(output=torch.zeros(2)))
    head = msgspec.msgpack.decode(frames[0])
    head[4] = msgspec.Raw(b"\x81\xa6output" + b"\x91" * 70 + b"\x01")
    blob = tmp_path / "deep.tw"
    blob.write_bytes(tw.join([msgspec.msgpack.encode(head)]))
    assert main(["inspect", str(blob)]) == 2
    expected = f"diffusion.Output v1: nesting deeper than the limit of 64 - at `$.output{'[0]' * 64}`"
    assert capsys.readouterr() == ("", f"tensorwire: {expected}\n")
    with pytest.raises(tw.DecodeError) as caught:
        tw.Decoder(tw.builtins.REGISTRY).decode(tw.split(blob.read_bytes()))
    assert str(caught.value) == expected
