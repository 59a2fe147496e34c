"""Wire compatibility: what a schema change breaks, for old readers and for old writers.

``compare(old, new, mode)`` diffs two compiled schema directories; ``reader_accepts(reader,
writer)`` asks whether ``reader`` decodes what ``writer`` writes. Modes: ``backward`` (new reads
old: protects old writers), ``forward`` (old reads new: protects old readers), ``full`` (both,
the default inside one major version), ``none``; ``compare_transitive`` checks against every
earlier state. The rule catalogue is ``RULES``.
"""

from __future__ import annotations

from tensorwire.compat.diff import MODES, Finding, compare, compare_transitive, reader_accepts
from tensorwire.compat.rules import RULES, Rule

__all__ = ["MODES", "RULES", "Finding", "Rule", "compare", "compare_transitive", "reader_accepts"]
