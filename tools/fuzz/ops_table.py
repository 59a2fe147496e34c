"""Structural mutations of frame 0's tag, fingerprint and items, its buffer table, its handles
(shared-memory and queue ones) and the inline frames.

Frame 0 is ``[tag, fingerprint, data, [[nbytes, handle], ...], body]``; the tag is
``"tensorwire:<wire>:<type id>:<version>"`` (``tools.fuzz.ops_data`` mutates the data). Each
operator edits a ``Draft`` in place and returns a short label, or None where it does not apply (the
generator then tries another).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec

from tensorwire._wire import MAGIC, WIRE_VERSION, tag
from tensorwire.builtins import REGISTRY
from tools.fuzz import rawmp, targets, values
from tools.fuzz.draft import BODY, BUFFERS, DATA, DELETE, FINGERPRINT, TAG, Draft, Live, LiveHandle, encode
from tools.fuzz.seeds import PLAIN

__all__ = [
    "BUFFER_OPS",
    "HANDLE_OPS",
    "HEADER_OPS",
    "QUEUE_OPS",
    "SIZES",
    "Op",
    "handle_set",
    "retarget_all",
    "size",
]

Op = Callable[[Draft], "str | None"]

_INFOS = [*REGISTRY.infos(), *PLAIN.infos()]
_TAGS = [tag(i.type_id, i.version) for i in _INFOS]
_PRINTS = [i.fingerprint for i in _INFOS]
_PLAIN_INFOS = PLAIN.infos()
# frame 0's sizes where the decoder changes how it bounds it (``tensorwire._decoder``: ``_COUNTED``,
# ``_SMALL``, the tight configuration's ``max_header_bytes``), a byte under and over each
SIZES = tuple(n + delta for n in (512, 2048, 4096) for delta in (-1, 0, 1))
DATA_SIZES = (63, 64, 255, 256)  # frame 0's data: a bin8 the decoder counts whole or not, a bin8 or a bin16


def _own_tag(d: Draft) -> tuple[str, str]:
    """The type id and version of the draft's tag (as text, however odd), or those of a built-in type."""
    value = d.get(TAG)
    parts = value.split(":") if isinstance(value, str) else []
    if len(parts) != 4:
        return _INFOS[0].type_id, str(_INFOS[0].version)
    return parts[2], parts[3]


