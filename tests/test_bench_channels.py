"""The ZeroMQ channel benchmark runs end to end in a tiny form and reports well-formed rows.

No performance figure is asserted: only the report's structure, positive times, and that the
run leaves no child process, shared-memory file or ipc socket folder behind.
"""

from __future__ import annotations

import contextlib
import glob
import math
import multiprocessing as mp
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import shm_left_by_spawned

pytest.importorskip("zmq")

from tools.bench.channels import (  # after the skip: the module needs pyzmq
    HOOKS,
    IPC,
    PICKLE,
    PICKLE_INBAND,
    RAW,
    SWEEP,
    TCP,
    TENSORWIRE,
    TENSORWIRE_ALLOCATED,
    VARIANTS,
    main,
    measure_copy_threshold,
    measure_rpc,
    measure_transfers,
    messages_per_sample,
    render,
    rounds_for,
    targets,
)

KiB = 1024
SIZES = [4 * KiB, 64 * KiB]


@pytest.fixture
def leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """A check that the test's spawned processes are gone and left no ``tw-<pid>-`` file in /dev/shm
    and no ipc folder of the benchmark in the temporary directory."""
    left = shm_left_by_spawned(monkeypatch)
    folders = set(glob.glob(os.path.join(tempfile.gettempdir(), "tw-bench-zmq-*")))

    def check() -> None:
        assert not mp.active_children()
        assert not left()
        assert set(glob.glob(os.path.join(tempfile.gettempdir(), "tw-bench-zmq-*"))) <= folders

    yield check


@contextlib.contextmanager
def channels_made_first(capfd: pytest.CaptureFixture[str]) -> Iterator[None]:
    """Fails if a channel of the benchmark, here or in a child it spawns, was made on a socket bound or
    connected already (its MAXMSGSIZE would not hold on that endpoint: the channel warns)."""
    late = "bound or connected already"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not [str(w.message) for w in caught if late in str(w.message)]
    assert late not in capfd.readouterr().err


def positive(*values: Any) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values)


def test_transfers_report_every_implementation_on_both_transports(
    leaves_nothing: Callable[[], None], capfd: pytest.CaptureFixture[str]
) -> None:
    with channels_made_first(capfd):
        rows = measure_transfers(SIZES, (TCP, IPC), rounds=1, warmup=1)
    leaves_nothing()
    expected = {
        TCP: {TENSORWIRE, PICKLE, PICKLE_INBAND, HOOKS, RAW},
        IPC: {TENSORWIRE, TENSORWIRE_ALLOCATED, PICKLE, PICKLE_INBAND, HOOKS, RAW},
    }
    got = {(row["transport"], row["bytes"], row["implementation"]) for row in rows}
    assert got == {(kind, size, name) for kind, names in expected.items() for size in SIZES for name in names}
    assert len(rows) == len(got)
    for row in rows:
        assert positive(row["median_s"], row["min_s"], row["max_s"], row["gb_per_s"], row["x_raw"], row["tw_speedup"])
        assert row["min_s"] <= row["median_s"] <= row["max_s"]
        assert row["label"].startswith(row["implementation"]) and row["size"] in {"4 KiB", "64 KiB"}
        if row["implementation"] == RAW:
            assert row["x_raw"] == 1
        if row["implementation"] == TENSORWIRE:
            assert row["tw_speedup"] == 1
    verdicts = targets(rows)
    assert len(verdicts) == 5 and all(v["measured"] is None and v["met"] is None for v in verdicts)
    results = {"transfers": rows, "targets": verdicts}
    text = render(results)
    assert text.count("\n| tcp |") == 10 and text.count("\n| ipc |") == 12 and text.count(": not measured") == 5


