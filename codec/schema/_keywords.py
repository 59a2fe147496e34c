"""The keywords of the schema language by node kind: those any node may carry (documentation,
examples, defaults), those each value type and the ``enum`` and ``oneOf`` forms take, and the check
that a node carries none but those allowed beside the keyword that says what it is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorwire.schema._scalars import BOUNDS
from tensorwire.schema._source import join_pointer

if TYPE_CHECKING:
    from tensorwire.schema._build import FileEntry

_DOC = frozenset(
    {
        "$comment",
        "title",
        "description",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "x-compat-ignore",
    }
)
_APPLIES: dict[str, frozenset[str]] = {
    "boolean": frozenset({"type"}),
    "integer": frozenset({"type", "format"}) | BOUNDS,
    "number": frozenset({"type", "format"}) | BOUNDS,
    "string": frozenset({"type", "minLength", "maxLength", "pattern", "format", "contentEncoding"}),
    "array": frozenset({"type", "items", "prefixItems", "uniqueItems", "minItems", "maxItems"}),
    "object": frozenset(
        {
            "type",
            "properties",
            "required",
            "additionalProperties",
            "minProperties",
            "maxProperties",
            "x-constraints",
            "x-validators",
        }
    ),
    "enum": frozenset({"type", "enum", "x-enum-name"}),
    "oneOf": frozenset({"oneOf", "discriminator"}),
}


def _only(entry: FileEntry, schema: dict[str, Any], ptr: str, allowed: frozenset[str], what: str) -> None:
    for key in schema:
        if key not in allowed:
            raise entry.source.error(
                join_pointer(ptr, key), f"keyword {key!r} cannot be combined with {what!r}", key=True
            )
