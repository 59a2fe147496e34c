"""``Sealed``: the base of the objects that are immutable once built (``Encoder``, ``Decoder``)."""

from __future__ import annotations

from typing import Any, NoReturn, Self

__all__ = ["Sealed"]


class Sealed:
    """Attributes are set while ``__init__`` runs, until it sets ``_sealed`` (a slot of the
    subclass); none after. Nothing in the object can change, so a copy (``copy.copy``,
    ``copy.deepcopy``, of it or of anything holding it) is the object itself; pickling is refused:
    what it holds (transports, pools, locks) belongs to this process, so each process builds its own."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, "_sealed"):
            raise AttributeError(f"{type(self).__name__} is immutable; build a new one")
        object.__setattr__(self, name, value)

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError(f"cannot pickle {type(self).__name__!r} object: build one in each process")
