"""Structural mutations of the tensor descriptors and of the message body.

Descriptors are ``[kind, dtype, shape, strides, offset, buffer, nbytes]``; a mutation sometimes
keeps ``nbytes`` consistent with a new shape or dtype so the input reaches the deeper checks. The
body is edited as a tree (tree tuples opened), with hand-built raw msgpack where msgspec would
refuse to write it: extension chains, nesting hundreds deep, invalid UTF-8, non-canonical widths,
containers claiming more items than there are bytes.
"""

from __future__ import annotations

import copy
import math
import struct
from typing import Any

import msgspec

from codec import DTYPES
from tools.fuzz import rawmp, values
from tools.fuzz.draft import BodyTuple, Draft, encode
from tools.fuzz.ops_table import Op

__all__ = ["BODY_OPS", "DESCRIPTOR_OPS"]

_FIELDS = ("kind", "dtype", "shape", "strides", "offset", "buffer", "nbytes")
_DTYPES = tuple(DTYPES)
_SHAPES: tuple[list[int], ...] = (
    [2**63],
    [0, 2**63],
    [2**40, 2**40, 0],
    [2**64 - 1, 0],
    [0, 2**64 - 1, 2**64 - 1],
    [0] * 9,
    [1] * 9,
    [2**31, 2**31],
    [3, 2**62, 0],
    [2**34],
    [],
    [0],
    [1],
    [1, 0, 1],
)
_EXT_TUPLE, _EXT_TENSOR = 2, 1
_INDEX = struct.Struct("<I")
_MAX = 2**64 - 1


def _descs(d: Draft) -> list[Any] | None:
    tensors = d.listed("tensors")
    return tensors if tensors else None


def _desc(d: Draft) -> list[Any] | None:
    tensors = _descs(d)
    if tensors is None:
        return None
    desc = d.rng.choice(tensors)
    return desc if isinstance(desc, list) and len(desc) == 7 else None


def _consistent(desc: list[Any]) -> None:
    """``nbytes`` (and C-contiguous strides) matching the descriptor's shape and dtype, where it can."""
    shape, dtype = desc[2], desc[1]
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        return
    itemsize = DTYPES[dtype].itemsize if isinstance(dtype, str) and dtype in DTYPES else 1
    desc[6] = min(math.prod(shape) * itemsize, _MAX)
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(min(step, 2**63 - 1))
        step *= max(dim, 1)
    desc[3] = strides[::-1]


def _field_values(d: Draft, field: str, desc: list[Any]) -> Any:
    rng = d.rng
    rank = len(desc[2]) if isinstance(desc[2], list) else 1
    if field == "kind":
        return rng.choice(("tensor", "ndarray", "Tensor", "", 1, None))
    if field == "dtype":
        return rng.choice((*_DTYPES, "float128", "", "bfloat16 ", "object", 5, None))
    if field == "shape":
        if rng.random() < 0.6:
            return list(rng.choice(_SHAPES))
        return [rng.choice((0, 1, 2, 3, 255, 2**20, 2**32)) for _ in range(rng.randrange(10))]
    if field == "strides":
        stride = rng.choice((0, -1, 1, 2**63 - 1, -(2**63), 2**62, 2**64 - 1, 4096, -4096))
        return rng.choice(([stride] * rank, [stride] * (rank + 1), [], [1] * rank, [stride, *[1] * (rank - 1)]))
    if field == "offset":
        return rng.choice((-1, 0, 1, 2, 3, 4, 8, 15, 4096, 2**31, 2**63, _MAX, "0", None))
    if field == "buffer":
        return rng.choice((-1, 1, 2, 3, 100, 2**32, _MAX, None, "0"))
    return rng.choice((0, -1, 1, 2**63, _MAX, 2**40, (desc[6] if isinstance(desc[6], int) else 0) + 1, None))


def _desc_field(d: Draft) -> str | None:
    desc = _desc(d)
    if desc is None:
        return None
    field = d.rng.choice(_FIELDS)
    index = _FIELDS.index(field)
    desc[index] = _field_values(d, field, desc)
    kept = field in ("shape", "dtype") and d.rng.random() < 0.5
    if kept:
        _consistent(desc)
    return f"descriptor {field} = {desc[index]!r:.50}{' (nbytes kept consistent)' if kept else ''}"


def _desc_list(d: Draft) -> str | None:
    tensors = d.listed("tensors")
    if tensors is None:
        return None
    kind = d.rng.randrange(6)
    if kind == 0 and tensors:
        tensors.insert(d.rng.randrange(len(tensors) + 1), copy.deepcopy(d.rng.choice(tensors)))
        return "descriptor duplicated"
    if kind == 1 and tensors:
        tensors.pop(d.rng.randrange(len(tensors)))
        return "descriptor dropped"
    desc = _desc(d)
    if kind == 2 and desc is not None:
        desc.append(values.junk(d.rng))
        return "descriptor with an extra item"
    if kind == 3 and desc is not None:
        desc.pop(d.rng.randrange(7))
        return "descriptor missing an item"
    if kind == 4 and desc is not None:
        tensors[tensors.index(desc)] = dict(zip(_FIELDS, desc, strict=True))
        return "descriptor as a map"
    value: Any = d.rng.choice(({}, None, "x", 5, [[]], [None], [["tensor"] * 7]))
    d.put("tensors", value)
    return f"tensors = {value!r:.30}"


