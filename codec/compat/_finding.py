"""A compatibility finding: one schema change, the rule it falls under, whom it breaks and where it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensorwire.errors import Location

__all__ = ["Finding"]

_GONE = {"FIELD_DELETED", "FIELD_DELETED_OPTIONAL", "TYPE_DELETED"}  # located in the old schemas


@dataclass(frozen=True)
class Finding:
    """One change and the rule it falls under: whom it breaks (``side``), where it is in the schema
    file (``pointer``) and in the old and new schemas (``old_location``, ``new_location``)."""

    rule: str
    severity: str
    side: str
    message: str
    type_id: str
    version: int
    pointer: str
    old_location: Location | None  # in the old schemas
    new_location: Location | None  # in the new schemas
    suppressed: str | None = None  # the x-compat-ignore reason, if suppressed

    @property
    def old(self) -> str | None:
        """``old_location`` as ``file:line:col``."""
        return None if self.old_location is None else str(self.old_location)

    @property
    def new(self) -> str | None:
        """``new_location`` as ``file:line:col``."""
        return None if self.new_location is None else str(self.new_location)

    @property
    def location(self) -> Location | None:
        """Where to point a reader: the old file for something that is gone, else the new one."""
        if self.rule in _GONE:
            return self.old_location or self.new_location
        return self.new_location or self.old_location

    @property
    def where(self) -> str:
        """``location`` as ``file:line:col`` ("" if there is none)."""
        location = self.location
        return "" if location is None else str(location)

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "side": self.side,
            "message": self.message,
            "type_id": self.type_id,
            "version": self.version,
            "pointer": self.pointer,
            "old": self.old,
            "new": self.new,
            "suppressed": self.suppressed,
        }
