"""MathVista (``AI4Math/MathVista``, split ``testmini``, 1,000 rows): its **multiple-choice** questions
(540 of testmini), judged by a rule instead of MathVista's GPT-4 answer extractor.

Columns used: ``pid``, ``question``, ``choices`` (list of option texts), ``answer`` (the correct option's
*text*), ``question_type`` (``multi_choice`` / ``free_form``), ``decoded_image`` (``{bytes, path}``) and
``metadata`` (its ``task`` and ``skills`` are kept as ``category`` and ``skills``). Free-form rows are
skipped with that reason (counted, as every skip), so a whole testmini conversion reports 460 skips.

Prompt: the question, then ``Choices:`` and one ``(A) text`` line per option, then
:data:`~vrh.data.sources.choices.CHOICE_SUFFIX`. Gold: the letter of the option equal to ``answer``.

**The answer extractor.** MathVista's official scoring asks GPT-4 to pull the answer out of a free-form
response and then matches it to an option. vrh replaces that with a rule, so no API is called and every
run scores the same: the question asks for the letter directly and the ``choice`` rule
(:func:`vrh.tasks.vqa.judge_answer`) reads it -- at the start of the answer (``B``, ``(B)``, ``B. 145°``),
as a lone letter, or after ``answer`` / ``option`` / ``choice`` (``The answer is (B).``). An answer that
states only the option's text, or reasons at length and names the letter elsewhere, is a
``parse_failure`` (kept apart from a wrong answer), where the GPT extractor might have recovered it: scores
are comparable with the official ones only up to that difference, which the parse-failure rate measures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.choices import letters_for, options_block, with_suffix
from vrh.data.sources.images import image_bytes
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, register_source

COLUMNS = ("pid", "question", "choices", "answer", "question_type", "decoded_image")


def read_rows(src: Path, split: str, options: dict[str, Any]):
    return parquet_rows(src, split, COLUMNS, key="pid")


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    if row.get("question_type") != "multi_choice":
        raise SkipRow(f"question_type {row.get('question_type')!r}: only multi_choice questions are converted")
    question, choices, answer = row.get("question"), row.get("choices"), row.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise SkipRow(f"empty question: {question!r}")
    if not isinstance(choices, (list, tuple)) or not all(isinstance(c, str) and c.strip() for c in choices):
        raise SkipRow(f"choices must be a list of non-empty strings, got {choices!r}")
    choices = [" ".join(c.split()) for c in choices]
    letters = letters_for(len(choices))
    gold = " ".join(answer.split()) if isinstance(answer, str) else None
    if gold not in choices:
        raise SkipRow(f"answer {answer!r} is not one of the choices {choices}")
    if choices.count(gold) > 1:
        raise SkipRow(f"answer {answer!r} appears more than once among the choices")
    image_path, size = ctx.images.put(*image_bytes(row.get("decoded_image")))
    meta_info = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa",
                   question=with_suffix(options_block(question, choices)), answer=letters[choices.index(gold)],
                   answer_type="choice", image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split, "choices": choices, "answer_text": gold,
                         "category": meta_info.get("task"), "skills": meta_info.get("skills")})]


register_source(Source(
    name="mathvista", summary="AI4Math/MathVista multiple-choice questions -> vqa, answer_type choice (a letter "
                              "rule instead of the GPT-4 extractor)",
    layout="a parquet file, or the snapshot folder with data/<split>-*.parquet; columns pid, question, choices, "
           "answer (option text), question_type, decoded_image, metadata",
    task="vqa", splits=("testmini", "test"), read_rows=read_rows, convert_row=convert_row,
    expected_rows={"testmini": 1000}))
