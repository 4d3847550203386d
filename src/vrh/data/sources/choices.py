"""Multiple-choice answers of the VQA benchmarks: the gold letter, the option letters a question offers,
and the one instruction appended to every multiple-choice question.

The instruction is lmms-eval's post-prompt for these sets, fixed here (and snapshot-tested) so every
converted multiple-choice set asks for the answer the same way and the ``choice`` judge
(:func:`vrh.tasks.vqa.judge_answer`) can read it.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from vrh.data.sources.registry import SkipRow

CHOICE_SUFFIX = "Answer with the option's letter from the given choices directly."
_GOLD_RE = re.compile(r"\s*\(?\s*([A-Za-z])\s*\)?\s*[.:]?\s*")
# an inline option: "A:", "A.", "(A)" or "A)" after the start, a blank, a comma or a bracket
_OPTION_RE = re.compile(r"(?:^|[\s,(])\(?([A-Z])(?:\)|[:.])\s")


def gold_letter(answer: object, letters: Collection[str]) -> str:
    """The gold option letter of ``answer`` (``"(A)"``, ``"A"``, ``"b"``); SkipRow unless it is one of
    ``letters``.

    >>> gold_letter("(B)", "AB"), gold_letter(" c ", "ABCD")
    ('B', 'C')
    >>> gold_letter("(E)", "ABCD")
    Traceback (most recent call last):
    ...
    vrh.data.sources.registry.SkipRow: unknown answer letter 'E': the options are A, B, C, D
    """
    m = _GOLD_RE.fullmatch(answer) if isinstance(answer, str) else None
    if m is None:
        raise SkipRow(f"answer {answer!r} is not an option letter")
    letter = m.group(1).upper()
    if letter not in letters:
        raise SkipRow(f"unknown answer letter {letter!r}: the options are {', '.join(sorted(letters)) or 'none'}")
    return letter


def letters_for(n: int) -> str:
    """The first ``n`` option letters (``letters_for(3) == "ABC"``)."""
    if not 1 <= n <= 26:
        raise SkipRow(f"a multiple-choice question needs 1-26 choices, got {n}")
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n]


def inline_letters(question: str) -> str:
    """The option letters written in the question's text, in order of appearance.

    >>> inline_letters("Which?\\nOptions: A: a cat, B: a dog, C: both")
    'ABC'
    >>> inline_letters("Select one.\\n(A) left\\n(B) right")
    'AB'
    """
    return "".join(dict.fromkeys(_OPTION_RE.findall(question)))


def with_suffix(question: str) -> str:
    """The question as the model sees it: the text, a newline, :data:`CHOICE_SUFFIX`."""
    return f"{question.rstrip()}\n{CHOICE_SUFFIX}"


def options_block(question: str, options: list[str]) -> str:
    """The question with its options written out, one ``(A) text`` line each, before the choice instruction.

    >>> print(options_block("Find x.", ["1", "2"]))
    Find x.
    Choices:
    (A) 1
    (B) 2
    """
    lines = [question.strip(), "Choices:"]
    lines += [f"({letter}) {text}" for letter, text in zip(letters_for(len(options)), options)]
    return "\n".join(lines)
