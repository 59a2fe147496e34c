"""Producer and consumer in separate spawned processes: data arrives, nothing leaks, no tracker noise."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY
from tensorwire.transports.shm import SHM_DIR, Backing, our_segments, reap
from tests.conftest import REPO
from tests.wire_helpers import head_of, segments_of


def run_pair(count: int, borrow: bool) -> tuple[tuple[int, bool], int]:
    """Producer -> consumer in two spawned processes; returns the consumer's report and the producer pid."""
    from tests import procs

    ctx = mp.get_context("spawn")
    data_out, data_in = ctx.Pipe()
    report_out, report_in = ctx.Pipe()
    control_out, control_in = ctx.Pipe()
    sender = ctx.Process(target=procs.producer, args=(data_out, control_in, count))
    receiver = ctx.Process(target=procs.consumer, args=(data_in, report_out, count, borrow))
    sender.start()
    receiver.start()
    try:
        assert report_in.poll(120), "the consumer did not report in time"
        report = report_in.recv()
        control_out.send("done")
        receiver.join(timeout=60)
        sender.join(timeout=60)
        assert receiver.exitcode == 0 and sender.exitcode == 0
    finally:
        for proc in (sender, receiver):
            if proc.is_alive():
                proc.kill()
    assert sender.pid is not None
    return report, sender.pid


@pytest.mark.parametrize("borrow", [False, True])
def test_messages_between_spawned_processes_leave_no_segment(borrow: bool) -> None:
    report, producer_pid = run_pair(25, borrow)
    assert report == (25, True)
    assert segments_of(producer_pid) == []


SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from tests.test_cross_process import run_pair

    if __name__ == "__main__":
        report, pid = run_pair(10, True)
        print("consumer report", report, "producer", pid)
    """
)


def test_no_resource_tracker_output_and_no_leak(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(repo=str(REPO)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert "consumer report (10, True)" in result.stdout
    assert "resource_tracker" not in result.stderr and "leaked" not in result.stderr, result.stderr
    producer_pid = int(result.stdout.strip().split()[-1])
    assert segments_of(producer_pid) == []


def _exported_by_a_sender_that_exited(backing: Backing) -> tuple[int, list[Any]]:
    from tests import procs

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    sender = ctx.Process(target=procs.export_and_exit, args=(child, backing))
    sender.start()
    frames = parent.recv()
    sender.join(timeout=60)
    assert sender.exitcode == 0 and sender.pid is not None
    return sender.pid, frames


def test_a_named_segment_outlives_its_sender_and_reap_removes_it() -> None:
    pid, frames = _exported_by_a_sender_that_exited("named")
    names = segments_of(pid)
    assert len(names) == 1  # the creator is gone; its segment is still there (no tracker destroyed it)
    would = [n for n in reap(dry_run=True) if n.startswith(f"tw-{pid}-")]
    assert would == names and (SHM_DIR / names[0]).exists()  # a dry run removes nothing
    removed = reap()
    assert names[0] in removed and segments_of(pid) == []
    with pytest.raises(tw.TransportError, match=r"cannot open pool segment .*: No such file or directory"):
        tw.Decoder(REGISTRY, transports=[transports.ShmTransport(backing="named")]).decode(frames)


def test_a_memfd_slot_goes_with_its_sender_and_leaves_nothing_to_reap() -> None:
    pid, frames = _exported_by_a_sender_that_exited("memfd")
    assert segments_of(pid) == [] and not any(n.startswith(f"tw-{pid}-") for n in reap(dry_run=True))
    with pytest.raises(
        tw.TransportError, match=rf"cannot open pool segment tw-{pid}-.* through /proc/{pid}/fd/\d+: No such file"
    ):
        tw.Decoder(REGISTRY, transports=[transports.ShmTransport()]).decode(frames)


def test_reap_keeps_segments_of_live_processes() -> None:
    before = set(segments_of(os.getpid()))
    one_shot = transports.ShmTransport(pool=False)
    encoder = tw.Encoder(transport=one_shot, options=tw.EncodeOptions(inline_threshold=1, embed_threshold=0))
    frames = encoder.encode(tw.builtins.diffusion.Output(output=torch.ones(10)))
    mine = sorted(set(segments_of(os.getpid())) - before)
    assert len(mine) == 1
    assert mine[0] not in reap()
    assert (SHM_DIR / mine[0]).exists()
    tw.Decoder(REGISTRY, transports=[one_shot]).decode(frames)
    assert set(segments_of(os.getpid())) <= before


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_cli_shm_reap_and_ls(capsys: pytest.CaptureFixture[str]) -> None:
    from tensorwire.cli import main

    dead = SHM_DIR / (f"tw-{_dead_pid()}-" + "b" * 32 + "-1")
    dead.write_bytes(b"x")
    try:
        assert main(["shm", "ls"]) == 0
        assert dead.name in capsys.readouterr().out
        assert main(["shm", "reap", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert f"would remove {dead.name}" in out and "segment(s) of dead processes would be removed" in out
        assert dead.exists()
        assert main(["shm", "reap"]) == 0
        out = capsys.readouterr().out
        assert f"removed {dead.name}" in out and "segment(s) of dead processes removed" in out
        assert not dead.exists() and dead.name not in our_segments()
    finally:
        dead.unlink(missing_ok=True)


def test_a_borrowed_mapping_lives_until_its_last_view_dies() -> None:
    """Reference counting alone releases the mapping: no cycle keeps it (or the sender's tensor) alive."""
    import gc
    import weakref

    shm = transports.ShmTransport(pool=False, backing="named")  # a receiver that maps one-shot segments
    encoder = tw.Encoder(transport=shm, options=tw.EncodeOptions(inline_threshold=1, embed_threshold=0))
    decoder = tw.Decoder(REGISTRY, transports=[shm], options=tw.DecodeOptions(borrow=True))
    sent = torch.arange(4096, dtype=torch.float32)
    sent_ref = weakref.ref(sent)
    gc.collect()
    gc.disable()
    try:
        frames = encoder.encode(tw.builtins.diffusion.Output(output=(sent, "tuple in a tree")))
        name = head_of(frames[0])[3][0][1]["name"]

        def mapped() -> bool:
            return name in Path("/proc/self/maps").read_text()

        message = decoder.decode(frames)
        del frames, sent
        assert sent_ref() is None  # the encoder kept nothing of the sender's
        assert not (SHM_DIR / name).exists() and mapped()  # unlinked, still mapped
        view = message.output[0][100:110]
        array = view.numpy()
        del message
        assert mapped() and array[0] == 100.0 and view[9].item() == 109.0
        del view
        assert mapped() and array[5] == 105.0
        del array
        assert not mapped()
    finally:
        gc.enable()


def test_cli_shm_ls_prints_a_table_of_our_segments_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tensorwire.cli import main
    from tensorwire.transports import list_segments

    assert main(["shm", "ls", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "no segments\n"
    dead, live = f"tw-{_dead_pid()}-" + "b" * 32 + "-1", f"tw-{os.getpid()}-" + "c" * 32 + "-2"
    (tmp_path / dead).write_bytes(b"x" * 10)
    (tmp_path / live).write_bytes(b"y" * 4096)
    os.mkfifo(tmp_path / (f"tw-{os.getpid()}-" + "d" * 32 + "-3"))  # our name, not a file: never opened
    (tmp_path / (f"tw-{os.getpid()}-" + "e" * 32 + "-4")).symlink_to("/etc/passwd")  # nor followed
    (tmp_path / "not-ours").write_bytes(b"z")
    assert main(["shm", "ls", "--dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "creator", "alive", "size", "age", "backing"]
    rows = sorted(line.split() for line in lines[1:])
    assert [r[:4] + r[5:] for r in rows] == sorted(
        [[dead, dead.split("-")[1], "no", "10", "named"], [live, str(os.getpid()), "yes", "4096", "named"]]
    )
    assert all(r[4].endswith("s") for r in rows)
    assert main(["shm", "ls", "--dir", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["alive"], s["size"], s["backing"], s["holders"]) for s in listed] == sorted(
        [(dead, False, 10, "named", []), (live, True, 4096, "named", [])]
    )
    name = f"tw-{os.getpid()}-" + "f" * 32 + "-5"  # a memfd this process holds
    fd = os.memfd_create(name)
    try:
        os.ftruncate(fd, 8192)
        held = [s for s in list_segments(tmp_path) if s.backing == "memfd" and s.name == name]
        assert len(held) == 1 and held[0].size == 8192 and os.getpid() in held[0].holders and held[0].alive
        assert name not in {s.name for s in list_segments(tmp_path, memfds=False)}
    finally:
        os.close(fd)
    assert name not in {s.name for s in list_segments(tmp_path)}
    assert main(["shm", "reap", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"removed {dead}\n1 segment(s) of dead processes removed\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live, "not-ours", f"tw-{os.getpid()}-" + "d" * 32 + "-3", f"tw-{os.getpid()}-" + "e" * 32 + "-4"]
    )