def _number(text: str) -> int | str:
    """``text`` as a version number where it is a short one (else the text itself)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else text


def _tag(d: Draft) -> str:
    type_id, version = _own_tag(d)
    wire = str(WIRE_VERSION)

    def make(magic: str = MAGIC, w: str = wire, t: str = type_id, v: str = version) -> str:
        return f"{magic}:{w}:{t}:{v}"

    choices: tuple[Any, ...] = (
        *_TAGS,  # another type's tag on this body
        make(w="1"),
        make(w="2"),  # the format before frame 0 had its data item
        make(w=str(WIRE_VERSION + 1)),
        make(w="0"),
        make(w="0" + wire),
        make(w="-" + wire),
        make(w=""),
        make(w="\u00b2"),  # a superscript two: a digit, not a decimal
        make(w="\u00b3"),
        make(w="\u0662"),  # an Arabic-Indic two: a decimal
        make(w="\u0663"),
        make(w=wire * 5000),
        make(v="0"),
        make(v="2"),
        make(v="01"),
        make(v="1 "),
        make(v="-1"),
        make(v="1.0"),
        make(v=""),
        make(v="18446744073709551616"),
        make(v="9" * 5000),
        make(t="media.video"),
        make(t=""),
        make(t="x" * 300),
        make(t=type_id + "\x00"),
        make(t=type_id + ":1"),
        make(t="x" * 100_000),
        make(magic="TENSORWIRE"),
        make(magic="tensorwirf"),
        make(magic=""),
        f"{MAGIC}:{wire}:{type_id}",
        f"{MAGIC}:{wire}:{type_id}:{version}:",
        MAGIC,
        "",
        make().encode(),
        make()[:-1],
        make() + "\x00",
        0,
        2,
        None,
        [MAGIC, WIRE_VERSION, type_id, _number(version)],
        {"magic": MAGIC, "wire": WIRE_VERSION},
    )
    value = d.rng.choice(choices)
    d.put(TAG, value)
    return f"tag = {value!r:.60}"


def _fingerprint(d: Draft) -> str:
    mine = d.get(FINGERPRINT)
    own = mine if isinstance(mine, str) else "0" * 64
    choices = (*_PRINTS, "", "0" * 64, own[:-1], own.upper(), own + "0", own.encode(), 123, None, b"x", DELETE)
    value = d.rng.choice(choices)
    if value is DELETE:
        if len(d.items) > FINGERPRINT:
            del d.items[FINGERPRINT]  # the data, the buffer table and the body move up one place
    else:
        d.put(FINGERPRINT, value)
    return f"fingerprint = {value!r:.40}"


def _drop_item(d: Draft) -> str | None:
    if not d.items:
        return None
    index = d.rng.randrange(len(d.items))
    del d.items[index]
    return f"item {index} of frame 0 dropped"


def _extra_item(d: Draft) -> str:
    index = d.rng.randrange(len(d.items) + 1)
    d.items.insert(index, values.junk(d.rng))
    return f"extra item at {index} of frame 0"


def _dup_item(d: Draft) -> str | None:
    if not d.items:
        return None
    index = d.rng.randrange(len(d.items))
    value = copy.deepcopy(d.items[index])
    d.items.insert(d.rng.randrange(len(d.items) + 1), value)
    return f"item {index} of frame 0 duplicated"


def _swap_items(d: Draft) -> str | None:
    if len(d.items) < 2:
        return None
    if d.rng.random() < 0.3:
        d.rng.shuffle(d.items)
        return "items of frame 0 shuffled"
    i, j = d.rng.sample(range(len(d.items)), 2)
    d.items[i], d.items[j] = d.items[j], d.items[i]
    return f"items {i} and {j} of frame 0 swapped"


def _retype_item(d: Draft) -> str | None:
    if not d.items:
        return None
    index = d.rng.randrange(len(d.items))
    d.items[index] = d.rng.choice((values.junk(d.rng), [], {}, None, msgspec.Raw(b"\xc1")))
    return f"item {index} of frame 0 of another type"


def _wire1(d: Draft) -> bytes:
    """Frame 0 in the layout of wire format 1 (a map), built from the draft's items."""
    type_id, version = _own_tag(d)
    items = list(d.items) + [None] * (5 - len(d.items))
    table = d.get(BUFFERS)
    if isinstance(table, list):
        table = [{"nbytes": e[0], "handle": e[1]} if isinstance(e, list) and len(e) == 2 else e for e in table]
    wire = d.rng.choice((1, 1, 0, 3, "1", None))
    pairs: list[tuple[Any, Any]] = [
        ("magic", MAGIC),
        ("wire", wire),
        ("type", type_id),
        ("version", _number(version)),
        ("fingerprint", items[FINGERPRINT]),
        ("buffers", table),
        ("tensors", []),
        ("body", items[BODY]),
    ]
    return rawmp.build_map([(encode(k), encode(v)) for k, v in pairs])


def _not_an_array(d: Draft) -> str:
    old = _wire1(d)
    d.raw_header = d.rng.choice(
        (
            old,
            old,
            rawmp.build_map([(encode(i), encode(v)) for i, v in enumerate(d.items)]),
            msgspec.msgpack.encode(MAGIC),
            msgspec.msgpack.encode(_TAGS[0]),
            b"",
            b"\xc0",
            b"\x80",
            b"\x90",
            rawmp.array_header(5),
            rawmp.array_header(5) + encode(_TAGS[0]),
            rawmp.array_header(5) + encode(_TAGS[0]) + encode(_PRINTS[0]),
            rawmp.array_header(5) + encode(_TAGS[0]) + encode(_PRINTS[0]) + b"\xc4\x00",
            b"\xdd\xff\xff\xff\xff",
            b"\xdd\xff\xff\xff\xff\xc0",
            b"\xdc" + len(d.items).to_bytes(2, "big") + b"".join(encode(v) for v in d.items),  # a wide header
            rawmp.map_header(9) + encode("magic") + encode(MAGIC),
        )
    )
    what = "a wire-1 map" if d.raw_header is old else d.raw_header[:12].hex() or "nothing"
    return f"frame 0 replaced by {what}"


