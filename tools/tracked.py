"""The repository's tracked files, copied elsewhere (to build or install from what git holds)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["REPO", "tracked_copy"]

REPO = Path(__file__).resolve().parent.parent


def tracked_copy(dest: Path) -> None:
    """Copy the files git tracks into ``dest`` (or the working tree without build output when git
    is not there); a tracked file deleted in the working tree is left out."""
    try:
        names = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
        ).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        ignore = shutil.ignore_patterns(".git", ".venv*", "build", "*.egg-info", "__pycache__", ".*_cache")
        shutil.copytree(REPO, dest, ignore=ignore, dirs_exist_ok=True)
        return
    for name in filter(None, names):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
