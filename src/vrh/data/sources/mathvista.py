"""MathVista (``AI4Math/MathVista``, split ``testmini``, 1,000 rows): every question by default -- its 540
multiple-choice ones and its 460 free-form ones (418 integer, 40 float, 2 list answers) -- scored by
MathVista's own ``calculate_score.py`` on a rule-based answer extraction instead of its GPT-4 extractor.

**Which 1,000.** The paper (App. E.2) says "the MCQ split" and 1,000 samples; testmini has 1,000 rows of
which 540 are multiple choice, so the two cannot both hold. vrh follows the count: ``--subset all`` (the
default) converts all of testmini; ``--subset multi_choice`` keeps the 540 multiple-choice questions
(free-form rows are then counted apart, :class:`~vrh.data.sources.registry.NotInSubset`, not skipped).

Columns used: ``pid``, ``question``, ``choices`` (list of option texts), ``answer`` (the correct option's
*text*, or the free-form answer), ``question_type`` (``multi_choice`` / ``free_form``), ``answer_type``
(``text`` / ``integer`` / ``float`` / ``list``), ``precision`` (a float's decimal places), ``unit``,
``decoded_image`` (``{bytes, path}``) and ``metadata`` (its ``task`` and ``skills`` are kept as
``category`` and ``skills``).

Prompts. Multiple choice: the question, then ``Choices:`` and one ``(A) text`` line per option, then
:data:`~vrh.data.sources.choices.CHOICE_SUFFIX`; gold: the letter of the option equal to ``answer`` (the
first, when the text is written twice -- pid 781, ``['9', '12', '18', '18']``: either letter is accepted
by both rules). Free form: the question, `` (Unit: u)`` when it has one, and MathVista's own hint for its
answer type (:func:`hint`, from its ``evaluation/build_query.py``); gold: ``answer`` as ``integer``,
``float`` (with its ``precision``) or, for a list, ``exact``.

**The answer extractor.** MathVista's official scoring asks GPT-4 to pull the answer out of a response,
then normalises it (``calculate_score.py``). vrh replaces the GPT-4 step with a rule
(:func:`vrh.tasks.answer_rules.mathvista_extract`: an option's text, else the letter vrh reads, else the
answer; for numbers the last number in the answer) and keeps MathVista's normalisation and comparison
(``answer_rule`` ``mathvista``); no API is called and every run scores the same. Scores are comparable with
the official ones up to what GPT-4 would have extracted differently. ``--answer-rule lenient`` scores with
vrh's own rule for each answer type instead (a letter, or the first number).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.choices import letters_for, options_block, with_suffix
from vrh.data.sources.images import image_bytes
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import NotInSubset, RowContext, SkipRow, Source, SourceOption, register_source

COLUMNS = ("pid", "question", "choices", "answer", "question_type", "answer_type", "decoded_image")
SUBSETS = ("all", "multi_choice")
FREE_FORM = "free-form question (not in the multi_choice subset)"
ANSWER_TYPES = {"integer": "integer", "float": "float", "list": "exact"}  # MathVista's -> vrh's
_DECIMALS = {1: ("one decimal place", "1.2, 1.3, 1.4"), 2: ("two decimal places", "1.23, 1.34, 1.45")}


def read_rows(src: Path, split: str, options: dict[str, Any]):
    if options.get("subset", "all") not in SUBSETS:
        raise ValueError(f"--subset must be one of {SUBSETS} for mathvista, got {options.get('subset')!r}")
    return parquet_rows(src, split, COLUMNS, key="pid")


def hint(answer_type: str, precision: int | None) -> str:
    """MathVista's hint for a free-form answer (github lupantech/MathVista ``evaluation/build_query.py`` @
    53d5258, lines 218-228), without its ``Hint:`` label.

    >>> print(hint("float", 2))
    Please answer the question requiring a floating-point number with two decimal places and provide the final
    value, e.g., 1.23, 1.34, 1.45, at the end.
    """
    if answer_type == "integer":
        return ("Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, "
                "at the end.")
    if answer_type == "float":
        places, examples = _DECIMALS.get(precision, (f"{precision} decimal places", None))
        return (f"Please answer the question requiring a floating-point number with {places} and provide the final "
                f"value, {'e.g., ' + examples + ', ' if examples else ''}at the end.")
    return ("Please answer the question requiring a Python list as an answer and provide the final list, "
            "e.g., [1, 2, 3], [1.2, 1.3, 1.4], at the end.")


def _precision(value: Any) -> int:
    """A float answer's decimal places as an int (parquet may hold 1.0); SkipRow unless whole and >= 0."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or value != int(value):
        raise SkipRow(f"a float answer needs its precision (decimal places), got {value!r}")
    return int(value)


