"""A message class's closed twin (``tensorwire._twin``): the class, forbidding unknown fields,
whose decoded instances become the class's own; None wherever that could not hold."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from typing import Annotated, Any

import msgspec
import pytest

from tensorwire._twin import BECOME, closed_twin
from tensorwire._type_tree import closed_depth


class Plain(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    name: Annotated[str, msgspec.Meta(max_length=8)]
    count: int = 0
    tags: list[str] = []


class Tracked(msgspec.Struct, weakref=True, dict=True):
    rows: list[list[int]]


class Tagged(msgspec.Struct, tag=True, rename="camel"):
    some_field: int


class Explicit(msgspec.Struct, tag_field="type", tag="ns.Explicit", array_like=True):
    a: int
    b: str = "x"


class Frozen(msgspec.Struct, frozen=True):
    a: int


class OwnSetattr(msgspec.Struct):
    a: int

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{name} is read-only")


def _via_twin(cls: Any, value: Any) -> Any:
    """``value`` encoded, decoded as the twin of its class and made one of ``cls``."""
    twin = closed_twin(cls)
    assert twin is not None
    decoded: Any = msgspec.msgpack.decode(msgspec.msgpack.encode(value), type=twin)
    assert type(decoded) is twin
    BECOME(decoded, cls)
    return decoded


@pytest.mark.parametrize(
    "value",
    [
        Plain(name="a", count=3, tags=["x"]),
        Tracked(rows=[[1, 2], []]),
        Tagged(some_field=4),
        Explicit(a=1, b="y"),
        Frozen(a=1),
        OwnSetattr(a=2),
    ],
)
def test_a_twins_instance_becomes_one_of_the_class_itself(value: Any) -> None:
    cls = type(value)
    twin = closed_twin(cls)
    assert twin is not None and issubclass(twin, cls) and twin.__name__ == cls.__name__
    assert twin.__struct_config__.forbid_unknown_fields and not cls.__struct_config__.forbid_unknown_fields  # type: ignore[attr-defined]
    assert twin.__struct_config__.tag == cls.__struct_config__.tag  # type: ignore[attr-defined]
    assert twin.__struct_encode_fields__ == cls.__struct_encode_fields__  # type: ignore[attr-defined]
    decoded = _via_twin(cls, value)
    assert type(decoded) is cls and decoded == value and repr(decoded) == repr(value)
    as_itself = msgspec.msgpack.decode(msgspec.msgpack.encode(value), type=cls)
    assert gc.is_tracked(decoded) == gc.is_tracked(as_itself)  # a struct of scalars stays untracked
    assert msgspec.msgpack.encode(decoded) == msgspec.msgpack.encode(value)
    assert copy.copy(decoded) == value and type(copy.copy(decoded)) is cls
    assert type(pickle.loads(pickle.dumps(decoded))) is cls  # a copy of a local object, never of a frame


def test_the_twin_refuses_an_unknown_field_before_reading_its_value() -> None:
    twin = closed_twin(Plain)
    assert twin is not None
    levels = 100_000  # msgspec would recurse through them to skip them (the class itself does)
    body = (
        b"\x82" + msgspec.msgpack.encode("name") + msgspec.msgpack.encode("a") + b"\xa2zz" + b"\x91" * levels + b"\x00"
    )
    with pytest.raises(RecursionError):
        msgspec.msgpack.decode(body, type=Plain)
    with pytest.raises(msgspec.ValidationError, match="Object contains unknown field `zz`"):
        msgspec.msgpack.decode(body, type=twin)
    assert closed_depth(msgspec.inspect.type_info(twin)) == 2  # its map and the list of tags
    assert closed_depth(msgspec.inspect.type_info(Plain)) is None


def test_a_weak_reference_and_an_attribute_dict_still_work_on_the_class_it_became() -> None:
    decoded = _via_twin(Tracked, Tracked(rows=[[1]]))
    ref = weakref.ref(decoded)
    decoded.extra = 5
    assert decoded.extra == 5
    assert ref() is decoded


class Closed(msgspec.Struct, forbid_unknown_fields=True):
    a: int


SUBCLASSED: list[type] = []


class Watched(msgspec.Struct):
    a: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        SUBCLASSED.append(cls)
        super().__init_subclass__(**kwargs)


class OwnMeta(type(msgspec.Struct)):  # type: ignore[misc]
    pass


class Metaclassed(msgspec.Struct, metaclass=OwnMeta):
    a: int


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (Closed, "it forbids unknown fields already"),
        (Watched, "making the twin would run its __init_subclass__"),
        (Metaclassed, "making the twin would run its metaclass"),
    ],
)
def test_no_twin_where_it_could_not_stand_in_for_the_class(cls: type, why: str) -> None:
    before = list(SUBCLASSED)
    assert closed_twin(cls) is None, why
    assert SUBCLASSED == before  # nothing of the class's own ran


def test_a_frozen_twin_instance_becomes_the_class_and_stays_frozen() -> None:
    """Set as an attribute, a frozen struct's class is refused (``BECOME`` goes past that); its
    fields stay read-only and it hashes as the class's own."""
    twin = closed_twin(Frozen)
    assert twin is not None
    decoded: Any = msgspec.msgpack.decode(msgspec.msgpack.encode(Frozen(a=1)), type=twin)
    with pytest.raises(AttributeError, match="immutable type"):
        decoded.__class__ = Frozen
    BECOME(decoded, Frozen)
    assert type(decoded) is Frozen and hash(decoded) == hash(Frozen(a=1))
    with pytest.raises(AttributeError, match="immutable type"):
        decoded.a = 2  # type: ignore[misc]


