"""A full /dev/shm, for real: shm exports fail cleanly (ENOSPC, before any copy, atomically).

The body (``kill_procs.full_shm_report``) runs in a child process under ``unshare -m`` with a
4 MiB tmpfs mounted over /dev/shm (the host's /dev/shm is never filled), leaving 256 KiB free;
it prints one JSON report, checked here case by case.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.kill_procs import BIG, LEFT, SMALL
from transports.control import CONTROL_BYTES, FREE

REPO = Path(__file__).resolve().parents[2]
_MOUNT = "mount -t tmpfs -o size=4m tmpfs /dev/shm"
_SEGMENT = r"tw-\d+-[0-9a-f]{32}-[0-9a-f]+"


def _private_shm(command: str) -> subprocess.CompletedProcess[str]:
    """``command`` (a shell line) in a new mount namespace with a 4 MiB tmpfs on /dev/shm."""
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{_MOUNT} && {command}"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs over /dev/shm")
    probe = _private_shm("true")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs over /dev/shm (needs root or CAP_SYS_ADMIN): {probe.stderr.strip()}")
    code = "from tests.hostile.kill_procs import full_shm_report; full_shm_report()"
    run = _private_shm(f"exec {sys.executable} -c '{code}'")
    assert run.returncode == 0, run.stderr
    parsed: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return parsed


def _enospc(case: dict[str, Any], nbytes: int) -> None:
    """``case`` failed with a TransportError ENOSPC naming ``nbytes`` and /dev/shm."""
    assert case["error"] == "TransportError" and case["errno"] == errno.ENOSPC, case
    expected = rf"\[Errno 28\] cannot reserve {nbytes} bytes in /dev/shm for {_SEGMENT}: No space left on device"
    assert re.fullmatch(expected, case["message"]), case["message"]


def test_the_filler_left_less_than_the_big_buffer(report: dict[str, Any]) -> None:
    assert report["free"] <= LEFT < BIG


def test_a_one_shot_export_is_enospc_before_any_copy_leaving_nothing(report: dict[str, Any]) -> None:
    case = report["one_shot"]
    _enospc(case, CONTROL_BYTES + BIG)
    assert case["copied"] == [] and case["new"] == [] and case["left"] == []


def test_a_named_pool_past_its_budget_falls_back_to_a_one_shot_that_is_enospc(report: dict[str, Any]) -> None:
    case = report["named_past_budget"]
    _enospc(case, CONTROL_BYTES + BIG)  # the one-shot's size: the pool did not try to grow
    assert case["copied"] == [] and case["new"] == [] and case["slots"] == [] and case["left"] == []


def test_a_named_pool_growth_past_what_is_left_is_enospc_before_any_copy(report: dict[str, Any]) -> None:
    """The pool's budget as read before /dev/shm filled: the growth itself fails (its slot's size)."""
    case = report["named_growth"]
    _enospc(case, CONTROL_BYTES + report["size_class_big"])
    assert case["copied"] == [] and case["new"] == [] and case["slots"] == [] and case["left"] == []


@pytest.mark.parametrize("backing", ["memfd", "named"])
def test_a_failed_encode_hands_back_the_slot_of_its_earlier_buffer(report: dict[str, Any], backing: str) -> None:
    case = report[f"atomic_{backing}"]
    _enospc(case, CONTROL_BYTES + BIG)  # the big buffer, past the pool's budget, as a one-shot
    assert case["copied"] == [SMALL]  # the small one went to a slot; the big one was never copied
    assert [(s["state"], s["named"]) for s in case["slots"]] == [(FREE, backing == "named")]
    if backing == "memfd":
        assert case["new"] == []  # nothing at all in /dev/shm
    else:
        assert case["new"] == [case["slots"][0]["name"]]  # only the (free) slot the pool keeps
    assert case["left"] == []


def test_the_memfd_pool_is_not_bound_by_shm(report: dict[str, Any]) -> None:
    case = report["memfd_16mib"]
    assert case["handle"] == {"transport": "shm-slot", "memfd": True}
    assert case["ok"] and case["new"] == [] and case["free_unchanged"]


def test_a_receiver_reads_one_shots_from_a_full_shm(report: dict[str, Any]) -> None:
    case = report["read_when_full"]
    assert case["free"] == 0
    assert case["read"] == [{"borrow": False, "ok": True}, {"borrow": True, "ok": True}]
    assert case["left"] == []  # each was unlinked as it was read
