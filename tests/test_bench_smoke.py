"""The benchmark harness runs end to end (tiny sizes, a few modes) and reports sane rows."""

from __future__ import annotations

import gc
import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, shm_left_by_spawned
from tests.wire_helpers import segments_of
from tools.bench.__main__ import render, run
from tools.bench.modes import (
    BareOneCopy,
    BareZeroCopy,
    PickleInband,
    TinyMessage,
    TwDefault,
    TwPoolNamed,
    TwPoolZeroCopy,
    TwPoolZeroCopyNamed,
    TwQueue,
)


@pytest.fixture
def left_in_shm(monkeypatch: pytest.MonkeyPatch) -> Callable[[], set[str]]:
    """What the test's spawned processes (and the test itself) left in /dev/shm."""
    return shm_left_by_spawned(monkeypatch)


def test_bench_runs_and_compares_against_peers_and_floors(left_in_shm: Callable[[], set[str]]) -> None:
    names = [
        TwDefault.name,
        TwPoolZeroCopy.name,
        TwPoolNamed.name,
        TwPoolZeroCopyNamed.name,
        TwQueue.name,  # its queue must outlive the spawning of the processes that share it
        PickleInband.name,
        TinyMessage.name,
        BareZeroCopy.name,
        BareOneCopy.name,  # its receiver checks the values like a tensorwire mode's
    ]
    results = run([4096, 2**20], 0.1, names, log=io.StringIO())  # a receiver that got wrong data raises
    assert not left_in_shm()  # the named pool's slots and the floors' segments are gone too
    modes = {row["mode"] for row in results["rows"]}
    assert modes == {*names, "floor: np.copyto (warm)"}
    for row in results["rows"]:
        assert row["median_ms"] > 0 and row["p10_ms"] <= row["median_ms"] <= row["p90_ms"]
        assert row["best_peer"] == PickleInband.name
    text = render(results)
    assert "== 4 KiB (best peer: pickle-5 in-band, Pipe)" in text and "in process" in text
    cases = {r["case"] for r in results["in_process"]}
    assert {c.split(":")[0] for c in cases} == {"envelope", "16x16 tensor"}
    assert {"envelope: floor: header + body, no checks (msgspec)"} < cases
    assert {"16x16 tensor: floor: tensor to bytes, raw msgspec, bytes to tensor"} < cases


def test_unknown_mode_is_a_usage_error() -> None:
    from tools.bench.__main__ import main

    with pytest.raises(SystemExit) as info:
        main(["--modes", "carrier pigeon"])
    assert info.value.code == 2


def test_a_plot_without_matplotlib_is_a_usage_error_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    import tools.bench.__main__ as bench

    def not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the benchmark ran")

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "matplotlib" else find_spec(name))
    monkeypatch.setattr(bench, "run", not_run)
    with pytest.raises(SystemExit) as info:
        bench.main(["--plot", "out.png", "--sizes", "4K"])
    assert info.value.code == 2
    assert "--plot needs matplotlib, which the bench extra installs" in capsys.readouterr().err


