"""The compiled helpers of the per-message paths (``tensorwire._speedups``, a C extension built
with the package where a compiler is found), or None: where the package was installed without
them, or where ``TENSORWIRE_PURE_PYTHON`` is set to ``1`` in the environment when tensorwire is
first imported. Without them the Python code of ``Encoder.encode`` and ``Decoder.decode`` takes
the same shorter paths, a little slower; every message gives the same frames, value or error
either way.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["SPEEDUPS"]


def _speedups() -> ModuleType | None:
    if os.environ.get("TENSORWIRE_PURE_PYTHON") == "1":
        return None
    try:
        from tensorwire import _speedups
    except ImportError:
        return None
    return _speedups


SPEEDUPS: ModuleType | None = _speedups()
"""``tensorwire._speedups``, or None where the Python code takes its paths."""
