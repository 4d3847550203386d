"""How a VQA answer is scored: vrh's rule for each answer type, and each benchmark's own rule.

:func:`score_answer` picks the rule for one sample, by the VQA task's ``answer_rule`` option
(``--answer-rule``):

* ``official`` (default): a sample whose source names its benchmark's rule (``Sample.answer_rule``) is
  scored by that rule, reproduced from the benchmark's own scoring code (each cited below to repository,
  commit and line, and registered by name with :func:`vrh.data.answer_rule_registry.register_answer_rule`,
  which is also where the data format reads the names it accepts); a sample without one by vrh's rule for
  its type.
* ``lenient``: vrh's rule for the answer type, whatever the benchmark (:data:`RULES`).

vrh's rules (one per answer type; :func:`judge_answer` applies them to a bare gold answer):

* ``exact``: the normalised prediction equals the normalised gold, as whole strings. Normalising
  lower-cases, turns punctuation into blanks and collapses blanks, so ``"Red."`` matches ``"red"`` but
  ``"red, no: blue"`` does not (a first-word match would reward hedging).
* ``choice``: the prediction's letter is read from its start (``"B"``, ``"(B)"``, ``"B."``, ``"B) cat"``),
  from a lone lower-case letter (``"b"``), or after ``answer`` / ``option`` / ``choice`` (``"Answer: B"``,
  ``"The answer is (B)."``). Correct when it is the gold letter, or another letter whose option text is
  the gold's (a gold written twice among the options, MathVista pid 781).
* ``number`` and ``integer``: the first number in the prediction (digits, with sign and decimals, or a
  word from ``zero`` to ``twenty``) compared numerically with the gold (``"3.0"`` matches ``"3"``).
  Thousands separators are not read: ``"1,000"`` reads as 1.
* ``float``: the first number, rounded to the sample's ``precision``, equals the gold rounded so.
* ``length`` (SpatialRGPT-Bench's sizes): the first number with a unit of length (:func:`vrh.data.lengths.parse_length`),
  in meters, is a success when ``0.75 * gold <= pred <= 1.25 * gold`` -- SpatialRGPT's own rule
  (github AnjieCheng/SpatialRGPT ``scripts/srgpt/eval/evaluate_spatial_with_gpt4.py`` @ 16715d4, lines
  279-282, where GPT-4 converts both sentences to meters with 1 inch = 0.0254 m, 1 foot = 0.3048 m,
  1 cm = 0.01 m, line 129); the record keeps its relative error ``|pred - gold| / (gold + 1e-4)``
  (line 282). A number without a unit is not read.

A prediction a rule cannot read at all (empty, no letter, no number) is a ``parse_failure``, kept apart
from a readable but wrong answer, as grounding keeps an unparsable box apart from a mislocated one. The
benchmarks' rules have no such outcome (an unreadable answer is simply not correct there), so the accuracy
is the same either way -- except for an empty answer to a MathVista multiple-choice question, which its
scorer maps to the shortest option and vrh counts as a parse failure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vrh.data import check_answer
from vrh.data.answer_rule_registry import get_answer_rule, register_answer_rule
from vrh.data.lengths import parse_length
from vrh.tasks.base import CORRECT, PARSE_FAILURE

if TYPE_CHECKING:
    from vrh.data import Sample

WRONG = "wrong"  # readable, but not the gold answer
RULE_CHOICES = ("official", "lenient")  # the VQA task's answer_rule option
LENIENT = "lenient"

_PUNCT_RE = re.compile(r"[\W_]+")  # anything but letters and digits (Unicode-aware)

# Read at the start of the answer: a capital letter, maybe bracketed, then a bracket, punctuation, the end
# of its line ("A\nBecause ...": the letter alone on the first line) or of the answer. "A cat" is not read as
# option A: a capital followed by a word is an article, not a choice.
_LEADING_CHOICE_RE = re.compile(r"\s*+[(\[]?([A-Z])(?:[)\]]|[.:,]|[ \t]*+(?:\r?\n|$))")
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

REL_ERROR_EPS = 1e-4  # SpatialRGPT's denominator guard, gold + 1e-4 (line 282)


@dataclass(frozen=True)
class Gold:
    """What a rule compares against: the gold ``answer`` of ``answer_type``, the float ``precision``, and
    for multiple choice the option texts (``choices``, empty when the sample does not keep them)."""

    answer: str
    answer_type: str = "exact"
    precision: int | None = None
    choices: tuple[str, ...] = ()

    @classmethod
    def of(cls, sample: Sample) -> Gold:
        choices = sample.meta.get("choices")
        ok = isinstance(choices, (list, tuple)) and all(isinstance(c, str) for c in choices)
        return cls(sample.answer or "", sample.answer_type, sample.precision, tuple(choices) if ok else ())

    def letters(self) -> frozenset[str]:
        """The letters that count as the gold option: its own, and any other whose option text is the same.

        >>> sorted(Gold("C", "choice", choices=("9", "12", "18", "18")).letters())
        ['C', 'D']
        """
        gold = self.answer.strip()
        i = ord(gold) - ord("A") if len(gold) == 1 else -1
        if not 0 <= i < len(self.choices):
            return frozenset({gold})
        return frozenset(chr(ord("A") + j) for j, c in enumerate(self.choices) if c == self.choices[i])


@dataclass(frozen=True)
class Verdict:
    """A rule's reading of one answer: the ``outcome``, what it ``read`` (a letter, a number, meters;
    ``None`` when nothing), and for lengths the relative error (SpatialRGPT's)."""

    outcome: str
    read: str | None = None
    rel_error: float | None = None


def normalize(text: str) -> str:
    """Lower-case, punctuation -> blank, blanks collapsed and stripped.

    >>> normalize("  The RED mug!! ")
    'the red mug'
    """
    return " ".join(_PUNCT_RE.sub(" ", text.lower()).split())


def parse_choice(text: str) -> str | None:
    """The option letter (upper-case) the answer chose, or ``None``.

    >>> [parse_choice(t) for t in ["B", "(b)", "C) a cat", "Answer: D", "The answer is (A).", "A cat", "A\\nAs seen"]]
    ['B', 'B', 'C', 'D', 'A', None, 'A']
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


# --- vrh's rules, one per answer type ------------------------------------------------------------------
def _shown(value: float) -> str:
    """A number as a record shows what was read: ``3`` for 3.0, else Python's shortest exact form."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _exact(pred: str, gold: Gold) -> Verdict:
    got = normalize(pred)
    if not got:
        return Verdict(PARSE_FAILURE)
    return Verdict(CORRECT if got == normalize(gold.answer) else WRONG, got)


def _choice(pred: str, gold: Gold) -> Verdict:
    letter = parse_choice(pred)
    if letter is None:
        return Verdict(PARSE_FAILURE)
    return Verdict(CORRECT if letter in gold.letters() else WRONG, letter)


def _number(pred: str, gold: Gold) -> Verdict:
    value = parse_number(pred)
    if value is None:
        return Verdict(PARSE_FAILURE)
    return Verdict(CORRECT if value == float(gold.answer) else WRONG, _shown(value))


def _float(pred: str, gold: Gold) -> Verdict:
    value = parse_number(pred)
    if value is None:
        return Verdict(PARSE_FAILURE)
    ok = round(value, gold.precision or 0) == round(float(gold.answer), gold.precision or 0)
    return Verdict(CORRECT if ok else WRONG, _shown(value))


def _length(pred: str, gold: Gold) -> Verdict:
    meters, gt = parse_length(pred), float(gold.answer)
    if meters is None:
        return Verdict(PARSE_FAILURE)
    ok = 0.75 * gt <= meters <= 1.25 * gt  # SpatialRGPT lines 279-281
    return Verdict(CORRECT if ok else WRONG, _shown(meters), abs(meters - gt) / (gt + REL_ERROR_EPS))


RULES: dict[str, Callable[[str, Gold], Verdict]] = {  # one per ANSWER_TYPES
    "exact": _exact, "choice": _choice, "number": _number, "integer": _number, "float": _float, "length": _length}


# --- the benchmarks' own rules ----------------------------------------------------------------------------
@register_answer_rule("mmstar", benchmark="MMStar")
def _mmstar(pred: str, gold: Gold) -> Verdict:
    """MMStar ``eval/vlmeval/evaluate/mmstar.py`` (github MMStar-Benchmark/MMStar @ 79e6d1c, lines 53-69):
    both lower-cased and stripped; correct when the gold is the answer's first character, or the one after
    a leading ``(``, ``option `` or ``the answer is ``. So ``"A cat"`` and ``"Above"`` are option A.

    >>> [_mmstar(p, Gold("A", "choice")).outcome for p in ["A cat", "Above", "Answer: B", "(a)", "B"]]
    ['correct', 'correct', 'correct', 'correct', 'wrong']
    """
    p, a = pred.lower().strip().replace("\n", " "), gold.answer.lower().strip()
    if not p:
        return Verdict(PARSE_FAILURE)
    ok = a in (p[0], p[1:2] if p[0] == "(" else None, p[7:8] if p.startswith("option ") else None,
               p[14:15] if p.startswith("the answer is ") else None)
    return Verdict(CORRECT if ok else WRONG, p[0].upper())


_CVBENCH_LETTER_RE = re.compile(r"[\(\s]*([A-Z])[\)\.\s]*", re.IGNORECASE)


@register_answer_rule("cvbench", benchmark="CV-Bench")
def _cvbench(pred: str, gold: Gold) -> Verdict:
    """lmms-eval ``lmms_eval/tasks/cv_bench/utils.py`` (github EvolvingLMMs-Lab/lmms-eval @ 75571cf, lines
    20-24 and 44-49): the first letter of the stripped answer, after blanks and ``(``, any case, against the
    gold letter. ``"Answer: B"`` reads as A; ``"1"`` reads nothing.

    >>> [_cvbench(p, Gold("B", "choice")).outcome for p in ["(b)", "B cat", "Answer: B", "1"]]
    ['correct', 'correct', 'wrong', 'parse_failure']
    """
    m = _CVBENCH_LETTER_RE.match(pred.strip())
    if m is None:
        return Verdict(PARSE_FAILURE)
    letter = m.group(1).upper()
    return Verdict(CORRECT if letter == gold.answer.strip() else WRONG, letter)


@register_answer_rule("countbenchqa", benchmark="CountBenchQA")
def _countbenchqa(pred: str, gold: Gold) -> Verdict:
    """lmms-eval ``lmms_eval/tasks/countbenchqa/utils.py`` (@ 75571cf, lines 14-18): the stripped answer
    equals the count's digits. ``"3."``, ``"three"`` and ``"There are 3 dogs."`` are wrong (lmms-eval's
    ``countbench`` task reads the words: :func:`_countbench`).

    >>> [_countbenchqa(p, Gold("3", "number")).outcome for p in [" 3 ", "3.", "There are 3 dogs.", ""]]
    ['correct', 'wrong', 'wrong', 'parse_failure']
    """
    p = pred.strip()
    if not p:
        return Verdict(PARSE_FAILURE)
    return Verdict(CORRECT if p == gold.answer.strip() else WRONG, p)


def _count_word(text: str) -> str:
    """lmms-eval countbench's normalising of an answer or a gold count (``utils.py`` @ 9c25ff5, lines 27-29):
    stripped and lower-cased, then a whole answer that is a number word from ``none`` / ``zero`` to ``twenty``
    (its table, lines 1-24) becomes its digits."""
    t = text.strip().lower()
    return "0" if t == "none" else str(_NUMBER_WORDS.index(t)) if t in _NUMBER_WORDS else t


@register_answer_rule("countbench", benchmark="CountBenchQA as lmms-eval's countbench task")
def _countbench(pred: str, gold: Gold) -> Verdict:
    """lmms-eval ``lmms_eval/tasks/countbench/utils.py`` (@ 9c25ff5, lines 48-51), its second task on the same
    data: answer and count both normalised (:func:`_count_word`), then compared whole; so ``"Three"`` and
    ``" 3 "`` are right, ``"3."``, ``"three."`` and ``"There are 3 dogs."`` wrong, as under ``countbenchqa``.

    >>> [_countbench(p, Gold("3", "number")).outcome for p in ["Three", " 3 ", "3.", "three.", "There are 3.", ""]]
    ['correct', 'correct', 'wrong', 'wrong', 'wrong', 'parse_failure']
    >>> _countbench("None", Gold("0", "number")).outcome
    'correct'
    """
    p = _count_word(pred)
    if not p:
        return Verdict(PARSE_FAILURE)
    return Verdict(CORRECT if p == _count_word(gold.answer) else WRONG, p)


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions), as MathVista's ``Levenshtein.distance``.

    >>> edit_distance("kitten", "sitting"), edit_distance("", "abc")
    (3, 3)
    """
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


_MATHVISTA_NUMBER_RE = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)")
_LIST_RE = re.compile(r"\[[^\[\]]*\]")


def mathvista_extract(pred: str, gold: Gold) -> str:
    """vrh's rule in place of MathVista's GPT-4 answer extraction (``evaluation/extract_answer.py``): the
    answer itself when it is an option's text; else for multiple choice the letter :func:`parse_choice`
    reads, else the answer; for ``integer`` / ``float`` the **last** number in it (MathVista's hint asks
    for the final value at the end; thousands separators dropped); for a list the last ``[...]``. ``""``:
    nothing to read.

    >>> g = Gold("B", "choice", choices=("3", "5"))
    >>> mathvista_extract("5", g), mathvista_extract("The answer is (B).", g), mathvista_extract("five", g)
    ('5', 'B', 'five')
    >>> mathvista_extract("2 + 3 = 1,005", Gold("1005", "integer")), mathvista_extract("none", Gold("2", "integer"))
    ('1005', '')
    """
    p = pred.strip()
    if gold.answer_type == "choice":
        return p if p in gold.choices else (parse_choice(p) or p)
    if gold.answer_type in ("integer", "float", "number"):
        found = _MATHVISTA_NUMBER_RE.findall(p)
        return found[-1].replace(",", "") if found else ""
    found = _LIST_RE.findall(p)
    return found[-1] if found else p


@register_answer_rule("mathvista", benchmark="MathVista")
def _mathvista(pred: str, gold: Gold) -> Verdict:
    """MathVista ``evaluation/calculate_score.py`` (github lupantech/MathVista @ 53d5258, lines 27-94) on
    :func:`mathvista_extract`'s extraction: multiple choice maps a ``(X)`` or bare option letter to its
    text, anything else to the option nearest by edit distance, and compares texts (so a gold written twice
    accepts either letter); ``integer`` compares ``str(int(float(x)))``, ``float``
    ``str(round(float(x), precision))`` and a list ``str(x)``, each with the gold as a string. An empty
    answer is a parse failure (the official scorer maps it to the shortest option).

    >>> g = Gold("B", "choice", choices=("3 cm", "5 cm"))
    >>> [_mathvista(p, g).outcome for p in ["B", "(b) 5", "5cm", "The answer is A", ""]]
    ['correct', 'correct', 'correct', 'wrong', 'parse_failure']
    >>> [_mathvista(p, Gold("1.5", "float", 1)).outcome for p in ["1.54", "so x = 1.46", "1.50"]]
    ['correct', 'correct', 'correct']
    >>> [_mathvista(p, Gold("3", "integer")).outcome for p in ["3.9", "3", "x = 4"]]
    ['correct', 'correct', 'wrong']
    """
    got = mathvista_extract(pred, gold)
    if not got:
        return Verdict(PARSE_FAILURE)
    if gold.answer_type == "choice":
        if not gold.choices:
            raise ValueError("the mathvista rule needs the sample's option texts (meta 'choices')")
        letters = [chr(ord("A") + i) for i in range(len(gold.choices))]
        bracketed = re.findall(r"\(([a-zA-Z])\)", got)
        got = bracketed[0].upper() if bracketed else got
        text = (gold.choices[letters.index(got)] if got in letters
                else min(gold.choices, key=lambda c: edit_distance(got, c)))  # min keeps the first of ties
        return Verdict(CORRECT if text == gold.choices[ord(gold.answer) - ord("A")] else WRONG, text)
    if gold.answer_type in ("integer", "float", "number"):
        x = float(got)
        if not math.isfinite(x):  # digits past a float's range: MathVista's try/except reads no number (wrong)
            return Verdict(WRONG, got)
        norm = str(int(x)) if gold.answer_type != "float" else str(round(x, int(gold.precision or 0)))
        return Verdict(CORRECT if norm == gold.answer.strip() else WRONG, norm)
    return Verdict(CORRECT if got == gold.answer.strip() else WRONG, got)



def rule_name(sample: Sample, answer_rule: str = "official") -> str:
    """The rule that scores ``sample`` under the task option ``answer_rule``: its benchmark's own
    (``mmstar``, ...) or ``lenient`` (vrh's rule for its answer type)."""
    if answer_rule not in RULE_CHOICES:
        raise ValueError(f"answer_rule must be one of {RULE_CHOICES}, got {answer_rule!r}")
    return sample.answer_rule if answer_rule == "official" and sample.answer_rule else LENIENT


def score_answer(pred: str, sample: Sample, answer_rule: str = "official") -> Verdict:
    """The verdict on the answer ``pred`` to VQA ``sample`` by the rule :func:`rule_name` picks."""
    name, gold = rule_name(sample, answer_rule), Gold.of(sample)
    check_answer(gold.answer, gold.answer_type)
    return (RULES[gold.answer_type] if name == LENIENT else get_answer_rule(name).score)(pred or "", gold)


def judge_answer(pred: str, gold: str, answer_type: str = "exact", *, precision: int | None = None) -> str:
    """The outcome (``correct``, ``wrong`` or ``parse_failure``) of prediction ``pred`` against ``gold``
    under vrh's rule for ``answer_type`` (see the module docstring). A gold answer that does not fit its
    type is a ValueError (:func:`vrh.data.check_answer`), not a wrong answer.

    >>> judge_answer("Red.", "red"), judge_answer("red, no: blue", "red"), judge_answer(" ", "red")
    ('correct', 'wrong', 'parse_failure')
    >>> judge_answer("The answer is (B).", "B", "choice"), judge_answer("A cat", "A", "choice")
    ('correct', 'parse_failure')
    >>> judge_answer("I count three.", "3", "number"), judge_answer("3.5", "3", "number")
    ('correct', 'wrong')
    >>> judge_answer("Region [0] is 2.5 feet tall.", "0.7", "length"), judge_answer("1.47", "1.5", "float", precision=1)
    ('correct', 'correct')
    """
    check_answer(gold, answer_type)  # also rejects an unknown answer_type, naming ANSWER_TYPES
    if answer_type == "float" and precision is None:
        raise ValueError("answer_type 'float' needs its precision (the decimal places the benchmark rounds to)")
    return RULES[answer_type](pred or "", Gold(gold, answer_type, precision)).outcome
