"""The structure-aware fuzzer (``tools.fuzz``): its corpus replays clean, a short run finds nothing,
and a deliberately broken decoder is caught in every way the fuzzer claims to catch one.

Each run is a ``python -m tools.fuzz`` subprocess (its own victim, workers and private directory
in /dev/shm, all removed when it ends) that writes its report as JSON.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

import tensorwire as tw
from tensorwire._wire import EMPTY_DATA, EXT_INLINE, MAGIC, WIRE_VERSION, prefix, unpack_descriptor
from tensorwire.builtins import diffusion
from tests.wire_helpers import ext_data, tensor_exts
from tools.fuzz import cases, known, ops_table, ops_tensors, rawmp, seeds
from tools.fuzz.case import Case, dump, file_name, load
from tools.fuzz.draft import BODY, Draft, finish, start
from tools.fuzz.materialize import materialize

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
SABOTAGE = "type-error,no-capability,crash,leak-fd,leak-segment"
FAILURES = ("crashes", "non_codec", "harmed", "leaked_segments", "leaked_fds", "rejected", "harness")


def _fuzz(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    """Run the fuzzer; its exit status, report and output."""
    out = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "tools.fuzz", *args, "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.exists(), done.stdout + done.stderr
    return done.returncode, json.loads(out.read_text()), done.stdout + done.stderr


def _zero(report: dict[str, Any]) -> dict[str, Any]:
    return {name: report[name] for name in FAILURES if report[name]}


# -- the pieces ------------------------------------------------------------------------------------


def test_generation_depends_only_on_seed_and_index() -> None:
    first = [dump(cases.generate(5, i)) for i in range(300)]
    assert first == [dump(cases.generate(5, i)) for i in range(300)]
    assert len(set(first)) > 0.9 * len(first)  # a few coincide (e.g. the same valid message)
    assert {cases.generate(5, i).family for i in range(300)} == {name for name, _ in cases.FAMILIES}


def test_generation_depends_on_nothing_the_process_did_before() -> None:
    """The cases of a seed are the same in every process, whatever it drew from torch's global
    random generator before (a template drawn from it made the ``batch`` cases differ from run to
    run: the key a sabotage's triggers read too, so a saved case replayed another way)."""
    code = (
        "import sys, torch, zlib\n"
        "from tools.fuzz import cases\n"
        "from tools.fuzz.case import dump\n"
        "torch.randn(int(sys.argv[1]))\n"
        "print([zlib.crc32(dump(cases.generate(5, i))) for i in range(60)])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        subprocess.run(
            [sys.executable, "-c", code, draws], cwd=REPO, env=env, capture_output=True, text=True, check=True
        )
        for draws in ("0", "7")
    ]
    assert runs[0].stdout == runs[1].stdout
    assert "batch" in {cases.generate(5, i).label.split(";")[0] for i in range(60)}  # (one of them drew)


def test_a_worker_counts_what_inspect_gets_wrong_on_a_frame_0_as_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case's frame 0 is also read as ``tensorwire inspect`` reads it: a description (that JSON
    takes) or a ``DecodeError`` is what it promises; anything else is the case's error."""
    from tools.fuzz import worker

    frame = tw.Encoder().encode(diffusion.Output(output=torch.arange(6.0), chunk_index=2))[0]
    assert worker._description_problem([frame]) is None
    assert worker._description_problem([b"\xc1"]) is None  # (refused: a DecodeError)
    assert worker._description_problem([7]) is None  # (no blob's frame 0: the decoder's input check)

    def broken(header_frame: Any, *args: Any) -> Any:
        raise ValueError("a bad description")

    monkeypatch.setattr(worker, "describe", broken)
    problem = worker._description_problem([frame])
    assert problem is not None and problem["type"] == "inspect: builtins.ValueError"
    assert problem["message"] == "a bad description" and "broken" in problem["where"]
    monkeypatch.setattr(worker, "describe", lambda *args: {"x": float("nan")})  # (JSON cannot hold it)
    problem = worker._description_problem([frame])
    assert problem is not None and problem["type"] == "inspect: builtins.ValueError"
    assert "JSON" in problem["message"]


def test_a_case_file_round_trips() -> None:
    for index in range(200):
        case = cases.generate(9, index)
        again, found = load(dump(case))
        assert dump(again) == dump(case) and found is None


