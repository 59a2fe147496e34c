"""The compiled shorter paths (``tensorwire._speedups``): built here, each step as the Python code
of ``Encoder.encode`` and ``Decoder.decode`` takes it, and None (the full path) wherever that code
goes on. ``tests/test_plain_path.py`` and ``tests/test_plain_trees.py`` run every case both ways."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorwire as tw
from tensorwire._native import SPEEDUPS
from tensorwire._plan import UNBOUNDED, type_plan
from tensorwire._scan import OPENERS
from tensorwire._twin import BECOME
from tests.conftest import minimal, write_schemas
from tests.test_plain_path import _load, _python_decoder, _python_encoder, _ticket

pytestmark = pytest.mark.skipif(SPEEDUPS is None, reason="tensorwire._speedups is not built here")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> tw.Registry:
    return _load(tmp_path_factory.mktemp("open"), False)


def test_switched_off_by_the_environment_the_python_paths_give_the_same_frames() -> None:
    code = (
        "import tensorwire as tw; from tensorwire._native import SPEEDUPS; from tensorwire.builtins import rpc\n"
        "e, d = tw.Encoder(), tw.Decoder(tw.builtins.REGISTRY)\n"
        "m = rpc.Value(value=[1, 'a'])\n"
        "frames = e.encode(m)\n"
        "print(SPEEDUPS is None, e._native is None, d._native is None, d.decode(frames) == m, frames[0].hex())"
    )
    env = {**os.environ, "TENSORWIRE_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    *flags, hexed = out.stdout.split()
    assert flags == ["True", "True", "True", "True"]
    assert bytes.fromhex(hexed) == tw.Encoder().encode(tw.builtins.rpc.Value(value=[1, "a"]))[0]


# -- count_openers


def test_each_byte_counts_as_an_opener_exactly_where_the_python_count_does() -> None:
    assert SPEEDUPS is not None
    for byte in range(256):
        assert SPEEDUPS.count_openers(bytes([byte]) * 3) == (3 if byte in OPENERS else 0), hex(byte)


@given(st.binary(max_size=3000))
def test_the_count_of_any_bytes_is_the_translate_count(data: bytes) -> None:
    assert SPEEDUPS is not None
    expected = len(data) - len(data.translate(None, OPENERS))
    assert SPEEDUPS.count_openers(data) == expected
    assert SPEEDUPS.count_openers(bytearray(data)) == expected == SPEEDUPS.count_openers(memoryview(data))


def test_the_count_takes_only_buffers() -> None:
    assert SPEEDUPS is not None
    with pytest.raises(TypeError, match="a bytes-like object is required, not 'str'"):
        SPEEDUPS.count_openers("\x80")


# -- plain_decode


def _decode_state(decoder: tw.Decoder) -> Any:
    assert decoder._native is not None
    return decoder._native


def test_a_plain_frame_is_decoded_into_the_class_itself(registry: tw.Registry) -> None:
    assert SPEEDUPS is not None
    decoder = tw.Decoder(registry)
    message = registry.type("plain.Flat")(id="f", count=2, tags=["a"])
    frames = tw.Encoder().encode(message)
    for given_frames in (frames, tuple(frames)):
        got = SPEEDUPS.plain_decode(_decode_state(decoder), given_frames)
        assert type(got) is type(message) and got == message  # the twin's instance made the class's
    got = SPEEDUPS.plain_decode(_decode_state(decoder), tw.Encoder().encode(_ticket(registry)))
    assert type(got) is registry.type("plain.Ticket") and got == _ticket(registry)  # counted, then read


class _Frames(list[Any]):
    pass


def test_frames_the_compiled_decode_does_not_read_go_to_the_python_code(registry: tw.Registry) -> None:
    assert SPEEDUPS is not None
    decoder = tw.Decoder(registry)
    state = _decode_state(decoder)
    head = tw.Encoder().encode(_ticket(registry))[0]
    assert type(head) is bytes
    bare_end = head.index(b"\xc4\x00\x90") + 3
    released = memoryview(head)
    released.release()
    unread: dict[str, Any] = {
        "no frames": [],
        "two frames": [head, b""],
        "a list subclass": _Frames([head]),
        "not a buffer": [7],
        "a str": [head.decode("latin-1")],
        "a view that is not contiguous": [memoryview(head + head)[::2]],
        "a released view": [released],
        "72 bytes": [head[:72]],
        "over the header limit": [head + b"\x00" * (decoder._max_header - len(head) + 1)],
        "another fingerprint": [head[: bare_end - 67] + b"0" * 64 + head[bare_end - 3 :]],
        "data in frame 0": [head[: bare_end - 3] + b"\xc4\x01z\x90" + head[bare_end:]],
        "a tag that is not a str": [head[:1] + b"\x07" + head[2:]],
        "a tag's length past the frame": [head[:1] + b"\xbf" + head[2:80]],
        "a long tag's length past the frame": [head[:1] + b"\xd9\xff" + head[3:100]],
        "a damaged body": [head[:bare_end] + b"\xc1" + head[bare_end + 1 :]],
        "a body cut short": [head[:-2]],
        "bytes after the body": [head + b"\xc0"],
        "a set": {head},
    }
    for name, frames in unread.items():
        assert SPEEDUPS.plain_decode(state, frames) is None, name
    for frame in (head, bytearray(head), memoryview(head), memoryview(b"." + head)[1:], memoryview(head).cast("c")):
        got = SPEEDUPS.plain_decode(state, [frame])  # any contiguous buffer: read through a view of it
        assert type(got) is registry.type("plain.Ticket") and got == _ticket(registry), type(frame)


def _table_state(read: Callable[[bytes], Any], budget: int, bounded: bool = False, **more: Any) -> tuple[Any, bytes]:
    """A state whose one entry reads a body with ``read`` (and ``guard``, ``cls`` from ``more``), and a
    frame of it: frame 0 up to the body 73 bytes of a fixstr tag, the body 30 level openers."""
    bare = b"\x95\xa5" + b"t" * 5 + b"\xd9\x40" + b"f" * 64 + b"\xc4\x00\x90"
    entry = (read, bounded, more.get("cls"), more.get("guard", _never))
    state = ({bare: entry}, 1 << 20, budget, more.get("become", BECOME), [None, None, None])
    return state, bare + b"\x91" * 30


def _never(body: bytes) -> None:
    raise AssertionError("not to be called")


def test_the_guard_runs_only_where_the_body_has_more_openers_than_the_budget() -> None:
    assert SPEEDUPS is not None
    calls: list[str] = []

    def read(body: bytes) -> Any:
        calls.append("read")
        return ("read", body)

    def guard(body: bytes) -> None:
        calls.append("guard")

    state, frame = _table_state(read, 30, guard=guard)
    assert SPEEDUPS.plain_decode(state, [frame]) == ("read", b"\x91" * 30) and calls == ["read"]
    calls.clear()
    state, frame = _table_state(read, 29, guard=guard)
    assert SPEEDUPS.plain_decode(state, [frame]) == ("read", b"\x91" * 30) and calls == ["guard", "read"]
    calls.clear()
    state, frame = _table_state(read, 0, bounded=True)
    assert SPEEDUPS.plain_decode(state, [frame]) == ("read", b"\x91" * 30) and calls == ["read"]  # uncounted


class _Stop(BaseException):
    pass


def _raises(exc: BaseException) -> Callable[..., Any]:
    def raising(*args: Any) -> Any:
        raise exc

    return raising


def test_an_exception_of_the_python_code_called_gives_none_and_anything_else_goes_on() -> None:
    assert SPEEDUPS is not None
    for place in ("read", "guard", "become"):
        for exc, given_back in ((ValueError("x"), True), (MemoryError(), True), (_Stop(), False)):
            read = _raises(exc) if place == "read" else (lambda body: ["read"])
            more: dict[str, Any] = {place: _raises(exc)} if place != "read" else {}
            state, frame = _table_state(read, 0 if place == "guard" else 30, cls=list, **more)
            if given_back:
                assert SPEEDUPS.plain_decode(state, [frame]) is None, (place, exc)
            else:
                with pytest.raises(_Stop):
                    SPEEDUPS.plain_decode(state, [frame])


def test_a_swap_to_a_class_of_another_layout_gives_none(registry: tw.Registry) -> None:
    assert SPEEDUPS is not None
    flat = registry.type("plain.Flat")
    decoder = tw.Decoder(registry)
    plain, *rest = _decode_state(decoder)
    bare = type_plan(flat).bare
    read, bounded, cls, guard = plain[bare]
    assert cls is flat
    state = ({bare: (read, bounded, registry.type("plain.Inner"), guard)}, *rest)
    assert SPEEDUPS.plain_decode(state, tw.Encoder().encode(flat(id="f", count=1))) is None


def test_the_frames_emptied_by_the_code_it_calls_leave_the_decode_its_own_copy() -> None:
    """The read empties the caller's frames list (dropping frame 0's last reference elsewhere): the
    decode still reads its body from its own copy."""
    assert SPEEDUPS is not None
    frames: list[Any] = []

    def read(body: bytes) -> Any:
        frames.clear()
        return bytes(body)

    state, frame = _table_state(read, 0, guard=lambda body: frames.clear())
    frames.append(bytearray(frame).decode("latin-1").encode("latin-1"))  # its only reference: the list
    del frame
    assert SPEEDUPS.plain_decode(state, frames) == b"\x91" * 30 and frames == []


def test_a_state_of_another_shape_is_a_type_error() -> None:
    assert SPEEDUPS is not None
    state, frame = _table_state(lambda body: 1, 0)
    message = r"a tensorwire\._speedups state is a tuple \(plain, max_header, budget, become, last\)"
    for bad in (state[:3], list(state), ([], *state[1:]), (state[0], "1", *state[2:])):
        with pytest.raises(TypeError):
            SPEEDUPS.plain_decode(bad, [frame])
    with pytest.raises(TypeError, match=message):
        SPEEDUPS.plain_decode(state[:3], [frame])
    entry = next(iter(state[0].values()))
    with pytest.raises(TypeError, match=r"a plain_decode entry is a tuple \(read, bounded, cls, guard\)"):
        SPEEDUPS.plain_decode(({bare: entry[:3] for bare in state[0]}, *state[1:]), [frame])
    with pytest.raises(TypeError, match="plain_decode takes a state and frames"):
        SPEEDUPS.plain_decode(state)


# -- one_encode


def _changed(message: Any, **fields: Any) -> Any:
    """A copy of ``message`` with ``fields`` set after it was built (its class's check not run)."""
    copy = msgspec.structs.replace(message)
    for name, value in fields.items():
        setattr(copy, name, value)
    return copy


def _encode_state(encoder: tw.Encoder) -> Any:
    assert encoder._native is not None
    return encoder._native


def test_a_plain_message_is_one_encode_and_its_check(registry: tw.Registry) -> None:
    assert SPEEDUPS is not None
    encoder = tw.Encoder()
    message = _ticket(registry)
    expected = _python_encoder(encoder).encode(message)
    assert encoder.encode(message) == expected  # the first: planned by the Python code
    assert SPEEDUPS.one_encode(_encode_state(encoder), message) == expected
    assert _python_decoder(tw.Decoder(registry)).decode(expected) == message


def test_messages_the_compiled_encode_does_not_write_go_to_the_python_code(registry: tw.Registry) -> None:
    assert SPEEDUPS is not None
    encoder = tw.Encoder()
    state = _encode_state(encoder)
    ticket = _ticket(registry)
    encoder.encode(ticket)  # planned
    plans, levels, max_header, encode = state

    class Unplanned(msgspec.Struct):
        x: int = 0

    cases: dict[str, tuple[Any, Any]] = {
        "a type not planned": (state, Unplanned()),
        "a rule broken": (state, _changed(ticket, count=13)),
        "out of range": (state, _changed(ticket, count=1001)),
        "an int msgpack cannot hold": (state, _changed(ticket, count=2**64)),
        "a string that is not UTF-8": (state, _changed(ticket, id="\udc80")),
        "over the header limit": ((plans, levels, len(encoder.encode(ticket)[0]) - 1, encode), ticket),
        "more levels than it takes": ((plans, 1, max_header, encode), ticket),
        "no levels (no schema check)": ((plans, -1, max_header, encode), ticket),
        "a recursive type's levels": (
            ({type(ticket): (*plans[type(ticket)][:1], UNBOUNDED, plans[type(ticket)][2])}, levels, max_header, encode),
            ticket,
        ),
        "the encode raising": ((plans, levels, max_header, _raises(ValueError("x"))), ticket),
        "the check raising": (
            ({type(ticket): (_raises(KeyError("x")), *plans[type(ticket)][1:])}, levels, max_header, encode),
            ticket,
        ),
    }
    for name, (given_state, message) in cases.items():
        assert SPEEDUPS.one_encode(given_state, message) is None, name
    with pytest.raises(_Stop):
        SPEEDUPS.one_encode((plans, levels, max_header, _raises(_Stop())), ticket)
    with pytest.raises(TypeError, match="an integer is required"):  # levels that are not an int
        SPEEDUPS.one_encode(({type(ticket): (plans[type(ticket)][0], "1", plans[type(ticket)][2])}, *state[1:]), ticket)
    with pytest.raises(TypeError, match="one_encode's encode must give bytes"):
        SPEEDUPS.one_encode((plans, levels, max_header, lambda message: bytearray(b"\x80")), ticket)
    with pytest.raises(TypeError, match=r"a one_encode plan is a tuple \(check, levels, bare\)"):
        SPEEDUPS.one_encode(({type(ticket): plans[type(ticket)][:2]}, levels, max_header, encode), ticket)
    with pytest.raises(
        TypeError, match=r"a tensorwire\._speedups state is a tuple \(plans, levels, max_header, encode\)"
    ):
        SPEEDUPS.one_encode(state[:3], ticket)


def test_a_twin_read_instance_is_made_the_class_own_keeping_both_types_counted(registry: tw.Registry) -> None:
    """The compiled swap (a direct subclass of the same layout) moves one reference from the twin's
    type to the class's per message, as ``obj.__class__ = cls`` does."""
    import gc

    assert SPEEDUPS is not None
    flat = registry.type("plain.Flat")
    decoder = tw.Decoder(registry)
    frames = tw.Encoder().encode(flat(id="f", count=2, tags=["a"]))
    twin = type(decoder._plain[type_plan(flat).bare][0](bytes(frames[0])[len(type_plan(flat).bare) :]))
    assert twin is not flat and twin.__base__ is flat
    gc.collect()
    counts = sys.getrefcount(flat), sys.getrefcount(twin)
    kept = [SPEEDUPS.plain_decode(_decode_state(decoder), frames) for _ in range(1000)]
    assert all(type(message) is flat for message in kept) and kept[0] == flat(id="f", count=2, tags=["a"])
    assert sys.getrefcount(flat) == counts[0] + 1000 and sys.getrefcount(twin) == counts[1]
    del kept
    gc.collect()
    assert (sys.getrefcount(flat), sys.getrefcount(twin)) == counts


def test_the_swap_raises_the_audit_event_of_a_class_assignment(tmp_path: Path) -> None:
    """As ``obj.__class__ = cls`` does; a hook that refuses it leaves the message to the full decode."""
    code = (
        "import sys, tensorwire as tw\n"
        "from tensorwire._native import SPEEDUPS\n"
        "seen = []\n"
        "def hook(event, args):\n"
        "    if event == 'object.__setattr__' and args[1] == '__class__' and args[2].__name__ == 'Flat':\n"
        "        seen.append(args[2].__name__)\n"
        "        if len(seen) > 1: raise RuntimeError('refused')\n"
        "sys.addaudithook(hook)\n"
        "flat = tw.load_schemas(sys.argv[1]).type('audit.Flat')\n"
        "decoder = tw.Decoder(tw.load_schemas(sys.argv[1]))\n"
        "frames = tw.Encoder().encode(flat(id='f', count=2))\n"
        "first = SPEEDUPS.plain_decode(decoder._native, frames)\n"
        "second = SPEEDUPS.plain_decode(decoder._native, frames)\n"
        "third = decoder.decode(frames)\n"
        "print(type(first).__name__, second, type(third).__name__, third == first, len(decoder._free), seen)\n"
    )
    schema = minimal("audit.Flat", id={"type": "string"}, count={"type": "integer"})
    write_schemas(tmp_path, {"audit/Flat.v1.json": schema})
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    # the first swapped (one event), the second refused (None: to the full decode), the decoder's
    # own decode refused in C and in Python (two more), then read by the full decode
    assert out.stdout.split(maxsplit=5) == ["Flat", "None", "Flat", "True", "1", "['Flat', 'Flat', 'Flat', 'Flat']\n"]


def test_the_entry_found_last_is_remembered_for_its_own_table_only(registry: tw.Registry) -> None:
    """Frames of one type in a row compare their bytes with the remembered key; frames of other
    types, and a state naming another table with the same list, look their table up."""
    assert SPEEDUPS is not None
    decoder = tw.Decoder(registry)
    plain, max_header, budget, become, last = _decode_state(decoder)
    flat, ticket = registry.type("plain.Flat")(id="f", count=2), _ticket(registry)
    frames = {type(m): tw.Encoder().encode(m) for m in (flat, ticket)}
    for message in (flat, flat, ticket, flat, ticket, ticket):
        got = SPEEDUPS.plain_decode(decoder._native, frames[type(message)])
        assert type(got) is type(message) and got == message
        assert last[0] is plain and last[1] == type_plan(type(message)).bare and last[2] is plain[last[1]]
    emptied: tuple[Any, ...] = ({}, max_header, budget, become, last)  # another table, the same list: not trusted
    assert SPEEDUPS.plain_decode(emptied, frames[type(ticket)]) is None
    assert last[0] is plain  # (a table that has no entry for the frame leaves what it remembers)
    for nothing in (None, [], [None, None]):  # remembers nothing, reads all the same
        got = SPEEDUPS.plain_decode((plain, max_header, budget, become, nothing), frames[type(flat)])
        assert type(got) is type(flat) and got == flat
    assert decoder.decode(frames[type(ticket)]) == ticket


def test_a_remembered_list_changed_during_the_lookup_is_looked_at_again() -> None:
    """The list of the entry found last was judged before the table lookup, which can run a key's
    ``__eq__``: one that emptied the list had the entry written past its end (a crash). A decoder's
    table holds only bytes keys, so only a hand-made state could do it; the list is now looked at
    after the lookup, and one that no longer holds three items remembers nothing."""
    assert SPEEDUPS is not None
    state, frame = _table_state(lambda body: ("read", body), 1 << 20)
    plain, max_header, budget, become, last = state
    (bare,) = plain

    class _Emptying:
        def __hash__(self) -> int:
            return hash(bare)

        def __eq__(self, other: object) -> bool:
            last.clear()
            return isinstance(other, bytes) and other == bare

    tricky = {_Emptying(): plain[bare]}
    assert SPEEDUPS.plain_decode((tricky, max_header, budget, become, last), [frame]) == ("read", b"\x91" * 30)
    assert last == []
