"""The instruction-count benchmark: its markers, the parts it reads and, where valgrind is, a real count."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tools.bench import instructions, small
from tools.bench.instructions import EMPTY, main, parts, render, run_marked
from tools.bench.small import FLOOR, RAW, TENSORWIRE, Case


def test_each_implementation_runs_its_round_trips_between_two_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = small.case_builders

    def builders() -> dict[str, Callable[[], Case]]:
        envelope = real()["envelope"]()
        counted = {impl: _logged(impl, fn, calls) for impl, fn in envelope.implementations.items()}
        return {"envelope": lambda: Case(envelope.name, envelope.reference, counted)}

    monkeypatch.setattr(small, "case_builders", builders)
    labels = run_marked(["envelope"], 3, marker=lambda: calls.append("marker"))
    assert labels[0] == [EMPTY, EMPTY, EMPTY]
    names = [impl for _, impl, _ in labels[1:]]
    assert {case for case, _, _ in labels[1:]} == {"envelope (10 fields)"}
    assert {reference for _, _, reference in labels[1:]} == {RAW}
    assert TENSORWIRE in names and RAW in names and FLOOR in names
    counted = calls[calls.index("marker") :]  # after the warm-up: a marker, then each part's round trips
    expected = ["marker"]  # the empty round trip's part holds no logged call
    for name in names:
        expected += ["marker", name, name, name]
    assert counted == [*expected, "marker"]


def _logged(name: str, fn: Callable[[], Any], calls: list[str]) -> Callable[[], Any]:
    def call() -> Any:
        calls.append(name)
        return fn()

    return call


def test_parts_reads_each_dump_after_the_first(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out"
    for index, total in ((1, 999), (2, 1200), (3, 3400)):
        (tmp_path / f"callgrind.out.{index}").write_text(f"version: 1\ncmd: x\nsummary: {total}\n\nfn=a\n")
    assert parts(out, 2) == [1200, 3400]
    (tmp_path / "callgrind.out.3").write_text("version: 1\n")
    with pytest.raises(ValueError, match=r"callgrind\.out\.3 has no summary line"):
        parts(out, 2)
    (tmp_path / "callgrind.out.3").write_text("summary: 3400\n")
    with pytest.raises(FileNotFoundError):
        parts(out, 3)  # a dump that is not there: the child stopped before its last marker


def test_without_valgrind_it_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["--cases", "envelope", "--number", "5"]) == 2
    assert capsys.readouterr().err == "python -m tools.bench.instructions: valgrind is not on the PATH\n"


def test_a_child_that_left_no_dumps_is_an_error_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/valgrind")
    labels = [[EMPTY, EMPTY, EMPTY], ["c", "a", "a"]]

    def ran(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert command[:3] == ["/usr/bin/valgrind", "--tool=callgrind", "--dump-before=os_getppid"]
        assert kwargs["env"]["PYTHONHASHSEED"] == "0"
        return subprocess.CompletedProcess(command, 0, stdout=json.dumps(labels) + "\n", stderr="")

    monkeypatch.setattr(subprocess, "run", ran)
    assert main(["--cases", "envelope", "--number", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m tools.bench.instructions: callgrind did not dump at every marker (os_getppid): ")
    assert "callgrind.out.2" in err


@pytest.mark.parametrize(
    ("code", "stdout", "stderr", "problem"),
    [
        (
            1,
            "",
            "Traceback ...\nImportError: no torch\n",
            "the counted child failed (1): Traceback ...\nImportError: no torch",
        ),
        (0, "\n", "", "the counted child printed no labels"),
    ],
)
def test_a_failed_or_silent_child_is_an_error_not_a_traceback(
    code: int,
    stdout: str,
    stderr: str,
    problem: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/valgrind")
    monkeypatch.setattr(
        subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, code, stdout, stderr)
    )
    assert main(["--cases", "envelope", "--number", "5"]) == 2
    assert capsys.readouterr().err == f"python -m tools.bench.instructions: {problem}\n"


def test_its_cases_are_the_small_benchmarks_cases() -> None:
    assert instructions.CASES == tuple(small.case_builders())  # one list, kept in step


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--cases", "envelope,nope"], "unknown cases ['nope']"),
        (["--cases", ""], "give at least one case and a --number of 1 or more"),
        (["--number", "0"], "give at least one case and a --number of 1 or more"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert problem in capsys.readouterr().err


def test_render_marks_the_reference() -> None:
    rows = [
        {"case": "c", "implementation": "a", "median": 1234.4, "reference": "b", "ratio": 1.5},
        {"case": "c", "implementation": "b", "median": 822.9, "reference": "b", "ratio": 1.0},
    ]
    assert render(rows).splitlines()[2:] == ["| c | a | 1,234 | 1.50 |", "| c | b | 823 | 1 (reference) |"]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_counted_run_gives_every_implementation_its_instructions() -> None:
    """About a minute: valgrind runs the child, torch's import included, ~50x slower."""
    rows = instructions.instructions(["envelope"], 20)
    by_name = {row["implementation"]: row for row in rows}
    assert set(by_name) >= {TENSORWIRE, RAW, FLOOR}
    assert by_name[RAW]["ratio"] == 1.0
    # what each executes does not move between runs: tensorwire's round trip checks and frames what
    # the raw one only encodes and decodes, and its C steps alone are a part of it
    assert 1000 < by_name[RAW]["median"] < by_name[FLOOR]["median"] < by_name[TENSORWIRE]["median"]
