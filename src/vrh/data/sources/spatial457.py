"""Spatial457 (``RyanWW/Spatial457-v2``), e.g. config ``L1_single`` (single-object questions, split
``validation``, 670 rows): free-form answers judged by normalised exact match.

Columns used: ``image``, ``question``, ``answer`` (a string: a colour, a shape, ``yes``/``no``, a
count). Judged as ``exact`` (lower-cased, punctuation ignored, whole string), so a count answered in
words ("three" for "3") is wrong -- the benchmark's own scoring, as far as we know, is exact match too.
Pass the config's folder (``.../L1_single``) when the snapshot holds several configs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.images import image_bytes
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, register_source


def read_rows(src: Path, split: str, options: dict[str, Any]):
    return parquet_rows(src, split, ("image", "question", "answer"), key="question_index")


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    question, answer = row.get("question"), row.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise SkipRow(f"empty question: {question!r}")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not any(c.isalnum() for c in answer):
        raise SkipRow(f"answer must be a string with a letter or digit, got {answer!r}")
    image_path, size = ctx.images.put(*image_bytes(row.get("image")))
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa", question=question.strip(),
                   answer=answer.strip(), answer_type="exact", image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split})]


register_source(Source(
    name="spatial457", summary="RyanWW/Spatial457-v2 (e.g. L1_single) -> vqa, answer_type exact",
    layout="a parquet file, or a config folder (e.g. L1_single/) with [data/]validation-*.parquet; columns "
           "image, question, answer",
    task="vqa", splits=("validation",), read_rows=read_rows, convert_row=convert_row))
