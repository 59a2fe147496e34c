"""Wire compatibility: what a schema change breaks, for old readers and for old writers.

``compare(old, new, mode)`` diffs two compiled schema directories; ``reader_accepts(reader,
writer)`` asks whether ``reader`` decodes what ``writer`` writes. Modes: ``backward`` (new reads
old: protects old writers), ``forward`` (old reads new: protects old readers), ``full`` (both,
the default inside one major version), ``none``; ``compare_transitive`` checks against every
earlier state. The rule catalogue is ``RULES`` (``RETIRED``: IDs it no longer has, and ``covers`` says what an
ignore of one covers); ``render(findings, format)`` prints findings as
the command line does, ``JSON_SCHEMA`` is the schema of its JSON output.
"""

from __future__ import annotations

from tensorwire.compat._diff import MODES, Finding, compare, compare_transitive, reader_accepts
from tensorwire.compat._report import JSON_SCHEMA, render
from tensorwire.compat._rules import RETIRED, RULES, Rule, covers

__all__ = [
    "JSON_SCHEMA",
    "MODES",
    "RETIRED",
    "RULES",
    "Finding",
    "Rule",
    "compare",
    "compare_transitive",
    "covers",
    "reader_accepts",
    "render",
]
