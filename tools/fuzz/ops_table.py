"""Structural mutations of frame 0's fixed fields, its buffer table, its handles and the inline frames.

Each operator edits a ``Draft`` in place and returns a short label, or None where it does not
apply (the generator then tries another).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec

from codec.generated import REGISTRY
from tools.fuzz import rawmp, targets, values
from tools.fuzz.draft import DELETE, Draft, Live, LiveHandle, encode

__all__ = ["BUFFER_OPS", "HANDLE_OPS", "HEADER_OPS", "Op", "handle_set", "retarget_all"]

Op = Callable[[Draft], "str | None"]

_INFOS = REGISTRY.infos()
_TYPES = [i.type_id for i in _INFOS]
_PRINTS = [i.fingerprint for i in _INFOS]


def _set(d: Draft, key: str, choices: tuple[Any, ...]) -> str:
    value = d.rng.choice(choices)
    if value is DELETE:
        d.pairs = [p for p in d.pairs if p[0] != key]
    else:
        d.put(key, value)
    return f"{key}={value!r:.40}"


def _magic(d: Draft) -> str:
    return _set(d, "magic", ("", "tensorwirf", "TENSORWIRE", "tensorwire\x00", b"tensorwire", 0, None, "x" * 999))


def _wire(d: Draft) -> str:
    return _set(d, "wire", (0, 2, -1, 2**63, 2**64 - 1, "1", 1.0, True, None, DELETE))


def _type(d: Draft) -> str:
    return _set(d, "type", (*_TYPES, "media.video", "", "x" * 300, 7, None, "diffusion.Output\x00", DELETE))


def _version(d: Draft) -> str:
    return _set(d, "version", (0, 2, 3, -1, 2**31, 2**63, 2**64 - 1, "1", 1.5, None, DELETE))


def _fingerprint(d: Draft) -> str:
    mine = d.get("fingerprint")
    own = mine if isinstance(mine, str) else "0" * 64
    return _set(d, "fingerprint", (*_PRINTS, "", "0" * 64, own[:-1], own.upper(), own + "0", 123, None, b"x", DELETE))


def _drop_key(d: Draft) -> str:
    pair = d.pairs.pop(d.rng.randrange(len(d.pairs)))
    return f"drop {pair[0]!r}"


def _extra_key(d: Draft) -> str:
    key = d.rng.choice(("extra", "", "Body", "buffers ", "tensorwire"))
    d.pairs.insert(d.rng.randrange(len(d.pairs) + 1), [key, values.junk(d.rng)])
    return f"extra key {key!r}"


def _dup_key(d: Draft) -> str:
    pair = d.rng.choice(d.pairs)
    value = copy.deepcopy(pair[1]) if d.rng.random() < 0.5 else values.junk(d.rng)
    d.pairs.insert(d.rng.randrange(len(d.pairs) + 1), [pair[0], value])
    return f"duplicate key {pair[0]!r}"


def _shuffle(d: Draft) -> str:
    d.rng.shuffle(d.pairs)
    return "keys shuffled"


def _key_type(d: Draft) -> str:
    pair = d.rng.choice(d.pairs)
    key = pair[0] if isinstance(pair[0], str) else "body"
    pair[0] = d.rng.choice((key.encode(), 0, key.upper(), key + "\x00", None, 1.5))
    return f"key {key!r} -> {pair[0]!r}"


def _not_a_map(d: Draft) -> str:
    d.raw_header = d.rng.choice(
        (
            encode([p[1] for p in d.pairs]),
            msgspec.msgpack.encode("tensorwire"),
            b"",
            b"\xc0",
            b"\x90",
            rawmp.map_header(0),
            b"\xdf\xff\xff\xff\xff",
            b"\xdd\xff\xff\xff\xff\xc0",
            rawmp.map_header(9) + encode("magic") + encode("tensorwire"),
        )
    )
    return "frame 0 not a header map"


HEADER_OPS: tuple[Op, ...] = (
    _magic,
    _wire,
    _type,
    _version,
    _fingerprint,
    _drop_key,
    _extra_key,
    _dup_key,
    _shuffle,
    _key_type,
    _not_a_map,
)


# -- the buffer table and the inline frames -------------------------------------------------------


def _entries(d: Draft) -> list[Any] | None:
    buffers = d.listed("buffers")
    return buffers if buffers else None


def _entry(d: Draft) -> dict[str, Any] | None:
    buffers = _entries(d)
    if buffers is None:
        return None
    entry = d.rng.choice(buffers)
    return entry if isinstance(entry, dict) else None


def _nbytes(d: Draft) -> str | None:
    entry = _entry(d)
    if entry is None:
        return None
    real = entry.get("nbytes")
    real = real if isinstance(real, int) else 0
    entry["nbytes"] = d.rng.choice((*values.EDGE_INTS, real + 1, real - 1, real * 2, real + 4096, "1", None, 1.0))
    return f"nbytes {real} -> {entry['nbytes']!r}"


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
    buffers = d.listed("buffers")
    if buffers is None:
        return None
    frame = d.rng.choice((0, -1, 1, len(d.frames), len(d.frames) + 1, 2**32, 2**63, 2**64 - 1, "1", None))
    entry = {"nbytes": values.edge_int(d.rng), "handle": {"transport": "inline", "frame": frame}}
    if buffers and d.rng.random() < 0.5:
        buffers[d.rng.randrange(len(buffers))] = entry
    else:
        buffers.append(entry)
    return f"inline entry naming frame {frame!r}"


def _entry_junk(d: Draft) -> str | None:
    buffers = d.listed("buffers")
    if buffers is None:
        return None
    junk = d.rng.choice(([], 5, None, "x", {}, {"nbytes": 1}, {"handle": None}, [1, {"transport": "inline"}]))
    if buffers:
        buffers[d.rng.randrange(len(buffers))] = junk
    else:
        buffers.append(junk)
    return f"buffer entry {junk!r:.30}"


def _entry_field(d: Draft) -> str | None:
    entry = _entry(d)
    if entry is None:
        return None
    if d.rng.random() < 0.5 and entry:
        key = d.rng.choice(list(entry))
        del entry[key]
        return f"buffer entry without {key!r}"
    entry[d.rng.choice(("extra", "Nbytes", "frame"))] = values.junk(d.rng)
    return "buffer entry with an extra field"


def _buffers_type(d: Draft) -> str:
    value: Any = d.rng.choice(({}, None, "x", 5, [], b"\x00", DELETE))
    if value is DELETE:
        d.pairs = [p for p in d.pairs if p[0] != "buffers"]
    else:
        d.put("buffers", value)
    return f"buffers = {value!r}"


def _buffers_many(d: Draft) -> str:
    count = d.rng.choice((4096, 4097, 20000))
    d.put("buffers", msgspec.Raw(encode([{"nbytes": 0, "handle": {"transport": "inline", "frame": 1}}] * count)))
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


def handle_set(entry: dict[str, Any], field: str, value: Any) -> None:
    """Set a field of the entry's handle (an override of a bound handle, or a plain dict's key)."""
    handle = entry.get("handle")
    if isinstance(handle, LiveHandle):
        handle.fields[field] = value
    elif isinstance(handle, dict):
        if value is DELETE:
            handle.pop(field, None)
        else:
            handle[field] = value
    else:
        entry["handle"] = {"transport": "shm-slot", field: value}


def _out_of_band(d: Draft) -> dict[str, Any] | None:
    """An entry with a shared-memory handle (bound or not), else any entry."""
    buffers = _entries(d)
    if buffers is None:
        return None
    live = [e for e in buffers if isinstance(e, dict) and isinstance(e.get("handle"), LiveHandle)]
    if live:
        entry: dict[str, Any] = d.rng.choice(live)
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
        return bool(d.exports[ref[2]].mode != "oneshot")
    return bool(ref[2] in ("slots", "leaked"))


def _generation(d: Draft) -> Any:
    entry = _out_of_band(d)
    handle = entry.get("handle") if entry else None
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
    chosen = [e for e in buffers if isinstance(e, dict) and isinstance(e.get("handle"), LiveHandle)]
    if not chosen:
        chosen = [e for e in buffers if isinstance(e, dict)]
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
        entry["handle"] = LiveHandle(handle_ref)
        if d.rng.random() < 0.85:
            entry["nbytes"] = Live(nbytes_ref)
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
    buffers[index] = {"nbytes": nbytes, "handle": handle}
    return f"handle {index} names decoy {kind} ({handle['transport']})"


def _victim_fd(d: Draft) -> str | None:
    entry = _out_of_band(d)
    if entry is None:
        return None
    which = d.rng.choice(targets.FDS)
    entry["handle"] = LiveHandle(targets.slot("memfd", d.rng.randrange(targets.MEMFD_SLOTS), "handle"))
    entry["handle"].fields["fd"] = Live(targets.fd(which))
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