def test_a_joined_case_without_frames_is_delivered_as_a_blob_of_no_frames() -> None:
    """A case with no frames at all, in the joined form: the receiver splits a blob whose table says
    no frames (made by hand: ``tw.join`` refuses to make one), which ``tw.split`` refuses."""
    delivery = materialize(Case("buffers", "no frames at all; joined", [], joined=True), {})
    assert delivery.blob == b"TWB1\x00\x00\x00\x00" and delivery.frames == []
    with pytest.raises(tw.DecodeError, match=r"frame table \(0 frames\)"):
        tw.split(delivery.blob)


def test_labels_name_no_address() -> None:
    """A label is the same in every process (a case file's name is its content's hash): a value's
    repr that names where it lives in memory (a msgpack Ext's) never goes into one."""
    labels = set()
    for rng in range(100):
        d = start(random.Random(rng), "buffers", seeds.template(0, seeds.LAYOUTS[0]), [])
        labels.add(ops_table._buffers_type(d))
    assert "buffers = ext(2, 90)" in labels and not [label for label in labels if " at 0x" in label]


def test_raw_msgpack_walk_handles_100000_nested_extensions() -> None:
    chain = rawmp.ext_chain([(2, b"")] * 100_000, b"\x90")
    assert rawmp.skip(chain, 0) == len(chain)
    head, items, rest = rawmp.items(rawmp.build_array([b"\xa1a", chain, b"\xc1", b"\xc0"])) or (b"", [], b"")
    assert head == b"\x94" and items == [b"\xa1a", chain] and rest == b"\xc1\xc0"


def test_cases_are_frames_of_this_wire_format() -> None:
    """Generated frames are arrays ``[tag, fingerprint, data, buffers, body]`` of this wire version
    whose buffer table holds ``[nbytes, handle]`` pairs and whose body carries tensors as ext(1) and
    ext(3), each ext(3) naming a range of the data (which holds nothing else)."""
    codes: set[int] = set()
    legit = inline = 0
    for index in range(400):
        case = cases.generate(11, index)
        if case.family != "legit":
            continue
        legit += 1
        head = msgspec.msgpack.decode(case.frames[0])
        assert isinstance(head, list) and len(head) == 5 and head[0].startswith(f"{MAGIC}:{WIRE_VERSION}:"), head[:2]
        assert isinstance(head[2], bytes), type(head[2])
        for i, (nbytes, handle) in enumerate(head[3]):  # a handle bound at materialization is a placeholder
            assert isinstance(nbytes, int) and (isinstance(handle, dict) or handle.startswith("$")), head[3]
            assert isinstance(handle, dict) or any(b.path[:3] == [3, i, 1] for b in case.bindings), case.bindings
        exts = tensor_exts(head[4])
        codes.update(e.code for e in exts)
        ends = []
        for ext in exts:
            if ext.code == EXT_INLINE:
                desc = unpack_descriptor(EXT_INLINE, ext_data(ext))
                assert desc.offset + desc.nbytes <= len(head[2]), (desc, len(head[2]))
                ends.append(desc.offset + desc.nbytes)
                inline += 1
        assert max(ends, default=0) == len(head[2]), case.label
    assert legit and inline and codes == {1, 3}


def test_the_data_family_reaches_every_kind_of_data_damage() -> None:
    """Frame 0's data is cut, grown, shifted, retyped, given lying lengths, read by many ext(3), and
    dropped (wire format 2)."""
    drawn = (cases.generate(12, i) for i in range(3000))
    labels = " | ".join(c.label for c in drawn if c.family == "data")
    kinds: tuple[str, ...] = (
        "data cut by",
        "data grown by",
        "bytes before the data",
        "data as ",
        "data claiming",
        "bin32 header",
    )
    kinds += ("ext(3) reading one range", "ext(3) range moved", "frame 0 of wire format 2", "after the data")
    assert [k for k in kinds if k not in labels] == []


def _seed(name: str, rng: int = 0, layout: seeds.Layout = seeds.LAYOUTS[0]) -> Draft:
    """A draft of the seed ``name`` (every tensor out of band by default), its buffers unbound."""
    index = [n for n, _ in seeds.SEEDS].index(name)
    return start(random.Random(rng), "test", seeds.template(index, layout), [])


def _plain_decoders(tmp_path: Path) -> list[Any]:
    """What the fuzzer's decoders make of each seed of ``seeds.PLAIN``: the message, and whether the
    full decode ran (a decoder keeps its frame 0 decoders once one has)."""
    from tools.fuzz import decoders

    built, receivers = decoders.build(tmp_path)
    try:
        outcomes = []
        for name, _ in seeds.SEEDS:
            if name.startswith(("plain-", "closed-")):
                frames = finish(_seed(name), name).frames
                assert len(frames) == 1  # no out-of-band buffer, no inline frame
                outcomes += [(name, decoder.decode(frames), bool(decoder._free)) for decoder in built]
        return outcomes
    finally:
        for receiver in receivers:
            receiver.close()


