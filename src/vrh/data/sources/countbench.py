"""CountBenchQA (``vikhyatk/CountBenchQA``, split ``test``, 491 rows): "how many ...?" with the count as
a number, as either of lmms-eval's two tasks on it (both official, both on the same rows):

* source ``countbenchqa`` (lmms-eval task ``countbenchqa``): the question, then its post-prompt
  (:data:`NUMBER_SUFFIX`); scored by exact match (``answer_rule`` ``countbenchqa``: the stripped answer
  equals the count's digits, so ``"3."``, ``"three"`` and ``"There are 3 dogs."`` are wrong);
* source ``countbench`` (lmms-eval task ``countbench``): its pre-prompt (:data:`COUNT_PREFIX`), then the
  question; scored with number words read (``answer_rule`` ``countbench``: answer and count lower-cased and
  a whole-answer word from ``none`` / ``zero`` to ``twenty`` mapped to digits, so ``"Three"`` is right and
  ``"3."`` still wrong).

The rules are in :mod:`vrh.tasks.answer_rules`, each citing its lmms-eval file; every VQA record names the
rule that scored it. ``--answer-rule lenient`` scores either as vrh's ``number`` (the first number in the
answer, digits or a word up to twenty, compared numerically). Rows have no id column, so the id is the row
number in the split.
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
# lmms-eval countbench/countbench.yaml's pre_prompt (@ afa400a, line 19; its post_prompt is empty)
COUNT_PREFIX = ("Look at the image carefully and count the objects. Answer with just a number, without any additional "
                "text. ")


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


def _converter(rule: str):
    """``convert_row`` of the source scored by ``rule``: lmms-eval's prompt of the task of that name."""

    def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise SkipRow(f"empty question: {question!r}")
        answer = count_answer(row.get("number"))
        image_path, size = ctx.images.put(*image_bytes(row.get("image")))
        q = question.strip()
        text = f"{q}\n{NUMBER_SUFFIX}" if rule == "countbenchqa" else f"{COUNT_PREFIX}{q}"
        return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa", question=text, answer=answer,
                       answer_type="number", answer_rule=rule, image_size=size,
                       meta={"benchmark": ctx.source, "split": ctx.split})]

    return convert_row


LAYOUT = "a parquet file, or the snapshot folder with data/test-*.parquet; columns image, question, number"
register_source(Source(
    name="countbenchqa", summary="vikhyatk/CountBenchQA counting -> vqa, answer_type number, scored by lmms-eval "
                                 "countbenchqa's exact match",
    layout=LAYOUT, task="vqa", splits=("test",), read_rows=read_rows, convert_row=_converter("countbenchqa"),
    expected_rows={"test": 491}))
register_source(Source(
    name="countbench", summary="vikhyatk/CountBenchQA counting -> vqa, answer_type number, scored by lmms-eval "
                               "countbench's match with number words read ('three' = 3)",
    layout=LAYOUT, task="vqa", splits=("test",), read_rows=read_rows, convert_row=_converter("countbench"),
    expected_rows={"test": 491}))
