"""MMStar (``Lin-Chen/MMStar``, split ``val``, 1,500 rows): multiple choice with the options written in
the question (``"...\\nOptions: A: ..., B: ..., C: ..., D: ..."``) and the gold as a letter.

The model sees ``question`` plus :data:`~vrh.data.sources.choices.CHOICE_SUFFIX`. Scored by MMStar's own
rule (``answer_rule`` ``mmstar``, :mod:`vrh.tasks.answer_rules`: its ``eval/vlmeval/evaluate/mmstar.py``
reads the answer's first character, so ``"A cat"`` and ``"Above"`` are option A and ``"Answer: B"`` is
"a"); ``--answer-rule lenient`` scores it as vrh's ``choice`` letter instead. A gold letter that is not
among the question's inline options is a skip: the row cannot be answered correctly.
``category`` and ``l2_category`` are kept (MMStar averages over categories).

Layout: the hub snapshot (``Lin-Chen/MMStar``) holds ``mmstar.parquet`` at its top (and ``MMStar.tsv``,
VLMEvalKit's copy, which is not read); split ``val`` is that file, or ``val.parquet`` /
``val-*.parquet`` (in ``data/`` or at the top) where a mirror names it so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.choices import gold_letter, inline_letters, with_suffix
from vrh.data.sources.images import image_bytes
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, register_source


LAYOUTS = {"val": (("val",), ("mmstar",))}


def read_rows(src: Path, split: str, options: dict[str, Any]):
    return parquet_rows(src, split, ("image", "question", "answer"), key="index", layouts=LAYOUTS)


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise SkipRow(f"empty question: {question!r}")
    letters = inline_letters(question)
    if not letters:
        raise SkipRow("no inline options (e.g. 'A: ...') found in the question")
    answer = gold_letter(row.get("answer"), letters)
    image_path, size = ctx.images.put(*image_bytes(row.get("image")))
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa", question=with_suffix(question),
                   answer=answer, answer_type="choice", answer_rule="mmstar", image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split, "category": row.get("category"),
                         "l2_category": row.get("l2_category")})]


register_source(Source(
    name="mmstar", summary="Lin-Chen/MMStar multiple choice (inline options) -> vqa, answer_type choice, scored by "
                           "MMStar's own first-character rule",
    layout="a parquet file, or the snapshot folder with mmstar.parquet at its top (or val-*.parquet); columns "
           "index, image, question (options inline), answer letter, category, l2_category",
    task="vqa", splits=("val",), read_rows=read_rows, convert_row=convert_row, expected_rows={"val": 1500}))