def test_every_decoder_reads_the_types_whose_bodies_are_read_alone_on_the_shorter_path(tmp_path: Path) -> None:
    """The seeds of ``seeds.PLAIN`` (closed types uncounted, open ones as their closed twin or through
    their closed mirror) decode with every configuration without the full decode."""
    outcomes = _plain_decoders(tmp_path)
    assert {name for name, _, _ in outcomes} >= {"plain-flat", "plain-many", "closed-ticket", "plain-flat-large"}
    assert [(name, full) for name, _, full in outcomes if full] == []
    assert all(type(message).__tw_type__.type_id.startswith(("plain.", "closed.")) for _, message, _ in outcomes)


def test_a_frame_0_is_made_that_of_a_type_whose_body_is_read_alone() -> None:
    d = _seed("views")
    label = ops_table._plain_prefix(d)
    case = finish(d, label)
    bare = {prefix(i.type_id, i.version, i.fingerprint) + EMPTY_DATA + b"\x90" for i in seeds.PLAIN.infos()}
    assert case.frames[0].startswith(tuple(bare)) and len(case.frames) == 1, label


@pytest.mark.parametrize("name", ["plain-flat", "plain-many", "video", "rpc-tensors", "video-embedded"])
def test_frame_0_is_grown_to_each_size_where_the_decoder_changes_strategy(name: str) -> None:
    """Each of ``SIZES`` reached exactly, by a string of the body (no data) or the data's padding."""
    name, embedded, _ = name.partition("-embedded")
    layout = seeds.EMBEDDED[1] if embedded else seeds.LAYOUTS[0]
    sizes = set()
    for rng in range(60):
        d = _seed(name, rng, layout)
        label = ops_table._sized(d)
        if label is not None and "grown to" in label:
            sizes.add(len(finish(d, label).frames[0]))
    assert sizes >= {n for n in ops_table.SIZES if n > ops_table.size(_seed(name, 0, layout))}


def test_a_field_of_the_body_nests_past_the_limit() -> None:
    depths = set()
    for rng in range(40):
        d = _seed("closed-ticket", rng)
        label = ops_tensors._field_deep(d)
        body = finish(d, label or "").frames[0]
        depths.add(len(body) - len(body.translate(None, bytes([0x91, 0x81, 0x92, 0xC7, 0xC8, 0xC9]))))
    assert max(depths) >= 100_000 and min(depths) < 200


def test_a_list_of_the_body_is_made_of_many_copies_of_a_struct() -> None:
    d = _seed("plain-ticket")
    label = ops_tensors._struct_list(d)
    body = msgspec.msgpack.decode(finish(d, label or "").frames[0])[BODY]
    lists = [v for v in body.values() if isinstance(v, list)] + [
        v for v in body["inner"].values() if isinstance(v, list)
    ]
    assert any(len(v) >= 32 for v in lists), label


def test_the_corpus_holds_every_known_bug_case() -> None:
    for case in known.cases():
        path = CORPUS / file_name(case, "known")
        assert path.exists(), f"{path.name} ({case.label}) missing: python -m tools.fuzz --write-known {CORPUS}"


# -- runs ------------------------------------------------------------------------------------------


def test_every_corpus_case_replays_without_failure(tmp_path: Path) -> None:
    files = sorted(CORPUS.glob("*.twcase"))
    assert len(files) >= 7
    status, report, output = _fuzz(tmp_path, "--replay", str(CORPUS))
    assert report["cases"] == len(files), output
    assert _zero(report) == {} and status == 0, output


def test_a_short_fuzzing_run_finds_nothing(tmp_path: Path) -> None:
    # a number of cases, not of seconds: on a loaded machine a time budget ran fewer than it checks
    status, report, output = _fuzz(tmp_path, "--cases", "1000", "--seed", "7")
    assert _zero(report) == {} and status == 0, output
    assert report["cases"] == 1000, output
    legit = report["families"]["legit"]
    assert legit[1] == legit[0] > 0, output  # every valid message decoded: the harness itself works
    assert set(report["families"]) == {name for name, _ in cases.FAMILIES}


