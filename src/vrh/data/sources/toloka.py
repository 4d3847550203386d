"""Toloka Visual Question Answering, WSDM Cup 2023 (``toloka/WSDMCup2023``): grounding from a CSV.

Each row: ``image`` (a URL), ``width``, ``height``, ``left``, ``top``, ``right``, ``bottom`` (the answer
box, xyxy pixels of the original image) and ``question`` (what to find; it becomes the expression). vrh
downloads nothing: each image is looked up in a local folder by the URL's file name
(``https://.../wsdm2023/abc123.jpg`` -> ``<images>/abc123.jpg``); ``--images`` names the folder
(default: ``images/`` beside the CSV). Missing files are one error listing them, before anything is
written. A local image whose size differs from the CSV's ``width`` x ``height`` (a resized download) is
skipped with that reason, because the box would be in the wrong frame. A row whose four box columns are
empty is skipped as having no answer box: the first public test release (Sep 2022) has only such rows, so
its conversion fails (no sample) instead of passing for the 1,705-row labelled one.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from vrh.data.jsonl import Sample
from vrh.data.sources.images import check_box
from vrh.data.sources.registry import RowContext, SkipRow, Source, SourceOption, register_source

COLUMNS = ("image", "width", "height", "left", "top", "right", "bottom", "question")
MAX_LISTED = 20  # missing files named in the error


def image_name(url: str) -> str:
    """The file name an image URL points at.

    >>> image_name("https://tlk.s3.yandex.net/wsdm2023/6c5b2a0d.jpg?x=1")
    '6c5b2a0d.jpg'
    """
    return Path(urlparse(url).path).name


def _csv_file(src: Path, split: str) -> Path:
    if src.is_file():
        return src
    if src.is_dir():
        path = src / f"{split}.csv"
        if path.is_file():
            return path
        found = sorted(p.name for p in src.glob("*.csv"))
        raise ValueError(f"no {split}.csv in {src} (CSV files there: {', '.join(found) or 'none'}); "
                         f"choose one with --split or pass the CSV file")
    raise FileNotFoundError(f"no such file or folder: {src}")


def read_rows(src: Path, split: str, options: dict[str, Any]):
    path = _csv_file(Path(src), split)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing_cols = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing_cols:
            raise ValueError(f"{path} lacks column(s) {missing_cols}; its columns: {reader.fieldnames}")
        rows = list(reader)
    folder = Path(options.get("images") or path.parent / "images").expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} not found; download the images named in {path} there "
                                f"or pass --images DIR")
    missing = sorted({image_name(r["image"]) for r in rows if not (folder / image_name(r["image"])).is_file()})
    if missing:
        listed = ", ".join(missing[:MAX_LISTED]) + (", ..." if len(missing) > MAX_LISTED else "")
        raise FileNotFoundError(f"{len(missing)} image file(s) named in {path} are not in {folder}: {listed}")
    for r in rows:
        r["_image_path"] = folder / image_name(r["image"])
    return iter([(str(i), r) for i, r in enumerate(rows)])


def _number(row: dict[str, Any], key: str) -> float:
    try:
        value = float(row[key])
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise SkipRow(f"{key} must be a number, got {row[key]!r}")
    return value


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    question = (row.get("question") or "").strip()
    if not question:
        raise SkipRow("empty question")
    if not any(str(row.get(k) or "").strip() for k in ("left", "top", "right", "bottom")):
        raise SkipRow("no answer box: left, top, right and bottom are empty (an unlabelled release?)")
    left, top, right, bottom, width, height = (_number(row, k) for k in ("left", "top", "right", "bottom",
                                                                         "width", "height"))
    if right <= left or bottom <= top:
        raise SkipRow(f"box left/top/right/bottom {[left, top, right, bottom]} has non-positive width or height")
    image_path, size = ctx.images.put_file(row["_image_path"])
    if size != (int(width), int(height)):
        raise SkipRow(f"image {row['_image_path'].name} is {size[0]}x{size[1]} but the CSV says "
                      f"{int(width)}x{int(height)}")
    box = check_box((left, top, right, bottom), size)
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="grounding",
                   expression=" ".join(question.split()), box=box, image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split, "url": row["image"]})]


register_source(Source(
    name="toloka", summary="toloka/WSDMCup2023 questions answered by a box -> grounding (IoU)",
    layout="<split>.csv (or the CSV file) with columns image (URL), width, height, left, top, right, bottom, "
           "question; the images in a local folder by file name (--images DIR, default images/ beside the CSV)",
    task="grounding", splits=("test_public", "train", "test_private"), read_rows=read_rows,
    convert_row=convert_row, expected_rows={"test_public": 1705}, options=(SourceOption("images", "local image folder, by the CSV's URL file names (default: images/ beside the CSV)", metavar="DIR"),)))
