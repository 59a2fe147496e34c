"""Deliberately broken decoders, so a test can prove the fuzzer sees what it claims to see.

``install(kinds, decode, key)`` returns a wrapped decode function (and for ``no-capability`` patches
the control page's proof away in this worker). ``key()`` is a number derived from the case being
decoded as it was generated (before its names, pids and handles were bound in this run: those bytes
differ from run to run, e.g. when a pid gains a digit). Kinds (comma-separated):

- ``type-error``: raises ``TypeError`` on cases whose key is 3 mod 7;
- ``no-capability``: every capability proves (claims of forged handles succeed);
- ``crash``: kills the worker with SIGSEGV on inputs whose frame 0 holds the int 2**64 - 1 (no pid
  or name decides it, so the same cases crash in every run);
- ``leak-fd``: leaks an fd of /dev/null on cases whose key is even;
- ``leak-segment``: leaks a memfd named like this worker's segments on cases whose key is 1 mod 5.

Every trigger depends on the case alone, so a saved case reproduces it.
"""

from __future__ import annotations

import hmac
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from tensorwire.transports import _one_shot_page, _page

__all__ = ["KINDS", "install"]

KINDS = ("type-error", "no-capability", "crash", "leak-fd", "leak-segment")
Decode = Callable[[Sequence[Any]], Any]
_LEAKED: list[int] = []
_MAX_UINT = b"\xcf" + b"\xff" * 8  # msgpack of 2**64 - 1


def _without_proof() -> None:
    """Every hand-over's check passes in this process (the transport's claim proves nothing)."""
    for module in (_page, _one_shot_page):  # where a mapped page's and a one-shot page's checks look it up
        if hasattr(module, "_refusal"):
            setattr(module, "_refusal", lambda *args, **kwargs: None)  # noqa: B010
        else:  # a later layout of the module: at least the comparison always succeeds
            setattr(hmac, "compare_digest", lambda a, b: True)  # noqa: B010


def install(kinds: str, decode: Decode, key: Callable[[], int]) -> Decode:
    """``decode`` broken in the ways ``kinds`` names."""
    chosen = {k for k in kinds.split(",") if k}
    unknown = chosen - set(KINDS)
    if unknown:
        raise ValueError(f"unknown sabotage {sorted(unknown)}; known: {', '.join(KINDS)}")
    if "no-capability" in chosen:
        _without_proof()

    def broken(frames: Sequence[Any]) -> Any:
        number = key()
        if "crash" in chosen and frames and _MAX_UINT in bytes(frames[0]):
            os.kill(os.getpid(), signal.SIGSEGV)
        if "type-error" in chosen and number % 7 == 3:
            raise TypeError("sabotaged decoder")
        if "leak-fd" in chosen and number % 2 == 0:
            _LEAKED.append(os.open(os.devnull, os.O_RDONLY))
        if "leak-segment" in chosen and number % 5 == 1:
            _LEAKED.append(os.memfd_create(f"tw-{os.getpid()}-{'f' * 32}-{len(_LEAKED):x}"))
        return decode(frames)

    return broken
