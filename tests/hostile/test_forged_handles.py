"""Forged shared-memory handles: a receiver never reads, claims, frees or unlinks what they name.

A victim (another live process, ``tests/hostile/victim.py``) owns decoys named like its segments
and real buffers in flight. The attacker sends this process's decoder handles naming each of them,
without their capabilities, through every failure path of a decode (none, a bad magic, an unknown
type, a bad body, a bad descriptor, a wrong size). Each decode raises a ``CodecError``; afterwards
every decoy and buffer is exactly as it was (kind, size, contents, atime, mtime, slot state and
generation), and the victim's real messages still reach their receiver.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

import tensorwire as tw
from tensorwire import _wire as wire
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports._page import Page
from tensorwire.transports._page_layout import CONTROL_BYTES, SENDER
from tensorwire.transports._segment import SEALS
from tests.hostile import victim as victim_module
from tests.hostile.children import spawned
from tests.wire_helpers import edit_descriptor, frame_of, head_of

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # the payload through shared memory


@contextmanager
def victim(directory: Path) -> Iterator[dict[str, Any]]:
    """Run the victim; after the block, check it is untouched and that its real messages arrive."""
    with spawned(victim_module.victim, str(directory)) as child:
        info: dict[str, Any] = child.recv()
        yield info
        child.send("done")
        report = child.recv()
        assert report["unchanged"], f"the victim's files or slots changed: {report['before']} -> {report['after']}"
        receiver = transports.ShmTransport(directory, backing="named", pool=False)
        for i, frames in enumerate(child.recv()):
            out = tw.Decoder(REGISTRY, transports=[receiver]).decode(frames).output
            assert torch.equal(out, victim_module.PAYLOAD + i)  # the intended receiver still gets it
            del out
        receiver.close()
        child.send("bye")
        assert child.join() == 0


def _template(directory: Path) -> tuple[transports.ShmTransport, list[Any], list[Any]]:
    """This process's own one-shot message of 4 KiB, as frames and as a frame 0 to forge."""
    transport = transports.ShmTransport(directory, pool=False)
    frames = tw.Encoder(transport=transport, options=OOB).encode(diffusion.Output(output=victim_module.PAYLOAD))
    return transport, frames, head_of(frames[0])


def _release_own(transport: transports.ShmTransport, head: list[Any]) -> None:
    transport.release(msgspec.convert(head[3][0][1], transports.ShmHandle))


def _descriptor(head: list[Any], **changes: Any) -> None:
    """Change the descriptor of the message's one tensor (in the body, at ``output``)."""
    head[4]["output"] = edit_descriptor(head[4]["output"], **changes)


FAILURES: dict[str, Callable[[list[Any]], None]] = {  # frame 0 is [tag, fingerprint, data, buffers, body]
    "none": lambda h: None,
    "magic": lambda h: h.__setitem__(0, "pickle:2:diffusion.Output:1"),
    "type": lambda h: h.__setitem__(0, wire.tag("evil.Type", 1)),
    "body": lambda h: h[4].update(chunk_index="x"),
    "descriptor": lambda h: h[4].__setitem__("output", msgspec.msgpack.Ext(1, b"\x00\xff\x01\x00")),
    "extent": lambda h: _descriptor(h, offset=4),  # well-formed, reaching past its buffer
    "size": lambda h: h[3][0].__setitem__(0, 4095),
}


def _attack(decoder: tw.Decoder, head: list[Any], handle: dict[str, Any]) -> list[str]:
    """Decode ``head`` with ``handle`` in its buffer table through every failure path; the errors."""
    errors = []
    for failure in FAILURES.values():
        forged = head_of(frame_of(head))
        forged[3][0][1] = handle
        failure(forged)
        with pytest.raises(tw.CodecError) as info:
            decoder.decode([frame_of(forged)])
        errors.append(str(info.value))
    return errors


ONE_SHOT_ERRORS = {
    "regular": r"has no valid control page",
    "empty": r"holds 0 bytes, its handle names 8192",
    "fifo": r"is not a regular file",
    "symlink": r"is a symbolic link",
    "directory": r"is not a regular file",
    "foreign_uid": r"belongs to uid 65534, not to this process's uid",
    "control_like": r"the handle's capability does not match",
}


