"""Case generation: a valid seed message, then structural mutations of one family, deterministically.

The seeds are messages of the built-in types and of types that hold no tensor (``seeds.PLAIN``,
open and closed), whose bodies the decoder reads on its shorter path.

``generate(seed, index)`` depends on nothing but its two arguments (no pid, no clock, no victim):
every process builds the same case, and what is live (names, fds, capabilities) is bound when the
case is materialized. Families:

- ``legit``: a valid message, unchanged (it must decode: the harness's own check);
- ``header``: the tag (magic, wire version, type id, version), the fingerprint, frame 0's items
  dropped, added, duplicated, reordered, retyped; frame 0 not an array (a wire-1 map among others);
  frame 0 up to the body made that of a type whose body the decoder reads alone (``seeds.PLAIN``);
  frame 0 grown to a byte under, at or over a size where the decoder changes how it bounds it;
- ``buffers``: ``[nbytes, handle]`` entries added, removed, duplicated, swapped, misshapen, retyped,
  nbytes edges; inline frames;
- ``handles``: transport tag, name, fd, generation, offset, capability, fields, victim targets;
- ``queue``: the worker's own queue tensors, their handles forged (``ops_table.QUEUE_OPS``): of
  another sender, ids older, taken already, never issued, negative, huge, of the wrong type, one
  tensor named twice, entries reordered;
- ``victim``: every handle forged to name victim targets (slots in flight, one-shots);
- ``leaked``: the victim's one leaked message, as sent or with its capability used elsewhere;
- ``descriptors``: the tensor extensions of the body (``ext(1)`` in a buffer, ``ext(3)`` in frame
  0's data): kind, dtype, rank, flags, shape, strides, buffer, offset, nbytes, bytes after the
  dims, the code, the payload's length; dropped, turned into wire-1 forms, copied many times;
- ``data``: frame 0's data under its ``ext(3)`` ranges: cut, grown, shifted, retyped, its bin
  header non-canonical or lying, opener bytes, one range read many times, ranges overlapping,
  the data item dropped (``tools.fuzz.ops_data``);
- ``body``: tensor extensions, extension codes and chains, deep nesting, wrong types, raw oddities,
  a field (unknown or known) nested past any limit, a list of many copies of one struct;
- ``damage``: byte-level damage to frame 0 (mostly where its items start, its tag, buffer table
  and body) or an inline frame; ``blob``: the joined form, damaged.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.fuzz import damage, decoders, ops_data, ops_table, ops_tensors, targets
from tools.fuzz.case import Case, Export
from tools.fuzz.draft import BUFFERS, Draft, Live, LiveHandle, finish, start
from tools.fuzz.ops_table import Op
from tools.fuzz.seeds import EMBEDDED, LAYOUTS, LEAKED, OUT_OF_BAND, SEEDS, Layout, Template, template

__all__ = ["FAMILIES", "generate"]

FAMILIES: tuple[tuple[str, int], ...] = (
    ("legit", 3),
    ("header", 8),
    ("buffers", 10),
    ("handles", 18),
    ("queue", 8),
    ("victim", 12),
    ("leaked", 3),
    ("descriptors", 14),
    ("data", 10),
    ("body", 16),
    ("damage", 11),
    ("blob", 5),
)
_NAMES = [name for name, _ in FAMILIES]
_WEIGHTS = [weight for _, weight in FAMILIES]
_MODES = ("memfd", "memfd", "named", "oneshot", "queue", "cuda")


def _template(rng: random.Random, source: str) -> Template:
    """A template of any seed (``source`` "any"), of one with out-of-band buffers ("oob"), or mostly
    (four in five) of one with tensor bytes in frame 0's data ("data")."""
    if source == "data" and rng.random() < 0.2:
        source = "any"
    layouts: tuple[Layout, ...] = {"any": LAYOUTS, "oob": OUT_OF_BAND, "data": EMBEDDED}[source]
    while True:
        tpl = template(rng.randrange(len(SEEDS)), rng.choice(layouts))
        if source == "any" or (tpl.oob if source == "oob" else tpl.data):
            return tpl


def _exports(rng: random.Random, tpl: Template, modes: tuple[str, ...] = _MODES) -> list[Export]:
    same = rng.choice(modes) if rng.random() < 0.6 else None
    exports = []
    for _, data in tpl.oob:
        mode = same or rng.choice(modes)
        pad = rng.choice((16, 64, 4096, 8192)) if mode in ("memfd", "named") and rng.random() < 0.2 else 0
        exports.append(Export(mode, data, pad))
    return exports


def _draft(rng: random.Random, family: str, source: str = "any", modes: tuple[str, ...] = _MODES) -> Draft:
    tpl = _template(rng, source)
    d = start(rng, family, tpl, _exports(rng, tpl, modes))
    d.labels.append(tpl.name)
    d.decoder = rng.randrange(len(decoders.CONFIGS))
    d.writable = rng.random() < 0.2
    return d


def _mutate(d: Draft, ops: tuple[Op, ...], count: int) -> None:
    for _ in range(count):
        for _attempt in range(6):
            label = d.rng.choice(ops)(d)
            if label is not None:
                d.labels.append(label)
                break


def _windows(d: Draft) -> tuple[int, list[tuple[int, int]]]:
    """The size of frame 0 as the draft writes it, and where damage hurts most: the first bytes of
    each item (its header: the data's length included) and of each item longer than that."""
    if d.raw_header is not None:
        return len(d.raw_header), [(0, 16)]
    spans = d.spans()
    windows = [(start, min(end, start + 6)) for start, end in spans]
    windows += [(start, min(end, start + 512)) for start, end in spans if end - start > 6]
    return (spans[-1][1] if spans else 1), windows


