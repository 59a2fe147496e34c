"""What the compatibility walk asks of a struct's named dims (a name ties the sizes of the axes
that carry it, within one struct): which names a new version renamed one for one
(``dim_renames``), which it gave a size the old one always had (``pinned_dims``), which ties hold
on both sides (``kept_ties``), whether a name moved to another axis (``moved``), and which names
tie nothing (``free_dims``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from tensorwire.schema.ir import ArrayT, MapT, Node, NullableT, StructT, TensorT, TupleT

__all__ = ["dim_renames", "free_dims", "kept_ties", "moved", "pinned_dims"]


def dim_renames(a: StructT, b: StructT) -> dict[str, str]:
    """The named dims of ``a`` that ``b`` renamed: the name is paired, axis for axis, with only one
    new name and that one with no other. The new name may be one ``a`` gave other axes (a -> b
    while b -> c): a name only says which sizes of a struct's tensors agree, so a one-to-one
    renaming keeps the wire; a name moved to another axis of one tensor is a reorder (``moved``)."""
    new_types = {f.name: f.type for f in b.fields}
    pairs = {
        (x, y)
        for f in a.fields
        if f.name in new_types
        for x, y in _dims(f.type, new_types[f.name])
        if isinstance(x, str) and isinstance(y, str)
    }
    return {x: y for x, y in pairs if x != y and [p for p in pairs if x == p[0] or y == p[1]] == [(x, y)]}


def _dims(a: Node, b: Node) -> Iterator[tuple[int | str | None, int | str | None]]:
    """The dims of ``a`` and ``b`` at the same axis of the tensors at the same place, within one
    struct (a nested struct's names are its own)."""
    a = a.inner if isinstance(a, NullableT) else a
    b = b.inner if isinstance(b, NullableT) else b
    if isinstance(a, TensorT) and isinstance(b, TensorT):
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            yield from zip(a.shape, b.shape, strict=True)
    elif isinstance(a, ArrayT) and isinstance(b, ArrayT):
        yield from _dims(a.items, b.items)
    elif isinstance(a, MapT) and isinstance(b, MapT):
        yield from _dims(a.values, b.values)
    elif isinstance(a, TupleT) and isinstance(b, TupleT) and len(a.items) == len(b.items):
        for x, y in zip(a.items, b.items, strict=True):
            yield from _dims(x, y)


def pinned_dims(a: StructT, b: StructT) -> dict[str, int]:
    """The dim names of ``b`` at whose every axis ``a`` had the same fixed size, by that size: the
    sizes such a name ties agreed in every message of ``a``. A name also on an axis ``a`` lacks (of
    a field it lacks, or of a tensor whose rank changed) is not one."""
    old_types = {f.name: f.type for f in a.fields}
    axes: Counter[str] = Counter()  # how many axes of ``b`` each name is on
    paired: Counter[str] = Counter()  # how many of them ``a`` has
    sizes: dict[str, set[int | str | None]] = {}  # the dims of ``a`` there
    for f in b.fields:
        axes.update(y for _, y in _dims(f.type, f.type) if isinstance(y, str))
        for x, y in _dims(old_types[f.name], f.type) if f.name in old_types else ():
            if isinstance(y, str):
                paired[y] += 1
                sizes.setdefault(y, set()).add(x)
    found: dict[str, int] = {}
    for name, seen in sizes.items():
        size, *others = seen
        if not others and isinstance(size, int) and paired[name] == axes[name]:
            found[name] = size
    return found


def kept_ties(a: StructT, b: StructT) -> tuple[dict[str, str], dict[str, str]]:
    """The ties between sizes that hold on both sides: the names of ``a`` at whose every axis
    ``b`` still has (a kept field's, of the same rank) ``b`` has one name, by that name (the sizes
    the old name tied agree in ``b``'s messages too); and the names of ``b`` at whose every axis
    ``a`` had one name, by that name (the sizes the new name ties agreed in ``a``'s messages)."""
    old_types = {f.name: f.type for f in a.fields}
    axes: Counter[str] = Counter()  # how many axes of ``b`` each name is on
    paired: Counter[str] = Counter()  # how many of them ``a`` has
    news: dict[str, set[int | str | None]] = {}  # the dims of ``b`` at each old name's axes
    olds: dict[str, set[int | str | None]] = {}  # the dims of ``a`` at each new name's axes
    for f in b.fields:
        axes.update(y for _, y in _dims(f.type, f.type) if isinstance(y, str))
        for x, y in _dims(old_types[f.name], f.type) if f.name in old_types else ():
            if isinstance(x, str):
                news.setdefault(x, set()).add(y)
            if isinstance(y, str):
                paired[y] += 1
                olds.setdefault(y, set()).add(x)
    kept = {x: y for x, seen in news.items() if len(seen) == 1 and isinstance(y := next(iter(seen)), str)}
    held = {
        y: x
        for y, seen in olds.items()
        if len(seen) == 1 and isinstance(x := next(iter(seen)), str) and paired[y] == axes[y]
    }
    return kept, held


def moved(old: Sequence[int | str | None], new: Sequence[int | str | None]) -> bool:
    """Whether a dim name leaves an axis of ``old`` and names another axis in ``new``. A name that
    only gains axes or only loses some ties more sizes or fewer, which the shape rules judge."""
    changed = [(x, y) for x, y in zip(old, new, strict=True) if x != y]
    return bool({x for x, _ in changed if isinstance(x, str)} & {y for _, y in changed if isinstance(y, str)})


def free_dims(struct: StructT) -> frozenset[str]:
    """The dim names of ``struct`` that tie no two sizes together (one axis of one tensor)."""
    uses: Counter[str] = Counter()
    for f in struct.fields:
        uses += _dim_uses(f.type)
    return frozenset(name for name, count in uses.items() if count == 1)


def _dim_uses(node: Node, weight: int = 1) -> Counter[str]:
    """How many sizes each dim name of the tensors in ``node`` ties, within one struct; a tensor in
    an array or a map counts twice (its items' sizes agree)."""
    node = node.inner if isinstance(node, NullableT) else node
    uses: Counter[str] = Counter()
    if isinstance(node, TensorT):
        for d in node.shape or ():
            if isinstance(d, str):
                uses[d] += weight
    elif isinstance(node, ArrayT):
        uses = _dim_uses(node.items, 2)
    elif isinstance(node, MapT):
        uses = _dim_uses(node.values, 2)
    elif isinstance(node, TupleT):
        for item in node.items:
            uses += _dim_uses(item, weight)
    return uses
