"""The meta-schema: the tensorwire subset of JSON Schema, and validation of files against it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from tensorwire.dtypes import DTYPE_NAMES
from tensorwire.errors import SchemaError, SchemaProblem
from tensorwire.schema._source import SourceFile, join_pointer

__all__ = ["META_SCHEMA_NAME", "check_against_meta", "meta_schema", "meta_schema_text"]

META_SCHEMA_NAME = "tensorwire.v1.json"
MAX_META_ERRORS = 100  # a file of many wrong values: each costs jsonschema work and a position
# What to write instead of a keyword the subset does not have, where there is a way to say it.
_INSTEAD = {
    "anyOf": "a union is a oneOf whose variants are objects told apart by discriminator.propertyName",
    "allOf": "write the properties of one object type (or $ref a shared $defs entry from a field)",
    "nullable": 'a nullable field says so in its type: "type": ["string", "null"], or a oneOf with {"type": "null"}',
    "definitions": "nested types go in $defs",
    "patternProperties": 'a map with any string keys is {"type": "object", "additionalProperties": {...}}',
    "propertyNames": 'a map with any string keys is {"type": "object", "additionalProperties": {...}}',
    "unevaluatedProperties": '"additionalProperties": false rejects unknown fields',
    "dependentRequired": 'fields that exclude or need each other: "x-constraints" (at_most_one_of, exactly_one_of)',
    "if": 'a rule across fields: "x-constraints", or a named check in "x-validators"',
    "not": 'a rule the subset cannot say: a named check in "x-validators"',
    "contains": 'a rule on an array\'s items: a named check in "x-validators"',
    "id": "a type's id is $id (<namespace>.<Name>)",
    "example": '"examples" is a list of examples',
}
_ROOT_UNION = (
    "a schema file is one object type; a union of types goes in a field of it: "
    '{"oneOf": [{"$ref": ...}, ...], "discriminator": {"propertyName": ...}}'
)


def meta_schema_text() -> str:
    """The meta-schema file, exactly as shipped (what ``tensorwire schemas --meta`` writes out)."""
    return resources.files("tensorwire.schema").joinpath(META_SCHEMA_NAME).read_text(encoding="utf-8")


@cache
def meta_schema() -> dict[str, Any]:
    """The meta-schema as a JSON object."""
    data: dict[str, Any] = json.loads(meta_schema_text())
    return data


@cache
def _validator() -> Any:
    checks = {
        "uniqueItems": _unique_items,  # jsonschema's compares unsortable items pairwise
        "additionalProperties": _additional_properties,  # jsonschema's walks a set
    }
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, checks)(meta_schema())


_ADDITIONAL_PROPERTIES = jsonschema.Draft202012Validator.VALIDATORS["additionalProperties"]


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``additionalProperties`` checking an object's other keys in the file's order: jsonschema's
    walks them as a set, in an order the hash seed picks, so which errors came before the
    ``MAX_META_ERRORS`` cut depended on it."""
    if not validator.is_type(extra, "object") or not validator.is_type(instance, "object"):
        yield from _ADDITIONAL_PROPERTIES(validator, extra, instance, schema)  # one error, keys sorted
        return
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    for key in instance:
        if key not in known and not any(re.search(pattern, key) for pattern in patterns):
            yield from validator.descend(instance[key], extra, path=key)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``uniqueItems`` in one pass: the first item equal (as JSON) to an earlier one."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    for index, item in enumerate(instance):
        first = seen.setdefault(_json_key(item), index)
        if first != index:
            message = f"item {index} ({_short(item)}) repeats item {first}: the items must be unique"
            yield jsonschema.ValidationError(message, path=[index])
            return


def _json_key(value: Any) -> Any:
    """A hashable key equal for values equal as JSON (``1`` and ``1.0``, never ``true`` and ``1``)."""
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, int | float | str):
        return value
    if isinstance(value, list):
        return ("list", tuple(_json_key(item) for item in value))
    return ("object", frozenset((key, _json_key(item)) for key, item in value.items()))


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_against_meta(source: SourceFile) -> None:
    """Raise a ``SchemaError`` with the file's meta-schema violations as its ``errors``, in file
    order (its text lists the first five); checking stops at ``MAX_META_ERRORS`` of them."""
    found: set[SchemaProblem] = set()  # a set: branches of the meta-schema repeat an error
    explained = (entry for error in _validator().iter_errors(source.data) for entry in _explain(error))
    for pointer, message, on_key in explained:  # one error may name every key of an object
        found.add(source.problem(pointer, message, key=on_key))  # each a walk over the text
        if len(found) >= MAX_META_ERRORS:
            break
    if found and isinstance(source.data, dict) and "oneOf" in source.data and "properties" not in source.data:
        found = {source.problem("/oneOf", _ROOT_UNION, key=True)}  # the rest follows from it
    if found:
        raise SchemaError(errors=sorted(found, key=_file_order))


def _file_order(problem: SchemaProblem) -> tuple[int, int, str]:
    """Position in the file, then pointer and message."""
    return (problem.line or 0, problem.col or 0, f"{problem.pointer or '/'}: {problem.message}")


def _instead(keyword: str) -> str:
    hint = _INSTEAD.get(keyword)
    return "" if hint is None else f"; {hint}"


def _pointer(path: Any) -> str:
    return join_pointer("", *path)


def _explain(error: Any) -> list[tuple[str, str, bool]]:
    """Turn one jsonschema error into ``(pointer, message, points_at_key)`` entries."""
    pointer = _pointer(error.absolute_path)
    kind = error.validator
    last = error.absolute_path[-1] if error.absolute_path else None
    if kind == "additionalProperties" and error.validator_value is False:
        allowed = set(error.schema.get("properties", {}))
        return [
            (join_pointer(pointer, key), f"keyword {key!r} is not in the tensorwire subset{_instead(key)}", True)
            for key in error.instance
            if key not in allowed
        ]
    if kind == "enum" and "dtypes" in error.absolute_path:
        return [(pointer, f"unknown dtype {_shown(error.instance)}; expected one of {', '.join(DTYPE_NAMES)}", False)]
    if kind == "type" and len(error.absolute_path) >= 2 and error.absolute_path[-2] == "enum":
        return [(pointer, f"enum members must be strings, got {_short(error.instance)}", False)]
    if kind == "maximum" and last == "max_depth":
        return [(pointer, f"tree depth {error.instance} is over the limit of {error.validator_value}", False)]
    if kind == "pattern" and last == "$id":
        return [
            (pointer, f"$id {_shown(error.instance)} must have the form <namespace>.<Name>, e.g. media.Video", False)
        ]
    if kind == "required":
        missing = [name for name in error.validator_value if name not in error.instance]
        return [(pointer, f"missing required keyword {name!r}", False) for name in missing]
    if kind == "propertyNames":
        return [(pointer, f"invalid name: {_message(error)}", False)]
    return [(pointer, _message(error), False)]


def _shown(value: Any, limit: int = 60) -> str:
    """``value`` as a message shows it: its ``repr``, or past ``limit`` characters its JSON text cut
    there (a value of a megabyte would make a message of a megabyte)."""
    shown = repr(value)
    return shown if len(shown) <= limit else _short(value, limit)


def _message(error: Any, limit: int = 60) -> str:
    """jsonschema's message for ``error``, with the value it shows cut at ``limit`` characters (it
    writes the whole value, as ``_shown`` would not)."""
    shown = repr(error.instance)
    if len(shown) <= limit:
        return str(error.message)
    return str(error.message).replace(shown, _shown(error.instance, limit), 1)
