"""The run: a private directory, a victim, workers in rounds of batches, isolation of every failure.

Each round gives every worker a batch of case indices; after it the victim checks its targets.

- A worker killed by a signal (or silent past its deadline) loses its batch's results: the batch is
  run again case by case in a fresh worker, and each case it dies on is run once more alone in
  another fresh worker, to tell a crash of its own from one that needs the cases before it.
- A non-codec exception (or a valid message refused, or a harness error) comes with its index.
- fds or segments held after a batch beyond what the worker held when ready are leaked; the batch
  is run again in a fresh worker with stats after every case to find the inputs that leak.
- A worker one of whose inputs ran into its memory cap (a ``MemoryError``, reported with its
  index) ends its batch there; a fresh worker runs the rest.
- A harmed victim target: the round's cases run again one by one against a fresh victim, checked
  after each; the main loop goes on with a fresh victim and fresh workers.

Failing inputs are saved (``--save-failures``) as case files named by their content. Every
process is stopped (killed if it will not stop) and the directory removed, whatever happens.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.fuzz.case import Case, Found, dump, file_name, load
from tools.fuzz.cases import generate
from tools.fuzz.channel import REPO, Child, ChildDied
from tools.fuzz.probe import named_segments
from tools.fuzz.report import Failure, Report
from tools.fuzz.victim import VictimProcess

__all__ = ["Config", "Run", "run"]

_START_TIMEOUT = 300.0
_CASE_TIMEOUT = 30.0
_CATEGORY = {"error": "non-codec", "rejected": "rejected", "harness": "harness"}


@dataclass
class Config:
    """What to run: ``cases`` generated from ``seed`` (or the case files of ``replay``), within
    ``seconds``; ``sabotage`` breaks the workers' decoders on purpose (see ``tools.fuzz.sabotage``)."""

    cases: int = 10_000
    seed: int = 0
    seconds: float | None = None
    workers: int = max(1, os.cpu_count() or 1)
    batch: int = 250
    corpus: Path = REPO / "tests" / "hostile" / "corpus"
    save_failures: bool = False
    replay: list[Path] = field(default_factory=list)
    sabotage: str = ""
    max_isolations: int = 3  # per kind of failure; past it, failures are counted without their input
    verbose: bool = False


