r"""Refuse patterns whose matching can take time exponential in the string's length.

Python's ``re`` backtracks: a repeated part that can match the same text in more than one way
(``(a+)+``, ``(a|aa)+``) makes a failing match try every way, 2**n of them for n characters. A
pattern runs at schema load (on defaults and examples) and on every string a peer sends, so such
a pattern is a ``SchemaError``. The check is conservative: inside a repeat that can run more than
once, every quantifier must be of fixed count (``{3}``) or match no character that must come right
after it: the next item of the repeated part, or where it ends the part, the start of the part's
next repeat (``(-[a-z]+)*``: a ``-`` starts each repeat, which ``[a-z]+`` cannot take;
``(\d{1,3}\.){3}``: a ``.`` follows ``\d{1,3}``; either way the quantifier has one place to
stop, so the repeats cannot split the same text two ways), and its part must not match the empty
string (``(-?)?`` matches it in two ways); every alternation's branches must start with
characters no other branch starts with. A possessive quantifier (``++``, ``*+``, ``?+``,
``{m,n}+``) or an atomic group (``(?>...)``) never gives back what it matched, so what lies inside
one is checked on its own. Several unbounded parts in a row (``.*a.*b``) still cost time
polynomial in the string's length: bound such strings with ``maxLength``.
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
    import sre_parse

__all__ = ["pattern_problem"]

_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT)
_HOLDERS = (*_REPEATS, _c.SUBPATTERN, _c.BRANCH)  # items whose parts a repeat around them can split
_NESTED = (
    "a repeated part holds a quantifier that is not of fixed count (nested quantifiers: "
    "the repeats can split the same text in many ways)"
)
_OVERLAP = (
    "a repeated part holds an alternation whose branches can start with the same character "
    "(or match nothing): each repeat can take either"
)
_FENCE_CHARS = 256  # characters a repeat's start may be tested against, at most
_CATEGORIES = {
    _c.CATEGORY_DIGIT: r"\d",
    _c.CATEGORY_NOT_DIGIT: r"\D",
    _c.CATEGORY_SPACE: r"\s",
    _c.CATEGORY_NOT_SPACE: r"\S",
    _c.CATEGORY_WORD: r"\w",
    _c.CATEGORY_NOT_WORD: r"\W",
}
_HINT = (
    "make the inner quantifier possessive ('++', '*+', '?+', '{m,n}+') or the group atomic '(?>...)', "
    "or write the alternatives so that no two start alike"
)
CharSet = frozenset[tuple[int, int]] | None  # ranges of code points; None: not known
Test = Callable[[str], bool]


@dataclass(frozen=True)
class Fence:
    """What must come next: one of ``chars`` (None: too many to list, or not known) and a character
    ``test`` passes (None: not known)."""

    chars: frozenset[str] | None
    test: Test | None


@dataclass(frozen=True)
class _Flags:
    fold: bool  # IGNORECASE
    ascii: bool  # ASCII: \d, \w and \s match ASCII characters only
    dotall: bool  # DOTALL: ``.`` matches a newline too


def pattern_problem(pattern: str) -> str | None:
    """Why matching ``pattern`` can backtrack exponentially, or None. ``pattern`` compiles."""
    parsed = sre_parse.parse(pattern)
    flags = parsed.state.flags
    top = _Flags(
        fold=bool(flags & _c.SRE_FLAG_IGNORECASE),
        ascii=bool(flags & _c.SRE_FLAG_ASCII),
        dotall=bool(flags & _c.SRE_FLAG_DOTALL),
    )
    why = _walk(list(parsed.data), in_loop=False, fence=None, flags=top)
    if why is None:
        return None
    return f"pattern {pattern!r} can backtrack through exponentially many ways to match a string: {why}; {_HINT}"


def _group_flags(flags: _Flags, group: Any) -> _Flags:
    """The flags a group's items are read under (``(?i:...)`` turns IGNORECASE on)."""
    return replace(flags, fold=flags.fold or bool(group[1] & _c.SRE_FLAG_IGNORECASE))


def _walk(items: list[tuple[Any, Any]], *, in_loop: bool, fence: Fence | None, flags: _Flags) -> str | None:
    """The first problem among ``items`` (``in_loop``: inside a repeat that can run more than once;
    ``fence``: the characters one of which must come next after ``items``, None if not known)."""
    for index, (op, av) in enumerate(items):
        # what follows an item matters only inside a repeat, and only to an item that holds others
        follow = _follow(items, index + 1, fence, flags) if in_loop and op in _HOLDERS else None
        why = _item(op, av, in_loop=in_loop, fence=follow, flags=flags)
        if why is not None:
            return why
    return None


def _follow(items: list[tuple[Any, Any]], start: int, fence: Fence | None, flags: _Flags) -> Fence | None:
    """What must come right after ``items[start - 1]``: what ``items[start:]`` starts with, or
    ``fence`` (what must follow ``items``) where only anchors are left."""
    for index in range(start, len(items)):
        if items[index][0] is not _c.AT:
            return _fence(items, flags, index)
    return fence