def _multi_choice(row: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    choices, answer = row.get("choices"), row.get("answer")
    if not isinstance(choices, (list, tuple)) or not all(isinstance(c, str) and c.strip() for c in choices):
        raise SkipRow(f"choices must be a list of non-empty strings, got {choices!r}")
    choices = [" ".join(c.split()) for c in choices]
    letters = letters_for(len(choices))
    gold = " ".join(answer.split()) if isinstance(answer, str) else None
    if gold not in choices:
        raise SkipRow(f"answer {answer!r} is not one of the choices {choices}")
    question = with_suffix(options_block(row["question"], choices))
    return question, letters[choices.index(gold)], {"choices": choices, "answer_text": gold}


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    question, qtype = row.get("question"), row.get("question_type")
    if qtype not in ("multi_choice", "free_form"):
        raise SkipRow(f"unknown question_type {qtype!r}: expected multi_choice or free_form")
    if qtype == "free_form" and ctx.options.get("subset", "all") == "multi_choice":
        raise NotInSubset(FREE_FORM)
    if not isinstance(question, str) or not question.strip():
        raise SkipRow(f"empty question: {question!r}")
    precision = None
    if qtype == "multi_choice":
        text, answer, extra = _multi_choice(row)
        answer_type = "choice"
    else:
        source_type, answer = row.get("answer_type"), row.get("answer")
        if source_type not in ANSWER_TYPES:
            raise SkipRow(f"unknown answer_type {source_type!r} of a free-form question: expected "
                          f"{', '.join(ANSWER_TYPES)}")
        if not isinstance(answer, str) or not answer.strip():
            raise SkipRow(f"empty answer: {answer!r}")
        precision = _precision(row.get("precision")) if source_type == "float" else None
        unit = row.get("unit") if isinstance(row.get("unit"), str) and row["unit"].strip() else None
        text = f"{question.strip()}" + (f" (Unit: {unit})" if unit else "") + f"\n{hint(source_type, precision)}"
        answer, answer_type, extra = answer.strip(), ANSWER_TYPES[source_type], {"unit": unit}
    image_path, size = ctx.images.put(*image_bytes(row.get("decoded_image")))
    meta_info = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    try:
        return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa", question=text, answer=answer,
                       answer_type=answer_type, precision=precision, answer_rule="mathvista", image_size=size,
                       meta={"benchmark": ctx.source, "split": ctx.split, "question_type": qtype, **extra,
                             "category": meta_info.get("task"), "skills": meta_info.get("skills")})]
    except ValueError as e:  # a gold that does not fit its answer type ("1.5" as an integer)
        raise SkipRow(str(e)) from None


register_source(Source(
    name="mathvista", summary="AI4Math/MathVista, all of testmini (--subset multi_choice: its 540 multiple-choice "
                              "questions) -> vqa, scored by MathVista's calculate_score on a rule-based extraction",
    layout="a parquet file, or the snapshot folder with data/<split>-*.parquet; columns pid, question, choices, "
           "answer, question_type, answer_type, precision, unit, decoded_image, metadata",
    task="vqa", splits=("testmini", "test"), read_rows=read_rows, convert_row=convert_row,
    expected_rows={"testmini": 1000}, options=(SourceOption("subset", "all (default: testmini's 1,000) or multi_choice (its 540)",
                                        choices=SUBSETS),)))
