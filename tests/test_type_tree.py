"""``closed_depth``: how deep a value of a declared type is read when msgspec can skip nothing in it,
and None wherever msgspec may read (skip) a value nested without bound; ``typed_depth``: how deep
the typed part of a value nests, whatever msgspec skips."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

import msgspec
import msgspec.inspect as mi
import pytest

from tensorwire._type_tree import closed_depth, typed_depth


class Leaf(msgspec.Struct, forbid_unknown_fields=True):
    x: int


class Open(msgspec.Struct):
    x: int


class Circle(msgspec.Struct, tag="circle", forbid_unknown_fields=True):
    r: float


class Square(msgspec.Struct, tag="square", forbid_unknown_fields=True):
    side: float


class Node(msgspec.Struct, forbid_unknown_fields=True):
    children: list[Node]


def _closed(name: str, field: Any) -> Any:
    return msgspec.defstruct(name, [("f", field)], forbid_unknown_fields=True)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (int, 1),
        (Annotated[int, msgspec.Meta(ge=0, title="n")], 1),
        (Literal["a", "b"], 1),
        (bytes, 1),
        (Optional[str], 1),  # noqa: UP045 (a union of leaves)
        (list[dict[str, int]], 3),
        (tuple[int, Leaf], 3),
        (frozenset[str], 2),
        (Leaf | None, 2),  # one struct in a union: read as itself
        (Circle, 2),
        (dict[str, list[Leaf]], 4),
        (dict[tuple[int, int], int], 3),  # a key is read as deep as its own type
        (Open, None),  # its unknown fields are skipped, however deep
        (list[Open], None),
        (Circle | Square, None),  # the fields before the tag are skipped to find it
        (Annotated[Circle, msgspec.Meta(title="c")] | Square, None),  # as well when one is annotated
        (Node, None),  # recursive: as deep as the bytes
        (Any, None),
        (msgspec.Raw, None),
    ],
)
def test_the_levels_of_a_closed_struct_holding_a_field(field: Any, expected: int | None) -> None:
    """The struct's own map, and the levels its field's value is read from."""
    assert closed_depth(mi.type_info(_closed("Holder", field))) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (int, 1),
        (Optional[str], 1),  # noqa: UP045 (a union of leaves)
        (list[dict[str, int]], 3),
        (tuple[int, Leaf], 3),
        (dict[tuple[int, int], int], 3),
        (Open, 2),  # an open struct nests as deep as its fields: what it skips is not its own
        (list[Open], 3),
        (Circle | Square, 2),  # a union adds no level of its own
        (Annotated[list[int], msgspec.Meta(max_length=3)], 2),
        (Any, 1),  # a tree: bounded as the encoder rewrites it, not by its type
        (msgspec.Raw, 1),
        (Node, None),  # recursive: as deep as the value
    ],
)
def test_the_typed_levels_of_a_struct_holding_a_field(field: Any, expected: int | None) -> None:
    """The struct's own map, and the levels its field's declared type nests."""
    holder = msgspec.defstruct("Holder", [("f", field)])
    assert typed_depth(mi.type_info(holder)) == expected


def test_an_open_struct_bounds_nothing() -> None:
    assert closed_depth(mi.type_info(Leaf)) == 1
    assert closed_depth(mi.type_info(Open)) is None


def _nested(levels: int) -> bytes:
    return b"\x91" * levels + b"\x01"


def test_msgspec_refuses_a_closed_structs_unknown_field_before_reading_it() -> None:
    """The premise of a closed type's bound: an unknown field is an error before its value is read
    (100,000 levels would be a RecursionError if it were skipped: past the recursion limits of
    every Python, whose limit on recursion in C is separate from 3.12 on, 10,000 levels on 3.13),
    also in a struct that is one member of a union, where a union of two structs skips the fields
    before its tag."""
    value = _nested(100_000)
    with pytest.raises(msgspec.ValidationError, match=r"^Object contains unknown field `y`$"):
        msgspec.msgpack.decode(b"\x82\xa1x\x01\xa1y" + value, type=Leaf)
    with pytest.raises(msgspec.ValidationError, match=r"^Expected `int`, got `array` - at `\$\.x`$"):
        msgspec.msgpack.decode(b"\x81\xa1x" + value, type=Leaf)
    for one_struct in (Leaf | None, Circle | None):  # a union with one struct reads it as itself
        with pytest.raises(msgspec.ValidationError, match=r"^Object contains unknown field `y` - at `\$\.f`$"):
            msgspec.msgpack.decode(b"\x81\xa1f\x82\xa1y" + value + b"\xa1x\x01", type=_closed("One", one_struct))
    for two_structs in (Circle | Square, Annotated[Circle, msgspec.Meta(title="c")] | Square):
        with pytest.raises(RecursionError):
            msgspec.msgpack.decode(b"\x82\xa1r" + value + b"\xa4type\xa6circle", type=two_structs)
    with pytest.raises(RecursionError):
        msgspec.msgpack.decode(b"\x82\xa1x\x01\xa1y" + value, type=Open)
