r"""What characters an item of a parsed pattern (``sre_parse``) can match, for the check of
``_regex``: the item that starts every match of a sequence (``first_char``), every character a
sequence can match, when few (``taken``), a test of whether it can match a given one (``takes``,
``takes_one``), the ranges of code points a match starts with (``first``) and whether such sets
share none (``disjoint``); each under the flags it is read with (``Flags``, ``group_flags``).
Each answers None (or False) where it does not know.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from itertools import pairwise
from typing import Any

with warnings.catch_warnings():  # the parser ``re`` itself uses; the module name is deprecated
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _c

__all__ = [
    "REPEATS",
    "CharSet",
    "Flags",
    "Test",
    "disjoint",
    "first",
    "first_char",
    "group_flags",
    "taken",
    "takes",
    "takes_one",
]

REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT)
_FENCE_CHARS = 256  # characters a repeat's start may be tested against, at most
_CATEGORIES = {
    _c.CATEGORY_DIGIT: r"\d",
    _c.CATEGORY_NOT_DIGIT: r"\D",
    _c.CATEGORY_SPACE: r"\s",
    _c.CATEGORY_NOT_SPACE: r"\S",
    _c.CATEGORY_WORD: r"\w",
    _c.CATEGORY_NOT_WORD: r"\W",
}
CharSet = frozenset[tuple[int, int]] | None  # ranges of code points; None: not known
Test = Callable[[str], bool]


@dataclass(frozen=True)
class Flags:
    """The flags a pattern's item is read under."""

    fold: bool  # IGNORECASE
    ascii: bool  # ASCII: \d, \w and \s match ASCII characters only
    dotall: bool  # DOTALL: ``.`` matches a newline too


def group_flags(flags: Flags, group: Any) -> Flags:
    """The flags a group's items are read under (``(?i:...)`` turns IGNORECASE on)."""
    return replace(flags, fold=flags.fold or bool(group[1] & _c.SRE_FLAG_IGNORECASE))


def first_char(items: list[tuple[Any, Any]], flags: Flags, start: int = 0) -> tuple[tuple[Any, Any], Flags] | None:
    """The item that matches the first character of every match of ``items[start:]`` (with the
    flags it is read under); None where not known, or where they can match nothing."""
    for index in range(start, len(items)):
        op, av = items[index]
        if op is _c.AT:
            continue
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return (op, av), flags
        if op is _c.SUBPATTERN:
            return first_char(list(av[3]), group_flags(flags, av))
        if op in (*REPEATS, _c.POSSESSIVE_REPEAT):
            return first_char(list(av[2]), flags) if av[0] >= 1 else None
        if op is _c.ATOMIC_GROUP:
            return first_char(list(av), flags)
        return None
    return None


def taken(items: list[tuple[Any, Any]], flags: Flags) -> frozenset[str] | None:
    """Every character ``items`` can match anywhere (and maybe a few more), if known and at most
    ``_FENCE_CHARS`` of them; None otherwise."""
    out: set[str] = set()
    for op, av in items:
        if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
            continue
        if op is _c.LITERAL:
            some: frozenset[str] | None = frozenset(_forms(chr(av), flags.fold))
        elif op is _c.IN:
            some = _class_chars(av, flags)
        elif op in (*REPEATS, _c.POSSESSIVE_REPEAT):
            some = taken(list(av[2]), flags)
        elif op is _c.ATOMIC_GROUP:
            some = taken(list(av), flags)
        elif op is _c.SUBPATTERN:
            some = taken(list(av[3]), group_flags(flags, av))
        else:
            return None
        if some is None:
            return None
        out |= some
    if len(out) > _FENCE_CHARS:
        return None
    return frozenset(out)


def _class_chars(members: list[tuple[Any, Any]], flags: Flags) -> frozenset[str] | None:
    """The characters of a class of literals, short ranges and small categories (``\\s``), with
    their other cases under IGNORECASE; None for a negated class or a large one."""
    out: set[str] = set()
    for op, av in members:
        if op is _c.LITERAL:
            chars: frozenset[str] | None = frozenset({chr(av)})
        elif op is _c.RANGE and av[1] - av[0] < _FENCE_CHARS:
            chars = frozenset(chr(code) for code in range(av[0], av[1] + 1))
        elif op is _c.CATEGORY and av in _CATEGORIES:
            chars = _category_chars(_CATEGORIES[av], flags.ascii)
        else:
            return None
        if chars is None:
            return None
        out.update(form for char in chars for form in _forms(char, flags.fold))
        if len(out) > _FENCE_CHARS:
            return None
    return frozenset(out)


