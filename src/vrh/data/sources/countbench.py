"""CountBenchQA (``vikhyatk/CountBenchQA``, split ``test``, 491 rows): "how many ...?" with the count as
a number.

Columns used: ``image``, ``question``, ``number``. The question is asked with lmms-eval's post-prompt
(:data:`NUMBER_SUFFIX`) and scored by lmms-eval's exact match (``answer_rule`` ``countbenchqa``,
:mod:`vrh.tasks.answer_rules`: the stripped answer equals the count's digits, so ``"3."`` and ``"There are 3
dogs."`` are wrong), or with ``--answer-rule lenient`` as vrh's ``number`` (the first number in the answer,
digits or a word up to twenty, compared numerically). Rows have no id column, so the id is the row number
in the split.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.images import image_bytes
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, register_source

# lmms-eval countbenchqa.yaml's post_prompt (github EvolvingLMMs-Lab/lmms-eval @ 75571cf, line 20)
NUMBER_SUFFIX = "Answer with a single number."


def read_rows(src: Path, split: str, options: dict[str, Any]):
    return parquet_rows(src, split, ("image", "question", "number"))


def count_answer(value: Any) -> str:
    """The gold count as digits; SkipRow unless it is a whole, finite, non-negative number.

    >>> count_answer(3), count_answer(4.0), count_answer("7")
    ('3', '4', '7')
    """
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise SkipRow(f"number must be a whole count, got {value!r}")
    return str(int(number))


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise SkipRow(f"empty question: {question!r}")
    answer = count_answer(row.get("number"))
    image_path, size = ctx.images.put(*image_bytes(row.get("image")))
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa",
                   question=f"{question.strip()}\n{NUMBER_SUFFIX}", answer=answer, answer_type="number", answer_rule="countbenchqa", image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split})]


register_source(Source(
    name="countbenchqa", summary="vikhyatk/CountBenchQA counting -> vqa, answer_type number, scored by lmms-eval's "
                                 "exact match",
    layout="a parquet file, or the snapshot folder with data/test-*.parquet; columns image, question, number",
    task="vqa", splits=("test",), read_rows=read_rows, convert_row=convert_row, expected_rows={"test": 491}))
