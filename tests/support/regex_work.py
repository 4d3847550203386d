"""The regex engine's work on a text, counted: a deterministic stand-in for timing a parser.

Python's ``re`` is a backtracking engine and says nothing about how much it backtracked, so a test that wants
to prove a pattern linear in its text used to time it, and a busy machine failed it. :class:`Model` runs a
compiled pattern's own parse tree (``re._parser``) through a plain backtracking matcher, in the order ``re``
tries the alternatives, and counts its steps: one per node tried and one per character a repeat takes or gives
back. ``re``'s shortcuts (a literal prefix searched for, a repeat that only gives back to where the next
literal fits) prune that same search tree, so the count bounds its work up to a constant per step.
:func:`agrees` checks that the model reads a pattern as ``re`` does on a recorded call (the same matches and
groups), so the count is about the real pattern.

:func:`recorded` swaps a module's compiled patterns for recorders while a parser runs, so a test counts the
work of every regex call the parser made (``finditer`` read to its end, so the count is an upper bound when
the parser stops early):

>>> import re
>>> m = Model(re.compile(r"(a|ab)(c|bcd)(d*)"))
>>> m.finditer("abcd")
[(0, 4, ((0, 1), (1, 4), (4, 4)))]
>>> Model(re.compile(r"\\s*\\d")).steps_of("finditer", " " * 10) > Model(re.compile(r"\\s*+\\d")).steps_of(
...     "finditer", " " * 10)
True
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from re import _constants as C  # noqa: N812 (the engine's own opcode names)
from re import _parser as P  # noqa: N812
from types import ModuleType
from typing import Any

_SINGLE = {C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN}  # nodes that match exactly one character


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _category(code, ch: str) -> bool:
    if code is C.CATEGORY_DIGIT:
        return ch.isdecimal()
    if code is C.CATEGORY_NOT_DIGIT:
        return not ch.isdecimal()
    if code is C.CATEGORY_SPACE:
        return ch.isspace()
    if code is C.CATEGORY_NOT_SPACE:
        return not ch.isspace()
    if code is C.CATEGORY_WORD:
        return _is_word(ch)
    if code is C.CATEGORY_NOT_WORD:
        return not _is_word(ch)
    raise NotImplementedError(f"category {code}")


class Model:
    """One compiled pattern, run by a counting backtracking matcher. ``steps`` grows with every call."""

    def __init__(self, pattern: re.Pattern):
        if pattern.flags & (re.ASCII | re.MULTILINE | re.VERBOSE):
            raise NotImplementedError(f"flags of {pattern.pattern!r}")
        self.pattern = pattern
        self.tree = P.parse(pattern.pattern, pattern.flags)
        self.ngroups = pattern.groups
        self.ignorecase = bool(pattern.flags & re.IGNORECASE)
        self.dotall = bool(pattern.flags & re.DOTALL)
        self.steps = 0

    # --- one character ---------------------------------------------------------------------------------
    def _one(self, op, av, ch: str, ic: bool) -> bool:
        if op is C.ANY:
            return self.dotall or ch != "\n"
        if op is C.LITERAL or op is C.NOT_LITERAL:
            same = ch == chr(av) or (ic and ch.lower() == chr(av).lower())
            return same if op is C.LITERAL else not same
        if op is C.IN:
            return any(self._in(av, c) for c in ({ch, ch.lower(), ch.upper()} if ic else (ch,)))
        raise NotImplementedError(op)

    def _in(self, items, ch: str) -> bool:
        negate, hit = False, False
        for op, av in items:
            if op is C.NEGATE:
                negate = True
            elif op is C.LITERAL:
                hit = hit or ch == chr(av)
            elif op is C.RANGE:
                hit = hit or av[0] <= ord(ch) <= av[1]
            elif op is C.CATEGORY:
                hit = hit or _category(av, ch)
            else:
                raise NotImplementedError(op)
        return hit != negate

    # --- sequences and nodes: generators of (end, captures), in re's order ------------------------------
    def _seq(self, items, k: int, s: str, i: int, caps: tuple, ic: bool) -> Iterator[tuple[int, tuple]]:
        if k == len(items):
            yield i, caps
            return
        op, av = items[k]
        for j, caps2 in self._node(op, av, s, i, caps, ic):
            yield from self._seq(items, k + 1, s, j, caps2, ic)

    def _node(self, op, av, s: str, i: int, caps: tuple, ic: bool) -> Iterator[tuple[int, tuple]]:
        self.steps += 1
        n = len(s)
        if op in _SINGLE:
            if i < n and self._one(op, av, s[i], ic):
                yield i + 1, caps
        elif op is C.AT:
            if self._at(av, s, i):
                yield i, caps
        elif op is C.BRANCH:
            for alt in av[1]:
                yield from self._seq(alt.data, 0, s, i, caps, ic)
        elif op is C.SUBPATTERN:
            gid, add, delete, sub = av
            ic2 = (ic or bool(add & re.IGNORECASE)) and not (delete & re.IGNORECASE)
            for j, caps2 in self._seq(sub.data, 0, s, i, caps, ic2):
                if gid is not None:
                    caps2 = caps2[:gid - 1] + ((i, j),) + caps2[gid:]
                yield j, caps2
        elif op is C.ATOMIC_GROUP:
            for first in self._seq(av.data, 0, s, i, caps, ic):
                yield first
                break
        elif op is C.MAX_REPEAT or op is C.MIN_REPEAT or op is C.POSSESSIVE_REPEAT:
            lo, hi, sub = av
            gen = self._repeat(lo, hi, sub.data, s, i, caps, ic, lazy=op is C.MIN_REPEAT)
            if op is C.POSSESSIVE_REPEAT:  # x*+ is (?>x*): the greedy repeat's first result only
                gen = _first(gen)
            yield from gen
        elif op is C.ASSERT or op is C.ASSERT_NOT:
            direction, sub = av
            if direction == 1:
                ok = next(self._seq(sub.data, 0, s, i, caps, ic), None) is not None
            else:
                lo, hi = sub.getwidth()
                if lo != hi:
                    raise NotImplementedError("variable-width look-behind")
                ok = i - lo >= 0 and any(j == i for j, _ in self._seq(sub.data, 0, s, i - lo, caps, ic))
            if ok == (op is C.ASSERT):
                yield i, caps
        else:
            raise NotImplementedError(op)

    def _repeat(self, lo, hi, items, s, i, caps, ic, lazy) -> Iterator[tuple[int, tuple]]:
        if len(items) == 1 and items[0][0] in _SINGLE and not lazy:  # a run of single characters: take, give back
            op, av = items[0]
            j, stop = i, min(len(s), i + hi)
            while j < stop and self._one(op, av, s[j], ic):
                j += 1
                self.steps += 1
            for end in range(j, i + lo - 1, -1):
                self.steps += 1
                yield end, caps
            return
        yield from self._iterate(lo, hi, items, s, i, caps, ic, lazy, 0)

    def _iterate(self, lo, hi, items, s, i, caps, ic, lazy, count) -> Iterator[tuple[int, tuple]]:
        if lazy and count >= lo:
            yield i, caps
        if count < hi:
            for j, caps2 in self._seq(items, 0, s, i, caps, ic):
                if j == i and count >= lo:  # an empty iteration ends the repeat (re's guard)
                    continue
                yield from self._iterate(lo, hi, items, s, j, caps2, ic, lazy, count + 1)
        if not lazy and count >= lo:
            yield i, caps

    def _at(self, code, s: str, i: int) -> bool:
        n = len(s)
        if code is C.AT_BEGINNING or code is C.AT_BEGINNING_STRING:
            return i == 0
        if code is C.AT_END:
            return i == n or (i == n - 1 and s[i] == "\n")
        if code is C.AT_END_STRING:
            return i == n
        if code is C.AT_BOUNDARY or code is C.AT_NON_BOUNDARY:
            edge = (i > 0 and _is_word(s[i - 1])) != (i < n and _is_word(s[i]))
            return edge if code is C.AT_BOUNDARY else not edge
        raise NotImplementedError(code)

    # --- what re's methods do -------------------------------------------------------------------------
    def _attempt(self, s: str, i: int, full: bool = False) -> tuple[int, tuple] | None:
        self.steps += 1
        empty = ((-1, -1),) * self.ngroups
        for j, caps in self._seq(self.tree.data, 0, s, i, empty, self.ignorecase):
            if not full or j == len(s):
                return j, caps
        return None

    def finditer(self, s: str, pos: int = 0) -> list[tuple[int, int, tuple]]:
        """``(start, end, group spans)`` of every match, as ``re.finditer`` finds them."""
        out, i = [], pos
        while i <= len(s):
            found = self._attempt(s, i)
            if found is None:
                i += 1
                continue
            j, caps = found
            out.append((i, j, caps))
            i = j if j > i else i + 1
        return out

    def search(self, s: str, pos: int = 0):
        for i in range(pos, len(s) + 1):
            found = self._attempt(s, i)
            if found is not None:
                return i, found[0], found[1]
        return None

    def steps_of(self, method: str, s: str, pos: int = 0) -> int:
        """The steps one call of ``re``'s ``method`` (finditer, findall, sub, search, match, fullmatch) takes."""
        before = self.steps
        if method in ("finditer", "findall", "sub", "subn", "split"):
            self.finditer(s, pos)
        elif method == "search":
            self.search(s, pos)
        elif method in ("match", "fullmatch"):
            self._attempt(s, pos, full=method == "fullmatch")
        else:
            raise NotImplementedError(method)
        return self.steps - before


