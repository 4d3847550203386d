"""RefCOCO, RefCOCO+ and RefCOCOg in the layout of the lmms-lab parquet snapshots (``lmms-lab/RefCOCO``,
``lmms-lab/RefCOCOplus``, ``lmms-lab/RefCOCOg``).

Each row is one referred object: ``question_id``, ``image`` (``{bytes, path}``), ``question`` (lmms-eval's
captioning prompt, not used here), ``answer`` (the list of referring expressions written for the object),
``bbox`` (``[x, y, w, h]`` in pixels of the COCO image) and ``file_name``.

Which expression becomes the sample: by default **one sample per row, expression = ``answer[0]``**, which
gives the row counts the paper reports (val: 8,811 / 3,805 / 7,573; the paper's 3,804 for RefCOCO+ is one
fewer). lmms-eval instead makes one sample per expression; ``--all-expressions`` does that (ids get
``:<index into answer>``), at the price of samples that share an object and image. Every expression of the
row is kept in the line's ``expressions`` field either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.jsonl import Sample
from vrh.data.sources.images import check_box, image_bytes, xywh_box
from vrh.data.sources.parquet import parquet_rows
from vrh.data.sources.registry import RowContext, SkipRow, Source, SourceOption, register_source

COLUMNS = ("question_id", "image", "answer", "bbox")
LAYOUT = ("a parquet file, or the snapshot folder with data/<split>-*.parquet; columns question_id, "
          "image{bytes,path}, answer (list of expressions), bbox [x,y,w,h] px, file_name")

# also taken by the *-refer sources (vrh.data.sources.refer)
ALL_EXPRESSIONS = SourceOption("all_expressions", "one sample per referring expression instead of one per row "
                                                  "(answer[0])", type=bool)


def read_rows(src: Path, split: str, options: dict[str, Any]):
    return parquet_rows(src, split, COLUMNS, key="question_id")


def expressions(value: Any, all_expressions: bool) -> list[tuple[int, str]]:
    """(index into ``answer``, expression) pairs that become samples; SkipRow on an empty one.

    >>> expressions(["man left", " the man "], False), expressions(["a", "b"], True)
    ([(0, 'man left')], [(0, 'a'), (1, 'b')])
    """
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise SkipRow(f"empty expression: answer is {value!r}")
    chosen = list(enumerate(value)) if all_expressions else [(0, value[0])]
    for i, text in chosen:
        if not isinstance(text, str) or not text.strip():
            raise SkipRow(f"empty expression: answer[{i}] is {text!r}")
    return [(i, " ".join(text.split())) for i, text in chosen]


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    all_expr = bool(ctx.options.get("all_expressions"))
    chosen = expressions(row.get("answer"), all_expr)
    box = xywh_box(row.get("bbox"))  # cheap checks first: decoding the image is the slow part
    data, path = image_bytes(row.get("image"))
    image_path, size = ctx.images.put(data, row.get("file_name") or path)
    box = check_box(box, size)
    answers = [row["answer"]] if isinstance(row["answer"], str) else row["answer"]
    meta = {"benchmark": ctx.source, "split": ctx.split, "question_id": key, "file_name": row.get("file_name"),
            "expressions": [" ".join(t.split()) for t in answers if isinstance(t, str)]}
    return [Sample(id=ctx.sample_id(key, f":{i}" if all_expr else ""), image_path=image_path, task="grounding",
                   expression=text, box=box, image_size=size, meta={**meta, "expression_index": i})
            for i, text in chosen]


_SPLITS = {"refcoco": ("val", "test", "testA", "testB"), "refcoco+": ("val", "testA", "testB"),
           "refcocog": ("val", "test")}
_VAL_ROWS = {"refcoco": 8811, "refcoco+": 3805, "refcocog": 7573}  # lmms-lab snapshots, as the paper counts
_HUB = {"refcoco": "lmms-lab/RefCOCO", "refcoco+": "lmms-lab/RefCOCOplus", "refcocog": "lmms-lab/RefCOCOg"}

for _name, _splits in _SPLITS.items():
    register_source(Source(
        name=_name, summary=f"{_HUB[_name]} referring expressions -> grounding (IoU >= 0.5)",
        layout=LAYOUT, task="grounding", splits=_splits, read_rows=read_rows, convert_row=convert_row,
        expected_rows={"val": _VAL_ROWS[_name]}, options=(ALL_EXPRESSIONS,)))