def test_forged_one_shot_handles_leave_every_file_as_it_was(directory: Path) -> None:
    own, frames, head = _template(directory)
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory, backing="named", pool=False)])
    with victim(directory) as info:
        for kind, name in info["decoys"].items():
            errors = _attack(decoder, head, {"transport": "shm", "name": name, "capability": secrets.token_bytes(16)})
            assert _matches(errors[0], ONE_SHOT_ERRORS[kind]), (kind, errors[0])
        targets = [info["handles"]["one_shot"]["name"], info["handles"]["named"]["name"]]
        for name in targets:
            for capability in (secrets.token_bytes(16), bytes(16)):
                errors = _attack(decoder, head, {"transport": "shm", "name": name, "capability": capability})
                assert _matches(errors[0], r"the handle's capability does not match|holds \d+ bytes, its handle")
        assert _matches(_attack(decoder, head, _shm(f"tw-2147483648-{'a' * 32}-1"))[0], r"not a tensorwire name")
    assert tw.Decoder(REGISTRY, transports=[own]).decode(frames).output.sum() == victim_module.PAYLOAD.sum()


SLOT_ERRORS = {  # a decoy named in a pool slot handle, to a receiver that maps named segments
    "regular": r"has no valid control page",
    "empty": r"holds 0 bytes, less than its 4096-byte header",
    "fifo": r"is not a regular file",
    "symlink": r"is a symbolic link",
    "directory": r"is not a regular file",
    "foreign_uid": r"belongs to uid 65534, not to this process's uid",
    "control_like": r"has no valid control page",  # a one-shot's page is no slot's
}
if os.geteuid() != 0:  # only root can make another uid's file here: the victim's stays ours
    ONE_SHOT_ERRORS["foreign_uid"] = SLOT_ERRORS["foreign_uid"] = r"."


def test_forged_slot_handles_leave_every_slot_and_file_as_it_was(directory: Path) -> None:
    own = transports.ShmTransport(directory, backing="named", claim_timeout=3600.0)
    frames = tw.Encoder(transport=own, options=OOB).encode(diffusion.Output(output=victim_module.PAYLOAD))
    head = head_of(frames[0])
    decoders = {
        backing: tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory, backing=backing)])
        for backing in ("memfd", "named")
    }
    with victim(directory) as info:
        pid = info["pid"]
        for kind in ("memfd", "named"):
            real = info["handles"][kind]
            for capability in (secrets.token_bytes(16), bytes(16)):
                forged = {**real, "transport": "shm-slot", "capability": capability}
                for backing, decoder in decoders.items():
                    errors = _attack(decoder, head, forged)
                    expected = (
                        r"capability does not match" if backing == "named" or kind == "memfd" else "named segment"
                    )
                    assert _matches(errors[0], expected), (kind, backing, errors[0])
        memfd = info["handles"]["memfd"]
        for number in info["other_fds"]:  # the victim's pipe and /dev/null, named as if they were its memfd
            errors = _attack(decoders["memfd"], head, {**memfd, "fd": number, "capability": bytes(16)})
            assert _matches(errors[0], rf"/proc/{pid}/fd/{number} is not that memfd"), errors[0]
        for kind, name in info["decoys"].items():
            slot = {"transport": "shm-slot", "name": name, "offset": 0, "generation": 1, "capability": bytes(16)}
            errors = _attack(decoders["named"], head, slot)
            assert _matches(errors[0], rf"pool segment {name} {SLOT_ERRORS[kind]}"), (kind, errors[0])
            errors = _attack(decoders["memfd"], head, {**slot, "fd": 3})
            link = rf"/proc/{pid}/fd/3"
            expected = rf"pool segment {name}: {link} is not that memfd|cannot open pool segment {name} through {link}"
            assert _matches(errors[0], expected), (kind, errors[0])
    out = decoders["named"].decode(frames).output
    assert torch.equal(out, victim_module.PAYLOAD)  # our own in-flight slot survived every forgery too
    del out
    own.close()


def test_a_memfd_receiver_refuses_named_slots_and_maps_no_one_shot(directory: Path) -> None:
    named = transports.ShmTransport(directory, backing="named")
    frames = tw.Encoder(transport=named, options=OOB).encode(diffusion.Output(output=victim_module.PAYLOAD))
    receiver = transports.ShmTransport(directory)
    with pytest.raises(tw.DecodeError, match=r"is a named segment, which a same-uid process can truncate"):
        tw.Decoder(REGISTRY, transports=[receiver]).decode(frames)
    assert named.pool is not None and [s.state for s in named.pool.slots()] == [transports._page_layout.IN_FLIGHT]
    one_shot = transports.ShmTransport(directory, pool=False)
    frames = tw.Encoder(transport=one_shot, options=OOB).encode(diffusion.Output(output=victim_module.PAYLOAD))
    name = head_of(frames[0])[3][0][1]["name"]
    borrowing = tw.Decoder(REGISTRY, transports=[receiver], options=tw.DecodeOptions(borrow=True))
    out = borrowing.decode(frames).output
    assert torch.equal(out, victim_module.PAYLOAD)
    assert name not in Path("/proc/self/maps").read_text()  # a private copy, not a mapping of the file
    named.close()


