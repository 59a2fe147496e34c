"""Wire compatibility: what a schema change breaks, for old readers and for old writers.

``compare(old, new, mode)`` diffs two compiled schema directories; ``reader_accepts(reader,
writer)`` asks whether ``reader`` decodes what ``writer`` writes. Modes: ``backward`` (new reads
old: protects old writers), ``forward`` (old reads new: protects old readers), ``full`` (both,
the default inside one major version), ``none``; ``compare_transitive`` checks against every
earlier state. The rule catalogue is ``RULES``; ``render(findings, format)`` prints findings as
the command line does, ``JSON_SCHEMA`` is the schema of its JSON output.
"""

from __future__ import annotations

from tensorwire.compat._diff import MODES, Finding, compare, compare_transitive, reader_accepts
from tensorwire.compat._report import JSON_SCHEMA, render
from tensorwire.compat._rules import RULES, Rule

__all__ = [
    "JSON_SCHEMA",
    "MODES",
    "RULES",
    "Finding",
    "Rule",
    "compare",
    "compare_transitive",
    "reader_accepts",
    "render",
]
