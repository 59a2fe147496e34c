"""An object node of a schema: a map (``additionalProperties`` of one schema) or a struct, and a
struct's fields (its tag, the first string const; which are required; each optional field's
default), its ``x-constraints`` and its ``x-validators``. The ``Builder`` given builds the fields'
own nodes and keeps the named types."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorwire.rules import known_validators
from tensorwire.schema._keywords import _DOC, _only
from tensorwire.schema._names import _CLASS_NAME, _field_name_problem, _pascal
from tensorwire.schema._scalars import counts
from tensorwire.schema._source import join_pointer
from tensorwire.schema._values import value_problem
from tensorwire.schema.ir import MISSING, Constraint, Field, MapT, Node, ScalarT, StructT

if TYPE_CHECKING:
    from tensorwire.schema._build import Builder, FileEntry

__all__ = ["constraints_of", "object_node", "struct_node"]

_NON_ASCII_TAG = (
    "tag {tag!r} (the object's first string const) is not ASCII: msgspec's MessagePack decoder refuses "
    "a struct whose tag is not ASCII (until it has encoded one); use ASCII"
)


def object_node(builder: Builder, entry: FileEntry, schema: dict[str, Any], ptr: str, hint: str) -> Node:
    src = entry.source
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        if "properties" in schema:
            raise src.error(ptr, "an object has either properties (a struct) or additionalProperties (a map), not both")
        for key in ("required", "x-constraints", "x-validators"):
            if key in schema:
                raise src.error(join_pointer(ptr, key), f"keyword {key!r} does not apply to a map", key=True)
        values = builder._node(entry, extra, join_pointer(ptr, "additionalProperties"), hint)
        low, high = counts(src, schema, ptr, "Properties")
        return MapT(values, min_properties=low, max_properties=high)
    if "properties" not in schema:
        raise src.error(
            ptr,
            "an object needs properties (a struct) or additionalProperties (a map of values of one schema, "
            'e.g. {"x-tree": {}} for any value)',
        )
    for key in ("minProperties", "maxProperties"):
        if key in schema:
            raise src.error(
                join_pointer(ptr, key),
                f"{key} counts the entries of a map (additionalProperties: {{...}}); "
                "a struct's fields are set by properties and required",
                key=True,
            )
    name = schema.get("title", hint)
    if not isinstance(name, str) or not _CLASS_NAME.fullmatch(name):
        name = hint
    return struct_node(builder, entry, schema, ptr, name, message=False)


def struct_node(
    builder: Builder, entry: FileEntry, schema: dict[str, Any], ptr: str, name: str, *, message: bool
) -> StructT:
    src = entry.source
    props: dict[str, Any] = schema.get("properties", {})
    required = schema.get("required", [])
    for i, field_name in enumerate(required):
        if field_name not in props:
            raise src.error(join_pointer(ptr, "required", i), f"required names unknown property {field_name!r}")
    tag_field = tag = None
    fields: list[Field] = []
    for field_name, prop in props.items():
        fptr = join_pointer(ptr, "properties", field_name)
        problem = _field_name_problem(field_name)
        if problem is not None:
            raise src.error(fptr, problem, key=True)
        if tag_field is None and isinstance(prop.get("const"), str) and prop.get("type", "string") == "string":
            _only(entry, prop, fptr, _DOC | {"const", "type"}, "const")
            tag_field, tag = field_name, prop["const"]  # the first string const: the struct's tag
            if not tag.isascii():
                raise src.error(join_pointer(fptr, "const"), _NON_ASCII_TAG.format(tag=tag))
            continue
        node = builder._node(entry, prop, fptr, name + _pascal(field_name))
        is_required = field_name in required
        default = prop.get("default", MISSING)
        if not is_required and default is MISSING and isinstance(node, ScalarT) and node.const is not None:
            default = node.const  # an optional const field left out has its one value
        if is_required and default is not MISSING:
            raise src.error(join_pointer(fptr, "default"), f"field {field_name!r} is required and has a default")
        if not is_required and default is MISSING:
            raise src.error(fptr, f"optional field {field_name!r} needs a default (add it to required or give one)")
        if default is not MISSING:
            problem = value_problem(node, default, whole=False)
            if problem:
                raise src.error(join_pointer(fptr, "default"), f"default of wrong type: {problem}")
        fields.append(
            Field(
                field_name,
                node,
                is_required,
                default,
                prop.get("description", ""),
                deprecated=prop.get("deprecated", False),
                read_only=prop.get("readOnly", False),
                write_only=prop.get("writeOnly", False),
            )
        )
    if not fields:
        raise src.error(ptr, "an object type needs at least one property besides its tag")
    constraints = constraints_of(entry, schema.get("x-constraints", {}), ptr, {f.name for f in fields})
    validators = tuple(schema.get("x-validators", ()))
    known = known_validators()
    for i, validator in enumerate(validators):
        if validator not in known:
            raise src.error(
                join_pointer(ptr, "x-validators", i),
                f"unknown validator {validator!r}; registered: {', '.join(sorted(known)) or 'none'}",
            )
    struct = StructT(
        namespace=entry.namespace,
        name=name,
        fields=tuple(fields),
        constraints=constraints,
        validators=validators,
        tag_field=tag_field,
        tag=tag,
        description=schema.get("description", schema.get("title", "")) if message else schema.get("description", ""),
        type_id=f"{entry.namespace}.{entry.name}" if message else None,
        version=entry.version if message else None,
        source=src.path,
        pointer=ptr,
        closed=schema.get("additionalProperties") is False,
        deprecated=schema.get("deprecated", False),
    )
    if message:
        builder._check_examples(entry, schema, ptr, struct)
        return struct
    return builder._named(entry, struct, ptr)  # type: ignore[return-value]


def constraints_of(entry: FileEntry, spec: dict[str, Any], ptr: str, names: set[str]) -> tuple[Constraint, ...]:
    out: list[Constraint] = []
    for rule, groups in spec.items():
        normalized = [groups] if all(isinstance(g, str) for g in groups) else groups
        for g, group in enumerate(normalized):
            if isinstance(group, str):
                raise entry.source.error(join_pointer(ptr, "x-constraints", rule, g), "expected a list of field names")
            for name in group:
                if name not in names:
                    raise entry.source.error(
                        join_pointer(ptr, "x-constraints", rule), f"{rule} names unknown field {name!r}"
                    )
            if len(group) < 2:
                raise entry.source.error(join_pointer(ptr, "x-constraints", rule), f"{rule} needs two or more fields")
            out.append(Constraint(rule, tuple(group)))  # type: ignore[arg-type]  # the meta-schema allows only the two rules
    return tuple(out)