@pytest.fixture(scope="module")
def sabotaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str, Path]:
    """A run against decoders broken on purpose (see ``tools.fuzz.sabotage``), its failures saved."""
    tmp = tmp_path_factory.mktemp("sabotaged")
    corpus = tmp / "corpus"
    args = ["--cases", "60", "--batch", "30", "--seed", "5", "--max-isolations", "1", "--sabotage", SABOTAGE]
    status, report, output = _fuzz(tmp, *args, "--save-failures", "--corpus", str(corpus))
    return status, report, output, corpus


def test_a_broken_decoder_is_caught(sabotaged: tuple[int, dict[str, Any], str, Path]) -> None:
    status, report, output, corpus = sabotaged
    assert status == 1, output
    for name in ("crashes", "non_codec", "harmed", "leaked_segments", "leaked_fds"):
        assert report[name] > 0, f"{name} not detected:\n{output}"
    saved = {getattr(load(p.read_bytes())[1], "category", None) for p in corpus.glob("*.twcase")}
    assert saved == {"crash", "non-codec", "harm", "leak"}, output
    crash = next(f for f in report["failures"] if f["category"] == "crash")
    assert "signal 11" in crash["detail"] and crash["saved"], crash


def test_saved_failures_replay_the_same_way(tmp_path: Path, sabotaged: tuple[int, dict[str, Any], str, Path]) -> None:
    corpus = sabotaged[3]
    chosen = [sorted(corpus.glob(f"{category}-*.twcase"))[0] for category in ("crash", "non-codec", "harm")]
    args = ["--max-isolations", "1", "--sabotage", SABOTAGE, "--replay", *map(str, chosen)]
    status, report, output = _fuzz(tmp_path, *args)
    assert status == 1 and report["crashes"] > 0 and report["non_codec"] > 0 and report["harmed"] > 0, output
    status, report, output = _fuzz(tmp_path, "--replay", *map(str, chosen))  # the real decoder: all clean
    assert status == 0 and _zero(report) == {}, output


def test_the_fuzzer_reads_with_the_generated_types_and_with_run_time_ones(tmp_path: Path) -> None:
    from tools.fuzz import decoders

    built, receivers = decoders.build(tmp_path)
    try:
        modules = [d.registry.type("diffusion.Output").__module__ for d in built]
    finally:
        for receiver in receivers:
            receiver.close()
    assert set(modules) == {"tensorwire.builtins.diffusion", "tensorwire.loaded.diffusion"}
    assert [i for i, c in enumerate(decoders.CONFIGS) if c.loaded] == [
        i for i in decoders.SAFE if "loaded" in modules[i]
    ]


# -- queue and CUDA handles ------------------------------------------------------------------------


