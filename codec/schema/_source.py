"""Read one schema file: parse JSON, reject duplicate keys, and record where every value sits.

``SourceFile.position(pointer)`` gives ``(line, col)`` (1-based) of the value at a JSON pointer, or
of its key with ``key=True`` (``location`` the same with the file, ``where`` as text), so every
schema error can name the exact place in the file.
"""

from __future__ import annotations

import errno
import json
import math
import re
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorwire._files import read_text
from tensorwire.errors import Location, SchemaError, SchemaProblem

__all__ = ["SourceFile", "escape_pointer", "join_pointer", "read_source"]

_WS = re.compile(r"[ \t\r\n]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null|NaN|-?Infinity")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_FOLLOWED = "a symbolic link (schema files are read as regular files only, never through a link)"


def escape_pointer(token: str) -> str:
    """Escape one reference token for a JSON pointer (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def join_pointer(pointer: str, *tokens: str | int) -> str:
    """``pointer`` extended by ``tokens``."""
    return pointer + "".join("/" + escape_pointer(str(t)) for t in tokens)


@dataclass
class SourceFile:
    """A parsed schema file with value and key positions indexed by JSON pointer.

    The index is a tree of the file's values (node 0 its top value), each node found from its
    parent by its key or index, so it holds each key once: a table by pointer repeats every key
    above each value (a long key over many values made it the size of their product)."""

    path: str
    text: str
    data: Any
    _offsets: list[int] = field(default_factory=list)  # node -> offset of its value
    _key_offsets: dict[int, int] = field(default_factory=dict)  # node of an object's entry -> offset of its key
    _children: dict[tuple[int, str], int] = field(default_factory=dict)  # (node, key or index) -> node
    _parents: list[tuple[int, str]] = field(default_factory=list)  # node -> (its parent, its key or index)
    _blocks: tuple[array[int], array[int]] | None = field(default=None, repr=False, compare=False)

    def position(self, pointer: str, *, key: bool = False) -> tuple[int, int]:
        """``(line, col)`` of the value (or key) at ``pointer``; the nearest known ancestor otherwise."""
        if not self._offsets:
            return self._line_col(0)
        path = [0]  # the nodes of ``pointer`` the file has, from the top
        for token in pointer.split("/")[1:]:
            child = self._children.get((path[-1], token.replace("~1", "/").replace("~0", "~")))
            if child is None:
                break
            path.append(child)
        offset = self._offsets[path[-1]]
        if key:  # the key of the nearest entry of an object on the way, else the top value
            offset = next((self._key_offsets[n] for n in reversed(path) if n in self._key_offsets), self._offsets[0])
        return self._line_col(offset)

    def pointer(self, node: int) -> str:
        """The JSON pointer of ``node``."""
        tokens = []
        while node > 0:
            node, token = self._parents[node]
            tokens.append(escape_pointer(token))
        return "".join("/" + t for t in reversed(tokens))

    def node(self, parent: int, token: str) -> int:
        """A new node, the child of ``parent`` at ``token`` (-1: the top value)."""
        made = len(self._offsets)
        self._offsets.append(0)
        self._parents.append((parent, token))
        self._children[(parent, token)] = made
        return made

    def _line_col(self, offset: int) -> tuple[int, int]:
        """``(line, col)`` of ``offset``, reading the text from the start of its block only: each of
        a lint's findings once read the whole text before it (quadratic in a large file)."""
        if self._blocks is None:
            self._blocks = _newlines_before_blocks(self.text)
        counts, lasts = self._blocks
        start = offset - offset % _BLOCK
        line = counts[start // _BLOCK] + self.text.count("\n", start, offset) + 1
        newline = self.text.rfind("\n", start, offset)
        if newline < 0:
            newline = lasts[start // _BLOCK]
        return line, offset - newline

    def location(self, pointer: str, *, key: bool = False) -> Location:
        """This file and the ``position`` of the value (or key) at ``pointer``."""
        line, col = self.position(pointer, key=key)
        return Location(self.path, line, col)

    def where(self, pointer: str, *, key: bool = False) -> str:
        """``path:line:col`` of the value (or key) at ``pointer`` (``location`` as text)."""
        return str(self.location(pointer, key=key))

    def problem(self, pointer: str, message: str, *, key: bool = False) -> SchemaProblem:
        """The problem ``message`` at ``pointer``: ``file:line:col: /pointer: message``."""
        line, col = self.position(pointer, key=key)
        return SchemaProblem(message, self.path, line, col, pointer)

    def error(self, pointer: str, message: str, *, key: bool = False) -> SchemaError:
        """A ``SchemaError`` of the form ``file:line:col: /pointer: message``."""
        return SchemaError(errors=(self.problem(pointer, message, key=key),))


_BLOCK = 4096  # characters of a schema file's text after which ``position`` keeps a count of lines


def _newlines_before_blocks(text: str) -> tuple[array[int], array[int]]:
    """For each ``_BLOCK`` of ``text``: how many newlines come before it, and the offset of the last
    of them (-1: none)."""
    counts, lasts = array("q"), array("q")
    count, last = 0, -1
    for start in range(0, len(text) + 1, _BLOCK):
        counts.append(count)
        lasts.append(last)
        found = text.count("\n", start, start + _BLOCK)
        if found:
            count += found
            last = text.rfind("\n", start, start + _BLOCK)
    return counts, lasts


def read_source(path: Path, display: str, *, follow: bool = False) -> SourceFile:
    """Parse ``path`` (shown as ``display`` in errors) into a ``SourceFile``; a link there is
    followed only with ``follow`` (it could name any file), else a ``SchemaError``."""
    try:
        text = read_text(path, MAX_FILE_BYTES, follow=follow)
    except OSError as exc:
        why = _NOT_FOLLOWED if exc.errno == errno.ELOOP else exc.strerror
        raise SchemaError(f"cannot read schema file: {why}", file=display) from None
    except UnicodeDecodeError as exc:
        raise SchemaError(f"cannot read schema file: {exc}", file=display) from None

    repeats: list[bool] = []  # an object with a key twice: refused at its place by ``_index``

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen = dict(pairs)
        if len(seen) != len(pairs):
            repeats.append(True)
        return seen

    deep = _too_deep(text)
    if deep is not None:
        line = text.count("\n", 0, deep) + 1
        col = deep - (text.rfind("\n", 0, deep) + 1) + 1
        raise SchemaError(f"nested deeper than {MAX_NESTING} arrays and objects", file=display, line=line, col=col)
    try:
        data = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"invalid JSON: {exc.msg}", file=display, line=exc.lineno, col=exc.colno) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        long = _long_integer(text)
        if long is None:
            raise SchemaError(f"invalid JSON: {exc}", file=display) from None
        line = text.count("\n", 0, long.start()) + 1
        col = long.start() - (text.rfind("\n", 0, long.start()) + 1) + 1
        digits, limit = len(long.group().lstrip("-")), sys.get_int_max_str_digits()
        message = f"invalid JSON: an integer of {digits} digits (Python reads integers of at most {limit})"
        raise SchemaError(message, file=display, line=line, col=col) from None
    source = SourceFile(display, text, data)
    _index(text, _skip(text, 0), source.node(-1, ""), source, refuse_repeats=bool(repeats))
    _check_values(source)
    return source


def _check_values(source: SourceFile) -> None:
    """Refuse what Python's JSON reader takes but JSON has not: ``NaN``, ``Infinity`` and numbers
    too large for a double (read as infinite), and strings holding a lone surrogate (``"\\ud800"``,
    no Unicode character: no UTF-8 file can hold it)."""
    pending: list[tuple[int, Any]] = [(0, source.data)]  # (node, value)
    children = source._children
    while pending:
        node, value = pending.pop()
        if isinstance(value, float) and not math.isfinite(value):
            match = _SCALAR.match(source.text, source._offsets[node])
            token = match.group() if match else str(value)
            message = f"{token} is not a finite number (JSON numbers here are finite doubles)"
            raise source.error(source.pointer(node), message)
        if isinstance(value, str) and _SURROGATE.search(value):
            message = f"string {_escaped(value)} holds a lone surrogate, not a Unicode character"
            raise source.error(source.pointer(node), message)
        if isinstance(value, dict):
            for key, item in value.items():
                child = children[(node, key)]
                if _SURROGATE.search(key):
                    message = f"key {_escaped(key)} holds a lone surrogate, not a Unicode character"
                    raise source.error(source.pointer(child), message, key=True)
                pending.append((child, item))
        elif isinstance(value, list):
            pending.extend((children[(node, str(i))], item) for i, item in enumerate(value))


def _escaped(text: str, limit: int = 60) -> str:
    """``text`` as JSON writes it with ASCII only (a surrogate as ``\\udXXX``), cut at ``limit``."""
    shown = json.dumps(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + '..."'


MAX_FILE_BYTES = 16 * 1024 * 1024  # the largest schema file read: real ones are a few KiB
MAX_NESTING = 100  # levels of arrays and objects in one schema file: real schemas use a dozen
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _too_deep(text: str) -> int | None:
    """The offset of the first array or object nested past ``MAX_NESTING`` (None: there is none),
    found before anything recursive reads the file."""
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return match.start()
        elif token in "]}":
            depth -= 1
    return None


_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?', re.DOTALL)


def _long_integer(text: str) -> re.Match[str] | None:
    """The first integer of ``text`` (a JSON document) with more digits than Python converts."""
    limit = sys.get_int_max_str_digits()
    for match in _NUMBER.finditer(text):
        token = match.group()
        if token[0] != '"' and match.group(1) is None and match.group(2) is None:
            if limit and len(token.lstrip("-")) > limit:
                return match
    return None


def _skip(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _index(text: str, pos: int, node: int, source: SourceFile, *, refuse_repeats: bool = False) -> int:
    """Record the position of the value at ``pos`` as ``node``'s (and of its children); return the
    end offset. With ``refuse_repeats``, a key an object already has is a ``SchemaError`` at its
    second place."""
    source._offsets[node] = pos
    char = text[pos]
    if char == "{":
        pos = _skip(text, pos + 1)
        while text[pos] != "}":
            match = _STRING.match(text, pos)
            assert match is not None
            key = json.loads(match.group())
            child = source._children.get((node, key))
            if child is None:
                child = source.node(node, key)
            elif refuse_repeats:
                source._key_offsets[child] = pos
                raise source.error(source.pointer(child), f"invalid JSON: duplicate key {key!r}", key=True)
            source._key_offsets[child] = pos
            pos = _skip(text, match.end())
            pos = _skip(text, pos + 1)  # the colon
            pos = _skip(text, _index(text, pos, child, source, refuse_repeats=refuse_repeats))
            if text[pos] == ",":
                pos = _skip(text, pos + 1)
        return pos + 1
    if char == "[":
        pos = _skip(text, pos + 1)
        index = 0
        while text[pos] != "]":
            child = source.node(node, str(index))
            pos = _skip(text, _index(text, pos, child, source, refuse_repeats=refuse_repeats))
            index += 1
            if text[pos] == ",":
                pos = _skip(text, pos + 1)
        return pos + 1
    match = _STRING.match(text, pos) if char == '"' else _SCALAR.match(text, pos)
    assert match is not None
    return match.end()