def test_targets_read_the_speed_up_over_the_peer() -> None:
    rows = [
        {"transport": TCP, "bytes": 64 * KiB * 1024, "implementation": RAW, "tw_speedup": 0.9},
        {"transport": TCP, "bytes": 64 * KiB * 1024, "implementation": PICKLE, "tw_speedup": 1.0},
        {"transport": TCP, "bytes": 64 * KiB * 1024, "implementation": PICKLE_INBAND, "tw_speedup": 2.5},
        {"transport": TCP, "bytes": 256 * KiB * 1024, "implementation": PICKLE_INBAND, "tw_speedup": 4.0},
    ]
    verdicts = {(v["transport"], v["bytes"], v["peer"]): v for v in targets(rows)}
    assert verdicts[TCP, 64 * KiB * 1024, RAW]["met"] is True
    assert verdicts[TCP, 64 * KiB * 1024, PICKLE_INBAND]["met"] is False
    assert verdicts[TCP, 64 * KiB * 1024, PICKLE_INBAND]["out_of_band"] == 1.0
    assert verdicts[TCP, 256 * KiB * 1024, PICKLE_INBAND]["met"] is True
    assert verdicts[TCP, 256 * KiB * 1024, PICKLE_INBAND]["out_of_band"] is None
    assert verdicts[IPC, 64 * KiB * 1024, RAW]["met"] is None
    assert (TCP, 64 * KiB * 1024, PICKLE) not in verdicts  # out-of-band pickle is shown, not a target
    text = render({"transfers": [], "targets": targets(rows)})
    assert "0.90x, met" in text and "2.50x, NOT met (against pickle-5 out-of-band: 1.00x)" in text
    assert "tcp 256 MiB: tensorwire >= 3x pickle in-band: 4.00x, met\n" in text


def test_copy_threshold_sweep_rows_and_crossover(leaves_nothing: Callable[[], None]) -> None:
    sweep = measure_copy_threshold(SIZES, rounds=1, warmup=0, burst_bytes=64 * KiB)
    leaves_nothing()
    assert {(row["bytes"], row["variant"]) for row in sweep["rows"]} == {(s, v) for s in SIZES for v in VARIANTS}
    for row in sweep["rows"]:
        assert positive(row["median_us"], row["min_us"], row["max_us"], row["gb_per_s"], row["x_copy"])
        assert row["messages"] >= 16
    assert set(sweep["crossover"]) == set(VARIANTS[1:])
    assert all(size is None or size in SIZES for size in sweep["crossover"].values())
    assert sweep["pyzmq_copy_threshold"] > 0
    text = render({"transfers": [], "targets": [], "copy_threshold": sweep})
    assert "beats copy=True" in text


def test_rpc_rows_and_target(leaves_nothing: Callable[[], None], capfd: pytest.CaptureFixture[str]) -> None:
    with channels_made_first(capfd):
        rpc = measure_rpc(calls=40, blocks=2, number=5)
    leaves_nothing()
    assert [row["implementation"] for row in rpc["rows"]] == [TENSORWIRE, RAW]
    for row in rpc["rows"]:
        assert row["calls"] == 40
        assert positive(row["p50_us"], row["p99_us"], row["block_min_us"], row["block_max_us"], row["calls_per_s"])
        assert row["p50_us"] <= row["p99_us"]
    assert positive(*rpc["codec_us"].values())
    assert positive(rpc["target"]["budget_us"], rpc["target"]["ratio"]) and rpc["target"]["met"] in (True, False)
    text = render({"transfers": [], "targets": [], "rpc": rpc})
    assert "tensorwire Client/Server" in text and "raw echo p50 + codec cost" in text


def test_schedule_and_usage_errors() -> None:
    assert [messages_per_sample(s) for s in (4 * KiB, 64 * KiB, 1024 * KiB)] == [32, 16, 1]
    assert rounds_for(4 * KiB) >= rounds_for(1024 * KiB * 1024) >= 1
    assert SWEEP[0] == 4 * KiB and SWEEP[-1] == 1024 * KiB
    for argv in (["--transports", "udp"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2


def test_the_copy_below_sweep_reports_both_channels_per_size(capfd: pytest.CaptureFixture[str]) -> None:
    from tools.bench.copy_below import measure

    with channels_made_first(capfd):
        rows = measure([64 * 1024, 1024 * 1024], rounds=1, seed=0)
    assert [size for size, _, _ in rows] == [64 * 1024, 1024 * 1024]
    assert all(copy_us > 0 and zero_us > 0 for _, copy_us, zero_us in rows)
