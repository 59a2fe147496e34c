"""The closed dtype table: the only element types tensorwire puts on the wire.

Names are canonical and wire-stable. Values travel as raw bits: nothing is ever widened.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DTYPES", "DTYPE_NAMES", "DType", "dtype_of", "lookup"]


@dataclass(frozen=True, slots=True)
class DType:
    """One entry of the table: the canonical name, its size and numpy's name for the same bits."""

    name: str
    itemsize: int
    numpy_name: str | None  # None where numpy has no such type (bfloat16, float8 variants)
    torch_name: str


def _d(name: str, itemsize: int, numpy_name: str | None, torch_name: str | None = None) -> DType:
    return DType(name, itemsize, numpy_name, torch_name or name)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        _d("bool", 1, "bool"),
        _d("int8", 1, "int8"),
        _d("int16", 2, "int16"),
        _d("int32", 4, "int32"),
        _d("int64", 8, "int64"),
        _d("uint8", 1, "uint8"),
        _d("uint16", 2, "uint16"),
        _d("uint32", 4, "uint32"),
        _d("uint64", 8, "uint64"),
        _d("float16", 2, "float16"),
        _d("bfloat16", 2, None),
        _d("float32", 4, "float32"),
        _d("float64", 8, "float64"),
        _d("complex64", 8, "complex64"),
        _d("complex128", 16, "complex128"),
        _d("float8_e4m3fn", 1, None),
        _d("float8_e5m2", 1, None),
    )
}

DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES)


def lookup(name: str) -> DType:
    """The table entry for ``name``; ``KeyError`` names the known dtypes."""
    try:
        return DTYPES[name]
    except KeyError:
        raise KeyError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPE_NAMES)}") from None


def dtype_of(value: object) -> str | None:
    """Canonical dtype name of a torch tensor or numpy array, or None if it is not in the table."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    try:
        return _NAME_OF[dtype]
    except (KeyError, TypeError):  # not seen yet, or not hashable
        pass
    name = str(dtype).removeprefix("torch.")
    known = name if name in DTYPES else None
    try:
        if len(_NAME_OF) < 256:  # dtypes are few; anything else is not worth remembering
            _NAME_OF[dtype] = known
    except TypeError:
        pass
    return known


_NAME_OF: dict[object, str | None] = {}
