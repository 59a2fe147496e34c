"""What a run found: counts per family and per kind of failure, the failures themselves, the summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CATEGORIES", "Failure", "Report"]

# kinds of failure: a worker killed by a signal (or hung), an exception that is no CodecError, a
# victim target changed, a segment or fd still held, a valid message refused, a harness bug
CATEGORIES = ("crash", "non-codec", "harm", "leak", "rejected", "harness")


@dataclass
class Failure:
    """One failing input (``index`` into the run's source, None where it could not be isolated)."""

    category: str
    index: int | None
    family: str
    detail: str
    saved: str | None = None


@dataclass
class Report:
    """The outcome of a run; ``failed`` when anything but decoded messages and CodecErrors was seen."""

    cases: int = 0
    crashes: int = 0
    non_codec: int = 0
    harmed: int = 0
    leaked_segments: int = 0
    leaked_fds: int = 0
    max_rss: float = 0.0
    rejected: int = 0
    harness: int = 0
    seconds: float = 0.0
    families: dict[str, list[int]] = field(default_factory=dict)  # cases, decoded, CodecError, other
    failures: list[Failure] = field(default_factory=list)

    def failed(self) -> bool:
        counts = (self.crashes, self.non_codec, self.harmed, self.leaked_segments, self.leaked_fds)
        return any(counts) or bool(self.rejected or self.harness)

    def add_families(self, families: dict[str, list[int]]) -> None:
        for name, row in families.items():
            mine = self.families.setdefault(name, [0, 0, 0, 0])
            for i, n in enumerate(row):
                mine[i] += n
            self.cases += row[0]

    def summary(self) -> str:
        return (
            f"cases {self.cases}  crashes {self.crashes}  non-codec exceptions {self.non_codec}  "
            f"decoys harmed {self.harmed}  leaked segments {self.leaked_segments}  leaked fds {self.leaked_fds}  "
            f"max rss {self.max_rss:.0f} MiB"
        )

    def lines(self, failures: int = 20) -> list[str]:
        """One line per family, then the first failures, then the summary."""
        out = [f"{'family':<12} {'cases':>8} {'decoded':>8} {'refused':>8} {'other':>6}"]
        for name in sorted(self.families):
            cases, decoded, refused, other = self.families[name]
            out.append(f"{name:<12} {cases:>8} {decoded:>8} {refused:>8} {other:>6}")
        for failure in self.failures[:failures]:
            where = f" -> {failure.saved}" if failure.saved else ""
            out.append(
                f"FAIL {failure.category} case {failure.index} ({failure.family}): {failure.detail[:300]}{where}"
            )
        if len(self.failures) > failures:
            out.append(f"... and {len(self.failures) - failures} more failures")
        if self.rejected or self.harness:
            out.append(f"valid messages rejected {self.rejected}  harness errors {self.harness}")
        out.append(f"seconds {self.seconds:.1f}")
        out.append(self.summary())
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
