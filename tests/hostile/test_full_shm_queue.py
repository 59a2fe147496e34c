"""A queue export on a full /dev/shm: a TransportError (ENOSPC) naming the bytes, nothing left behind.

The body runs in a child process under ``unshare -m`` with a 4 MiB tmpfs mounted over /dev/shm
(the host's /dev/shm is never filled); it prints one report per case, checked here.
"""

from __future__ import annotations

import errno
import re
from typing import Any

import pytest

from tests.hostile import private_shm


@pytest.fixture(scope="module")
def reports() -> dict[str, dict[str, Any]]:
    return {r["case"]: r for r in private_shm.report_from("tests.hostile.queue_procs")}


CASES = [
    f"{strategy}-{path}-{check}"
    for strategy in ("file_descriptor", "file_system")
    for path in ("in_place", "snapshot", "numpy")
    for check in ("prechecked", "torch")
]


@pytest.mark.parametrize("case", CASES)
def test_a_full_shm_is_an_enospc_transport_error_naming_the_bytes(
    reports: dict[str, dict[str, Any]], case: str
) -> None:
    report = reports[case]
    assert report["error"] == "TransportError"
    assert report["errno"] == errno.ENOSPC
    if case.endswith("prechecked"):  # the free-space check, before torch is asked
        expected = r"\[Errno 28\] no room in /dev/shm for 1048576 bytes of a queue tensor \(\d+ bytes free\)"
    else:  # torch's own failure (as when /dev/shm fills after the check), converted
        expected = (
            r"\[Errno 28\] cannot put 1048576 bytes of a queue tensor in /dev/shm: unable to allocate shared "
            r"memory\(shm\) for file </torch_\d+_\d+_\d+>: No space left on device \(28\)"
        )
    assert re.fullmatch(expected, report["message"]), report["message"]


@pytest.mark.parametrize("case", CASES)
def test_nothing_is_left_in_shm_and_nothing_else_is_removed(reports: dict[str, dict[str, Any]], case: str) -> None:
    report = reports[case]
    if case.startswith("file_descriptor"):
        assert report["new_at_failure"] == []  # torch's half-made torch_<pid>_* file is gone at once
    else:  # file_system: the first buffer's storage has a file while it lives, and nothing more
        assert len(report["new_at_failure"]) <= 1
    assert report["left"] == []  # once everything is freed, nothing of the failed export stays
    assert report["gone"] == []  # a decoy torch_<pid>_* file and (file_system) a live tensor's file stay
    assert report["big_intact"]  # the sender's tensor is untouched and still private


@pytest.mark.parametrize("case", CASES)
def test_the_half_sent_message_is_discarded_as_stale_by_the_next(reports: dict[str, dict[str, Any]], case: str) -> None:
    report = reports[case]
    assert report["next_ok"] and report["buffered"] == 0
    assert any("discarding 1 stale tensor(s) of 1 older message(s) from sender" in line for line in report["log"])