def _crafted_memfd(sealed: bool) -> tuple[int, mmap.mmap, dict[str, Any]]:
    """A hostile sender's own memfd laid out as a valid slot in flight, with a capability it knows."""
    name = f"tw-{os.getpid()}-{secrets.token_hex(16)}-1"
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, CONTROL_BYTES + 65536)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    mapping = mmap.mmap(fd, CONTROL_BYTES + 65536)
    page = Page(fd, mapping, name)
    page.init(65536)
    generation = page.take(SENDER)
    capability = page.hand_over(60.0)
    page.release()
    handle = {"transport": "shm-slot", "name": name, "offset": 0, "generation": generation, "capability": capability}
    return fd, mapping, {**handle, "fd": fd}


def test_an_unsealed_memfd_is_refused_even_with_the_right_capability(directory: Path) -> None:
    """A hostile sender could shrink an unsealed memfd under the receiver's mapping (a SIGBUS)."""
    own, _, head = _template(directory)
    _release_own(own, head)
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory)])
    for sealed in (False, True):
        fd, mapping, handle = _crafted_memfd(sealed)
        forged = [*head[:3], [[4096, handle]], head[4]]
        try:
            if sealed:  # the same layout, sealed: accepted, which shows the refusal is about the seals
                out = decoder.decode([frame_of(forged)]).output
                assert out.shape == (1024,)
                del out
            else:
                with pytest.raises(tw.DecodeError, match=r"is not sealed against resizing"):
                    decoder.decode([frame_of(forged)])
        finally:
            mapping.close()
            os.close(fd)


def _sparse_slot(capacity: int, *, forged: bool = False) -> tuple[int, dict[str, Any]]:
    """A hostile sender's own sealed memfd of ``capacity`` bytes (sparse: it costs its maker
    nothing), laid out as a slot in flight; its handle's capability is wrong if ``forged``."""
    name = f"tw-{os.getpid()}-{secrets.token_hex(16)}-1"
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, CONTROL_BYTES + capacity)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    with mmap.mmap(fd, CONTROL_BYTES) as mapping:
        page = Page(fd, mapping, name)
        page.init(capacity)
        generation = page.take(SENDER)
        capability = secrets.token_bytes(16) if forged else page.hand_over(60.0)
        if forged:
            page.hand_over(60.0)
        page.release()
    handle = {"transport": "shm-slot", "name": name, "offset": 0, "generation": generation, "capability": capability}
    return fd, {**handle, "fd": fd}


def _mapped_here(name: str) -> bool:
    return name in Path("/proc/self/maps").read_text()


def test_a_forged_capability_leaves_no_mapping_behind(directory: Path) -> None:
    """A segment was mapped, and kept mapped, before its claim proved the handle's capability: a
    peer that named its own sparse memfds of terabytes with wrong capabilities filled the
    receiver's address space in a few dozen messages (its allocations then failed, an honest
    sender's messages too). A segment is now kept mapped only once a claim of it succeeded."""
    own, _, head = _template(directory)
    _release_own(own, head)
    receiver = transports.ShmTransport(directory)
    decoder = tw.Decoder(REGISTRY, transports=[receiver])
    fd, handle = _sparse_slot(1 << 30, forged=True)
    try:
        with pytest.raises(tw.DecodeError, match="capability"):
            decoder.decode([frame_of([*head[:3], [[4096, handle]], head[4]])])
        assert receiver._reader.mapped == 0 and not _mapped_here(handle["name"])
    finally:
        os.close(fd)
    fd, handle = _sparse_slot(1 << 30)
    try:
        out = decoder.decode([frame_of([*head[:3], [[4096, handle]], head[4]])]).output
        assert out.shape == (1024,) and receiver._reader.mapped == 1  # proven: kept for the next slot
        del out
    finally:
        os.close(fd)
        receiver.close()


def test_a_segment_larger_than_the_receiver_maps_is_refused_before_it_is_mapped(directory: Path) -> None:
    """A segment larger than the receiver keeps mapped in all (this host's memory by default: a
    sender's slots are memory as they are made) is refused whatever its capability."""
    own, _, head = _template(directory)
    _release_own(own, head)
    receiver = transports.ShmTransport(directory)
    limit = receiver._reader.max_mapped_bytes
    assert limit == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    fd, handle = _sparse_slot(limit)  # with its page: over the limit
    try:
        size = CONTROL_BYTES + limit
        with pytest.raises(
            tw.DecodeError, match=rf"cannot be mapped: it holds {size} bytes, more than this receiver maps \({limit}\)"
        ):
            tw.Decoder(REGISTRY, transports=[receiver]).decode([frame_of([*head[:3], [[4096, handle]], head[4]])])
        assert receiver._reader.mapped == 0 and not _mapped_here(handle["name"])
    finally:
        os.close(fd)
        receiver.close()


