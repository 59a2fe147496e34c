"""A registry of message classes by type id and major version."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any, TypeAlias

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
        for cls in classes:
            info: TypeInfo = cls.__tw_type__
            versions = self._by_id.setdefault(info.type_id, {})
            if info.version in versions and versions[info.version] is not cls:
                raise ValueError(f"{info.type_id} v{info.version} registered twice")
            versions[info.version] = cls
            self._by_fingerprint[info.fingerprint] = cls

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
        """The class of ``type_id`` at ``version`` (latest by default)."""
        versions = self._by_id.get(type_id)
        if versions is None:
            known = ", ".join(sorted(self._by_id)) or "none"
            raise UnknownTypeError(f"unknown type id {type_id!r}; known types: {known}")
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            known_versions = ", ".join(f"v{v}" for v in sorted(versions))
            raise UnknownTypeError(f"unknown version {version} of {type_id}; known versions: {known_versions}")
        return versions[version]

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