def _first(gen):
    for first in gen:
        yield first
        return


def _spans(m: re.Match | None) -> tuple | None:
    return None if m is None else (m.start(), m.end(), tuple(m.span(g) for g in range(1, m.re.groups + 1)))


def agrees(call: tuple) -> bool:
    """Whether the model finds what ``re`` finds (spans and every group's span) in one recorded call
    ``(pattern, method, text, pos)``: all matches for ``finditer`` and its kin, the one match otherwise."""
    pattern, method, text, pos = call
    model = Model(pattern)
    if method in ("finditer", "findall", "sub", "subn", "split"):
        return model.finditer(text, pos) == [_spans(m) for m in pattern.finditer(text, pos)]
    if method == "search":
        return model.search(text, pos) == _spans(pattern.search(text, pos))
    found = model._attempt(text, pos, full=method == "fullmatch")
    return (None if found is None else (pos, *found)) == _spans(getattr(pattern, method)(text, pos))


# --- recording the calls a parser makes ---------------------------------------------------------------
_METHODS = ("finditer", "findall", "sub", "subn", "split", "search", "match", "fullmatch")


class _Recorder:
    """Stands in for a compiled pattern and notes each call ``(pattern, method, text, pos)``."""

    def __init__(self, pattern: re.Pattern, calls: list):
        self._pattern, self._calls = pattern, calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._pattern, name)
        if name not in _METHODS:
            return attr

        def call(*args, **kw):
            text_at = 1 if name in ("sub", "subn") else 0
            text = args[text_at] if len(args) > text_at else kw.get("string")
            pos = args[text_at + 1] if name not in ("sub", "subn", "split") and len(args) > text_at + 1 else 0
            self._calls.append((self._pattern, name, text, pos))
            return attr(*args, **kw)
        return call


