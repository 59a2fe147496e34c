"""Run code in a mount namespace of its own, with a small private tmpfs over /dev/shm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
_MOUNT = "mount -t tmpfs -o size=4m tmpfs /dev/shm"


def _run(command: str) -> subprocess.CompletedProcess[str]:
    """``command`` (a shell line) under ``unshare -m`` with a 4 MiB tmpfs on /dev/shm."""
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{_MOUNT} && {command}"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def report_from(module: str) -> Any:
    """What ``module.full_shm_report()`` prints as its last line (JSON), run on a private 4 MiB
    /dev/shm; the test is skipped where this machine does not allow such a mount."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs over /dev/shm")
    probe = _run("true")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs over /dev/shm (needs root or CAP_SYS_ADMIN): {probe.stderr.strip()}")
    code = f"from {module} import full_shm_report; full_shm_report()"
    run = _run(f"exec {sys.executable} -c '{code}'")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])
