"""Count the Python-level function calls one invocation of a callable makes.

    count_calls(lambda: decoder.decode(encoder.encode(msg)))

Counts ``sys.setprofile`` ``"call"`` events: every Python function, method, lambda and
comprehension entered, and every resumption of a generator (each ``next`` on a generator
expression counts once). Calls into C (builtins, msgspec, most of torch) are not counted, but
the Python functions they call back (hooks, ``__post_init__``) are. Warm the callable up first
if it does one-time work (caches, lazy imports) that should not be counted. The garbage collector
is run first and kept off during the call, so finalizers of other objects are never counted.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["count_calls"]


def count_calls(fn: Callable[[], object]) -> int:
    """The number of Python-level calls one ``fn()`` makes, not counting the call of ``fn`` itself.

    Only the calling thread is watched. Any profiler already set (``sys.getprofile``) is put back,
    and the collector is switched back on if it was on.
    """
    count = 0
    own = count_calls.__code__

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            caller = frame.f_back
            if caller is None or caller.f_code is not own:  # a frame entered from here is fn itself
                count += 1

    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
        if collecting:
            gc.enable()
    return count
