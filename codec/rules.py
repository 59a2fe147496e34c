"""What a message type's run-time contract says, as data, and the named validators: torch-free.

The schema compiler and code generator build these; ``tensorwire._contract`` checks messages
against them. Named validators are Python functions registered with ``register_validator`` under
``namespace.rule_name`` and listed in a schema's ``x-validators``. Validators also come as
plug-ins: the modules named by the ``tensorwire.validators`` entry-point group of the installed
distributions (the built-in types' ``tensorwire.builtins.validators`` among them) are imported the
first time a validator is registered or looked up.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeAlias

from tensorwire._timeouts import take_within
from tensorwire.errors import ValidationError

__all__ = [
    "Check",
    "CountCheck",
    "EachCheck",
    "GroupRule",
    "StructRules",
    "TensorCheck",
    "TreeCheck",
    "TupleCheck",
    "TypeInfo",
    "PLUGIN_WAIT",
    "VALIDATOR_ENTRY_POINTS",
    "Validator",
    "known_validators",
    "register_validator",
    "validator",
    "violation",
]


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """Identity of a message type: stable id, major version and schema fingerprint."""

    type_id: str
    version: int
    fingerprint: str


@dataclass(frozen=True, slots=True)
class TensorCheck:
    kind: str  # "tensor" or "ndarray"
    dtypes: tuple[str, ...] | None = None
    shape: tuple[int | str | None, ...] | None = None
    devices: tuple[str, ...] | None = None
    contiguous: bool | None = None


@dataclass(frozen=True, slots=True)
class TreeCheck:
    max_depth: int = 64
    json_only: bool = False


@dataclass(frozen=True, slots=True)
class EachCheck:
    """Apply ``inner`` to each element of a list/set (``array``), each map value (``map``) or a non-None value."""

    container: str  # "array", "map" or "nullable"
    inner: Check


@dataclass(frozen=True, slots=True)
class TupleCheck:
    items: tuple[Check | None, ...]


@dataclass(frozen=True, slots=True)
class GroupRule:
    rule: str  # "at_most_one_of" or "exactly_one_of"
    fields: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CountCheck:
    """At least ``minimum`` items in a set, or entries in a map, as decoded, then ``inner`` (None:
    nothing more). msgspec counts the wire's array or map, in which an item or a key may repeat:
    a repeat counts once in the set or map it makes."""

    minimum: int
    inner: Check | None = None


Check: TypeAlias = TensorCheck | TreeCheck | EachCheck | TupleCheck | CountCheck


@dataclass(frozen=True, slots=True)
class StructRules:
    type_name: str
    fields: tuple[tuple[str, Check], ...] = ()
    groups: tuple[GroupRule, ...] = ()
    validators: tuple[str, ...] = ()


Validator: TypeAlias = Callable[[Any], None]
VALIDATOR_ENTRY_POINTS = "tensorwire.validators"
"""The entry-point group whose entries name modules that register validators when imported."""
_VALIDATORS: dict[str, Validator] = {}
_NAME = re.compile(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*")  # as ``x-validators`` names them (fullmatch)
_LOADING = threading.RLock()  # held while the plug-ins load (an RLock: see ``take_within``)
_loaded = False
_loader: int | None = None  # the thread loading the plug-ins
PLUGIN_WAIT = 10.0
"""Seconds a lookup waits for another thread to load the plug-ins: past it, it goes on without
them (that thread may be waiting for a module this one is importing)."""


def _plugins(*, wait: bool = True) -> None:
    """Import the validator plug-ins (once, and first, so that a name of theirs is taken); one that
    fails to import is a ``ValueError`` naming its entry point, at every call until it imports.

    While one thread loads them, a lookup in another (``wait``) waits for them, up to
    ``PLUGIN_WAIT``, so that it does not miss a validator they register; a registration does not
    (it may come from a module another thread imports while the loading thread waits for that
    import)."""
    global _loaded, _loader
    if _loaded or _loader == threading.get_ident():  # the plug-ins register through this module while they load
        return
    if not take_within(_LOADING, PLUGIN_WAIT if wait else 0.0):
        return
    try:
        if _loaded:  # loaded while this thread waited
            return
        _loader = threading.get_ident()
        for entry in metadata.entry_points(group=VALIDATOR_ENTRY_POINTS):
            try:
                entry.load()
            except Exception as exc:
                raise ValueError(
                    f"entry point {entry.name!r} ({entry.value}) of group {VALIDATOR_ENTRY_POINTS!r} failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        _loaded = True
    finally:
        _loader = None
        _LOADING.release()


def register_validator(name: str) -> Callable[[Validator], Validator]:
    """Register a named rule (``namespace.rule_name``) that schemas may list in ``x-validators``;
    a name no schema can list, or one already registered to another function, is a ``ValueError``;
    a name that is not a ``str``, or a validator that is not callable or whose body a call does not run
    (an async or generator function), a ``TypeError``."""
    if not isinstance(name, str):
        raise TypeError(f"a validator's name must be a str, got {name!r}")
    if not _NAME.fullmatch(name):
        raise ValueError(f"a validator's name must be namespace.rule_name (lowercase letters, digits, _), got {name!r}")

    def wrap(fn: Validator) -> Validator:
        if not callable(fn):
            raise TypeError(f"the validator {name!r} must be callable, got {fn!r}")
        if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            shown = getattr(fn, "__qualname__", fn)
            raise TypeError(
                f"the validator {name!r} must be a plain function: {shown!r} is an async or generator function, "
                "whose body a call does not run (it would refuse nothing)"
            )
        _plugins(wait=False)
        held = _VALIDATORS.get(name)
        if held is not None and held is not fn:
            raise ValueError(
                f"a validator named {name!r} is already registered ({held.__module__}.{held.__qualname__})"
            )
        _VALIDATORS[name] = fn
        return fn

    return wrap


def known_validators() -> frozenset[str]:
    """Names of every registered validator."""
    _plugins()
    return frozenset(_VALIDATORS)


def validator(name: str) -> Validator | None:
    """The validator registered as ``name``, if any."""
    _plugins()
    return _VALIDATORS.get(name)


def violation(type_name: str, rule: str, message: str) -> ValidationError:
    """The error a named validator raises: ``<type>: rule <RULE>: <message>``."""
    return ValidationError(message, type_id=type_name, rule=rule)
