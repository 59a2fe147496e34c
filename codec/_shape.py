"""The arithmetic of a view's shape and strides, for encoding and decoding.

The element strides of a C-contiguous shape (``c_strides``), the byte range a strided view reaches
(``extent``), whether a shape is within ``Limits.max_tensor_bytes`` (``shape_problem``), and the
alignment a buffer's views keep (``ALIGN``): an element-aligned offset for every dtype of the table.
The encoder's choice of the strides a view travels with is here too: strides of size-1 dims a
decoder would refuse made canonical (``fit_strides``), none sent for a C-contiguous view
(``travel_strides``, ``own_strides``), and the check that a decoder takes each (``strides_within``).
"""

from __future__ import annotations

from typing import Any

from tensorwire.errors import EncodeError

__all__ = [
    "ALIGN",
    "c_strides",
    "extent",
    "fit_strides",
    "own_strides",
    "shape_problem",
    "strides_within",
    "travel_strides",
]

ALIGN = 16  # the largest itemsize in the table (complex128)


def c_strides(shape: tuple[int, ...]) -> list[int]:
    """The element strides of a C-contiguous ``shape``."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * max(shape[axis + 1], 1)
    return strides


def extent(start: int, shape: Any, strides: Any, itemsize: int) -> tuple[int, int]:
    """[lo, hi) byte range reached by a non-empty view starting at address ``start``."""
    low = high = 0
    for n, s in zip(shape, strides, strict=True):
        if s < 0:
            low += (n - 1) * s
        else:
            high += (n - 1) * s
    return start + low * itemsize, start + (high + 1) * itemsize


def shape_problem(shape: list[int], itemsize: int, limit: int) -> tuple[str, str] | None:
    """Why ``shape`` is out of bounds, as ``(".shape[axis]", reason)``; None if it is within them.

    Every dimension, and the product of the non-zero ones times the itemsize, must be at most
    ``limit`` (``max_tensor_bytes``), for an empty tensor too: torch and numpy then never meet a
    size they cannot compute.
    """
    running = itemsize
    for axis, dim in enumerate(shape):
        if dim > limit:
            return f".shape[{axis}]", f"dimension {dim} is larger than the limit of {limit}"
        if dim:
            running *= dim
            if running > limit:
                return f".shape[{axis}]", f"{dim} makes the tensor larger than the limit of {limit} bytes"
    if running > limit:
        return ".dtype", f"an element of {itemsize} bytes is larger than the limit of {limit} bytes"
    return None


def fit_strides(shape: Any, strides: Any, limit: int) -> tuple[int, ...]:
    """``strides`` with the stride of each dim of size 1 past ``limit`` (which no decoder with that
    limit takes) replaced by its canonical one: no index moves along such a dim."""
    if all(-limit <= s <= limit for s in strides):
        return tuple(strides)
    canonical = c_strides(tuple(shape))
    return tuple(
        c if n == 1 and not -limit <= s <= limit else s for n, s, c in zip(shape, strides, canonical, strict=True)
    )


def travel_strides(shape: Any, strides: Any, contiguous: bool, limit: int) -> tuple[int, ...] | None:
    """The strides a non-empty view travels with (``fit_strides``), None for a C-contiguous one whose
    strides are then the canonical ones."""
    fitted = fit_strides(shape, strides, limit)
    return None if contiguous and list(fitted) == c_strides(tuple(shape)) else fitted


def strides_within(layout: Any, limit: int, refuse: bool = True) -> Any:
    """``layout`` if a decoder with limit ``limit`` takes each of its strides; else an
    ``EncodeError`` naming the first that is out of range (None if not ``refuse``)."""
    if layout is not None:
        for axis, stride in enumerate(layout):
            if not -limit <= stride <= limit:
                if not refuse:
                    return None
                raise EncodeError(f"strides[{axis}]: {stride} is out of range (over the limit of {limit})")
    return layout


def own_strides(shape: Any, strides: Any) -> tuple[int, ...] | None:
    """``strides`` of a contiguous view if they differ from the canonical ones (in dims of size 1)."""
    canonical = c_strides(tuple(shape))
    return None if list(strides) == canonical else tuple(strides)