def _plain_prefix(d: Draft) -> str:
    """Frame 0 up to the body made that of a type the decoder reads the body of alone (``tensorwire._plain``):
    its tag and fingerprint, no data, no buffers, no other frame; the body as it was."""
    info = d.rng.choice(_PLAIN_INFOS)
    body = d.items[BODY] if len(d.items) > BODY else d.items[-1] if d.items else None
    d.items = [tag(info.type_id, info.version), info.fingerprint, b"", [], body]
    d.frames = []
    return f"frame 0 up to the body of {info.type_id}"


def size(d: Draft) -> int:
    """The size of frame 0 as ``finish`` writes it (about, where a value is bound later)."""
    spans = d.spans()
    return spans[-1][1] if spans else len(rawmp.array_header(0))


def _longest_str(node: Any) -> tuple[Any, Any] | None:
    """``(container, key)`` of the longest string value of ``node`` (iterative), None if it has none."""
    best: tuple[Any, Any] | None = None
    longest = -1
    stack = [node]
    while stack:
        value = stack.pop()
        pairs = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in pairs:
            if isinstance(item, str) and len(item) > longest:
                best, longest = (value, key), len(item)
            elif isinstance(item, dict | list):
                stack.append(item)
    return best


def _sized(d: Draft) -> str | None:
    """Frame 0 grown to a size where the decoder changes strategy (``SIZES``): frame 0's data padded
    at its end where it has bytes (or made one of ``DATA_SIZES`` bytes), else the body's longest
    string lengthened."""
    data = d.data()
    if data and d.rng.random() < 0.3:
        want = max(d.rng.choice(DATA_SIZES), len(data))
        d.put(DATA, data + bytes(want - len(data)))
        return f"frame 0's data padded to {want} bytes"
    before = size(d)
    body = d.get(BODY)
    found = None if data else _longest_str(body)
    sizes = [n for n in SIZES if n > before]
    if (not data and found is None) or not sizes:
        return None
    target = d.rng.choice(sizes)
    added = 0
    for _attempt in range(4):  # a length header may widen (or narrow back): measure again
        grow = max(target - size(d), -added)
        if not grow:
            break
        added += grow
        if data:
            data = data[: len(data) - max(-grow, 0)] + bytes(max(grow, 0))
            d.put(DATA, data)
        elif found is not None:
            parent, key = found
            parent[key] = parent[key][: len(parent[key]) - max(-grow, 0)] + "x" * max(grow, 0)
    return f"frame 0 grown to {size(d)} bytes (for {target})"


HEADER_OPS: tuple[Op, ...] = (
    _tag,
    _tag,
    _tag,
    _fingerprint,
    _drop_item,
    _extra_item,
    _dup_item,
    _swap_items,
    _retype_item,
    _not_an_array,
    _plain_prefix,
    _sized,
    _sized,
)


# -- the buffer table and the inline frames -------------------------------------------------------


def _entries(d: Draft) -> list[Any] | None:
    buffers = d.listed(BUFFERS)
    return buffers if buffers else None


def _entry(d: Draft) -> list[Any] | None:
    """A ``[nbytes, handle]`` entry of the buffer table (None if the one drawn is something else)."""
    buffers = _entries(d)
    if buffers is None:
        return None
    entry = d.rng.choice(buffers)
    return entry if isinstance(entry, list) and entry else None


def _nbytes(d: Draft) -> str | None:
    entry = _entry(d)
    if entry is None:
        return None
    real = entry[0] if isinstance(entry[0], int) else 0
    entry[0] = d.rng.choice((*values.EDGE_INTS, real + 1, real - 1, real * 2, real + 4096, "1", None, 1.0, True))
    return f"nbytes {real} -> {entry[0]!r}"


def _entry_drop(d: Draft) -> str | None:
    buffers = _entries(d)
    if buffers is None:
        return None
    buffers.pop(d.rng.randrange(len(buffers)))
    return "buffer entry dropped"


def _entry_dup(d: Draft) -> str | None:
    buffers = _entries(d)
    if buffers is None:
        return None
    buffers.insert(d.rng.randrange(len(buffers) + 1), copy.deepcopy(d.rng.choice(buffers)))
    return "buffer entry duplicated"


def _entry_swap(d: Draft) -> str | None:
    buffers = _entries(d)
    if buffers is None or len(buffers) < 2:
        return None
    i, j = d.rng.sample(range(len(buffers)), 2)
    buffers[i], buffers[j] = buffers[j], buffers[i]
    return f"buffer entries {i} and {j} swapped"


