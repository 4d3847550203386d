"""The answer-rule registry: each benchmark's own way of scoring a VQA answer, by name (``Sample.answer_rule``).

The rules are functions of the tasks layer (:mod:`vrh.tasks.answer_rules`), each decorated
:func:`register_answer_rule`. Their *names* belong to the data format, which refuses a line whose
``answer_rule`` no rule has, at load time. So the registry lives here, below tasks, and the rules register
into it; no module of vrh.data imports a task module. What fills it: every lookup first imports each module
of the :data:`RULES_PACKAGE` package (:func:`vrh.infra.discovery.discover`, by the package's name), so the
names are complete however vrh was entered -- a script that only loads a dataset sees the built-in rules too
-- and a new rule is one decorated function, named nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vrh.infra.discovery import discover

RULES_PACKAGE = "vrh.tasks"  # the package whose modules define (and register) the rules


@dataclass(frozen=True)
class AnswerRule:
    """A registered rule: its ``name`` (what a sample's ``answer_rule`` says), the ``benchmark`` whose
    scoring code it reproduces (as ``--answer-rule``'s help names it) and ``score(pred, gold) -> verdict``
    (:mod:`vrh.tasks.answer_rules` defines the gold and verdict types)."""

    name: str
    benchmark: str
    score: Callable[..., Any]


_RULES: dict[str, AnswerRule] = {}


def register_answer_rule(name: str, *, benchmark: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the rule function under ``name``; returns the function unchanged. A name
    registered twice is an error (two rules for one benchmark would drift apart)."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ValueError(f"answer rule name {name!r} must be a non-empty string without surrounding blanks")

    def add(score: Callable[..., Any]) -> Callable[..., Any]:
        if name in _RULES:
            raise ValueError(f"answer rule {name!r} is already registered (by {_RULES[name].score!r})")
        _RULES[name] = AnswerRule(name, benchmark, score)
        return score

    return add


def answer_rules() -> tuple[AnswerRule, ...]:
    """Every registered rule, in registration order."""
    discover(RULES_PACKAGE)
    return tuple(_RULES.values())


def answer_rule_names() -> tuple[str, ...]:
    """The names a sample's ``answer_rule`` may take, in registration order.

    >>> "mmstar" in answer_rule_names()
    True
    """
    return tuple(r.name for r in answer_rules())


def get_answer_rule(name: str) -> AnswerRule:
    """The rule ``name``; an unknown name is the data format's error, listing the registered ones."""
    names = answer_rule_names()
    if name not in names:
        raise ValueError(f"unknown answer_rule {name!r}; expected one of {names}")
    return _RULES[name]
