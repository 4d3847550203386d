"""Hostile answers for the parsers, at any size: what ``tests/data/test_boxes.py``, ``tests/tasks/test_vqa_rules.py``
and ``benchmarks/parsers.py`` feed to :func:`vrh.data.boxes.parse_box` and to the VQA answer rules.

Each case is a builder of one size knob ``n`` and the ``n`` at which it is about 10,000 characters (scale 1);
:func:`box_text` / :func:`answer_text` build it at any scale (1/8, 8, 64, ...), so the same pattern is compared at
two lengths. Shapes: gaps of blanks where a backtracking pattern could split them many ways, runs of digits,
brackets, keys, tags and near-miss boxes repeated.
"""

from __future__ import annotations

from collections.abc import Callable

Case = tuple[Callable[[int], str], int]  # (builder of n, n at scale 1)

BOX_CASES: dict[str, Case] = {
    "whitespace gaps, no closing bracket": (lambda n: "[1" + " " * n + "2" + " " * n + "3" + " " * n + "4" + " " * n + "x",
                                            2400),
    "many gapped lists": (lambda n: ("[1" + " " * 100 + "2" + " " * 100 + "3" + " " * 100 + "4" + " " * 100 + "x") * n,
                          24),
    "long digit run": (lambda n: "[" + "1" * n, 9999),
    "digit runs split by blanks": (lambda n: ("[" + "1" * 500 + " ") * n, 19),
    "many brackets": (lambda n: "[" * n, 10000),
    "many parentheses": (lambda n: "(" * n, 10000),
    "nested brackets": (lambda n: "[[[[" * n, 2500),
    "bracket and blank": (lambda n: "[ " * n, 5000),
    "repeated key": (lambda n: '"bbox_2d":' * n, 1000),
    "repeated key and bracket": (lambda n: '"bbox_2d": [' * n, 800),
    "key then blanks": (lambda n: '"bbox_2d":' + " " * n, 9990),
    "unterminated numbers": (lambda n: "(" + "1," * n, 4999),
    "point pairs": (lambda n: "(1,2)," * n, 1666),
    "gapped point pairs": (lambda n: "(1 , 2) , (" * n, 900),
    "invalid boxes": (lambda n: "[4, 3, 2, 1] " * n, 769),
    "dotted numbers": (lambda n: "[1.1.1.1" * n, 1200),
    "exponents": (lambda n: "[1e1e1e1e" * n, 1100),
    "newlines": (lambda n: "[1\n\n\n" * n, 2000),
    "reasoning tags": (lambda n: "<think>" * n, 1250),
    "closing tags": (lambda n: "</think>" * n, 1111),
    "unclosed reasoning with lists": (lambda n: ("<think>[1, 2, 3, 4]" + " " * 80) * n, 100),
    "thousands-like lists": (lambda n: "[1,024, 20, 30] " * n, 625),
    "units": (lambda n: "[1px, 2%, 3 px, 4 %] " * n, 476),
}

ANSWER_CASES: dict[str, Case] = {  # for the VQA answer rules (vrh.tasks.answer_rules)
    "word, blanks, word": (lambda n: "answer" + " " * n + "x", 9990),
    "repeated keyword": (lambda n: "answer is" * n, 1100),
    "many parentheses": (lambda n: "(" * n, 10000),
    "long digit run": (lambda n: "1" * n, 10000),
    "minus and dot": (lambda n: "-." * n, 5000),
    "keyword, blanks, minus, blanks": (lambda n: "Answer:" + " " * n + "-" + " " * n, 4000),
}


def _build(case: Case, scale: float) -> str:
    builder, n = case
    return builder(max(1, round(n * scale)))


def box_text(name: str, scale: float = 1) -> str:
    """The box case ``name`` at ``scale`` (1: about 10,000 characters)."""
    return _build(BOX_CASES[name], scale)


def answer_text(name: str, scale: float = 1) -> str:
    """The answer case ``name`` at ``scale`` (1: about 10,000 characters)."""
    return _build(ANSWER_CASES[name], scale)
