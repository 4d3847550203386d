"""CV-Bench (``nyu-visionx/CV-Bench``, split ``test``, 2,638 rows): multiple-choice spatial questions.

Layout: the hub snapshot holds ``test_2d.parquet`` (1,438 rows) and ``test_3d.parquet`` (1,200); in 2024 it
held one ``test.parquet``. Split ``test`` (the default) reads ``test.parquet`` when there is one, else both
files, in that order (the hub card's default config, ``test*.parquet``); ``test_2d`` / ``test_3d`` read one.
``idx`` is the global index, so ids never clash between the two files.

Columns used: ``idx``, ``image``, ``prompt`` (the question with its choices written out), ``choices``
(list), ``answer`` (``"(A)"``), ``source`` (ADE20K / COCO / Omni3D), ``task``, ``type``. The model sees
``prompt`` plus :data:`~vrh.data.sources.choices.CHOICE_SUFFIX`; the answer is scored by lmms-eval's
CV-Bench rule (``answer_rule`` ``cvbench``, :mod:`vrh.tasks.answer_rules`: the first letter of the answer,
so ``"Answer: B"`` reads as A), or with ``--answer-rule lenient`` as vrh's ``choice`` letter. The benchmark's official score averages per image source, ½((ADE20K + COCO)/2 + Omni3D), so the
source is kept in the line's ``image_source`` field (``vrh data inspect`` counts it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.choices import gold_letter, letters_for, with_suffix
from vrh.data.sources.images import image_bytes
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, register_source


LAYOUTS = {"test": (("test",), ("test_2d", "test_3d"))}


def read_rows(src: Path, split: str, options: dict[str, Any]):
    return parquet_rows(src, split, ("image", "prompt", "choices", "answer"), key="idx", layouts=LAYOUTS)


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    prompt, choices = row.get("prompt"), row.get("choices")
    if not isinstance(prompt, str) or not prompt.strip():
        raise SkipRow(f"empty prompt: {prompt!r}")
    if not isinstance(choices, (list, tuple)):
        raise SkipRow(f"choices must be a list, got {choices!r}")
    answer = gold_letter(row.get("answer"), letters_for(len(choices)))
    image_path, size = ctx.images.put(*image_bytes(row.get("image")))
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa", question=with_suffix(prompt),
                   answer=answer, answer_type="choice", answer_rule="cvbench", image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split, "choices": [str(c) for c in choices],
                         "image_source": row.get("source"), "category": row.get("task"), "type": row.get("type")})]


register_source(Source(
    name="cvbench", summary="nyu-visionx/CV-Bench multiple choice -> vqa, answer_type choice, scored by lmms-eval's "
                            "first-letter rule",
    layout="a parquet file, or the snapshot folder with test_2d.parquet + test_3d.parquet (2024: test.parquet); "
           "columns idx, image, prompt, choices, answer '(A)', source, task",
    task="vqa", splits=("test", "test_2d", "test_3d"), read_rows=read_rows, convert_row=convert_row,
    expected_rows={"test": 2638, "test_2d": 1438, "test_3d": 1200}))