def _swap(value: Any, calls: list) -> Any:
    if isinstance(value, re.Pattern):
        return _Recorder(value, calls)
    if isinstance(value, tuple):
        return tuple(_swap(v, calls) for v in value)
    return value


class _ReModule:
    """``re`` for a module under record: the module-level functions compile, then record."""

    def __init__(self, calls: list):
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        if name not in _METHODS:
            return getattr(re, name)

        def call(pattern, *args, **kw):
            return getattr(_Recorder(re.compile(pattern), self._calls), name)(*args, **kw)
        return call


@contextlib.contextmanager
def recorded(*modules: ModuleType) -> Iterator[list]:
    """While inside, every compiled pattern held at module level by ``modules`` (alone or in a tuple) and their
    ``re.search(...)``-style calls record each call into the list yielded: ``(pattern, method, text, pos)``."""
    calls: list = []
    saved = []
    try:
        for module in modules:
            for name, value in list(vars(module).items()):
                swapped = _swap(value, calls) if not isinstance(value, ModuleType) else (
                    _ReModule(calls) if value is re else value)
                if swapped is not value:
                    saved.append((module, name, value))
                    setattr(module, name, swapped)
        yield calls
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


_MODELS: dict[re.Pattern, Model] = {}
_STEPS: dict[tuple, int] = {}  # (pattern, method, text, pos) -> steps: parsers that delegate repeat the same calls


def work(calls: list) -> int:
    """The model's steps for every recorded call, summed."""
    total = 0
    for call in calls:
        if call not in _STEPS:
            if len(_STEPS) > 4096:
                _STEPS.clear()
            pattern, method, text, pos = call
            _STEPS[call] = _MODELS.setdefault(pattern, Model(pattern)).steps_of(method, text, pos)
        total += _STEPS[call]
    return total

