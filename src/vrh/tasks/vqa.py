"""Visual question answering: the model answers in words; each sample's ``answer_type`` says how to judge.

One rule per answer type, in one pure function (:func:`judge_answer`), used by every caller that judges a
VQA answer (this task, and the organism's training-time evaluation), so two numbers called "VQA
accuracy" are always measured the same way:

* ``exact`` (default): the normalised prediction equals the normalised gold, as whole strings.
  Normalising lower-cases, turns punctuation into blanks and collapses blanks, so ``"Red."`` matches
  ``"red"`` but ``"red, no: blue"`` does not (a first-word match would reward hedging).
* ``choice``: the gold is an option letter; the prediction's letter is read from its start (``"B"``,
  ``"(B)"``, ``"B."``, ``"B) cat"``), from a lone lower-case letter (``"b"``), or after ``answer`` /
  ``option`` / ``choice`` (``"Answer: B"``, ``"The answer is (B)."``).
* ``number``: the first number in the prediction (digits, with sign and decimals, or a word from
  ``zero`` to ``twenty``) compared numerically with the gold (``"3.0"`` matches ``"3"``). Thousands
  separators are not read: ``"1,000"`` reads as 1.

A prediction the rule cannot read at all (empty, no letter, no number) is a ``parse_failure``, kept
apart from a readable but wrong answer, as grounding keeps an unparsable box apart from a mislocated one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from vrh.data import Sample, check_answer
from vrh.tasks.base import CORRECT, PARSE_FAILURE, Task, TaskAdapter, register_task

WRONG = "wrong"  # readable, but not the gold answer

_PUNCT_RE = re.compile(r"[\W_]+")  # anything but letters and digits (Unicode-aware)

# Read at the start of the answer: a capital letter, maybe bracketed, then a bracket, punctuation or the
# end. "A cat" is not read as option A: a capital followed by a word is an article, not a choice.
_LEADING_CHOICE_RE = re.compile(r"\s*+[(\[]?([A-Z])(?:[)\]]|[.:,]|\s*+$)")
# The whole answer is one letter, any case: "b", "(b)", "b." (models often lower-case a bare letter).
_LONE_CHOICE_RE = re.compile(r"\s*+[(\[]?([A-Za-z])[)\]]?[.:]?\s*+")
# After a keyword anywhere: "Answer: B", "The answer is (C).", "option D". Only a capital letter counts,
# so "the answer is a cat" is not option A. Possessive blanks keep the search linear in the text.
_KEYWORD_CHOICE_RE = re.compile(r"(?i:\b(?:answer|option|choice)\b)(?:\s++is)?\s*+[:\-]?\s*+[(\[]?([A-Z])\b")

_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
                 "twenty")
# Digits not glued to a preceding letter, digit or dot ("x2", "v1.5" are names, not numbers), or a
# number word as a whole word; the leftmost of either is the answer's number.
_NUMBER_RE = re.compile(r"(?<![\w.])(-?(?:\d+(?:\.\d+)?|\.\d+))|\b("
                        + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")\b", re.IGNORECASE)


def normalize(text: str) -> str:
    """Lower-case, punctuation -> blank, blanks collapsed and stripped.

    >>> normalize("  The RED mug!! ")
    'the red mug'
    """
    return " ".join(_PUNCT_RE.sub(" ", text.lower()).split())


def parse_choice(text: str) -> str | None:
    """The option letter (upper-case) the answer chose, or ``None``.

    >>> [parse_choice(t) for t in ["B", "(b)", "C) a cat", "Answer: D", "The answer is (A).", "A cat"]]
    ['B', 'B', 'C', 'D', 'A', None]
    """
    m = (_LEADING_CHOICE_RE.match(text) or _LONE_CHOICE_RE.fullmatch(text)
         or _KEYWORD_CHOICE_RE.search(text))
    return m.group(1).upper() if m else None


def parse_number(text: str) -> float | None:
    """The first number in the answer, or ``None``.

    >>> [parse_number(t) for t in ["There are 3 cats.", "Two.", "-2.50", "x2 is .5", "none"]]
    [3.0, 2.0, -2.5, 0.5, None]
    """
    m = _NUMBER_RE.search(text)
    if m is None:
        return None
    digits, word = m.groups()
    return float(digits) if digits is not None else float(_NUMBER_WORDS.index(word.lower()))


def _judge_exact(pred: str, gold: str) -> str:
    got = normalize(pred)
    if not got:
        return PARSE_FAILURE
    return CORRECT if got == normalize(gold) else WRONG


def _judge_choice(pred: str, gold: str) -> str:
    letter = parse_choice(pred)
    if letter is None:
        return PARSE_FAILURE
    return CORRECT if letter == gold.strip() else WRONG


def _judge_number(pred: str, gold: str) -> str:
    value = parse_number(pred)
    if value is None:
        return PARSE_FAILURE
    return CORRECT if value == float(gold) else WRONG


RULES = {"exact": _judge_exact, "choice": _judge_choice, "number": _judge_number}  # one per ANSWER_TYPES


def judge_answer(pred: str, gold: str, answer_type: str = "exact") -> str:
    """The outcome (``correct``, ``wrong`` or ``parse_failure``) of prediction ``pred`` against ``gold``
    under ``answer_type``'s rule (see the module docstring). A gold answer that does not fit its type
    is a ValueError (:func:`vrh.data.check_answer`), not a wrong answer.

    >>> judge_answer("Red.", "red"), judge_answer("red, no: blue", "red"), judge_answer(" ", "red")
    ('correct', 'wrong', 'parse_failure')
    >>> judge_answer("The answer is (B).", "B", "choice"), judge_answer("A cat", "A", "choice")
    ('correct', 'parse_failure')
    >>> judge_answer("I count three.", "3", "number"), judge_answer("3.5", "3", "number")
    ('correct', 'wrong')
    """
    check_answer(gold, answer_type)  # also rejects an unknown answer_type, naming ANSWER_TYPES
    return RULES[answer_type](pred or "", gold)


@register_task
@dataclass(frozen=True)
class VQATask(Task):
    """Prompt: ``adapter.vqa_prompt(question)``. Record: the shared keys plus ``question``, ``answer``,
    ``answer_type`` and ``outcome`` (correct / wrong / parse_failure, by :func:`judge_answer`)."""

    name: ClassVar[str] = "vqa"
    outcomes: ClassVar[tuple[str, ...]] = (CORRECT, WRONG, PARSE_FAILURE)

    def prompt(self, adapter: TaskAdapter, sample: Sample) -> str:
        self.check_sample(sample)
        return adapter.vqa_prompt(sample.question)

    def judge(self, adapter: TaskAdapter, sample: Sample, text: str, meta: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        rec = self.record(sample, text)
        rec.update(question=sample.question, answer=sample.answer, answer_type=sample.answer_type,
                   outcome=judge_answer(text, sample.answer, sample.answer_type))
        return rec