def _entry_inline(d: Draft) -> str | None:
    buffers = d.listed(BUFFERS)
    if buffers is None:
        return None
    frame = d.rng.choice((0, -1, 1, len(d.frames), len(d.frames) + 1, 2**32, 2**63, 2**64 - 1, "1", None))
    entry = [values.edge_int(d.rng), {"transport": "inline", "frame": frame}]
    if buffers and d.rng.random() < 0.5:
        buffers[d.rng.randrange(len(buffers))] = entry
    else:
        buffers.append(entry)
    return f"inline entry naming frame {frame!r}"


def _entry_junk(d: Draft) -> str | None:
    buffers = d.listed(BUFFERS)
    if buffers is None:
        return None
    inline = {"transport": "inline", "frame": 1}
    junk = d.rng.choice(
        (
            [],
            5,
            None,
            "x",
            {},
            [1],
            [1, None],
            [1, {}],
            [1, {"transport": "inline"}],
            [-1, inline],
            [2**64 - 1, inline],
            [1.5, inline],
            [inline, 1],  # the pair the other way round
            [1, inline, "extra"],
            {"nbytes": 1, "handle": inline},  # an entry of wire format 1
            [1, msgspec.msgpack.Ext(1, b"")],
        )
    )
    if buffers:
        buffers[d.rng.randrange(len(buffers))] = junk
    else:
        buffers.append(junk)
    return f"buffer entry {junk!r:.30}"


def _entry_field(d: Draft) -> str | None:
    entry = _entry(d)
    if entry is None:
        return None
    kind = d.rng.randrange(4)
    if kind == 0:
        del entry[d.rng.randrange(len(entry))]
        return "buffer entry missing an item"
    if kind == 1:
        entry.insert(d.rng.randrange(len(entry) + 1), values.junk(d.rng))
        return "buffer entry with an extra item"
    if kind == 2:
        entry.reverse()
        return "buffer entry as [handle, nbytes]"
    entry[d.rng.randrange(len(entry))] = values.junk(d.rng)
    return "buffer entry item of another type"


def _buffers_type(d: Draft) -> str:
    value: Any = d.rng.choice(({}, None, "x", 5, [], b"\x00", [[]], msgspec.msgpack.Ext(2, b"\x90"), DELETE))
    if value is DELETE:
        if len(d.items) > BUFFERS:
            del d.items[BUFFERS]  # the body moves into its place
    else:
        d.put(BUFFERS, value)
    shown = f"ext({value.code}, {bytes(value.data).hex()})" if isinstance(value, msgspec.msgpack.Ext) else repr(value)
    return f"buffers = {shown}"  # (an Ext's repr names its address: the label would differ per process)


def _buffers_many(d: Draft) -> str:
    count = d.rng.choice((4096, 4097, 20000))
    d.put(BUFFERS, msgspec.Raw(encode([[0, {"transport": "inline", "frame": 1}]] * count)))
    return f"{count} buffer entries"


def _frames(d: Draft) -> str:
    kind = d.rng.randrange(5)
    if kind == 0:
        d.frames.append(d.rng.randbytes(d.rng.choice((0, 1, 16, 1000))))
        return "extra frame"
    if kind == 1 and d.frames:
        d.frames.pop(d.rng.randrange(len(d.frames)))
        return "frame dropped"
    if kind == 2 and d.frames:
        i = d.rng.randrange(len(d.frames))
        change = d.rng.choice((-1, 1, -8, 8, 4096))
        frame = d.frames[i]
        d.frames[i] = frame[:change] if change < 0 else frame + bytes(change)
        return f"frame {i + 1} resized by {change}"
    if kind == 3:
        d.no_frames = True
        return "no frames at all"
    d.frames = [b""] * len(d.frames)
    return "every inline frame empty"


BUFFER_OPS: tuple[Op, ...] = (
    _nbytes,
    _entry_drop,
    _entry_dup,
    _entry_swap,
    _entry_inline,
    _entry_junk,
    _entry_field,
    _buffers_type,
    _buffers_many,
    _frames,
)


# -- handles -------------------------------------------------------------------------------------


def _handle(entry: list[Any]) -> Any:
    return entry[1] if len(entry) > 1 else None


