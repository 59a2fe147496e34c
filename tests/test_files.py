"""``tensorwire._files.read_regular``: a regular file, read to the size it had when opened."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tensorwire._files import read_regular
from tests.conftest import NOT_REGULAR, make_not_regular


def test_a_regular_file_is_read_whole_also_through_a_link(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100_000 + b"end")
    link = tmp_path / "link"
    link.symlink_to(path)
    assert read_regular(path) == read_regular(link) == bytearray(b"x" * 100_000 + b"end")
    assert read_regular(path, limit=100_003) == path.read_bytes()
    empty = tmp_path / "empty"
    empty.touch()
    assert read_regular(empty) == bytearray()


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_what_is_not_a_regular_file_is_refused_unread(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "f"
    make_not_regular(path, kind)  # a FIFO opens without blocking for a writer, then is refused
    with pytest.raises(OSError) as info:
        read_regular(path)
    assert (info.value.errno, info.value.strerror, info.value.filename) == (
        errno.EINVAL,
        "not a regular file",
        str(path),
    )


def test_a_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with path.open("wb") as file:
        file.truncate(1 << 40)  # sparse: reading it would take a TiB
    with pytest.raises(OSError) as info:
        read_regular(path, limit=1 << 20)
    assert (info.value.errno, info.value.strerror) == (errno.EFBIG, f"{1 << 40} bytes is over the limit of {1 << 20}")
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing")


@pytest.mark.parametrize(("seen", "want"), [(4, b"abcd"), (20, b"abcdefghij")], ids=["grew", "shrank"])
def test_only_what_the_file_held_when_opened_is_read(
    seen: int, want: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file another process grows after it was opened is not followed (its size then is read),
    and one that shrank ends the read early."""
    path = tmp_path / "f"
    path.write_bytes(b"abcdefghij")
    real = os.fstat

    def fstat(fd: int) -> Any:
        info = real(fd)
        return os.stat_result((info.st_mode, *info[1:6], seen, *info[7:]))

    monkeypatch.setattr(os, "fstat", fstat)
    assert read_regular(path) == bytearray(want)