def _desc_many(d: Draft) -> str | None:
    desc = _desc(d)
    if desc is None:
        return None
    count = d.rng.choice((4096, 4097, 10000))
    d.put("tensors", msgspec.Raw(encode([desc] * count)))
    return f"{count} descriptors"


def _retarget(d: Draft) -> str | None:
    desc = _desc(d)
    buffers = d.listed("buffers")
    if desc is None or not buffers:
        return None
    desc[5] = d.rng.randrange(len(buffers))
    entry = buffers[desc[5]]
    size = entry.get("nbytes") if isinstance(entry, dict) else None
    if isinstance(size, int) and isinstance(desc[6], int):
        desc[4] = max(0, size - desc[6]) + d.rng.choice((0, 0, 1, 16, -16))
    return f"descriptor moved to buffer {desc[5]} at {desc[4]}"


DESCRIPTOR_OPS: tuple[Op, ...] = (_desc_field, _desc_field, _desc_field, _desc_list, _desc_many, _retarget)


# -- the body ------------------------------------------------------------------------------------


def _nodes(holder: list[Any], limit: int = 4000) -> list[tuple[Any, Any]]:
    """``(container, key)`` of every value of the body, root first (tree tuples opened up to 32 deep,
    so that writing the body back never recurses far)."""
    found: list[tuple[Any, Any]] = []
    stack: list[tuple[Any, Any, int]] = [(holder, 0, 0)]
    while stack and len(found) < limit:
        parent, key, depth = stack.pop()
        found.append((parent, key))
        node = parent[key]
        if isinstance(node, msgspec.msgpack.Ext) and node.code == _EXT_TUPLE and depth < 32:
            try:
                items = msgspec.msgpack.decode(node.data)
            except msgspec.MsgspecError:
                continue
            if not isinstance(items, list):
                continue
            node = parent[key] = BodyTuple(items)
        if isinstance(node, BodyTuple):
            stack.extend((node.items, i, depth + 1) for i in range(len(node.items)))
        elif isinstance(node, list):
            stack.extend((node, i, depth + 1) for i in range(len(node)))
        elif isinstance(node, dict):
            stack.extend((node, k, depth + 1) for k in node)
    return found


def _body(d: Draft) -> tuple[list[Any], list[tuple[Any, Any]]]:
    holder = [d.get("body")]
    return holder, _nodes(holder)


def _store(d: Draft, holder: list[Any]) -> None:
    d.put("body", msgspec.Raw(encode(holder[0])))


def _replace(d: Draft, make: Any, what: str, pick: Any = None) -> str:
    """Replace one body node (chosen by ``pick`` among the nodes, or any) by ``make(node)``."""
    holder, nodes = _body(d)
    choices = [n for n in nodes if pick(n[0][n[1]])] if pick is not None else nodes
    if not choices:
        choices = nodes
    parent, key = d.rng.choice(choices)
    parent[key] = make(parent[key])
    _store(d, holder)
    return what


def _is_ref(node: Any) -> bool:
    return isinstance(node, msgspec.msgpack.Ext) and node.code == _EXT_TENSOR


def _tensor_ref(d: Draft) -> str:
    rng = d.rng
    tensors = d.listed("tensors") or []

    def make(node: Any) -> Any:
        kind = rng.randrange(3)
        if kind == 0:
            index = rng.choice((0, 1, len(tensors), len(tensors) + 1, 2**31, 2**32 - 1))
            return msgspec.msgpack.Ext(_EXT_TENSOR, _INDEX.pack(index))
        if kind == 1:
            return msgspec.msgpack.Ext(_EXT_TENSOR, rng.randbytes(rng.choice((0, 1, 3, 5, 8))))
        data = node.data if isinstance(node, msgspec.msgpack.Ext) else b"\0" * 4
        return msgspec.msgpack.Ext(rng.choice((0, 2, 3, 4, 127, -1, -128)), data)

    return _replace(d, make, "tensor reference changed", _is_ref)


def _ext_chain(d: Draft) -> str:
    rng = d.rng
    depth = rng.choice((1, 2, 3, 10, 60, 62, 63, 64, 65, 66, 100, 200, 1000))
    prefix = rng.choice((b"", b"\x91", b"\x92\xc0"))
    leaf = rng.choice(
        (
            encode([1]),
            encode([]),
            b"",
            encode(1),
            encode([1]) + b"\x00",
            rawmp.ext(_EXT_TENSOR, _INDEX.pack(0)),
            b"\x91",
            b"\xc0",
        )
    )
    raw = rawmp.ext_chain([(_EXT_TUPLE, prefix)] * depth, leaf)
    return _replace(d, lambda _: msgspec.Raw(raw), f"ext(2) chain {depth} deep (prefix {prefix.hex()})")