def _set_handle(entry: list[Any], handle: Any) -> None:
    if len(entry) > 1:
        entry[1] = handle
    else:
        entry.append(handle)


def handle_set(entry: list[Any], field: str, value: Any) -> None:
    """Set a field of the entry's handle (an override of a bound handle, or a plain dict's key)."""
    handle = _handle(entry)
    if isinstance(handle, LiveHandle):
        handle.fields[field] = value
    elif isinstance(handle, dict):
        if value is DELETE:
            handle.pop(field, None)
        else:
            handle[field] = value
    else:
        _set_handle(entry, {"transport": "shm-slot", field: value})


def _is_live(entry: Any) -> bool:
    return isinstance(entry, list) and len(entry) > 1 and isinstance(entry[1], LiveHandle)


def _out_of_band(d: Draft) -> list[Any] | None:
    """An entry with a shared-memory handle (bound or not), else any entry."""
    buffers = _entries(d)
    if buffers is None:
        return None
    live = [e for e in buffers if _is_live(e)]
    if live:
        entry: list[Any] = d.rng.choice(live)
        return entry
    return _entry(d)


def _field_op(field: str, draw: Callable[[Draft], Any]) -> Op:
    def op(d: Draft) -> str | None:
        entry = _out_of_band(d)
        if entry is None:
            return None
        value = draw(d)
        handle_set(entry, field, value)
        shown = value.ref if isinstance(value, Live) else value
        return f"handle {field} = {shown!r:.60}"

    op.__name__ = f"_{field}"
    return op


def _has_generation(d: Draft, ref: list[Any]) -> bool:
    """Whether the handle ``ref`` names is a pool slot's (one-shot handles have no generation)."""
    if ref[1] == "own":
        return bool(d.exports[ref[2]].mode in ("memfd", "named", "cuda"))
    return bool(ref[2] in ("slots", "leaked"))


def _generation(d: Draft) -> Any:
    entry = _out_of_band(d)
    handle = _handle(entry) if entry else None
    if isinstance(handle, LiveHandle) and _has_generation(d, handle.ref) and d.rng.random() < 0.4:
        return Live(["add", [*handle.ref, "generation"], d.rng.choice((-1, 1, 2, -(2**20)))])
    return d.rng.choice((0, 1, 2, -1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, "1", None, DELETE, True))


def _offset(d: Draft) -> Any:
    return d.rng.choice((-1, 0, 1, 8, 15, 16, 4095, 4096, 65535, 65536, 2**31, 2**62, 2**63 - 1, 2**64 - 1, "0", None))


def retarget_all(d: Draft, every: bool) -> str | None:
    """Point one out-of-band handle (or, with ``every``, all of them) at victim targets; the entries'
    sizes follow the targets' (mostly), capabilities stay zero unless a later op sets them."""
    buffers = _entries(d)
    if buffers is None:
        return None
    chosen = [e for e in buffers if _is_live(e)]
    if not chosen:
        chosen = [e for e in buffers if isinstance(e, list) and e]
    if not chosen:
        return None
    if not every:
        chosen = [d.rng.choice(chosen)]
    used: list[list[Any]] = []
    for entry in chosen:
        handle_ref, nbytes_ref = values.victim_handle(d.rng)
        if handle_ref in used:
            handle_ref, nbytes_ref = values.victim_handle(d.rng)
        used.append(handle_ref)
        _set_handle(entry, LiveHandle(handle_ref))
        if d.rng.random() < 0.85:
            entry[0] = Live(nbytes_ref)
    return f"{len(chosen)} handle(s) -> victim targets"


def _to_victim(d: Draft) -> str | None:
    return retarget_all(d, d.rng.random() < 0.6)


def _to_decoy(d: Draft) -> str | None:
    buffers = _entries(d)
    if buffers is None:
        return None
    kind = d.rng.choice(targets.DECOYS)
    if d.rng.random() < 0.5:
        handle: dict[str, Any] = {"transport": "shm", "name": Live(targets.decoy(kind))}
    else:
        handle = {"transport": "shm-slot", "name": Live(targets.decoy(kind)), "offset": 0, "generation": 1}
        if d.rng.random() < 0.3:
            handle["fd"] = values.fds(d.rng, d.exports)
    handle["capability"] = values.capabilities(d.rng, d.exports)
    nbytes: Any = Live(["ctx", "victim", "decoy_nbytes", kind]) if d.rng.random() < 0.8 else values.edge_int(d.rng)
    index = d.rng.randrange(len(buffers))
    buffers[index] = [nbytes, handle]
    return f"handle {index} names decoy {kind} ({handle['transport']})"


