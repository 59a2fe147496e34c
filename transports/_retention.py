"""How many bytes a pool may keep cached: a retention policy read from the live system.

A pool asks ``budget(cached)`` before it grows (``cached``: the bytes it already holds). The
answer is the smallest of: a fixed cap; a fraction of what /dev/shm could hold (its free space
plus what the pool holds; for pools of named segments); a fraction of the host memory available
(for memfd pools, which /dev/shm's size does not bound, and pools whose pages are pinned, e.g.
CUDA-registered ones); and what keeps at least ``min_free_fraction`` of the host's memory free.
Telemetry that cannot be read counts as no room to grow (the conservative answer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Retention", "host_memory"]


def host_memory() -> tuple[int, int] | None:
    """(available, total) bytes of host memory from /proc/meminfo; None if it cannot be read."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                key, _, rest = line.partition(":")
                if key in ("MemAvailable", "MemTotal"):
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if len(fields) != 2:
        return None
    return fields["MemAvailable"], fields["MemTotal"]


@dataclass(frozen=True, slots=True)
class Retention:
    """Bounds on a pool's cached bytes: ``None`` disables a bound (``min_free_fraction`` 0 too); a
    fraction or cap of 0 allows nothing, and so does a policy with no bound left."""

    shm_fraction: float | None = 0.25
    host_fraction: float | None = None
    min_free_fraction: float = 0.0
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("shm_fraction", "host_fraction", "min_free_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.max_bytes is not None and self.max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {self.max_bytes}")

    def budget(self, directory: Path, cached: int) -> int:
        """The most bytes the pool may hold in ``directory`` when it already holds ``cached``."""
        if self.max_bytes is not None and self.host_fraction is None and not self.min_free_fraction:
            return self.max_bytes  # a fixed cap alone: no telemetry needed
        limits = [] if self.max_bytes is None else [self.max_bytes]
        if self.shm_fraction is not None:
            try:
                stats = os.statvfs(directory)
            except OSError:
                return 0
            limits.append(int((stats.f_bavail * stats.f_frsize + cached) * self.shm_fraction))
        if self.host_fraction is not None or self.min_free_fraction:
            memory = host_memory()
            if memory is None:
                return 0
            available, total = memory
            if self.host_fraction is not None:
                limits.append(int((available + cached) * self.host_fraction))
            limits.append(cached + available - int(total * self.min_free_fraction))
        return max(0, min(limits)) if limits else 0
