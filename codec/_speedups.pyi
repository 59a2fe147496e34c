"""The shorter per-message paths of ``Encoder.encode`` and ``Decoder.decode``, compiled (``_speedups.c``)."""

from collections.abc import Callable, Sequence
from typing import Any

def one_encode(
    state: tuple[dict[type, tuple[Callable[[bytes], Any], int, bytes]], int, int, Callable[[Any], bytes]],
    message: Any,
    /,
) -> list[bytes] | None: ...
def plain_decode(
    state: tuple[dict[bytes, tuple[Any, ...]], int, int, Callable[[Any, type], None], list[Any]],
    frames: Sequence[Any],
    /,
) -> Any: ...
def count_openers(data: bytes | bytearray | memoryview, /) -> int: ...