def test_the_command_line_passes_every_option_to_the_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    from pathlib import Path

    import tensorwire.cli
    from tensorwire.cli import main

    if Path(tensorwire.cli.__file__).resolve().parent.parent != REPO:  # a wheel's tensorwire (make floor)
        assert main(["bench", "--quick"]) == 2
        assert "tensorwire: bench runs from a source checkout" in capsys.readouterr().err
        return

    floor = TinyMessage.name
    assert main(["bench", "--json", "--quick", "--interleave", "--sizes", "4K", "--modes", floor]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {row["mode"] for row in results["rows"]} == {floor, "floor: np.copyto (warm)"}
    with pytest.raises(SystemExit) as info:
        main(["bench", "--modes", "carrier pigeon"])  # the benchmark's own usage error, not the CLI's
    assert info.value.code == 2


def test_the_backing_comparison_runs_both_pools_interleaved_and_gives_a_verdict(
    left_in_shm: Callable[[], set[str]],
) -> None:
    from tools.bench.backing import compare, render

    results = compare([64 * 1024, 2**20], rounds=2, warmup=1)
    assert not left_in_shm()
    assert [(row["size"], row["kind"]) for row in results["rows"]] == [
        (size, kind) for size in ("64 KiB", "1 MiB") for kind in ("one copy", "pool-allocated")
    ]
    for row in results["rows"]:
        for backing in ("memfd", "named"):
            stats = row[backing]
            assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"]
        assert row["named_over_memfd"] == pytest.approx(row["named"]["median_ms"] / row["memfd"]["median_ms"])
    assert [v["deciding"] for v in results["verdicts"]] == [False, True]  # 1 MiB to 1 GiB decides
    assert results["memfd_stays_default"] == results["verdicts"][1]["within"]
    text = render(results)
    assert "== 64 KiB" in text and "== 1 MiB" in text
    assert text.count("verdict: memfd ") == 2 and "\ndefault: " in text


@pytest.mark.parametrize("spin", [False, True])
def test_the_stage_profile_times_both_sides_of_a_transfer(spin: bool) -> None:
    from tools.bench.stages import measure

    medians = measure(64 * 1024, count=20, spin=spin)
    stages = {"sender: encode, total", "receiver: decode, total", "encode: export", "decode: import buffers"}
    assert stages | {"encode: schema check (decode)"} <= set(medians)
    assert all(micros > 0 for micros in medians.values())
    assert medians["encode: export"] < medians["sender: encode, total"]  # a stage is part of its total
    assert medians["encode: schema check (decode)"] < medians["sender: encode, total"]
    assert medians["decode: import buffers"] < medians["receiver: decode, total"]


def test_the_idle_probe_times_work_after_each_pause() -> None:
    from tools.bench.idle import measure

    rows = measure(mib=1, rounds=2, pauses=[0.0, 0.002])
    assert [row["pause_s"] for row in rows] == [0.0, 0.002]
    for row in rows:
        assert set(row) == {"pause_s", "loop_us", "write_ns_per_page", "tensorwire_decode_us", "msgspec_decode_us"}
        assert all(value > 0 for key, value in row.items() if key != "pause_s")


def test_the_in_flight_probe_times_sends_behind_unread_messages() -> None:
    from tools.bench.in_flight import measure, render

    before = set(segments_of(os.getpid()))
    rows = measure([0, 4], size=64 * 1024, rounds=2, number=3, seed=0)
    gc.collect()
    assert set(segments_of(os.getpid())) <= before  # every message read, every pool closed
    assert [row["in_flight"] for row in rows] == [0, 4]
    assert rows[0]["ratio"] == 1.0 and rows[1]["ratio"] == rows[1]["median_us"] / rows[0]["median_us"]
    assert all(0 < row["min_us"] <= row["median_us"] <= row["max_us"] for row in rows)
    table = render(rows, 64 * 1024)
    assert "| messages in flight | one 64 KiB send + receive |" in table and "\n| 4 | " in table
    rows = measure([0, 3], size=64 * 1024, rounds=1, number=2, seed=0, one_shot=True)
    gc.collect()
    assert [row["in_flight"] for row in rows] == [0, 3] and set(segments_of(os.getpid())) <= before
    assert "| messages sent and read (one-shot segments) |" in render(rows, 64 * 1024, one_shot=True)
    rows = measure([0, 5], size=64 * 1024, rounds=2, number=3, seed=0, held=True)
    gc.collect()
    assert [row["in_flight"] for row in rows] == [0, 5] and set(segments_of(os.getpid())) <= before
    assert "| tensors the receiver keeps (each send grows the pool) |" in render(rows, 64 * 1024, held=True)


def test_the_in_flight_pipeline_sends_to_a_receiver_process() -> None:
    from tools.bench.in_flight import measure_pipeline, render_pipeline

    before = set(segments_of(os.getpid()))
    rows = measure_pipeline([1, 4], size=64 * 1024, rounds=2, number=6, seed=0)
    gc.collect()
    assert set(segments_of(os.getpid())) <= before  # the receiver is gone, every pool closed
    assert [row["in_flight"] for row in rows] == [1, 4] and rows[0]["slots"] == 1 and 1 <= rows[1]["slots"] <= 4
    assert all(0 < row["min_us"] <= row["median_us"] <= row["max_us"] and row["sender_cpu_us"] > 0 for row in rows)
    assert "| messages allowed in flight | one 64 KiB message |" in render_pipeline(rows, 64 * 1024)


@pytest.mark.parametrize(
    ("argv", "counts"),
    [(["--pipeline"], [1, 8, 64, 512]), ([], [0, 8, 64, 512]), (["--pipeline", "--in-flight", "2,3"], [2, 3])],
)
def test_the_in_flight_probe_runs_as_the_readme_shows_it(
    argv: list[str], counts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.bench.in_flight as probe

    asked: list[list[int]] = []

    def measured(windows: list[int], *args: object, **kwargs: object) -> list[dict[str, object]]:
        asked.append(list(windows))
        return []

    monkeypatch.setattr(probe, "measure_pipeline", measured)
    monkeypatch.setattr(probe, "measure", measured)
    monkeypatch.setattr(probe, "render_pipeline", lambda rows, size: "")
    monkeypatch.setattr(probe, "render", lambda rows, size, **kwargs: "")
    assert probe.main(argv) == 0
    assert asked == [counts]


@pytest.mark.parametrize("argv", [["--pipeline", "--in-flight", "0,8"], ["--in-flight", "x"], ["--in-flight", ""]])
def test_the_in_flight_probe_refuses_counts_it_cannot_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from tools.bench.in_flight import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "--in-flight takes counts of 0 or more (1 or more with --pipeline)" in capsys.readouterr().err


def test_the_threshold_sweep_answers_help_without_measuring(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tools.bench.threshold as threshold

    def measure_mode(*args: object) -> None:
        raise AssertionError("measured")

    monkeypatch.setattr(threshold, "measure_mode", measure_mode)
    with pytest.raises(SystemExit) as info:
        threshold.main(["--help"])
    assert info.value.code == 0 and "usage: python -m tools.bench.threshold" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        threshold.main(["--sizes", "4K"])
    assert info.value.code == 2


def test_the_readme_writer_replaces_the_bench_section_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tools.bench.readme import END, START, main

    results = REPO / "docs" / "bench.json"
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{START}\nold table\n{END}\nafter\n")
    assert main([str(results), str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"before\n{START}\n| size | mode | median ms |") and text.endswith(f"\n{END}\nafter\n")
    assert "old table" not in text
    plain = tmp_path / "NOTES.md"
    plain.write_text("no bench section\n")
    with pytest.raises(SystemExit) as info:
        main([str(results), str(plain)])
    assert info.value.code == 2 and plain.read_text() == "no bench section\n"
    assert f"{plain} has no {START} ... {END} section" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


_COMMANDS = ["backing", "channels", "copy_below", "cuda", "idle", "in_flight", "instructions", "readme"]
_COMMANDS += ["shm_roundtrip", "small", "stages", "threshold"]


@pytest.mark.parametrize("name", _COMMANDS)
def test_each_bench_command_answers_help_under_the_name_the_readme_runs_it_by(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    if name in ("channels", "copy_below"):
        pytest.importorskip("zmq")
    module = importlib.import_module(f"tools.bench.{name}")
    with pytest.raises(SystemExit) as info:
        module.main(["--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m tools.bench.{name} ")
