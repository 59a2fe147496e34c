"""The names a schema gives to what the code generator declares: a class name (``title``,
``x-enum-name``, a ``$defs`` key), a class name made from a field's, a field name, and an enum
member name made from its value; each must be one a generated Python class can declare."""

from __future__ import annotations

import keyword
import re
import unicodedata

_CLASS_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")  # fullmatch: a name, never a name and a newline
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_\W]+", name) if part)


def _member_problem(value: str, member: str, enum_name: str) -> str | None:
    """Why enum value ``value`` cannot be a member of enum class ``enum_name`` under the name
    ``member``, or None. Python's enum is asked about the name as written (a class built at run
    time) and as Python reads it in source (NFKC-normalized: a generated module)."""
    if not member.isidentifier():
        return f"enum value {value!r} makes the member name {member!r}, which is not a Python name"
    for name in dict.fromkeys((member, unicodedata.normalize("NFKC", member))):
        if name.startswith("__") or (len(name) > 2 and name[0] == name[-1] == "_"):
            return (
                f"enum value {value!r} makes the member name {member!r}: Python's enum takes a name starting with "
                "'__', or starting and ending with '_', for one of its own, not for a member"
            )
        private = f"_{enum_name}__"
        if name.startswith(private) and len(name) > len(private) and not name.endswith("__"):
            return (
                f"enum value {value!r} makes the member name {member!r}: Python's enum takes a name starting with "
                f"{private!r} for a private attribute of class {enum_name}, not for a member"
            )
        if name == "mro":
            return f"enum value {value!r} makes the member name {member!r}, read as 'mro', which Python's enum refuses"
    return None


def _field_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a field of a message class, or None."""
    if not _FIELD_NAME.fullmatch(name):
        return f"field name {name!r} must be ASCII letters, digits and underscores, not starting with a digit"
    if keyword.iskeyword(name):
        return f"field name {name!r} is a Python keyword, which a generated class cannot declare"
    if name.startswith("__"):
        return (
            f"field name {name!r} starts with '__': Python renames such a name in a class body (and "
            "tensorwire's own class attributes are dunders); rename the field"
        )
    return None
