"""Where a benchmark's processes run: two fixed CPUs, the same for every implementation it compares."""

from __future__ import annotations

import os

__all__ = ["two_cpus"]


def two_cpus() -> tuple[set[int], set[int]] | None:
    """Two different CPUs of those this process may use, each as a set for ``os.sched_setaffinity``:
    one for the driving (or sending) process, one for the other end; None with fewer than two.

    Pinning both ends the same way for every implementation keeps any of them from gaining or
    losing by where the scheduler happens to place its processes (each wake-up then crosses
    between the two CPUs).
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return ({allowed[0]}, {allowed[1]}) if len(allowed) >= 2 else None
