"""The Python source of the values a generated module holds: a scalar's literal, a string's (in
double quotes, a character past U+FFFF as ``\\U``), rule data (frozen dataclasses, tuples) broken
over lines past ``WIDTH``, a tree value's, and a docstring that holds exactly its text (quotes,
backslashes and controls escaped), each as ruff format writes it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

__all__ = ["WIDTH", "render_value"]

WIDTH = 120


def render_value(value: Any, indent: int = 0, prefix: int = 0) -> str:
    """Python literal of rule data (frozen dataclasses, tuples, scalars), broken over lines past ``WIDTH``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [
            f"{f.name}={render_value(getattr(value, f.name), indent + 4, indent + 5 + len(f.name))}"
            for f in dataclasses.fields(value)
            if getattr(value, f.name) != f.default
        ]
        opener, closer = f"{type(value).__name__}(", ")"
    elif isinstance(value, tuple):
        parts = [render_value(v, indent + 4, indent + 4) for v in value]
        opener, closer = "(", ",)" if len(value) == 1 else ")"
    elif isinstance(value, str):
        return _python_string(value)
    else:
        return repr(value)
    flat = opener + ", ".join(parts) + closer
    if prefix + len(flat) <= WIDTH - 1 and "\n" not in flat:
        return flat
    pad = " " * (indent + 4)
    return opener + "\n" + "".join(f"{pad}{p},\n" for p in parts) + " " * indent + ")"


def _literal(value: Any) -> str:
    """Python source of a scalar, strings in double quotes as the formatter writes them."""
    return _python_string(value) if isinstance(value, str) else repr(value)


_ESCAPE = re.compile(r"\\(?:u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|.)")  # one escape of JSON text


def _python_string(text: str) -> str:
    """``text`` as a Python string literal in double quotes: JSON's escapes, but a character past
    U+FFFF as ``\\U`` (JSON writes it as a surrogate pair, which Python reads as two lone
    surrogates: no string the schema holds, and no UTF-8 can carry them)."""
    return _ESCAPE.sub(_astral, json.dumps(text))


def _astral(match: re.Match[str]) -> str:
    if match.group(1) is None:
        return match.group()  # any other escape, an escaped backslash included, as it is
    high, low = int(match.group(1), 16), int(match.group(2), 16)
    return f"\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
"""Characters a docstring holds escaped: control characters, and those an editor shows otherwise
than Python reads them (bidirectional controls, which can reorder what a line shows: "trojan
source"; line separators, which an editor breaks a line at and Python does not)."""


def _docstring(text: str) -> str:
    """``text`` as a docstring holding exactly it: backslashes, quotes that would end it (three in
    a row, or one at its end) and ``_CONTROL`` characters (NUL, which Python source cannot hold;
    CR, which it reads as a newline; a bidirectional override) escaped."""
    body = text.replace("\\", "\\\\")
    inner = body.rstrip('"')
    body = inner.replace('"""', '\\"\\"\\"') + '\\"' * (len(body) - len(inner))
    body = _CONTROL.sub(_escape, body)
    lines = body.split("\n")
    if len(lines) == 1 and len(lines[0]) + 10 <= WIDTH:
        return f'    """{lines[0]}"""'
    indented = "\n".join(f"    {line}" if line else "" for line in lines)
    return f'    """{indented.lstrip()}\n    """'


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _tree_literal(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_python_string(k)}: {_tree_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_tree_literal(v) for v in value) + "]"
    return _literal(value)
