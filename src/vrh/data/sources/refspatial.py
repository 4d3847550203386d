"""RefSpatial-Bench (``BAAI/RefSpatial-Bench``; splits location 100, placement 100, unseen 77 rows):
spatial referring with a mask as the answer.

Columns used: ``id``, ``image``, ``mask`` (an image; non-zero pixels are the target), ``object`` (a short
description of the target), ``prompt`` and ``suffix`` (the benchmark's full instruction and its answer
format, asking for points). vrh grounds against a box: the **bounding box of the mask's non-zero
pixels** (pixel ``i`` spans ``[i, i+1)``), with the expression ``object`` (``--expression prompt`` uses
the full prompt instead). The mask is written beside the image and named in the line's ``mask`` field,
so the benchmark's own metric (a predicted point inside the mask) can be computed from the same file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.images import check_box, image_bytes, mask_box
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, register_source

EXPRESSION_FIELDS = ("object", "prompt")


def read_rows(src: Path, split: str, options: dict[str, Any]):
    field = options.get("expression", "object")
    if field not in EXPRESSION_FIELDS:
        raise ValueError(f"--expression must be one of {EXPRESSION_FIELDS}, got {field!r}")
    return parquet_rows(src, split, ("image", "mask", field), key="id")


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    field = ctx.options.get("expression", "object")
    text = row.get(field)
    if not isinstance(text, str) or not text.strip():
        raise SkipRow(f"empty expression: {field} is {text!r}")
    mask_data, _ = image_bytes(row.get("mask"))
    box, mask_size = mask_box(mask_data)
    image_path, size = ctx.images.put(*image_bytes(row.get("image")))
    if mask_size != size:
        raise SkipRow(f"mask is {mask_size[0]}x{mask_size[1]} but the image is {size[0]}x{size[1]}")
    mask_path, _ = ctx.images.put(mask_data, f"{ctx.sample_id(key)}_mask")
    box = check_box(box, size)
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="grounding", expression=" ".join(text.split()),
                   box=box, image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split, "mask": f"images/{mask_path.name}",
                         "object": row.get("object"), "prompt": row.get("prompt"), "suffix": row.get("suffix")})]


register_source(Source(
    name="refspatial", summary="BAAI/RefSpatial-Bench -> grounding against the mask's bounding box",
    layout="a parquet file, or the snapshot folder with [data/]<split>-*.parquet; columns id, image, mask (image), "
           "object, prompt, suffix",
    task="grounding", splits=("location", "placement", "unseen"), read_rows=read_rows, convert_row=convert_row,
    expected_rows={"location": 100, "placement": 100, "unseen": 77}, options=("expression",)))