def test_the_segments_a_receiver_keeps_mapped_stay_within_its_bytes(directory: Path) -> None:
    """Past ``max_mapped_bytes`` the least recently used segment is let go before another is kept
    (it was let go only after, and only past ``max_segments``)."""
    own, _, head = _template(directory)
    _release_own(own, head)
    receiver = transports.ShmTransport(directory)
    receiver._reader.max_mapped_bytes = 5 * (CONTROL_BYTES + (1 << 20)) // 2  # two segments of 1 MiB
    decoder = tw.Decoder(REGISTRY, transports=[receiver])
    made = [_sparse_slot(1 << 20) for _ in range(4)]
    try:
        for _, handle in made:
            out = decoder.decode([frame_of([*head[:3], [[4096, handle]], head[4]])]).output
            assert out.shape == (1024,)
            del out
        assert receiver._reader.mapped == 2
        assert [_mapped_here(handle["name"]) for _, handle in made] == [False, False, True, True]
    finally:
        for fd, _ in made:
            os.close(fd)
        receiver.close()


def _shm(name: str) -> dict[str, Any]:
    return {"transport": "shm", "name": name, "capability": bytes(16)}


def _matches(text: str, pattern: str) -> bool:
    import re

    return re.search(pattern, text) is not None


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("offset", -CONTROL_BYTES, r"offset and generation must be positive"),  # the control page itself
        ("offset", -(2**40), r"offset and generation must be positive"),  # far outside the mapping
        ("offset", 65536 - 4096 + 1, r"bytes \[61441, 65537\) outside its 65536-byte area"),  # one byte past it
        ("generation", 0, r"offset and generation must be positive"),
        ("fd", -1, r"fd -1 is out of range"),
        ("fd", 2**31, r"fd 2147483648 is out of range"),
    ],
)
def test_a_slot_handle_out_of_range_is_refused_even_with_the_right_capability(
    directory: Path, field: str, value: int, error: str
) -> None:
    """A hostile sender's own sealed slot, its capability right: the handle still names only its slot's bytes."""
    own, _, head = _template(directory)
    _release_own(own, head)
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory)])
    fd, mapping, handle = _crafted_memfd(sealed=True)
    forged = [*head[:3], [[4096, {**handle, field: value}]], head[4]]
    page = Page(fd, mapping, handle["name"])
    try:
        with pytest.raises(tw.DecodeError, match=error):
            decoder.decode([frame_of(forged)])
        assert page.receiver == 0  # never claimed (a well-formed handle's slot is given back)
    finally:
        page.release()
        mapping.close()
        os.close(fd)


@pytest.mark.parametrize(("word", "value"), [(0, 0), (4, 2 * 65536)], ids=["magic", "capacity"])
def test_a_slot_whose_page_is_not_a_slot_page_of_its_size_is_refused_even_with_the_right_capability(
    directory: Path, word: int, value: int
) -> None:
    """A page without the protocol's magic, or saying another capacity than its mapping holds, is no slot's."""
    own, _, head = _template(directory)
    _release_own(own, head)
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory)])
    fd, mapping, handle = _crafted_memfd(sealed=True)
    page = Page(fd, mapping, handle["name"])
    page.words[word] = value  # the page's magic, or the data capacity it says
    page.release()
    forged = [*head[:3], [[4096, handle]], head[4]]
    try:
        with pytest.raises(
            tw.DecodeError, match=rf"^diffusion.Output v1: pool segment {handle['name']} has no valid control page$"
        ):
            decoder.decode([frame_of(forged)])
    finally:
        mapping.close()
        os.close(fd)


def test_a_pool_slot_named_in_a_one_shot_handle_is_refused_even_with_its_capability(directory: Path) -> None:
    """A one-shot claim unlinks its file: a pool slot's page (no one-shot flag) never takes one."""
    own = transports.ShmTransport(directory, backing="named")
    frames = tw.Encoder(transport=own, options=OOB).encode(diffusion.Output(output=victim_module.PAYLOAD))
    head = head_of(frames[0])
    slot = head[3][0][1]
    path = directory / slot["name"]
    head[3][0] = [path.stat().st_size - CONTROL_BYTES, {"transport": "shm", **_pick(slot, "name", "capability")}]
    decoder = tw.Decoder(REGISTRY, transports=[transports.ShmTransport(directory, backing="named", pool=False)])
    with pytest.raises(tw.DecodeError, match=rf"shared memory segment {slot['name']} has no valid control page"):
        decoder.decode([frame_of(head)])
    assert path.exists()
    out = tw.Decoder(REGISTRY, transports=[own]).decode(frames).output  # the slot is still in flight
    assert torch.equal(out, victim_module.PAYLOAD)
    del out
    own.close()


def _pick(mapping: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: mapping[key] for key in keys}
