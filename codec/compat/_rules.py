"""The rule catalogue: every kind of schema change the checker knows, with a stable ID.

``side`` says whom a change breaks: ``old readers`` (consumers still on the old schema reading
new messages: FORWARD), ``old writers`` (producers still on the old schema whose messages new
code reads: BACKWARD), ``both``, or ``none``. A finding suppressed with ``x-compat-ignore``
keeps its rule ID, drops to ``info`` and carries the reason, so it stays visible.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RETIRED", "RULES", "Rule", "covers", "rule"]

READERS, WRITERS, BOTH, NONE = "old readers", "old writers", "both", "none"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    side: str
    severity: str  # error, warning, info
    purpose: str


_CATALOGUE = [
    # types and versions
    Rule(
        "TYPE_DELETED",
        BOTH,
        "error",
        "a type (at one major version) is gone; its readers and writers have nothing to talk to",
    ),
    Rule("TYPE_ADDED", NONE, "info", "a new type; nobody depends on it yet"),
    Rule("TYPE_ID_CHANGED", BOTH, "error", "a type reappears under another id; messages name types by id"),
    Rule(
        "MAJOR_VERSION_ADDED", NONE, "info", "a new major version file beside the old one (the way to break on purpose)"
    ),
    Rule("VERSION_DECREASED", BOTH, "error", "the newest major version of a type went down"),
    Rule(
        "VERSION_NOT_BUMPED",
        BOTH,
        "error",
        "a breaking change inside one major version; add Name.v<N+1>.json instead (a finding names the side "
        "its type's changes break)",
    ),
    Rule("DOC_CHANGED", NONE, "info", "only descriptions or titles changed; the wire is the same"),
    # fields
    Rule("FIELD_ADDED_REQUIRED", WRITERS, "error", "a required field old writers never send"),
    Rule("FIELD_ADDED_OPTIONAL", NONE, "info", "an optional field with a default; old readers ignore it"),
    Rule("FIELD_DELETED", READERS, "error", "a required field new writers no longer send"),
    Rule(
        "FIELD_DELETED_OPTIONAL",
        READERS,
        "warning",
        "an optional field new writers no longer send; old readers fall back to their default",
    ),
    Rule(
        "FIELD_ADDED_TO_CLOSED",
        READERS,
        "error",
        "a field added to a type whose old readers reject unknown fields (additionalProperties: false)",
    ),
    Rule(
        "FIELD_DELETED_FROM_CLOSED",
        WRITERS,
        "error",
        "a field removed from a type that rejects unknown fields: old writers still send it",
    ),
    Rule(
        "UNKNOWN_FIELDS_REJECTED",
        WRITERS,
        "warning",
        "additionalProperties: false added: new readers reject fields they do not know; adding one later breaks them",
    ),
    Rule(
        "UNKNOWN_FIELDS_IGNORED", NONE, "info", "additionalProperties: false dropped: unknown fields are ignored again"
    ),
    Rule(
        "FIELD_RENAMED",
        BOTH,
        "error",
        "a required field removed and a required one of the same type added; names are the wire keys",
    ),
    Rule("FIELD_MADE_REQUIRED", WRITERS, "error", "old writers omit the field when it equals its default"),
    Rule(
        "FIELD_MADE_OPTIONAL",
        READERS,
        "error",
        "new writers omit the field when it equals the default; old readers require it",
    ),
    Rule("DEFAULT_CHANGED", BOTH, "error", "an omitted field means its default; the two sides now disagree on it"),
    # types of fields
    Rule("TYPE_CHANGED", BOTH, "error", "a field's type changed to an unrelated one"),
    Rule(
        "TYPE_WIDENED",
        READERS,
        "error",
        "the type accepts more (integer to number, enum to string, a scalar, a tensor, an array or a map to x-tree, "
        "tuple to array): old readers reject the new values",
    ),
    Rule(
        "TYPE_NARROWED",
        WRITERS,
        "error",
        "the type accepts less (number to integer, string to enum, x-tree to a scalar, a tensor, an array or a map, "
        "array to tuple): old writers' values are rejected",
    ),
    Rule(
        "TYPE_WIDENED_LOSSY",
        WRITERS,
        "error",
        "integer to number, no const or bounds within ±2**53: old writers' larger integers decode as another number",
    ),
    Rule(
        "TYPE_NARROWED_LOSSY",
        READERS,
        "error",
        "number to integer, no const or bounds within ±2**53: old readers decode new writers' larger integers "
        "as another number",
    ),
    Rule("NULLABLE_ADDED", READERS, "error", "new writers may send null; old readers reject it"),
    Rule("NULLABLE_REMOVED", WRITERS, "error", "old writers may send null; new readers reject it"),
    Rule(
        "RANGE_TIGHTENED",
        WRITERS,
        "error",
        "a bound, multipleOf, length, item count or entry count tightened: some old values are rejected",
    ),
    Rule(
        "RANGE_LOOSENED",
        READERS,
        "error",
        "a bound, multipleOf, length, item count or entry count loosened: old readers reject some new values",
    ),
    Rule("CONST_ADDED", WRITERS, "error", "a value became fixed (const): old writers' other values are rejected"),
    Rule("CONST_REMOVED", READERS, "error", "a value is no longer fixed (const): old readers reject the others"),
    Rule("CONST_CHANGED", BOTH, "error", "the one value allowed (const) changed"),
    Rule("PATTERN_ADDED", WRITERS, "error", "a string must now match a pattern: some old values are rejected"),
    Rule("PATTERN_REMOVED", READERS, "error", "a string no longer has to match its pattern: old readers reject some"),
    Rule("PATTERN_CHANGED", BOTH, "error", "a string's pattern changed: each side may reject what the other sends"),
    Rule("TUPLE_LENGTH_CHANGED", BOTH, "error", "a tuple gained or lost items"),
    Rule(
        "ARRAY_MADE_SET",
        WRITERS,
        "error",
        "an array became a set (uniqueItems): old writers' repeated items decode as one, another value",
    ),
    Rule(
        "SET_MADE_ARRAY",
        READERS,
        "error",
        "a set (uniqueItems) became an array: old readers decode new writers' repeated items as one",
    ),
    Rule("REF_TARGET_CHANGED", BOTH, "error", "a field now refers to another message type or major version"),
    # enums
    Rule("ENUM_MEMBER_ADDED", READERS, "error", "new writers may send a member old readers do not know"),
    Rule("ENUM_MEMBER_REMOVED", WRITERS, "error", "old writers may send a member new readers no longer accept"),
    Rule("ENUM_VALUE_CHANGED", BOTH, "error", "a member's wire value changed (removed and added in its place)"),
    # unions
    Rule("UNION_VARIANT_ADDED", READERS, "error", "new writers may send a variant old readers do not know"),
    Rule("UNION_VARIANT_REMOVED", WRITERS, "error", "old writers may send a variant new readers no longer accept"),
    Rule("UNION_TAG_CHANGED", BOTH, "error", "a variant's tag value changed"),
    Rule("UNION_TAG_FIELD_CHANGED", BOTH, "error", "the discriminator property changed"),
    # tensors and arrays
    Rule("TENSOR_KIND_CHANGED", BOTH, "error", "a torch tensor became a numpy array or the reverse"),
    Rule("TENSOR_DTYPE_REPLACED", BOTH, "error", "the dtype set was replaced by a disjoint one"),
    Rule("TENSOR_DTYPES_GROWN", READERS, "error", "new writers may send dtypes old readers reject"),
    Rule("TENSOR_DTYPES_SHRUNK", WRITERS, "error", "old writers may send dtypes new readers reject"),
    Rule("TENSOR_RANK_CHANGED", BOTH, "error", "the rank changed"),
    Rule(
        "TENSOR_DIMS_REORDERED",
        BOTH,
        "error",
        "a named dim moved to another axis (or the names were permuted): same rank, different meaning per axis",
    ),
    Rule(
        "TENSOR_SHAPE_TIGHTENED",
        WRITERS,
        "error",
        "a free dim became fixed or tied to other sizes by its name, or a fixed size changed",
    ),
    Rule(
        "TENSOR_SHAPE_LOOSENED",
        READERS,
        "error",
        "a fixed dim, or one tied to other sizes by its name, became free: old readers reject other sizes",
    ),
    Rule("TENSOR_DEVICES_GROWN", READERS, "error", "new writers may send tensors on devices old readers reject"),
    Rule("TENSOR_DEVICES_SHRUNK", WRITERS, "error", "old writers may send tensors on devices new readers reject"),
    Rule("TENSOR_CONTIGUITY_REQUIRED", WRITERS, "error", "old writers may send non-contiguous tensors"),
    Rule(
        "TENSOR_CONTIGUITY_DROPPED",
        READERS,
        "error",
        "old readers reject non-contiguous tensors new writers may send",
    ),
    # trees
    Rule("TREE_DEPTH_DECREASED", WRITERS, "error", "old writers' deeper trees are rejected"),
    Rule("TREE_DEPTH_INCREASED", READERS, "error", "old readers reject new writers' deeper trees"),
    Rule(
        "TREE_JSON_TIGHTENED",
        WRITERS,
        "error",
        "the tree became JSON-only: old writers' tensors, bytes or tuples are rejected",
    ),
    Rule("TREE_JSON_LOOSENED", READERS, "error", "the tree may now hold tensors, bytes or tuples old readers reject"),
    # constraints and rules
    Rule(
        "CONSTRAINT_TIGHTENED", WRITERS, "error", "a cross-field constraint was added: some old messages are rejected"
    ),
    Rule(
        "CONSTRAINT_LOOSENED",
        READERS,
        "error",
        "a cross-field constraint was dropped: old readers reject some new messages",
    ),
    Rule("VALIDATOR_ADDED", WRITERS, "warning", "a named rule now applies; some old messages may be rejected"),
    Rule(
        "VALIDATOR_REMOVED",
        READERS,
        "warning",
        "a named rule no longer applies; old readers may reject some new messages",
    ),
    Rule(
        "STRUCT_TAG_CHANGED",
        BOTH,
        "warning",
        "a struct's tag property or value changed (what that breaks is its own finding: CONST_CHANGED, ...)",
    ),
]

RULES: dict[str, Rule] = {r.id: r for r in _CATALOGUE}

RETIRED: dict[str, tuple[str, ...]] = {"SET_SEMANTICS_CHANGED": ("ARRAY_MADE_SET", "SET_MADE_ARRAY")}
"""IDs no longer in the catalogue, each with the rules that took its place: an ignore that names
one still covers what it covered."""


def covers(ignored: str, rule_id: str) -> bool:
    """Whether an ignore entry naming ``ignored`` (a rule ID, or a retired one) covers ``rule_id``."""
    return ignored == rule_id or rule_id in RETIRED.get(ignored, ())


def rule(rule_id: str) -> Rule:
    """The rule with this ID (``KeyError`` if none)."""
    return RULES[rule_id]
