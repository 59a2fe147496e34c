"""A registry of message classes by type id and major version, and of the types nested in them.

A nested type (an object or enum of a schema's ``$defs``) is named ``<namespace>.<name>``, the
name being its ``$defs`` key for an object and its ``x-enum-name`` for an enum (each its class's
name): ``reg.type("rpc.RankStatus")``, ``reg.type("media.VideoColorModel")``. Where versions of a message define a
nested type of the same name differently, the name is the latest version's.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any, TypeAlias

import msgspec
import msgspec.inspect as mi

from tensorwire._type_tree import children
from tensorwire.errors import CodecError
from tensorwire.rules import TypeInfo

__all__ = ["MessageClass", "Registry", "UnknownTypeError"]

MessageClass: TypeAlias = type[Any]


class UnknownTypeError(CodecError, LookupError):
    """A type id or version the registry does not know."""


class Registry:
    """Message classes keyed by ``(type_id, version)``; ``type(id)`` gives the latest version."""

    def __init__(self, classes: Iterable[MessageClass]) -> None:
        self._by_id: dict[str, dict[int, MessageClass]] = {}
        self._by_fingerprint: dict[str, MessageClass] = {}
        if isinstance(classes, type):  # one class where an iterable of them is due
            raise TypeError(f"Registry takes an iterable of message classes, got the class {classes.__qualname__}")
        for cls in classes:
            info = getattr(cls, "__tw_type__", None)
            if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct) and isinstance(info, TypeInfo)):
                raise TypeError(f"Registry takes message classes (msgspec Structs with a __tw_type__), got {cls!r}")
            versions = self._by_id.setdefault(info.type_id, {})
            if info.version in versions and versions[info.version] is not cls:
                raise ValueError(f"{info.type_id} v{info.version} registered twice")
            versions[info.version] = cls
            self._by_fingerprint[info.fingerprint] = cls
        self._nested: dict[str, MessageClass] = {}  # schema name -> class, the latest versions' last
        for message in self:
            namespace = message.__tw_type__.type_id.rpartition(".")[0]
            struct = mi.type_info(message)
            assert isinstance(struct, mi.StructType)
            for field in struct.fields:
                _collect(field.type, namespace, self._nested, set())

    @classmethod
    def from_modules(cls, *modules: ModuleType) -> Registry:
        """Every message class (one with ``__tw_type__``) named in the modules' ``__all__``."""
        found = []
        for module in modules:
            for name in getattr(module, "__all__", ()):
                obj = getattr(module, name)
                if isinstance(obj, type) and "__tw_type__" in vars(obj):
                    found.append(obj)
        return cls(found)

    def type(self, type_id: str, version: int | None = None) -> MessageClass:
        """The class of ``type_id`` at ``version`` (latest by default), or of the nested type of
        that schema name (which has no version of its own)."""
        if not isinstance(type_id, str):
            raise TypeError(f"a type id must be a str, got {type_id!r}")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):  # True, 1.0: v1
            raise TypeError(f"a version must be an int, got {version!r}")
        versions = self._by_id.get(type_id)
        if versions is None:
            nested = self._nested.get(type_id)
            if nested is not None:
                if version is not None:
                    raise UnknownTypeError(f"{type_id} is a nested type: it has no version of its own")
                return nested
            known = ", ".join(sorted(self._by_id)) or "none"
            raise UnknownTypeError(f"unknown type id {type_id!r}; known types: {known}")
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            known_versions = ", ".join(f"v{v}" for v in sorted(versions))
            raise UnknownTypeError(f"unknown version {version} of {type_id}; known versions: {known_versions}")
        return versions[version]

    def nested_types(self) -> dict[str, MessageClass]:
        """Every nested struct and enum class by its schema name, sorted by name."""
        return dict(sorted(self._nested.items()))

    def by_fingerprint(self, fingerprint: str) -> MessageClass | None:
        """The class whose schema has this fingerprint, if any."""
        return self._by_fingerprint.get(fingerprint)

    def versions(self, type_id: str) -> list[int]:
        """Known versions of ``type_id``, ascending (empty if unknown)."""
        return sorted(self._by_id.get(type_id, {}))

    def infos(self) -> list[TypeInfo]:
        """Identity of every registered class, sorted by type id then version."""
        return [self._by_id[t][v].__tw_type__ for t in sorted(self._by_id) for v in sorted(self._by_id[t])]

    def __iter__(self) -> Any:
        return (self._by_id[t][v] for t in sorted(self._by_id) for v in sorted(self._by_id[t]))

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_id.values())

    def __repr__(self) -> str:
        return f"Registry({', '.join(f'{i.type_id} v{i.version}' for i in self.infos())})"


def _collect(t: Any, namespace: str, found: dict[str, MessageClass], seen: set[MessageClass]) -> None:
    """Put every struct and enum class reachable from ``t`` in ``found`` under its schema name."""
    if isinstance(t, mi.EnumType):
        found[f"{namespace}.{t.cls.__name__}"] = t.cls
        return
    if isinstance(t, mi.StructType):
        if t.cls in seen or "__tw_type__" in vars(t.cls):  # a message type is not nested: it is registered
            return
        seen.add(t.cls)
        rules = getattr(t.cls, "__tw_rules__", None)
        name = rules.type_name if rules is not None else f"{namespace}.{t.cls.__name__}"
        found[name] = t.cls
        namespace = name.rpartition(".")[0]  # its enums are of its own namespace
    for child in children(t):
        _collect(child, namespace, found, seen)