def _deep(d: Draft) -> str:
    rng = d.rng
    depth = rng.choice((10, 40, 58, 60, 61, 62, 63, 64, 65, 66, 70, 100, 200))
    openers = [rng.choice((b"\x91", b"\x81\xa1k", b"\x92\xc0", b"\x81\x00")) for _ in range(depth)]
    raw = rawmp.nested(openers, rng.choice((b"\xc0", b"\x90", b"\x80", rawmp.ext(_EXT_TENSOR, _INDEX.pack(0)))))
    return _replace(d, lambda _: msgspec.Raw(raw), f"containers nested {depth} deep")


def _wrong_type(d: Draft) -> str:
    return _replace(d, lambda _: values.junk(d.rng), "a body value of another type")


_ODDITIES = (
    b"\xa2\xff\xfe",  # invalid UTF-8
    b"\xa3\xed\xa0\x80",  # an encoded surrogate
    b"\xcf" + (5).to_bytes(8, "big"),  # a small uint in 8 bytes
    b"\xd3" + (-1).to_bytes(8, "big", signed=True),
    b"\xdb\x00\x00\x00\x01a",  # str32 of one byte
    b"\xdd\xff\xff\xff\xff",  # an array claiming 2**32-1 items
    b"\xdf\xff\xff\xff\xff",
    b"\xc6\xff\xff\xff\xff",  # bin32 claiming 4 GiB
    b"\xdb\xff\xff\xff\xff",
    b"\xc9\xff\xff\xff\xff\x02",  # ext32 claiming 4 GiB
    b"\xc1",  # never used
    b"\xd4\xff\x00",  # ext -1 (a timestamp) of one byte
    b"\xd6\xff\x00\x00\x00\x00",  # a valid timestamp
    b"\xc7\x0c\xff" + bytes(12),
    b"\xca\x7f\xc0\x00\x00",  # float32 NaN
)


def _oddity(d: Draft) -> str:
    raw = d.rng.choice(_ODDITIES)
    return _replace(d, lambda _: msgspec.Raw(raw), f"raw {raw[:8].hex()}")


def _dict_keys(d: Draft) -> str:
    rng = d.rng

    def make(node: Any) -> Any:
        if not isinstance(node, dict) or not node:
            return node
        key = rng.choice(list(node))
        kind = rng.randrange(5)
        if kind == 0:
            pairs = [(encode(k), encode(v)) for k, v in node.items()]
            pairs.insert(rng.randrange(len(pairs) + 1), (encode(key), encode(values.junk(rng))))
            return msgspec.Raw(rawmp.build_map(pairs))
        if kind == 1:
            del node[key]
        elif kind == 2:
            node[rng.choice(("zz_unknown", "", "Kind", "__class__"))] = values.junk(rng)
        elif kind == 3:
            pairs = [(encode(k if k != key else rng.choice((0, b"k", None, 1.5))), encode(v)) for k, v in node.items()]
            return msgspec.Raw(rawmp.build_map(pairs))
        else:
            node[f"{key}_"] = node.pop(key)
        return node

    return _replace(d, make, "a map of the body rekeyed", lambda n: isinstance(n, dict) and bool(n))


def _tag(d: Draft) -> str:
    tags = ("rpc.Value", "diffusion.Output", "media.Video", "", 5, None, "diffusion.output", "diffusion.RunnerOutput")

    def make(node: Any) -> Any:
        if isinstance(node, dict):
            node["kind"] = d.rng.choice(tags)
        return node

    return _replace(d, make, "a union tag changed", lambda n: isinstance(n, dict) and "kind" in n)


def _random_body(d: Draft) -> str:
    if d.rng.random() < 0.5:
        d.put("body", values.junk(d.rng, 4))
        return "body replaced by a random value"
    d.put("body", msgspec.Raw(d.rng.randbytes(d.rng.randrange(1, 64))))
    return "body replaced by random bytes"


def _alias(d: Draft) -> str:
    holder, nodes = _body(d)
    refs = [n for n in nodes if _is_ref(n[0][n[1]])]
    if not refs:
        return _wrong_type(d)
    source = d.rng.choice(refs)
    parent, key = d.rng.choice(nodes)
    parent[key] = source[0][source[1]]
    _store(d, holder)
    return "a tensor reference copied to another place"


BODY_OPS: tuple[Op, ...] = (
    _tensor_ref,
    _ext_chain,
    _ext_chain,
    _deep,
    _deep,
    _wrong_type,
    _wrong_type,
    _oddity,
    _dict_keys,
    _tag,
    _random_body,
    _alias,
)
