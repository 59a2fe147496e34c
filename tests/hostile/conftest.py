"""Fixtures of the hostile tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def directory() -> Iterator[Path]:
    """A private directory on /dev/shm's file system (removed after the test): nothing else on the
    machine can disturb it, and what a test counts there is its own."""
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="twtest-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
