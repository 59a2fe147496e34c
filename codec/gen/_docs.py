"""Docstrings of generated classes, shared by both back-ends."""

from __future__ import annotations

import textwrap

from tensorwire.schema.ir import StructT

__all__ = ["class_doc"]

WIDTH = 100


def class_doc(struct: StructT) -> str:
    """Description, then one entry per documented field."""
    label = f"{struct.type_id} v{struct.version}" if struct.type_id else f"{struct.namespace}.{struct.name}"
    head = struct.description.strip() or f"Message type {label}."
    parts = [textwrap.fill(head, WIDTH)]
    if struct.type_id:
        parts.append(f"Wire type {label}.")
    documented = [f for f in struct.fields if f.description.strip()]
    if documented:
        lines = ["Fields:"]
        for f in documented:
            lines.append(
                textwrap.fill(
                    f"{f.name}: {f.description.strip()}", WIDTH, initial_indent="    ", subsequent_indent="        "
                )
            )
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
