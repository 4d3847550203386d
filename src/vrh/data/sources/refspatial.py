"""RefSpatial-Bench (``BAAI/RefSpatial-Bench``; splits location 100, placement 100, unseen 77 rows):
spatial referring with a mask as the answer.

Columns used: ``id``, ``image``, ``mask`` (an image; non-zero pixels are the target), ``object`` (a short
description of the target), ``prompt`` and ``suffix`` (the benchmark's full instruction and its answer
format, asking for points). Two conversions (``--task``):

* ``grounding`` (default): grounded against a box, the **bounding box of the mask's non-zero pixels**
  (pixel ``i`` spans ``[i, i+1)``), with the expression ``object`` (``--expression prompt`` uses the
  full prompt instead); judged by IoU like every grounding set.
* ``point``: the benchmark's own protocol: the question is ``prompt + " " + suffix`` (its instruction and
  its answer format, "coordinates between 0 and 1"), asked as it is, and judged by the ``point`` task
  (:mod:`vrh.tasks.point`): the fraction of predicted points inside the mask.

Either way the mask is written beside the image and named in the line's ``mask`` field, and the sample id
is the same, so a detection run on one conversion and an evaluation on the other are checked disjoint by id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.images import check_box, image_bytes, mask_box
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, SourceOption, register_source

EXPRESSION_FIELDS = ("object", "prompt")
TASKS = ("grounding", "point")


def read_rows(src: Path, split: str, options: dict[str, Any]):
    task = options.get("task", "grounding")
    if task not in TASKS:
        raise ValueError(f"--task must be one of {TASKS} for refspatial, got {task!r}")
    if task == "point":
        if "expression" in options:
            raise ValueError("--expression applies to --task grounding; --task point asks the benchmark's "
                             "prompt + suffix")
        return parquet_rows(src, split, ("image", "mask", "prompt", "suffix"), key="id")
    field = options.get("expression", "object")
    if field not in EXPRESSION_FIELDS:
        raise ValueError(f"--expression must be one of {EXPRESSION_FIELDS}, got {field!r}")
    return parquet_rows(src, split, ("image", "mask", field), key="id")


def point_question(row: dict[str, Any]) -> str:
    """The benchmark's full instruction: ``prompt``, a blank, ``suffix`` (the answer format).

    >>> point_question({"prompt": "Point to the cup.", "suffix": "Answer (x, y) in 0-1."})
    'Point to the cup. Answer (x, y) in 0-1.'
    """
    parts = []
    for key in ("prompt", "suffix"):
        text = row.get(key)
        if not isinstance(text, str) or not text.strip():
            raise SkipRow(f"empty {key}: {text!r} (the point question is prompt + suffix)")
        parts.append(" ".join(text.split()))
    return " ".join(parts)


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    task = ctx.options.get("task", "grounding")
    field = ctx.options.get("expression", "object")
    text = point_question(row) if task == "point" else row.get(field)
    if not isinstance(text, str) or not text.strip():
        raise SkipRow(f"empty expression: {field} is {text!r}")
    mask_data, _ = image_bytes(row.get("mask"))
    box, mask_size = mask_box(mask_data)
    image_path, size = ctx.images.put(*image_bytes(row.get("image")))
    if mask_size != size:
        raise SkipRow(f"mask is {mask_size[0]}x{mask_size[1]} but the image is {size[0]}x{size[1]}")
    mask_path, _ = ctx.images.put(mask_data, f"{ctx.sample_id(key)}_mask")
    box = check_box(box, size)
    meta = {"benchmark": ctx.source, "split": ctx.split, "mask": f"images/{mask_path.name}",
            "object": row.get("object"), "prompt": row.get("prompt"), "suffix": row.get("suffix"), "step": row.get("step")}
    if task == "point":
        return [Sample(id=ctx.sample_id(key), image_path=image_path, task="point", question=text, box=box,
                       image_size=size, meta=meta)]
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="grounding", expression=" ".join(text.split()),
                   box=box, image_size=size, meta=meta)]


register_source(Source(
    name="refspatial", summary="BAAI/RefSpatial-Bench -> grounding against the mask's bounding box, or "
                               "(--task point) its own point-in-mask accuracy",
    layout="a parquet file, or the snapshot folder with [data/]<split>-*.parquet; columns id, image, mask (image), "
           "object, prompt, suffix",
    task="grounding", splits=("location", "placement", "unseen"), read_rows=read_rows, convert_row=convert_row,
    expected_rows={"location": 100, "placement": 100, "unseen": 77}, options=(
        SourceOption("expression", "--task grounding: the field that becomes the expression (default: object)",
                     choices=("object", "prompt")),
        SourceOption("task", "grounding against the mask's box (default), or point: the benchmark's own prompt + "
                             "suffix judged by a point inside the mask (vrh evaluate --task point)",
                     choices=("grounding", "point")))))
