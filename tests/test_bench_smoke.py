"""The benchmark harness runs end to end (tiny sizes, a few modes) and reports sane rows."""

from __future__ import annotations

import io
import os

import pytest

from tools.bench.__main__ import render, run
from tools.bench.modes import BareZeroCopy, PickleInband, TinyMessage, TwDefault, TwPoolZeroCopy


def test_bench_runs_and_compares_against_peers_and_floors() -> None:
    names = [TwDefault.name, TwPoolZeroCopy.name, PickleInband.name, TinyMessage.name, BareZeroCopy.name]
    before = set(os.listdir("/dev/shm"))
    results = run([4096, 2**20], 0.1, names, log=io.StringIO())  # a receiver that got wrong data raises
    assert set(os.listdir("/dev/shm")) <= before  # the floors' segments are gone too
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


def test_the_command_line_passes_every_option_to_the_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from codec.cli import main

    floor = TinyMessage.name
    assert main(["bench", "--json", "--quick", "--sizes", "4K", "--modes", floor]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {row["mode"] for row in results["rows"]} == {floor, "floor: np.copyto (warm)"}
    with pytest.raises(SystemExit) as info:
        main(["bench", "--modes", "carrier pigeon"])  # the benchmark's own usage error, not the CLI's
    assert info.value.code == 2


@pytest.mark.parametrize("spin", [False, True])
def test_the_stage_profile_times_both_sides_of_a_transfer(spin: bool) -> None:
    from tools.bench.stages import measure

    medians = measure(64 * 1024, count=20, spin=spin)
    assert {"sender: encode, total", "receiver: decode, total", "encode: export", "decode: import buffers"} <= set(
        medians
    )
    assert all(micros > 0 for micros in medians.values())
    assert medians["encode: export"] < medians["sender: encode, total"]  # a stage is part of its total
    assert medians["decode: import buffers"] < medians["receiver: decode, total"]


def test_the_idle_probe_times_work_after_each_pause() -> None:
    from tools.bench.idle import measure

    rows = measure(mib=1, rounds=2, pauses=[0.0, 0.002])
    assert [row["pause_s"] for row in rows] == [0.0, 0.002]
    for row in rows:
        assert set(row) == {"pause_s", "loop_us", "write_ns_per_page", "tensorwire_decode_us", "msgspec_decode_us"}
        assert all(value > 0 for key, value in row.items() if key != "pause_s")
