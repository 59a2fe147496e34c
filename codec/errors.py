"""The exception hierarchy of tensorwire.

Errors are data: each keeps the parts its message is made of as attributes and renders its text
from them, so a caller reads ``exc.path`` or ``exc.line`` instead of taking the text apart.

- ``SchemaError``: ``file``, ``line``, ``col`` (1-based), ``pointer`` (a JSON pointer; ``""`` is
  the document, shown as ``/``) and ``message``, each None where the error has no such part;
  ``errors`` is every problem found, each a ``SchemaProblem`` (the first one's parts are also on
  the error itself).
- ``DecodeError``, ``EncodeError``: ``message``, ``path`` (e.g. ``$.runner_outputs[0].step_index``;
  ``$`` is the message body, a map entry is ``.key``, ``["key"]`` or ``[key]``), ``type_id`` and
  ``version`` of the message.
- ``ValidationError``: ``message``, ``type_id`` (of the struct whose rule it breaks), ``path`` in
  that struct (e.g. ``$.tensor``), ``rule`` (a named validator's rule id) and ``where`` (the field
  as the text names it, e.g. ``media.Video.tensor``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CodecError",
    "CompatError",
    "DecodeError",
    "EncodeError",
    "Location",
    "SchemaError",
    "SchemaProblem",
    "TransportError",
    "ValidationError",
]

_LISTED = 5  # problems a SchemaError's text lists; the rest are counted
_LONGEST = 1000  # characters of an EncodeError's, DecodeError's or TransportError's message kept (a peer's
# value can be megabytes)
_QUOTED = 64  # characters of a peer's id or name that ``quoted`` keeps (a tensorwire segment name has 63 at most)


def printable(text: str) -> str:
    """``text`` with each character a terminal would act on (ESC, BEL, a bidirectional override)
    written as its escape (``\\x1b``): a schema file's name and keys are shown in errors."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def quoted(text: str, limit: int = _QUOTED) -> str:
    """``text`` quoted as Python writes a string, each character a terminal or a log reader would act
    on (a newline, ESC, a bidirectional override) written as its escape; of a longer one, its first
    ``limit`` characters and how long it was: a peer's sender id or segment name in an error or a
    log line."""
    if len(text) <= limit:
        return str.__repr__(text)
    return f"{str.__repr__(text[:limit])}... ({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class Location:
    """A place in a file: its path as shown, and the 1-based line and column where known."""

    file: str
    line: int | None = None
    col: int | None = None

    def __str__(self) -> str:
        if self.line is None or self.col is None:
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class SchemaProblem:
    """One problem of a schema file, shown as ``file:line:col: /pointer: message``."""

    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    pointer: str | None = None

    @property
    def location(self) -> Location | None:
        return None if self.file is None else Location(self.file, self.line, self.col)

    def __str__(self) -> str:
        parts = []
        if self.file is not None:
            parts.append(str(Location(self.file, self.line, self.col)))
        if self.pointer is not None:
            parts.append(printable(self.pointer) or "/")
        parts.append(self.message)
        return ": ".join(parts)


class CodecError(Exception):
    """Base class of every error raised by tensorwire."""


class SchemaError(CodecError):
    """A schema file or directory is invalid (names file, line:col, JSON pointer, expectation).

    ``SchemaError("text")`` is an error without a location; ``errors=`` gives several problems
    (the text lists the first five and counts the rest).
    """

    def __init__(
        self,
        message: str = "",
        *,
        file: str | None = None,
        line: int | None = None,
        col: int | None = None,
        pointer: str | None = None,
        errors: Iterable[SchemaProblem] = (),
    ) -> None:
        problems = tuple(errors) or (SchemaProblem(message, file, line, col, pointer),)
        first = problems[0]
        self.errors: tuple[SchemaProblem, ...] = problems
        self.message: str = first.message
        self.file: str | None = first.file
        self.line: int | None = first.line
        self.col: int | None = first.col
        self.pointer: str | None = first.pointer
        super().__init__(str(self))

    @property
    def location(self) -> Location | None:
        return self.errors[0].location

    def __str__(self) -> str:
        lines = [str(p) for p in self.errors[:_LISTED]]
        if len(self.errors) > _LISTED:
            lines.append(f"... and {len(self.errors) - _LISTED} more")
        return "\n".join(lines)


class ValidationError(CodecError, ValueError):
    """A message violates its schema's contract (constraints, tensor specs, named rules).

    Shown as ``<where>: [rule <RULE>: ]<message>``, ``where`` being the field as the rules name it
    (e.g. ``media.Media.metadata['k']``), else ``type_id``.
    """

    def __init__(
        self,
        message: str,
        *,
        type_id: str | None = None,
        path: str | None = None,
        rule: str | None = None,
        where: str | None = None,
    ) -> None:
        self.message = message
        self.type_id = type_id
        self.path = path
        self.rule = rule
        self.where = where
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = []
        head = self.where if self.where is not None else self.type_id
        if head:
            parts.append(head)
        if self.rule is not None:
            parts.append(f"rule {self.rule}")
        parts.append(self.message)
        return ": ".join(parts)


class _InMessage(CodecError, ValueError):
    """An error about one message: ``[<label>: ]<message>[ - at `<path>`]``. A message of more than
    1,000 characters (one quoting a value a peer sent, which may be megabytes) keeps its first ones
    and says how long it was."""

    def __init__(
        self, message: str, *, path: str | None = None, type_id: str | None = None, version: int | None = None
    ) -> None:
        self.message = message = _cut(message)
        self.path = path
        self.type_id = type_id
        self.version = version
        super().__init__(str(self))

    def _label(self) -> str | None:
        return self.type_id

    def __str__(self) -> str:
        label = self._label()
        head = "" if label is None else f"{label}: "
        return f"{head}{self.message}" + ("" if self.path is None else f" - at `{self.path}`")


class EncodeError(_InMessage):
    """A message cannot be encoded: a value it holds cannot travel (what is not a message type at
    all is a ``TypeError``, a usage error). Shown as ``<type_id>: <message> - at `<path>```."""


class DecodeError(_InMessage):
    """Bytes cannot be decoded into a message. Shown as ``<type_id> v<version>: <message> - at `<path>```."""

    def _label(self) -> str | None:
        if self.type_id is None or self.version is None:
            return self.type_id
        return f"{self.type_id} v{self.version}"


class TransportError(CodecError, OSError):
    """A transport failed to export, import or release a buffer. Its text (``strerror``) of more
    than 1,000 characters (one quoting a value a peer sent, a queue handle's sender id) keeps its
    first ones and says how long it was."""

    def __init__(self, *args: Any) -> None:
        if len(args) >= 2 and isinstance(args[1], str):
            args = (args[0], _cut(args[1]), *args[2:])
        super().__init__(*args)


def _cut(message: str) -> str:
    """``message``, or where it has more than 1,000 characters its first ones and how long it was."""
    if len(message) > _LONGEST:
        return f"{message[: _LONGEST - 40]}... (cut: {len(message)} characters)"
    return message


class CompatError(CodecError):
    """A compatibility check could not be carried out."""
