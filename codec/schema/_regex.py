"""Refuse patterns whose matching can take time exponential in the string's length.

Python's ``re`` backtracks: a repeated part that can match the same text in more than one way
(``(a+)+``, ``(a|aa)+``) makes a failing match try every way, 2**n of them for n characters. A
pattern runs at schema load (on defaults and examples) and on every string a peer sends, so such
a pattern is a ``SchemaError``. The check is conservative: inside a repeat that can run more than
once, every quantifier must be of fixed count (``{3}``) and every alternation's branches must start
with characters no other branch starts with. A possessive quantifier (``++``, ``*+``, ``?+``,
``{m,n}+``) or an atomic group (``(?>...)``) never gives back what it matched, so what lies inside
one is checked on its own. Several unbounded parts in a row (``.*a.*b``) still cost time
polynomial in the string's length: bound such strings with ``maxLength``.
"""

from __future__ import annotations

import warnings
from itertools import pairwise
from typing import Any

with warnings.catch_warnings():  # the parser ``re`` itself uses; the module name is deprecated
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _c
    import sre_parse

__all__ = ["pattern_problem"]

_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT)
_NESTED = (
    "a repeated part holds a quantifier that is not of fixed count (nested quantifiers: "
    "the repeats can split the same text in many ways)"
)
_OVERLAP = (
    "a repeated part holds an alternation whose branches can start with the same character "
    "(or match nothing): each repeat can take either"
)
_HINT = (
    "make the inner quantifier possessive ('++', '*+', '?+', '{m,n}+') or the group atomic '(?>...)', "
    "or write the alternatives so that no two start alike"
)
CharSet = frozenset[tuple[int, int]] | None  # ranges of code points; None: not known


def pattern_problem(pattern: str) -> str | None:
    """Why matching ``pattern`` can backtrack exponentially, or None. ``pattern`` compiles."""
    parsed = sre_parse.parse(pattern)
    fold = bool(parsed.state.flags & _c.SRE_FLAG_IGNORECASE)
    why = _walk(list(parsed.data), in_loop=False, fold=fold)
    if why is None:
        return None
    return f"pattern {pattern!r} can backtrack through exponentially many ways to match a string: {why}; {_HINT}"


def _walk(items: list[tuple[Any, Any]], *, in_loop: bool, fold: bool) -> str | None:
    """The first problem among ``items`` (``in_loop``: inside a repeat that can run more than once)."""
    for op, av in items:
        why = _item(op, av, in_loop=in_loop, fold=fold)
        if why is not None:
            return why
    return None


def _item(op: Any, av: Any, *, in_loop: bool, fold: bool) -> str | None:
    if op in _REPEATS:
        low, high, body = av
        if in_loop and low != high:
            return _NESTED
        return _walk(list(body), in_loop=in_loop or high > 1, fold=fold)
    if op is _c.POSSESSIVE_REPEAT:
        return _walk(list(av[2]), in_loop=False, fold=fold)
    if op is _c.ATOMIC_GROUP:
        return _walk(list(av), in_loop=False, fold=fold)
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return _walk(list(av[1]), in_loop=False, fold=fold)
    if op is _c.SUBPATTERN:
        return _walk(list(av[3]), in_loop=in_loop, fold=fold or bool(av[1] & _c.SRE_FLAG_IGNORECASE))
    if op is _c.BRANCH:
        if in_loop and not _disjoint([_first(list(branch), fold) for branch in av[1]]):
            return _OVERLAP
        return next((w for b in av[1] if (w := _walk(list(b), in_loop=in_loop, fold=fold))), None)
    if op is _c.GROUPREF_EXISTS:
        if in_loop:
            return _OVERLAP
        branches = [av[1]] if av[2] is None else [av[1], av[2]]
        return next((w for b in branches if (w := _walk(list(b), in_loop=False, fold=fold))), None)
    return None


def _first(items: list[tuple[Any, Any]], fold: bool) -> CharSet:
    """The characters a match of ``items`` can start with; None where that is not known (or it
    can match nothing)."""
    for op, av in items:
        if op is _c.AT:
            continue  # an anchor matches no character
        if op is _c.LITERAL:
            return _literal(av, fold)
        if op is _c.IN:
            return _class(av, fold)
        if op is _c.SUBPATTERN:
            return None if av[1] & _c.SRE_FLAG_IGNORECASE else _first(list(av[3]), fold)
        if op in (*_REPEATS, _c.POSSESSIVE_REPEAT):
            return _first(list(av[2]), fold) if av[0] >= 1 else None
        if op is _c.ATOMIC_GROUP:
            return _first(list(av), fold)
        return None
    return None


def _literal(code: int, fold: bool) -> frozenset[tuple[int, int]]:
    char = chr(code)
    codes = {code} | ({ord(c) for c in (char.lower(), char.upper()) if len(c) == 1} if fold else set())
    return frozenset((c, c) for c in codes)


def _class(members: list[tuple[Any, Any]], fold: bool) -> CharSet:
    """The ranges of a character class of literals and ranges only (under IGNORECASE, literals)."""
    out: set[tuple[int, int]] = set()
    for op, av in members:
        if op is _c.LITERAL:
            out |= _literal(av, fold)
        elif op is _c.RANGE and not fold:
            out.add(av)
        else:
            return None
    return frozenset(out)


def _disjoint(sets: list[CharSet]) -> bool:
    """Whether every set is known and no two share a character."""
    ranges: list[tuple[int, int]] = []
    for one in sets:
        if one is None:
            return False
        ranges.extend(_merged(one))
    ranges.sort()
    return all(a[1] < b[0] for a, b in pairwise(ranges))


def _merged(ranges: frozenset[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` as sorted ranges that do not overlap each other."""
    out: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out