@cache
def _category_chars(category: str, ascii_only: bool) -> frozenset[str] | None:
    """The characters of a category (``\\s``), if at most ``_FENCE_CHARS`` of them."""
    every = "".join(map(chr, range(128 if ascii_only else 0x110000)))  # (made per category, not kept)
    found = re.findall(category, every, re.ASCII if ascii_only else 0)
    return frozenset(found) if len(found) <= _FENCE_CHARS else None


def takes(items: list[tuple[Any, Any]], flags: Flags) -> Test | None:
    """A test of whether ``items`` can match a given character anywhere; None where not known."""
    tests: list[Test] = []
    for op, av in items:
        test = takes_one(op, av, flags)
        if test is None:
            return None
        tests.append(test)
    return lambda char: any(test(char) for test in tests)


def takes_one(op: Any, av: Any, flags: Flags) -> Test | None:
    if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
        return lambda char: False  # matches a place, no character
    if op is _c.LITERAL:
        return _same_as(chr(av), flags.fold)
    if op is _c.NOT_LITERAL:
        same = _same_as(chr(av), flags.fold)
        return lambda char: not same(char)
    if op is _c.ANY:
        return (lambda char: True) if flags.dotall else (lambda char: char != "\n")
    if op is _c.IN:
        return _in_class(av, flags)
    if op in (*REPEATS, _c.POSSESSIVE_REPEAT):
        return takes(list(av[2]), flags)
    if op is _c.ATOMIC_GROUP:
        return takes(list(av), flags)
    if op is _c.SUBPATTERN:
        return takes(list(av[3]), group_flags(flags, av))
    if op is _c.BRANCH:
        branches = [takes(list(branch), flags) for branch in av[1]]
        if any(b is None for b in branches):
            return None
        known = [b for b in branches if b is not None]
        return lambda char: any(b(char) for b in known)
    return None  # a back reference, a conditional: what it matches is not known here


def _same_as(literal: str, fold: bool) -> Test:
    if not fold:
        return lambda char: char == literal
    forms = {literal, literal.lower(), literal.upper()}
    return lambda char: char in forms or char.lower() in forms or char.upper() in forms


def _in_class(members: list[tuple[Any, Any]], flags: Flags) -> Test | None:
    """A test of a character class (``[...]``, ``\\d``): literals, ranges, categories, negated."""
    negate = False
    tests: list[Test] = []
    for op, av in members:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            tests.append(_same_as(chr(av), flags.fold))
        elif op is _c.RANGE:
            tests.append(_in_range(av[0], av[1], flags.fold))
        elif op is _c.CATEGORY and av in _CATEGORIES:
            tests.append(_in_category(_CATEGORIES[av], flags.ascii))
        else:
            return None
    if negate:
        return lambda char: not any(test(char) for test in tests)
    return lambda char: any(test(char) for test in tests)


def _in_range(low: int, high: int, fold: bool) -> Test:
    return lambda char: any(low <= ord(form) <= high for form in _forms(char, fold))


def _in_category(category: str, ascii_only: bool) -> Test:
    compiled = re.compile(category, re.ASCII if ascii_only else 0)
    return lambda char: compiled.fullmatch(char) is not None


def _forms(char: str, fold: bool) -> set[str]:
    return {char, char.lower(), char.upper()} if fold else {char}


def first(items: list[tuple[Any, Any]], flags: Flags) -> CharSet:
    """The characters a match of ``items`` can start with, as ranges; None where that is not known
    (or it can match nothing)."""
    found = first_char(items, flags)
    if found is None:
        return None
    (op, av), inner = found
    if op is _c.LITERAL:
        return _literal(av, inner.fold)
    if op is _c.IN:
        return _class(av, inner.fold)
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


def disjoint(sets: list[CharSet]) -> bool:
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