def _queue_context(handles: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's context for cases whose exports are all queue tensors (no victim named)."""
    sender = handles[0]["sender"] if handles else "1-000000000000"
    names = {"victim_pid": 1, "victim_token": "0" * 32, "self_pid": os.getpid(), "self_token": "0" * 32}
    own = [{"handle": h, "nbytes": 0} for h in handles]
    return {"victim": {}, "own": own, "names": {**names, "queue_sender": sender}}


def test_a_forged_queue_handle_reaches_every_kind_of_sender_and_id() -> None:
    """``values.queue_handle``: the sender the worker's own, another's, odd, not a string; each id
    the worker's own, one older or newer (taken already, never issued), negative, past 2**63, not an int."""
    from tools.fuzz import values
    from tools.fuzz.case import Export
    from tools.fuzz.materialize import resolve

    own: dict[str, Any] = {"transport": "queue", "sender": "7-abc", "message": 5, "tensor": 3}
    context = _queue_context([own])
    senders: set[str] = set()
    messages: set[str] = set()
    tensors: set[str] = set()
    for seed in range(400):
        handle = values.queue_handle(random.Random(seed), [Export("queue", b"x")])
        assert handle["transport"] == "queue"
        shown = {k: resolve(v.ref, context) if hasattr(v, "ref") else v for k, v in handle.items()}
        sender = shown.get("sender")
        senders.add("own" if sender == "7-abc" else type(sender).__name__ if not isinstance(sender, str) else "other")
        for field, seen in (("message", messages), ("tensor", tensors)):
            value = shown.get(field)
            if type(value) is not int:
                seen.add("not an int")
            elif value < 0:
                seen.add("negative")
            elif value >= 2**63:
                seen.add("past 2**63")
            else:
                seen.add({0: "own", -1: "older", 1: "newer"}.get(value - own[field], "other"))
    assert senders >= {"own", "other", "int", "NoneType", "bytes"}
    for seen in (messages, tensors):
        assert seen >= {"own", "older", "newer", "negative", "past 2**63", "not an int", "other"}


def test_a_queue_tensor_is_named_again_by_a_later_entry() -> None:
    """``ops_table._queue_again``: the same id, another tensor id of the message, an older message."""
    from tools.fuzz.case import Export

    labels = set()
    for seed in range(60):
        tpl = seeds.template([n for n, _ in seeds.SEEDS].index("rpc-tensors"), seeds.LAYOUTS[0])
        d = start(random.Random(seed), "test", tpl, [Export("queue", b"x")] * 2)
        label = ops_table._queue_again(d)
        bindings = finish(d, label or "").bindings
        whole = [(int(b.path[1]), str(b.ref)) for b in bindings if len(b.path) == 3]  # the handles bound whole
        refs = [ref for _, ref in whole]
        moved = [(int(b.path[1]), str(b.path[3]), b.ref) for b in bindings if len(b.path) == 4]
        assert len(refs) > len(set(refs)), bindings  # one export named by two entries
        first = min(i for i, ref in whole if refs.count(ref) > 1)
        if label == "a queue tensor named twice":
            assert moved == [], bindings
        else:
            [(index, field, ref)] = moved
            assert index > first and ref[0] == "add", bindings  # the later entry is the one changed
            assert field == ("message" if str(label).startswith("an older") else "tensor") and ref[1][-1] == field
            assert ref[2] == -1 or field == "tensor"
        labels.add(label)
    assert labels == {
        "a queue tensor named twice",
        "another tensor id of a queue message named",
        "an older message of a queue sender named after a newer one",
    }


def test_queue_handles_reach_the_queue_transports_verify_and_receive_path(tmp_path: Path) -> None:
    """The queue family's cases, bound to a real queue sender and decoded as the worker does: each
    refusal is a ``CodecError``, and they come from the queue transport's checks."""
    import queue as stdlib_queue

    from tensorwire import transports
    from tools.fuzz import decoders

    channel: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
    sender = transports.QueueTransport(channel)
    built, receivers = decoders.build(tmp_path, channel)
    seen: list[str] = []
    try:
        for index in range(3000):
            case = cases.generate(21, index)
            if case.family != "queue" or {e.mode for e in case.exports} != {"queue"}:
                continue
            sender.begin_message()
            own = [msgspec.to_builtins(sender.export(memoryview(e.data), [])) for e in case.exports]
            delivery = materialize(case, _queue_context(own))
            frames = tw.split(delivery.blob) if delivery.blob is not None else delivery.frames
            try:
                built[case.decoder].decode(frames)
                seen.append("decoded")
            except tw.CodecError as exc:
                seen.append(str(exc))
            while not channel.empty():
                channel.get_nowait()
            receivers[-1].close()
    finally:
        for receiver in receivers:
            receiver.close()
    text = "\n".join(seen)
    for expected in (
        "decoded",
        r"ids must not be negative",
        r"is named twice in one message",
        r"is stale: message \d+ of that sender was read already",
        r"after waiting 0.01s",
        r"invalid buffer table: Expected `int`",
        r"the buffer entry says \d+ bytes",
    ):
        assert re.search(expected, text), expected


def test_a_decoder_reads_shared_memory_through_a_cuda_shm_transport_and_the_worker_sends_through_one(
    tmp_path: Path,
) -> None:
    from tensorwire import transports
    from tensorwire.transports.shm import SlotHandle
    from tools.fuzz import decoders
    from tools.fuzz.host_cuda import HostRuntime

    built, receivers = decoders.build(tmp_path)
    cuda = [i for i, c in enumerate(decoders.CONFIGS) if c.backing == "cuda"]
    sender = transports.CudaShmTransport(tmp_path, runtime=HostRuntime(), pool=False)
    try:
        assert len(cuda) == 1 and cuda[0] in decoders.SAFE
        reader = built[cuda[0]].reader(SlotHandle(name="", offset=0, generation=1, capability=bytes(16)))
        assert isinstance(reader, transports.CudaShmTransport) and reader.available
        payload = torch.arange(256, dtype=torch.uint8)
        handle = sender.export_device(payload, 0, 256, [])
        assert isinstance(handle, SlotHandle) and sender.registrations == 1  # a registered slot
        assert bytes(reader.import_(handle, [], 256, borrow=False)) == bytes(payload.numpy())
    finally:
        sender.close()
        for receiver in receivers:
            receiver.close()
