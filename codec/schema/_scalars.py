"""Scalar schema nodes (integer, number, string, bytes, const), their keywords checked for what
msgspec can check: bounds, integer formats, lengths, patterns."""

from __future__ import annotations

import re
from typing import Any

from tensorwire.schema._regex import pattern_problem
from tensorwire.schema._source import SourceFile, join_pointer
from tensorwire.schema._values import WIRE_INT, describe, fits_double
from tensorwire.schema.ir import ScalarT

__all__ = ["BOUNDS", "INT_FORMATS", "const_node", "counts", "number_node", "string_node"]

# ``format`` of an integer: the range of a fixed-width integer
INT_FORMATS: dict[str, tuple[int, int]] = {
    f"{sign}int{bits}": ((0, 2**bits - 1) if sign else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
    for sign in ("", "u")
    for bits in (8, 16, 32, 64)
}
BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_CONST_KIND: dict[type, tuple[str, str]] = {bool: ("bool", "boolean"), int: ("int", "integer"), str: ("str", "string")}
INT64 = (-(2**63), 2**63 - 1)  # the integer bounds msgspec checks
MAX_LENGTH = 2**63 - 1  # the longest length, item count or entry count msgspec checks


def number_node(src: SourceFile, schema: dict[str, Any], ptr: str, kind: str) -> ScalarT:
    """An integer or number with its bounds: inclusive and exclusive ones are merged into the
    tightest of each side (an integer's exclusive bound becomes the inclusive one next to it)."""
    integer = kind == "integer"
    if integer:
        for key in BOUNDS:
            value = schema.get(key)
            if isinstance(value, float) and not value.is_integer():
                raise src.error(join_pointer(ptr, key), f"{key} of an integer must be whole, got {value}")
    lows: list[tuple[int | float, bool]] = []
    highs: list[tuple[int | float, bool]] = []
    fmt = schema.get("format")
    if fmt is not None:
        widths = ", ".join(INT_FORMATS)
        if not integer:
            raise src.error(
                join_pointer(ptr, "format"),
                f"format {fmt!r} does not apply to type 'number'; the formats {widths} are ranges of an integer",
            )
        if fmt not in INT_FORMATS:
            message = f"unknown integer format {fmt!r}; expected one of {widths}"
            raise src.error(join_pointer(ptr, "format"), message)
        lo, hi = INT_FORMATS[fmt]
        lows.append((lo, False))
        highs.append((hi, False))
    for key, into, exclusive in (
        ("minimum", lows, False),
        ("exclusiveMinimum", lows, True),
        ("maximum", highs, False),
        ("exclusiveMaximum", highs, True),
    ):
        if key in schema:
            value = int(schema[key]) if integer else schema[key]
            if integer and exclusive:  # x > 3 is x >= 4 for an integer
                value, exclusive = (value + 1 if into is lows else value - 1), False
            problem = _bound_problem(value, integer, low=into is lows)
            if problem is not None:
                raise src.error(join_pointer(ptr, key), f"{key} {schema[key]}: {problem}")
            into.append((value, exclusive))
    low = max(lows, key=lambda b: (b[0], b[1]), default=None)  # equal values: the exclusive one is tighter
    high = min(highs, key=lambda b: (b[0], not b[1]), default=None)
    if low is not None and high is not None and (low[0] > high[0] or (low[0] == high[0] and (low[1] or high[1]))):
        raise src.error(ptr, f"no value fits: the lower bound {_bound(low)} is above the upper bound {_bound(high)}")
    multiple = schema.get("multipleOf")
    if multiple is not None and integer:
        multiple = int(multiple)
    if multiple is not None and (multiple > INT64[1] if integer else not fits_double(multiple)):
        message = f"multipleOf {multiple} is past what msgspec checks ({'int64' if integer else 'a double'})"
        raise src.error(join_pointer(ptr, "multipleOf"), message)
    return ScalarT(
        "int" if integer else "float",
        minimum=None if low is None else low[0],
        maximum=None if high is None else high[0],
        exclusive_minimum=low is not None and low[1],
        exclusive_maximum=high is not None and high[1],
        multiple_of=multiple,
    )


def string_node(src: SourceFile, schema: dict[str, Any], ptr: str) -> ScalarT:
    """A string, or bytes (``format: bytes`` or base64 ``contentEncoding``), with its length and pattern."""
    fmt = schema.get("format")
    if fmt is not None and fmt != "bytes":
        raise src.error(
            join_pointer(ptr, "format"),
            f"format {fmt!r} is not checked; say what a valid value looks like with pattern "
            "(format 'bytes' makes the string raw bytes)",
        )
    is_bytes = schema.get("contentEncoding") == "base64" or fmt == "bytes"
    low, high = counts(src, schema, ptr, "Length")
    pattern = schema.get("pattern")
    if pattern is not None:
        if is_bytes:
            raise src.error(join_pointer(ptr, "pattern"), "pattern applies to text, not to bytes")
        try:
            re.compile(pattern)
            problem = pattern_problem(pattern)
        except (re.error, OverflowError) as exc:  # OverflowError: a repeat count past what re takes
            raise src.error(join_pointer(ptr, "pattern"), f"invalid pattern (Python re): {exc}") from None
        except RecursionError:  # re's parser, and the check of its parse, read groups by recursion
            raise src.error(
                join_pointer(ptr, "pattern"), "invalid pattern (Python re): groups nested too deeply"
            ) from None
        if problem is not None:
            raise src.error(join_pointer(ptr, "pattern"), problem)
    return ScalarT("bytes" if is_bytes else "str", max_length=high, min_length=low, pattern=pattern)


def const_node(src: SourceFile, schema: dict[str, Any], ptr: str) -> ScalarT:
    """A value that must be exactly ``const``: a string, an integer or a boolean."""
    value = schema["const"]
    kinds = _CONST_KIND.get(type(value))
    if kinds is None:
        hint = (
            'a number has no const (floats compare by range): write "minimum" and "maximum" with the same value'
            if isinstance(value, float)
            else "a const is a string, an integer or a boolean"
        )
        raise src.error(join_pointer(ptr, "const"), f"const {describe(value)} is not supported; {hint}")
    declared = schema.get("type", kinds[1])
    if declared != kinds[1] and not (declared == "number" and kinds[0] == "int"):
        raise src.error(join_pointer(ptr, "type"), f"const {describe(value)} is not of type {declared!r}")
    if kinds[0] == "int" and not INT64[0] <= value <= INT64[1]:
        raise src.error(join_pointer(ptr, "const"), f"const {value} is past what msgspec checks (int64)")
    return ScalarT(kinds[0], const=value)  # type: ignore[arg-type]  # one of the three kinds above


def counts(src: SourceFile, schema: dict[str, Any], ptr: str, noun: str) -> tuple[int | None, int | None]:
    """``min<noun>`` and ``max<noun>`` of ``schema`` (``minItems``, ``maxProperties``...), checked for
    order and for what msgspec checks (a length is a ``Py_ssize_t``)."""
    low, high = schema.get(f"min{noun}"), schema.get(f"max{noun}")
    for key, value in ((f"min{noun}", low), (f"max{noun}", high)):
        if value is not None and value > MAX_LENGTH:
            message = f"{key} {value} is past what msgspec checks (a length of at most {MAX_LENGTH})"
            raise src.error(join_pointer(ptr, key), message)
    if low is not None and high is not None and low > high:
        raise src.error(ptr, f"min{noun} {low} is above max{noun} {high}")
    return (low or None), high


def _bound_problem(value: int | float, integer: bool, *, low: bool) -> str | None:
    """Why ``value`` cannot be a lower (``low``) or upper bound msgspec checks, or None. An integer
    bound is checked in the int64 range; one past the integers the wire carries needs no check
    (format uint64's upper bound), one between the two cannot be said."""
    if not integer:
        return None if fits_double(value) else "out of a double's range"
    if INT64[0] <= value <= INT64[1] or (value <= WIRE_INT[0] if low else value >= WIRE_INT[1]):
        return None
    if (value > WIRE_INT[1]) if low else (value < WIRE_INT[0]):
        return f"no integer the wire carries ({WIRE_INT[0]} .. {WIRE_INT[1]}) is on its side"
    return f"msgspec checks integer bounds in the int64 range only ({INT64[0]} .. {INT64[1]})"


def _bound(bound: tuple[int | float, bool]) -> str:
    return f"{bound[0]} ({'exclusive' if bound[1] else 'inclusive'})"
