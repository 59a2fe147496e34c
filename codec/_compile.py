"""Straight-line functions built from generated source, for per-type work that runs on every message.

The source holds only names, indices and ranks: a field name is written in only when it is a plain
ASCII identifier and not a keyword (Python reads a name in source as its NFKC form: U+FB01 as
``fi``, another attribute), else it is read with ``getattr`` on a bound constant; every other value
is bound in the function's globals.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

__all__ = ["build", "read_field"]


def read_field(owner: str, name: str, slot: str, bound: dict[str, Any]) -> str:
    """An expression reading field ``name`` of the object named ``owner`` (``slot``: a name for
    the field's name in ``bound``, where it is not written into the source)."""
    if name.isascii() and name.isidentifier() and not keyword.iskeyword(name):
        return f"{owner}.{name}"
    bound[slot] = name
    return f"getattr({owner}, {slot})"


def build(lines: list[str], bound: dict[str, Any], name: str) -> Callable[..., Any]:
    """The function ``name`` that ``lines`` define, with ``bound`` as its globals."""
    exec("\n".join(lines), bound)  # the source holds only checked names, indices and ranks
    function: Callable[..., Any] = bound[name]
    return function
