"""The project's configuration: ``tensorwire.toml``, or ``[tool.tensorwire]`` in ``pyproject.toml``.

Found from the current directory upwards (the first directory with either file; there
``tensorwire.toml`` wins). Paths are relative to that file's directory. Every key is optional::

    schemas = "schemas"              # the schema directory (gen, schemas, compat, lint, golden record)
    out = "mypkg/messages"           # the generated package (gen)
    registry = "__init__"            # the module of ``out`` that holds REGISTRY (gen)
    golden = "tests/golden"          # the golden fixture directory (golden record)

    [compat]                         # ([tool.tensorwire.compat] in pyproject.toml)
    mode = "full"                    # backward, forward, full, none
    fail-on = "error"                # error, warning
    ignore = [{rule = "FIELD_DELETED", type = "t.Thing", reason = "no reader left"}]

    [lint]                           # ([tool.tensorwire.lint] in pyproject.toml)
    disable = ["FIELD_DESCRIPTION"]  # rules turned off (tensorwire lint --list-rules)
    ignore = [{rule = "TYPE_PASCAL_CASE", file = "legacy/*"}]  # off for files of the schema directory

Command-line flags override the file (``lint --disable`` adds to ``disable``). An unknown key, a
value of the wrong type or an ignore without a reason is a ``ConfigError`` naming the file and the
key (an unknown rule ID too, when the command that uses the rules reads it), and so is a file another user
owns: the search goes up through directories others may write to (``/tmp``), and a planted file
would choose where ``gen`` writes (refused before it is read as TOML; another user's
``pyproject.toml`` that does not name tensorwire is passed over). Only a regular file of at most
``MAX_FILE_BYTES`` is read (a FIFO or a device is refused unread, and the search stops at it rather
than looking past it), and one with a dotted key of more than ``MAX_KEY_PARTS`` parts is refused
before Python's TOML reader takes it.
"""

from __future__ import annotations

import os
import re
import reprlib
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorwire._files import as_text, open_regular, read_at
from tensorwire.errors import CodecError, printable

__all__ = [
    "CONFIG_FILE",
    "MAX_FILE_BYTES",
    "MAX_KEY_PARTS",
    "CompatIgnore",
    "Config",
    "ConfigError",
    "LintIgnore",
    "find_config",
    "load_config",
]

CONFIG_FILE = "tensorwire.toml"
MAX_FILE_BYTES = 1024 * 1024  # the largest configuration file read (a pyproject.toml included)
MAX_KEY_PARTS = 32  # the most parts of one dotted key or table name read (Python's TOML reader takes
# time and memory growing with their square: 20 KiB of one key of 8,000 parts took 250 MiB)
_DOTTED = re.compile(
    rf"""(?<![\w"'.-])(?:(?:[\w-]++|"[^"\n]*+"|'[^'\n]*+')[ \t]*+\.[ \t]*+){{{MAX_KEY_PARTS}}}"""
)  # a key of more parts (or such a run in a string: no real file has one)
_MODES = ("backward", "forward", "full", "none")
_FAIL_ON = ("error", "warning")


class ConfigError(CodecError, ValueError):
    """The configuration file is invalid (names the file and the key)."""


@dataclass(frozen=True, slots=True)
class CompatIgnore:
    """A compat finding to accept: its rule, optionally only for one type id, and why."""

    rule: str
    reason: str
    type: str | None = None


@dataclass(frozen=True, slots=True)
class LintIgnore:
    """A lint rule turned off for the files (relative to the schema directory) matching ``file``."""

    rule: str
    file: str


@dataclass(frozen=True, slots=True)
class Config:
    """What the file says (paths made absolute); None where it says nothing."""

    path: Path
    schemas: Path | None = None
    out: Path | None = None
    registry: str | None = None
    golden: Path | None = None
    mode: str | None = None
    fail_on: str | None = None
    ignore: tuple[CompatIgnore, ...] = field(default=())
    lint_disable: tuple[str, ...] = field(default=())
    lint_ignore: tuple[LintIgnore, ...] = field(default=())

    def key(self, name: str) -> str:
        """How the file spells key ``name`` (``tool.tensorwire.`` before it in ``pyproject.toml``)."""
        return f"tool.tensorwire.{name}" if self.path.name == "pyproject.toml" else name


