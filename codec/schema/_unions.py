"""A ``oneOf`` node of a schema: a nullable type (a variant of type ``null``), one variant alone,
or a tagged union, whose variants are object types each carrying the discriminator's property as
its tag, no two with the same tag. The ``Builder`` given builds the variants."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorwire.schema._keywords import _DOC
from tensorwire.schema._source import join_pointer
from tensorwire.schema.ir import MessageRefT, Node, NullableT, StructT, UnionT

if TYPE_CHECKING:
    from tensorwire.schema._build import Builder, FileEntry

__all__ = ["one_of", "union"]


def one_of(builder: Builder, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
    src = entry.source
    variants: list[Node] = []
    nullable = False
    for i, sub in enumerate(schema["oneOf"]):
        if sub.get("type") == "null" and len(sub.keys() - _DOC) == 1:
            nullable = True
            continue
        variants.append(builder._node(entry, sub, join_pointer(ptr, "oneOf", i), f"{hint}Variant{i}"))
    if not variants:
        raise src.error(join_pointer(ptr, "oneOf"), "oneOf needs a variant besides null")
    if len(variants) == 1 and "discriminator" not in schema:
        node = variants[0]
    else:
        if "discriminator" not in schema:
            raise src.error(
                join_pointer(ptr, "oneOf"),
                f"union without discriminator: {len(variants)} variants need discriminator.propertyName",
            )
        node = union(entry, schema, ptr, variants)
    if nullable and isinstance(node, NullableT):
        raise src.error(join_pointer(ptr, "oneOf"), "null appears twice in this oneOf")
    return NullableT(node) if nullable else node


def union(entry: FileEntry, schema: dict[str, Any], ptr: str, variants: list[Node]) -> UnionT:
    src = entry.source
    tag_field = schema["discriminator"]["propertyName"]
    tags: dict[str, int] = {}
    members: list[StructT | MessageRefT] = []
    for i, variant in enumerate(variants):
        vptr = join_pointer(ptr, "oneOf", i)
        struct = variant.target if isinstance(variant, MessageRefT) else variant
        if not isinstance(struct, StructT) or not isinstance(variant, StructT | MessageRefT):
            raise src.error(vptr, "a union variant must be an object type")
        label = struct.type_id or f"{struct.namespace}.{struct.name}"
        if struct.tag_field != tag_field:
            raise src.error(vptr, f"variant {label} has no const property {tag_field!r} (the union's discriminator)")
        assert struct.tag is not None
        if struct.tag in tags:
            raise src.error(vptr, f"variant {label} repeats tag {struct.tag!r} of variant {tags[struct.tag]}")
        tags[struct.tag] = i
        members.append(variant)
    return UnionT(tag_field, tuple(members))
