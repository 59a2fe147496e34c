"""A full /dev/shm, for real: shm exports fail cleanly (ENOSPC, before any copy, atomically).

The body (``kill_procs.full_shm_report``) runs in a child process under ``unshare -m`` with a
4 MiB tmpfs mounted over /dev/shm (the host's /dev/shm is never filled), leaving 256 KiB free;
it prints one JSON report, checked here case by case.
"""

from __future__ import annotations

import errno
import re
from typing import Any

import pytest

from tensorwire.transports._page_layout import CONTROL_BYTES, FREE
from tests.hostile import private_shm
from tests.hostile.kill_procs import BIG, LEFT, SMALL

_SEGMENT = r"tw-\d+-[0-9a-f]{32}-[0-9a-f]+"


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    parsed: dict[str, Any] = private_shm.report_from("tests.hostile.kill_procs")
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
