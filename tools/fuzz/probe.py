"""What a process holds: open fds, shared-memory segments (open or mapped), and its peak memory.

Only segments of this run count: memfds whose name carries one of the run's pids, and files in
the run's private directory. Nothing else on the machine can change the numbers.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["fd_count", "held_segments", "max_rss_mib", "named_segments"]

_MEMFD = "/memfd:"


def fd_count() -> int:
    """Open fds of this process (the listing's own fd not counted)."""
    return len(os.listdir("/proc/self/fd")) - 1


def _links() -> list[str]:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own fd, closed meanwhile
            pass
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6:
                links.append(fields[5].strip())
    return links


def held_segments(directory: Path, pids: list[int]) -> set[str]:
    """Segments this process has open or mapped: memfds named by one of ``pids``, files of ``directory``."""
    prefixes = tuple(f"tw-{pid}-" for pid in pids)
    root = f"{directory}/"
    names: set[str] = set()
    for link in _links():
        link = link.removesuffix(" (deleted)")
        if link.startswith(_MEMFD):
            name = link[len(_MEMFD) :]
            if name.startswith(prefixes):
                names.add(name)
        elif link.startswith(root):
            names.add(link[len(root) :])
    return names


def named_segments(directory: Path, pid: int) -> set[str]:
    """Names in ``directory`` created by ``pid`` (by the pattern ``tw-<pid>-...``)."""
    prefix = f"tw-{pid}-"
    try:
        return {n for n in os.listdir(directory) if n.startswith(prefix)}
    except OSError:
        return set()


def max_rss_mib() -> float:
    """Peak resident memory of this process, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