def _item(op: Any, av: Any, *, in_loop: bool, fence: Fence | None, flags: _Flags) -> str | None:
    """The first problem in one item, ``fence`` being what must come next after it."""
    if op in _REPEATS:
        low, high, body = av
        if in_loop and low != high and (_nullable(list(body)) or not _fenced_off(list(body), fence, flags)):
            return _NESTED
        loops = high > 1
        # a repeat's part is followed by its next repeat: the part's own start fences what ends it
        inner = _fence(list(body), flags) if loops else fence
        return _walk(list(body), in_loop=in_loop or loops, fence=inner, flags=flags)
    if op is _c.POSSESSIVE_REPEAT:
        return _walk(list(av[2]), in_loop=False, fence=None, flags=flags)
    if op is _c.ATOMIC_GROUP:
        return _walk(list(av), in_loop=False, fence=None, flags=flags)
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return _walk(list(av[1]), in_loop=False, fence=None, flags=flags)
    if op is _c.SUBPATTERN:
        return _walk(list(av[3]), in_loop=in_loop, fence=fence, flags=_group_flags(flags, av))
    if op is _c.BRANCH:
        if in_loop and not _disjoint([_first(list(branch), flags) for branch in av[1]]):
            return _OVERLAP
        return next((w for b in av[1] if (w := _walk(list(b), in_loop=in_loop, fence=fence, flags=flags))), None)
    if op is _c.GROUPREF_EXISTS:
        if in_loop:
            return _OVERLAP
        branches = [av[1]] if av[2] is None else [av[1], av[2]]
        return next((w for b in branches if (w := _walk(list(b), in_loop=False, fence=None, flags=flags))), None)
    return None


def _nullable(items: list[tuple[Any, Any]]) -> bool:
    """Whether ``items`` can match the empty string (True where not known): a quantifier over such a
    part can match nothing in two ways, running it empty or not at all."""
    for op, av in items:
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return False
        if op in (*_REPEATS, _c.POSSESSIVE_REPEAT):
            if av[0] >= 1 and not _nullable(list(av[2])):
                return False
        elif op is _c.SUBPATTERN:
            if not _nullable(list(av[3])):
                return False
        elif op is _c.ATOMIC_GROUP:
            if not _nullable(list(av)):
                return False
        elif op is _c.BRANCH:
            if not any(_nullable(list(branch)) for branch in av[1]):
                return False
    return True


def _fence(items: list[tuple[Any, Any]], flags: _Flags, start: int = 0) -> Fence | None:
    """What every match of ``items[start:]`` starts with (None if not known, or if it can match
    nothing)."""
    first = _first_char(items, flags, start)
    if first is None:
        return None
    (op, av), first_flags = first
    chars, test = _taken([(op, av)], first_flags), _takes_one(op, av, first_flags)
    return None if chars is None and test is None else Fence(chars, test)


def _fenced_off(body: list[tuple[Any, Any]], fence: Fence | None, flags: _Flags) -> bool:
    """Whether no character ``body`` can match is one ``fence`` starts with (a quantifier over it
    then cannot run into what must follow it): either ``body``'s test fails on every character the
    fence lists, or the fence's test fails on every character ``body`` can take."""
    if fence is None:
        return False
    takes = _takes(body, flags)
    if fence.chars is not None and takes is not None and not any(takes(char) for char in fence.chars):
        return True
    taken = _taken(body, flags)
    test = fence.test
    return taken is not None and test is not None and not any(test(char) for char in taken)


def _first_char(items: list[tuple[Any, Any]], flags: _Flags, start: int = 0) -> tuple[tuple[Any, Any], _Flags] | None:
    """The item that matches the first character of every match of ``items[start:]`` (with the
    flags it is read under); None where not known, or where they can match nothing."""
    for index in range(start, len(items)):
        op, av = items[index]
        if op is _c.AT:
            continue
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return (op, av), flags
        if op is _c.SUBPATTERN:
            return _first_char(list(av[3]), _group_flags(flags, av))
        if op in (*_REPEATS, _c.POSSESSIVE_REPEAT):
            return _first_char(list(av[2]), flags) if av[0] >= 1 else None
        if op is _c.ATOMIC_GROUP:
            return _first_char(list(av), flags)
        return None
    return None


def _taken(items: list[tuple[Any, Any]], flags: _Flags) -> frozenset[str] | None:
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
        elif op in (*_REPEATS, _c.POSSESSIVE_REPEAT):
            some = _taken(list(av[2]), flags)
        elif op is _c.ATOMIC_GROUP:
            some = _taken(list(av), flags)
        elif op is _c.SUBPATTERN:
            some = _taken(list(av[3]), _group_flags(flags, av))
        else:
            return None
        if some is None:
            return None
        out |= some
    if len(out) > _FENCE_CHARS:
        return None
    return frozenset(out)


def _class_chars(members: list[tuple[Any, Any]], flags: _Flags) -> frozenset[str] | None:
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


def _takes(items: list[tuple[Any, Any]], flags: _Flags) -> Test | None:
    """A test of whether ``items`` can match a given character anywhere; None where not known."""
    tests: list[Test] = []
    for op, av in items:
        test = _takes_one(op, av, flags)
        if test is None:
            return None
        tests.append(test)
    return lambda char: any(test(char) for test in tests)


def _takes_one(op: Any, av: Any, flags: _Flags) -> Test | None:
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
    if op in (*_REPEATS, _c.POSSESSIVE_REPEAT):
        return _takes(list(av[2]), flags)
    if op is _c.ATOMIC_GROUP:
        return _takes(list(av), flags)
    if op is _c.SUBPATTERN:
        return _takes(list(av[3]), _group_flags(flags, av))
    if op is _c.BRANCH:
        branches = [_takes(list(branch), flags) for branch in av[1]]
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


def _in_class(members: list[tuple[Any, Any]], flags: _Flags) -> Test | None:
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


def _first(items: list[tuple[Any, Any]], flags: _Flags) -> CharSet:
    """The characters a match of ``items`` can start with, as ranges; None where that is not known
    (or it can match nothing)."""
    found = _first_char(items, flags)
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