class _Worker:
    """A worker process and what it held when it reported ready."""

    def __init__(self, child: Child) -> None:
        self.child = child
        self.pid = child.pid
        self.base: dict[str, Any] = {}

    def run(self, start: int, count: int, each: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = self.child.ask(
            {"op": "run", "start": start, "count": count, "each": each}, _deadline(count)
        )
        return result


def _deadline(count: int) -> float:
    return 120.0 + 0.5 * count


class Run:
    """One fuzzing (or replay) run; ``execute`` returns its report."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.report = Report()
        self.corpus = [p.read_bytes() for p in config.replay]
        self.total = len(self.corpus) if config.replay else config.cases
        self.directory = Path("/nonexistent")  # made by ``execute``, removed when it ends
        self.logs = self.directory
        self.victim: VictimProcess | None = None
        self.workers: list[_Worker] = []
        self.isolations: dict[str, int] = {}
        self._spawned = 0
        self._exited: list[int] = []  # pids of workers that exited cleanly

    # -- processes -----------------------------------------------------------------------------------
    def _init(self) -> dict[str, Any]:
        assert self.victim is not None
        source: dict[str, Any] = {"corpus": self.corpus} if self.corpus else {"seed": self.config.seed}
        return {
            "op": "init",
            "directory": str(self.directory),
            "victim": self.victim.table,
            "sabotage": self.config.sabotage,
            **source,
        }

    def _spawn(self, count: int) -> list[_Worker]:
        """``count`` fresh workers, started side by side."""
        fresh = []
        for _ in range(count):
            self._spawned += 1
            log = self.logs / f"worker-{self._spawned}.log"
            fresh.append(_Worker(Child(f"worker {self._spawned}", "tools.fuzz.worker", [], log)))
        init = self._init()
        try:
            for worker in fresh:
                worker.child.send(init)
            for worker in fresh:
                reply = worker.child.recv(_START_TIMEOUT)
                worker.pid, worker.base = reply["pid"], reply["stats"]
        except BaseException:
            for worker in fresh:
                worker.child.kill()
            raise
        return fresh

    def _restart_victim(self) -> None:
        if self.victim is not None:
            self.victim.stop()
        self.victim = VictimProcess(self.directory, self.logs / f"victim-{time.monotonic_ns()}.log")

    def _stop(self, worker: _Worker) -> None:
        """Stop a worker, counting what it still held and what it left in the directory."""
        last = worker.child.stop()
        if last is None:
            return
        self._leak_check(worker, last["stats"], None)
        self._exited.append(worker.pid)

    def _kill_all(self) -> None:
        for worker in self.workers:
            worker.child.kill()
        self.workers = []
        if self.victim is not None:
            self.victim.child.kill()
            self.victim = None

    # -- the loop ------------------------------------------------------------------------------------
    def execute(self) -> Report:
        began = time.monotonic()
        self.directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="twfuzz-"))
        self.logs = Path(tempfile.mkdtemp(prefix="twfuzz-logs-"))
        try:
            self._restart_victim()
            self.workers = self._spawn(max(1, min(self.config.workers, self.total)))
            done = 0
            while done < self.total and not self._out_of_time(began):
                done = self._round(done)
            self._finish()
        finally:
            self._kill_all()
            shutil.rmtree(self.directory, ignore_errors=True)
            shutil.rmtree(self.logs, ignore_errors=True)
            self.report.seconds = time.monotonic() - began
        return self.report

    def _out_of_time(self, began: float) -> bool:
        seconds = self.config.seconds
        return seconds is not None and time.monotonic() - began >= seconds

    def _round(self, done: int) -> int:
        batches = []
        for worker in self.workers:
            count = min(self.config.batch, self.total - done)
            if count <= 0:
                break
            worker.child.send({"op": "run", "start": done, "count": count, "each": False})
            batches.append((worker, done, count))
            done += count
        for slot, (worker, start, count) in enumerate(batches):
            try:
                result = worker.child.recv(_deadline(count))
            except ChildDied as died:
                self.workers[slot] = self._spawn(1)[0]
                self._crashed(start, count, died)
                continue
            self._absorb(worker, result, start, result["ran"])
            if result["ran"] < count:
                self._go_on(slot, start + result["ran"], count - result["ran"])
        assert self.victim is not None
        harmed = self.victim.check()
        if harmed:
            self._harmed(harmed, [(start, count) for _, start, count in batches])
        if self.config.verbose:
            print(f"  {done} cases, {self.report.summary()}", file=sys.stderr)
        return done

    def _go_on(self, slot: int, start: int, count: int) -> None:
        """The worker in ``slot`` stopped its batch after an input ran into its memory cap (its
        allocator keeps that address space): a fresh one runs the rest of the batch."""
        while count > 0:
            self._stop(self.workers[slot])
            worker = self.workers[slot] = self._spawn(1)[0]
            try:
                result = worker.run(start, count)
            except ChildDied as died:
                self.workers[slot] = self._spawn(1)[0]
                self._crashed(start, count, died)
                return
            self._absorb(worker, result, start, result["ran"])
            start, count = start + result["ran"], count - result["ran"]

    def _finish(self) -> None:
        for worker in self.workers:
            self._stop(worker)
        self.workers = []
        assert self.victim is not None
        harmed = self.victim.check()
        if harmed:
            self._record("harm", None, "", "; ".join(harmed))
            self.report.harmed += len(harmed)
        self.victim.stop()
        self.victim = None
        for pid in self._exited:
            left = named_segments(self.directory, pid)
            if left:
                self.report.leaked_segments += len(left)
                self._record("leak", None, "", f"worker {pid} exited leaving {sorted(left)[:4]} in the directory")

    # -- outcomes ------------------------------------------------------------------------------------
    def _case(self, index: int) -> Case:
        return load(self.corpus[index])[0] if self.corpus else generate(self.config.seed, index)

    def _record(self, category: str, index: int | None, family: str, detail: str) -> Failure:
        failure = Failure(category, index, family, detail)
        self.report.failures.append(failure)
        if index is None:
            return failure
        if self.corpus:
            failure.saved = str(self.config.replay[index])
        elif self.config.save_failures:
            try:
                case = self._case(index)
            except Exception:  # nothing to save: the generator itself failed (a harness error)
                return failure
            self.config.corpus.mkdir(parents=True, exist_ok=True)
            path = self.config.corpus / file_name(case, category)
            if not path.exists():
                path.write_bytes(dump(case, Found(category, detail[:2000], self.config.seed, index)))
            failure.saved = str(path)
        return failure

    def _absorb(self, worker: _Worker, result: dict[str, Any], start: int, count: int) -> None:
        """Count a batch's outcomes and errors, and check what the worker holds now."""
        self.report.add_families(result["families"])
        for error in result["errors"]:
            category = _CATEGORY[error["outcome"]]
            detail = f"{error['type']}: {error['message']} (at {error['where']})"
            self._record(category, error["index"], error["family"], detail)
            if category == "non-codec":
                self.report.non_codec += 1
            elif category == "rejected":
                self.report.rejected += 1
            else:
                self.report.harness += 1
        self._leak_check(worker, result["stats"], (start, count))

    def _leak_check(self, worker: _Worker, stats: dict[str, Any], batch: tuple[int, int] | None) -> None:
        self.report.max_rss = max(self.report.max_rss, stats["rss"])
        fds = stats["fds"] - worker.base["fds"]
        segments = stats["segments"] - worker.base["segments"]
        if fds <= 0 and segments <= 0:
            return
        self.report.leaked_fds += max(fds, 0)
        self.report.leaked_segments += max(segments, 0)
        worker.base = {**worker.base, "fds": max(stats["fds"], worker.base["fds"])}
        worker.base["segments"] = max(stats["segments"], worker.base["segments"])
        detail = f"worker {worker.pid} holds {fds} more fds and {segments} more segments than when it started"
        if batch is not None and batch[1] == 1:
            self._record("leak", batch[0], self._family(batch[0]), detail)
        elif batch is None or not self._may_isolate("leak"):
            self._record("leak", None, "", detail)
        else:
            self._isolate_leak(*batch, detail)

    def _may_isolate(self, category: str) -> bool:
        self.isolations[category] = self.isolations.get(category, 0) + 1
        return self.isolations[category] <= self.config.max_isolations

    def _isolate_leak(self, start: int, count: int, detail: str) -> None:
        """Find the cases after which a fresh worker holds more than before."""
        worker = self._spawn(1)[0]
        try:
            result = worker.run(start, count, each=True)
        except ChildDied:
            self._record("leak", None, "", detail + " (not isolated: the isolating worker died)")
            return
        finally:
            worker.child.kill()
        previous = worker.base
        found = False
        for offset, stats in enumerate(result["each"]):
            if stats["fds"] > previous["fds"] or stats["segments"] > previous["segments"]:
                grew = f"{stats['fds'] - previous['fds']} fds, {stats['segments'] - previous['segments']} segments"
                self._record("leak", start + offset, self._family(start + offset), f"{detail}; this case: {grew}")
                found = True
            previous = stats
        if not found:
            self._record("leak", None, "", detail + f" (cases {start}..{start + count - 1}; not reproduced one by one)")

    def _crashed(self, start: int, count: int, died: ChildDied) -> None:
        """A worker died during cases ``start .. start + count``: find the inputs it died on."""
        if not self._may_isolate("crash"):
            self.report.crashes += 1
            self._record("crash", None, "", f"{died} during cases {start}..{start + count - 1}: {died.tail[-500:]}")
            return
        worker = self._spawn(1)[0]
        try:
            for index in range(start, start + count):
                try:
                    result = worker.run(index, 1)
                except ChildDied as again:
                    worker = self._crash_at(index, again, start)
                    continue
                self._absorb(worker, result, index, 1)
        finally:
            worker.child.kill()

    def _family(self, index: int) -> str:
        try:
            return self._case(index).family
        except Exception:  # the worker reports the generator's own failures
            return "?"

    def _crash_at(self, index: int, died: ChildDied, start: int) -> _Worker:
        """Case ``index`` killed its worker: run it alone in a fresh one; return a live worker. A worker
        that exited by itself (no signal, no hang) hit a bug of the harness, not of the decoder."""
        signalled = died.returncode is None or died.returncode < 0
        category = "crash" if signalled else "harness"
        if signalled:
            self.report.crashes += 1
        else:
            self.report.harness += 1
        family = self._family(index)
        row = self.report.families.setdefault(family, [0, 0, 0, 0])
        row[0] += 1
        row[3] += 1
        self.report.cases += 1
        worker = self._spawn(1)[0]
        try:
            worker.run(index, 1)
            alone = "not alone: it crashed only after the cases before it in its batch"
        except ChildDied:
            alone = "alone too"
            worker = self._spawn(1)[0]
        signal = f"signal {-died.returncode}" if died.returncode is not None and died.returncode < 0 else str(died)
        self._record(category, index, family, f"{signal} ({alone}; batch from {start}); {_innermost(died.tail)}")
        return worker

    def _harmed(self, harmed: list[str], batches: list[tuple[int, int]]) -> None:
        """A victim target changed during the round: find the cases that change a fresh victim."""
        self.report.harmed += len(harmed)
        for worker in self.workers:
            worker.child.kill()
        self.workers = []
        self._restart_victim()
        if not self._may_isolate("harm"):
            self._record("harm", None, "", "; ".join(harmed))
        else:
            self._isolate_harm(harmed, batches)
            self._restart_victim()
        self.workers = self._spawn(max(1, self.config.workers))

    def _isolate_harm(self, harmed: list[str], batches: list[tuple[int, int]]) -> None:
        found = 0
        worker = self._spawn(1)[0]
        try:
            for start, count in batches:
                for index in range(start, start + count):
                    if found >= self.config.max_isolations:
                        break
                    try:
                        worker.run(index, 1)
                    except ChildDied:
                        worker = self._spawn(1)[0]
                        continue
                    assert self.victim is not None
                    now = self.victim.check()
                    if now:
                        found += 1
                        self._record("harm", index, self._family(index), "; ".join(now))
                        worker.child.kill()
                        self._restart_victim()
                        worker = self._spawn(1)[0]
        finally:
            worker.child.kill()
        if not found:
            self._record("harm", None, "", "; ".join(harmed) + " (not reproduced case by case)")


def _innermost(tail: str) -> str:
    """The innermost frames of the crash's faulthandler dump (or the last lines of stderr)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    frames = [line for line in lines if line.startswith("File ")]
    return " < ".join(frames[:5]) if frames else " | ".join(lines[-4:])


def run(config: Config) -> Report:
    """Run ``config`` and return the report."""
    return Run(config).execute()