def find_config(start: Path | None = None) -> Config | None:
    """The configuration of ``start`` (default: the current directory) or its nearest parent that has one.

    A name that is there is read as ``load_config`` reads it: one that is not a regular file (a FIFO,
    a directory, a dangling link) is a ``ConfigError``, not passed over for a parent's file."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        own = directory / CONFIG_FILE
        if os.path.lexists(own):
            return load_config(own)
        project = directory / "pyproject.toml"
        if os.path.lexists(project):
            config = load_config(project)
            if config is not None:
                return config
    return None


def load_config(path: Path) -> Config | None:
    """The configuration in ``path`` (None for a ``pyproject.toml`` without ``[tool.tensorwire]``)."""
    project = path.name == "pyproject.toml"
    try:
        link = os.lstat(path)
        with open_regular(path, MAX_FILE_BYTES) as (fd, size):
            owner = os.fstat(fd).st_uid  # of what is read, not of what the name holds a moment later
            text = as_text(read_at(fd, 0, size))
        if owner != os.geteuid() or (stat.S_ISLNK(link.st_mode) and link.st_uid != os.geteuid()):
            if project and "tensorwire" not in text:  # another's project file with no word of us: passed
                return None  # over (before anything reads it)
            _refuse_others(path, link, owner)
        deep = _DOTTED.search(text)
        if deep is not None:
            line = text.count("\n", 0, deep.start()) + 1
            raise ConfigError(f"{path}:{line}: a dotted key or table name of more than {MAX_KEY_PARTS} parts")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"{path}: cannot read it: {why}") from None
    except RecursionError:  # tomllib reads nested arrays and inline tables by recursion
        raise ConfigError(f"{path}: cannot read it: arrays or inline tables nested too deeply") from None
    table: Any = data
    where = ""
    if project:
        table = data.get("tool", {}).get("tensorwire") if isinstance(data.get("tool"), dict) else None
        if table is None:
            return None
        where = "tool.tensorwire."
    reader = _Reader(path, where)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [{where.rstrip('.') or 'top level'}] must be a table")
    reader.known(table, ("schemas", "out", "registry", "golden", "compat", "lint"), "")
    compat = table.get("compat", {})
    if not isinstance(compat, dict):
        raise ConfigError(f"{path}: {where}compat must be a table")
    reader.known(compat, ("mode", "fail-on", "ignore"), "compat.")
    lint = table.get("lint", {})
    if not isinstance(lint, dict):
        raise ConfigError(f"{path}: {where}lint must be a table")
    reader.known(lint, ("disable", "ignore"), "lint.")
    return Config(
        path=path,
        schemas=reader.path(table, "schemas"),
        out=reader.path(table, "out"),
        registry=reader.text(table, "registry"),
        golden=reader.path(table, "golden"),
        mode=reader.choice(compat, "mode", _MODES, "compat."),
        fail_on=reader.choice(compat, "fail-on", _FAIL_ON, "compat."),
        ignore=reader.ignores(compat.get("ignore", [])),
        lint_disable=reader.names(lint.get("disable", []), "lint.disable"),
        lint_ignore=reader.lint_ignores(lint.get("ignore", [])),
    )


def _refuse_others(path: Path, link: os.stat_result, owner: int) -> None:
    """The ``ConfigError`` of a file another user owns, or of a link another user made (it would
    pick which of this user's files is read), raised before the file is read as TOML."""
    if stat.S_ISLNK(link.st_mode) and link.st_uid != os.geteuid():
        raise ConfigError(f"{path}: a link owned by uid {link.st_uid}, not by this user: not read (move or remove it)")
    raise ConfigError(f"{path}: owned by uid {owner}, not by this user: not read (move or remove it)")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 80, 80


def _shown(value: Any) -> str:
    """``value`` as an error shows it: its ``repr``, cut short (a value the file nests thousands
    of levels deep through dotted keys, which ``repr`` cannot write, or one of megabytes)."""
    return _REPR.repr(value)


class _Reader:
    """Typed reads of one file's keys, each error naming the file and the key."""

    def __init__(self, path: Path, where: str) -> None:
        self.file, self.where = path, where

    def error(self, key: str, problem: str) -> ConfigError:
        """The error ``problem`` at ``key``, whose characters a terminal would act on (a key the
        file spells with escapes: ESC, a bidirectional override) are shown escaped."""
        return ConfigError(f"{self.file}: {self.where}{printable(key)}: {problem}")

    def known(self, table: dict[str, Any], keys: tuple[str, ...], prefix: str) -> None:
        for key in table:
            if key not in keys:
                raise self.error(f"{prefix}{key}", f"unknown key; known: {', '.join(keys)}")

    def text(self, table: dict[str, Any], key: str, prefix: str = "") -> str | None:
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise self.error(f"{prefix}{key}", f"expected a non-empty string, got {_shown(value)}")
        return value

    def path(self, table: dict[str, Any], key: str) -> Path | None:
        value = self.text(table, key)
        if value is not None and "\0" in value:  # no file system call takes it
            raise self.error(key, f"expected a path, got {_shown(value)}: a path holds no NUL character")
        return None if value is None else self.file.parent / value

    def choice(self, table: dict[str, Any], key: str, options: tuple[str, ...], prefix: str) -> str | None:
        value = self.text(table, key, prefix)
        if value is not None and value not in options:
            raise self.error(f"{prefix}{key}", f"expected one of {', '.join(options)}, got {_shown(value)}")
        return value

    def ignores(self, entries: Any) -> tuple[CompatIgnore, ...]:
        if not isinstance(entries, list):
            raise self.error("compat.ignore", f"expected an array of tables, got {_shown(entries)}")
        out = []
        for i, entry in enumerate(entries):
            key = f"compat.ignore[{i}]"
            if not isinstance(entry, dict):
                raise self.error(key, f"expected a table {{rule, reason[, type]}}, got {_shown(entry)}")
            self.known(entry, ("rule", "reason", "type"), f"{key}.")
            rule, reason = self.text(entry, "rule", f"{key}."), self.text(entry, "reason", f"{key}.")
            if rule is None or reason is None:
                raise self.error(key, "needs a rule and a reason (why the break is accepted)")
            out.append(CompatIgnore(rule, reason, self.text(entry, "type", f"{key}.")))
        return tuple(out)

    def names(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(key, f"expected an array of rule IDs, got {_shown(value)}")
        return tuple(value)

    def lint_ignores(self, entries: Any) -> tuple[LintIgnore, ...]:
        if not isinstance(entries, list):
            raise self.error("lint.ignore", f"expected an array of tables, got {_shown(entries)}")
        out = []
        for i, entry in enumerate(entries):
            key = f"lint.ignore[{i}]"
            if not isinstance(entry, dict):
                raise self.error(key, f"expected a table {{rule, file}}, got {_shown(entry)}")
            self.known(entry, ("rule", "file"), f"{key}.")
            rule, pattern = self.text(entry, "rule", f"{key}."), self.text(entry, "file", f"{key}.")
            if rule is None or pattern is None:
                raise self.error(key, "needs a rule and a file (a path or pattern relative to the schema directory)")
            out.append(LintIgnore(rule, pattern))
        return tuple(out)