class Wider(msgspec.Struct, gc=False):
    a: int
    b: int
    c: int
    d: int


def test_a_class_of_another_layout_is_refused() -> None:
    decoded = _via_twin(Plain, Plain(name="a"))
    with pytest.raises(TypeError, match="__class__ assignment: 'Tracked' deallocator differs from 'Plain'"):
        BECOME(decoded, Tracked)
    with pytest.raises(TypeError, match="__class__ assignment: 'Wider' object layout differs from 'Plain'"):
        BECOME(decoded, Wider)
    assert type(decoded) is Plain


def test_the_class_own_setattr_is_not_run() -> None:
    decoded = _via_twin(OwnSetattr, OwnSetattr(a=1))
    assert type(decoded) is OwnSetattr and decoded.a == 1


class Leaf(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    leaf_value: Annotated[int, msgspec.Meta(ge=0)]
    note: str = ""

    def __post_init__(self) -> None:
        RULES_RAN.append(self)


class Shape(msgspec.Struct, tag_field="kind", tag="shape.Square", array_like=True):
    side: float


class Holder(msgspec.Struct, kw_only=True, omit_defaults=True):
    items: list[Leaf] = []
    by_name: dict[str, Leaf] = {}
    maybe: Leaf | None = None
    pair: tuple[Leaf, int] | None = None
    shape: Annotated[Shape, msgspec.Meta(title="a shape")] | None = None
    first: int


class Loop(msgspec.Struct):
    next: Loop | None = None


RULES_RAN: list[Any] = []


def test_a_mirror_reads_what_the_class_writes_and_refuses_unknown_fields_at_every_level() -> None:
    from tensorwire._twin import closed_mirror

    mirror = closed_mirror(Holder)
    assert mirror is not None and not issubclass(mirror, Holder)
    assert mirror.__struct_fields__ == Holder.__struct_fields__  # type: ignore[attr-defined]
    info = msgspec.inspect.type_info(mirror)
    assert closed_depth(info) == 3 and closed_depth(msgspec.inspect.type_info(Holder)) is None
    value = Holder(
        items=[Leaf(leaf_value=1)],
        by_name={"a": Leaf(leaf_value=2, note="n")},
        pair=(Leaf(leaf_value=3), 4),
        shape=Shape(side=1.5),
        first=0,
    )
    body = msgspec.msgpack.encode(value)
    RULES_RAN.clear()
    read = msgspec.msgpack.decode(body, type=mirror)
    assert msgspec.msgpack.encode(read) == body and not RULES_RAN  # the same fields; no rules run
    assert msgspec.msgpack.decode(body, type=Holder) == value and len(RULES_RAN) == 3
    with pytest.raises(msgspec.ValidationError, match=r"Expected `int` >= 0 - at `\$.items\[0\].leafValue`"):
        msgspec.msgpack.decode(body.replace(b"\xa9leafValue\x01", b"\xa9leafValue\xff"), type=mirror)
    deep = b"\xa2zz" + b"\x91" * 100_000 + b"\x00"  # msgspec would recurse through it to skip it
    for where, bad in {
        "$.items[0]": body.replace(b"\x81\xa9leafValue\x01", b"\x82\xa9leafValue\x01" + deep),
        "$": b"\x86" + body[1:] + deep,
    }.items():
        with pytest.raises(RecursionError):
            msgspec.msgpack.decode(bad, type=Holder)
        with pytest.raises(msgspec.ValidationError) as caught:
            msgspec.msgpack.decode(bad, type=mirror)
        assert str(caught.value) == "Object contains unknown field `zz`" + ("" if where == "$" else f" - at `{where}`")


def test_no_mirror_for_a_struct_inside_itself_or_one_whose_annotations_do_not_resolve() -> None:
    from tensorwire._twin import closed_mirror

    unresolved: Any = msgspec.defstruct("Unresolved", [("x", "Missing")])  # a name nothing defines
    with pytest.raises(NameError):
        msgspec.inspect.type_info(unresolved)
    assert closed_mirror(Loop) is None and closed_mirror(unresolved) is None
    assert closed_mirror(Holder) is not None


def test_no_twin_where_its_config_would_differ_from_the_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin is kept only if all it changes is ``forbid_unknown_fields``; a config key that
    differs (here that flag itself, named among those compared) leaves no twin."""
    from tensorwire import _twin

    assert closed_twin(Plain) is not None
    monkeypatch.setattr(_twin, "_CONFIG", (*_twin._CONFIG, "forbid_unknown_fields"))
    assert closed_twin(Plain) is None


def test_no_mirror_where_its_fields_would_be_read_by_other_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror that would read other encode names than the class (here: made without the class's
    renames) is refused, and none is made."""
    from tensorwire._twin import closed_mirror

    defstruct = msgspec.defstruct

    def without_renames(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("rename")
        return defstruct(*args, **kwargs)

    assert closed_mirror(Leaf) is not None
    monkeypatch.setattr(msgspec, "defstruct", without_renames)
    assert closed_mirror(Leaf) is None
    assert closed_mirror(Holder) is None  # Leaf inside it has no mirror: neither has Holder
