"""Docstrings of generated classes, shared by both back-ends."""

from __future__ import annotations

import textwrap

from tensorwire.schema.ir import Field, StructT

__all__ = ["class_doc"]

WIDTH = 100


def class_doc(struct: StructT) -> str:
    """Description, then one entry per documented field."""
    label = f"{struct.type_id} v{struct.version}" if struct.type_id else f"{struct.namespace}.{struct.name}"
    head = struct.description.strip() or f"Message type {label}."
    parts = [textwrap.fill(("Deprecated. " if struct.deprecated else "") + head, WIDTH)]
    if struct.type_id:
        parts.append(f"Wire type {label}.")
    documented = [(f, text) for f in struct.fields if (text := _field_doc(f))]
    if documented:
        lines = ["Fields:"]
        for f, text in documented:
            lines.append(textwrap.fill(f"{f.name}: {text}", WIDTH, initial_indent="    ", subsequent_indent="        "))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _field_doc(field: Field) -> str:
    """A field's description, after what ``deprecated``, ``readOnly`` and ``writeOnly`` say of it."""
    notes = [
        note
        for flag, note in (
            (field.deprecated, "Deprecated."),
            (field.read_only, "Read-only."),
            (field.write_only, "Write-only."),
        )
        if flag
    ]
    return " ".join([*notes, field.description.strip()]).strip()
