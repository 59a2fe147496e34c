"""The arithmetic of a view's shape and strides that encoding and decoding share.

The element strides of a C-contiguous shape (``c_strides``), the byte range a strided view reaches
(``extent``), whether a shape is within ``Limits.max_tensor_bytes`` (``shape_problem``), and the
alignment a buffer's views keep (``ALIGN``): an element-aligned offset for every dtype of the table.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ALIGN", "c_strides", "extent", "shape_problem"]

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