def _victim_fd(d: Draft) -> str | None:
    entry = _out_of_band(d)
    if entry is None:
        return None
    which = d.rng.choice(targets.FDS)
    handle = LiveHandle(targets.slot("memfd", d.rng.randrange(targets.MEMFD_SLOTS), "handle"))
    handle.fields["fd"] = Live(targets.fd(which))
    _set_handle(entry, handle)
    return f"victim slot name with the victim's {which} fd"


def _handle_junk(d: Draft) -> str | None:
    entry = _out_of_band(d)
    if entry is None:
        return None
    if d.rng.random() < 0.5:
        handle_set(entry, d.rng.choice(("extra", "Name", "fd ", "nbytes")), values.junk(d.rng))
        return "handle with an extra field"
    field = d.rng.choice(("name", "capability", "offset", "generation", "fd", "transport"))
    handle_set(entry, field, DELETE)
    return f"handle without {field}"


HANDLE_OPS: tuple[Op, ...] = (
    _field_op("transport", lambda d: d.rng.choice(values.TAGS)),
    _field_op("name", lambda d: values.names(d.rng, d.exports)),
    _field_op("name", lambda d: values.names(d.rng, d.exports)),
    _field_op("fd", lambda d: values.fds(d.rng, d.exports)),
    _field_op("fd", lambda d: values.fds(d.rng, d.exports)),
    _field_op("generation", _generation),
    _field_op("offset", _offset),
    _field_op("capability", lambda d: values.capabilities(d.rng, d.exports)),
    _field_op("capability", lambda d: values.capabilities(d.rng, d.exports)),
    _to_victim,
    _to_decoy,
    _victim_fd,
    _handle_junk,
)


# -- queue handles ---------------------------------------------------------------------------------


def _queue_handle(d: Draft) -> str | None:
    """An entry's handle replaced by a queue handle of hostile fields (``values.queue_handle``)."""
    buffers = _entries(d)
    if buffers is None:
        return None
    index = d.rng.randrange(len(buffers))
    entry = buffers[index]
    if not isinstance(entry, list) or not entry:
        return None
    _set_handle(entry, values.queue_handle(d.rng, d.exports))
    return f"handle {index} a forged queue handle"


def _queue_again(d: Draft) -> str | None:
    """A queue tensor of the message named again by a later entry: the same id, another tensor id
    of its message, or an older message of its sender (stale once the first is read)."""
    buffers = _entries(d)
    queued = [e for e in buffers or () if _is_live(e) and d.exports[e[1].ref[2]].mode == "queue"]
    if buffers is None or not queued:
        return None
    entry = d.rng.choice(queued)
    twin = copy.deepcopy(entry)
    kind = d.rng.choice(("same", "tensor", "older"))
    field = "message" if kind == "older" else "tensor"
    if kind != "same":
        delta = -1 if kind == "older" else d.rng.choice(values.QUEUE_DELTAS)
        twin[1].fields[field] = Live(["add", [*entry[1].ref, field], delta])
    after = buffers.index(entry) + 1
    later = [k for k in range(after, len(buffers))]
    if later and d.rng.random() < 0.5:
        buffers[d.rng.choice(later)] = twin
    else:
        buffers.insert(d.rng.randrange(after, len(buffers) + 1), twin)
    return {
        "same": "a queue tensor named twice",
        "tensor": "another tensor id of a queue message named",
        "older": "an older message of a queue sender named after a newer one",
    }[kind]


QUEUE_OPS: tuple[Op, ...] = (
    _queue_handle,
    _queue_handle,
    _field_op("sender", lambda d: values.queue_sender(d.rng, d.exports)),
    _field_op("message", lambda d: values.queue_id(d.rng, d.exports, "message")),
    _field_op("message", lambda d: values.queue_id(d.rng, d.exports, "message")),
    _field_op("tensor", lambda d: values.queue_id(d.rng, d.exports, "tensor")),
    _queue_again,
    _entry_swap,
    _nbytes,
)