def _frame0_damage(d: Draft) -> None:
    size, windows = _windows(d)
    d.damage = damage.draw(d.rng, 0, size, windows)


def _extras(d: Draft) -> None:
    """Sometimes some byte damage on top, and sometimes the joined form."""
    if d.rng.random() < 0.08 and not d.no_frames:
        _frame0_damage(d)
        d.labels.append("plus byte damage")
    if d.rng.random() < 0.12:
        d.joined = True
        d.labels.append("joined")


def _legit(rng: random.Random) -> Case:
    d = _draft(rng, "legit", "oob" if rng.random() < 0.7 else "any")
    named = any(e.mode == "named" for e in d.exports)
    d.decoder = rng.choice([i for i in decoders.SAFE if i in decoders.NAMED or not named])
    d.joined = rng.random() < 0.2
    return finish(d, " ".join(d.labels))


def _family(name: str, ops: tuple[Op, ...], source: str = "any") -> Callable[[random.Random], Case]:
    def build(rng: random.Random) -> Case:
        d = _draft(rng, name, source)
        _mutate(d, ops, rng.choice((1, 1, 1, 2, 3)))
        _extras(d)
        return finish(d, "; ".join(d.labels))

    return build


def _queue(rng: random.Random) -> Case:
    d = _draft(rng, "queue", "oob", ("queue",) * 4 + _MODES if rng.random() < 0.3 else ("queue",))
    _mutate(d, ops_table.QUEUE_OPS, rng.choice((1, 1, 2, 3)))
    _extras(d)
    return finish(d, "; ".join(d.labels))


def _victim(rng: random.Random) -> Case:
    d = _draft(rng, "victim", "oob")
    label = ops_table.retarget_all(d, True)
    d.labels.append(label or "no handles")
    _mutate(d, ops_table.HANDLE_OPS[5:9], rng.choice((0, 0, 1, 2)))
    _extras(d)
    return finish(d, "; ".join(d.labels))


def _leaked(rng: random.Random) -> Case:
    tpl = template(LEAKED, (0, 0))  # as the victim sent it: every tensor in a segment of its own
    d = start(rng, "leaked", tpl, [])
    d.labels.append("the victim's leaked message")
    d.decoder = rng.choice(decoders.SAFE)
    buffers = d.listed(BUFFERS) or []
    for k, (entry_index, _) in enumerate(tpl.oob):
        buffers[entry_index][1] = LiveHandle(targets.leaked(k, "handle"))
    if rng.random() < 0.4:
        entry = buffers[tpl.oob[0][0]]
        kind = rng.choice(("memfd", "named"))
        count = targets.MEMFD_SLOTS if kind == "memfd" else targets.NAMED_SLOTS
        index = rng.randrange(count)
        handle = LiveHandle(targets.slot(kind, index, "handle"))
        handle.fields["capability"] = Live(targets.leaked(0, "handle", "capability"))
        entry[1] = handle
        entry[0] = Live(targets.slot(kind, index, "nbytes"))
        d.labels.append(f"its capability on a {kind} victim slot")
    elif rng.random() < 0.5:
        _mutate(d, ops_table.HANDLE_OPS, 1)
    return finish(d, "; ".join(d.labels))


def _damage(rng: random.Random) -> Case:
    d = _draft(rng, "damage")
    if rng.random() < 0.3:
        _mutate(d, ops_table.HANDLE_OPS + ops_tensors.DESCRIPTOR_OPS + ops_data.DATA_OPS + ops_tensors.BODY_OPS, 1)
    target = rng.randrange(1, len(d.frames) + 1) if d.frames and rng.random() < 0.15 else 0
    if target:
        d.damage = damage.draw(rng, target, len(d.frames[target - 1]))
    else:
        _frame0_damage(d)
    d.labels.append(f"byte damage to frame {target}")
    return finish(d, "; ".join(d.labels))


def _blob(rng: random.Random) -> Case:
    d = _draft(rng, "blob")
    d.joined = True
    if rng.random() < 0.85:
        d.damage = damage.draw(rng, -1, 1024)
        d.labels.append("byte damage to the joined blob")
    return finish(d, "; ".join(d.labels))


_BUILDERS: dict[str, Callable[[random.Random], Case]] = {
    "legit": _legit,
    "header": _family("header", ops_table.HEADER_OPS),
    "buffers": _family("buffers", ops_table.BUFFER_OPS),
    "handles": _family("handles", ops_table.HANDLE_OPS, "oob"),
    "queue": _queue,
    "victim": _victim,
    "leaked": _leaked,
    "descriptors": _family("descriptors", ops_tensors.DESCRIPTOR_OPS),
    "data": _family("data", ops_data.DATA_OPS, "data"),
    "body": _family("body", ops_tensors.BODY_OPS),
    "damage": _damage,
    "blob": _blob,
}


def generate(seed: int, index: int) -> Case:
    """Case ``index`` of the run seeded ``seed``."""
    for attempt in range(8):
        rng = random.Random(f"twfuzz/{seed}/{index}/{attempt}" if attempt else f"twfuzz/{seed}/{index}")
        family = rng.choices(_NAMES, _WEIGHTS)[0]
        try:
            return _BUILDERS[family](rng)
        except OverflowError:  # mutations stacked an int msgpack cannot hold: draw again
            continue
    raise AssertionError(f"case {index} of seed {seed}: no encodable draw")
