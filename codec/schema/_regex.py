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
polynomial in the string's length: bound such strings with ``maxLength``. What characters a
pattern's items can match (the fences, the branches' starts) is ``_regex_chars``'s.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

with warnings.catch_warnings():  # the parser ``re`` itself uses; the module name is deprecated
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _c
    import sre_parse

from tensorwire.schema._regex_chars import (
    REPEATS,
    Flags,
    Test,
    disjoint,
    first,
    first_char,
    group_flags,
    taken,
    takes,
    takes_one,
)

__all__ = ["pattern_problem"]

_HOLDERS = (*REPEATS, _c.SUBPATTERN, _c.BRANCH)  # items whose parts a repeat around them can split
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


@dataclass(frozen=True)
class Fence:
    """What must come next: one of ``chars`` (None: too many to list, or not known) and a character
    ``test`` passes (None: not known)."""

    chars: frozenset[str] | None
    test: Test | None


def pattern_problem(pattern: str) -> str | None:
    """Why matching ``pattern`` can backtrack exponentially, or None. ``pattern`` compiles."""
    parsed = sre_parse.parse(pattern)
    flags = parsed.state.flags
    top = Flags(
        fold=bool(flags & _c.SRE_FLAG_IGNORECASE),
        ascii=bool(flags & _c.SRE_FLAG_ASCII),
        dotall=bool(flags & _c.SRE_FLAG_DOTALL),
    )
    why = _walk(list(parsed.data), in_loop=False, fence=None, flags=top)
    if why is None:
        return None
    return f"pattern {pattern!r} can backtrack through exponentially many ways to match a string: {why}; {_HINT}"


def _walk(items: list[tuple[Any, Any]], *, in_loop: bool, fence: Fence | None, flags: Flags) -> str | None:
    """The first problem among ``items`` (``in_loop``: inside a repeat that can run more than once;
    ``fence``: the characters one of which must come next after ``items``, None if not known)."""
    for index, (op, av) in enumerate(items):
        # what follows an item matters only inside a repeat, and only to an item that holds others
        follow = _follow(items, index + 1, fence, flags) if in_loop and op in _HOLDERS else None
        why = _item(op, av, in_loop=in_loop, fence=follow, flags=flags)
        if why is not None:
            return why
    return None


def _follow(items: list[tuple[Any, Any]], start: int, fence: Fence | None, flags: Flags) -> Fence | None:
    """What must come right after ``items[start - 1]``: what ``items[start:]`` starts with, or
    ``fence`` (what must follow ``items``) where only anchors are left."""
    for index in range(start, len(items)):
        if items[index][0] is not _c.AT:
            return _fence(items, flags, index)
    return fence


def _item(op: Any, av: Any, *, in_loop: bool, fence: Fence | None, flags: Flags) -> str | None:
    """The first problem in one item, ``fence`` being what must come next after it."""
    if op in REPEATS:
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
        return _walk(list(av[3]), in_loop=in_loop, fence=fence, flags=group_flags(flags, av))
    if op is _c.BRANCH:
        if in_loop and not disjoint([first(list(branch), flags) for branch in av[1]]):
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
        if op in (*REPEATS, _c.POSSESSIVE_REPEAT):
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


def _fence(items: list[tuple[Any, Any]], flags: Flags, start: int = 0) -> Fence | None:
    """What every match of ``items[start:]`` starts with (None if not known, or if it can match
    nothing)."""
    found = first_char(items, flags, start)
    if found is None:
        return None
    (op, av), first_flags = found
    chars, test = taken([(op, av)], first_flags), takes_one(op, av, first_flags)
    return None if chars is None and test is None else Fence(chars, test)


def _fenced_off(body: list[tuple[Any, Any]], fence: Fence | None, flags: Flags) -> bool:
    """Whether no character ``body`` can match is one ``fence`` starts with (a quantifier over it
    then cannot run into what must follow it): either ``body``'s test fails on every character the
    fence lists, or the fence's test fails on every character ``body`` can take."""
    if fence is None:
        return False
    test_body = takes(body, flags)
    if fence.chars is not None and test_body is not None and not any(test_body(char) for char in fence.chars):
        return True
    chars = taken(body, flags)
    test = fence.test
    return chars is not None and test is not None and not any(test(char) for char in chars)
