"""SpatialRGPT-Bench (``a8cheng/SpatialRGPT-Bench``, 1,406 rows): spatial questions about marked regions,
e.g. "Is Region [0] behind Region [1]?".

The official annotation file is ``SpatialRGPT-Bench_v1.json``, **one JSON list** of records (compact or
indented; SpatialRGPT's own ``llava/eval/eval_spatial.py`` reads it with ``json.load``); a JSONL copy with
one record per line (``val_SpatialRGPT-Bench.jsonl``, as some mirrors ship it) is read too. ``SRC`` is the
file or its folder. Each record: ``id``, ``image_info`` (``file_path``, the image relative to ``--images
DIR``, default the annotation file's folder; ``height``, ``width``), ``text_q`` (the question, regions
written ``Region [k]``), ``conversations`` (the last ``gpt`` turn is the gold answer, a sentence), ``bbox``
(one ``[x1, y1, x2, y2]`` pixel box per region) and ``qa_info`` (``type`` qualitative / quantitative,
``category``). The ``rle`` masks are not used (boxes are). Missing image files are one error listing them.

Which rows become samples (``--subset``, recorded in ``convert.json``):

* ``size`` (default; the paper's App. E.2 "quantitative object-size estimation subset", 266 samples): the
  ``width_data`` (133) and ``height_data`` (133) questions. Gold: the length the gold sentence states with
  its unit ("Region [0] is 30.05 inches in height.", feet, centimeters, meters), read by
  :func:`vrh.data.lengths.parse_length` and stored in meters (``answer_type`` ``length``; a gold
  sentence without a readable length is a counted skip). The question ends with :data:`LENGTH_SUFFIX`. An
  answer is scored as SpatialRGPT's evaluation scores it (its ``evaluate_spatial_with_gpt4.py``, where
  GPT-4 converts both sentences to meters): a success within 25% of the gold, ``0.75 * gold <= pred <=
  1.25 * gold``, with the relative error ``|pred - gold| / (gold + 1e-4)`` kept per record; vrh reads the
  answer's length with the same rule as the gold's instead of asking GPT-4. Every other row is counted
  apart (:class:`~vrh.data.sources.registry.NotInSubset`), not skipped.
* ``qualitative``: the yes/no and region-choice questions below, judged by rule (the benchmark's own judge
  for them is GPT-4); quantitative rows are counted apart.

The qualitative questions:

* ``*_predicate`` (``behind_predicate``, ``tall_predicate``, ...): a yes/no question. Gold (:func:`gold_yes_no`):
  the bench's template openings first -- "That is True." -> ``yes``; "That is False.", "In fact, ..." and
  "Actually, ..." -> ``no`` (the last two go on to contradict the question: "In fact, Region [0] may be
  shorter than Region [1]." answers "Is Region [0] taller ...?") -- else the first word: ``yes`` for yes /
  indeed / correct / true / right, ``no`` for no / not / incorrect / false / wrong (else a counted skip).
  The question ends with ``Answer with yes or no.``; judged ``exact``.
* ``*_choice`` (``left_choice``, ``tall_choice``, ...): "Which is ..., Region [0] or Region [1]?" becomes
  multiple choice over the regions the question names, in order (``(A) Region [0]``, ``(B) Region [1]``);
  gold: the first region the gold sentence names; judged ``choice``.

How the model is shown the regions (``--regions``, recorded in ``convert.json``):

* ``draw`` (default): region k's box is outlined on the image in ``REGION_COLOURS[k]`` (red, blue, ...;
  each sample gets its own PNG) and the question starts ``Region [0] is outlined in red and Region [1] in
  blue.``
* ``describe``: the image is left as it is and the question starts with each region's box as fractions
  of the image's width and height, ``Region [0] is the box from (0.12, 0.30) to (0.45, 0.80)``
  (top-left to bottom-right corner; fractions, because each VLM family writes pixel boxes in its own frame).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from vrh.data import json_text
from vrh.data.jsonl import Sample
from vrh.data.sources.choices import letters_for, options_block, with_suffix
from vrh.data.sources.images import REGION_COLOURS, check_box, decode, draw_regions
from vrh.data.sources.registry import NotInSubset, RowContext, SkipRow, Source, SourceOption, register_source
from vrh.data.lengths import parse_length

REGION_MODES = ("draw", "describe")
SUBSETS = ("size", "qualitative")
SIZE_CATEGORIES = ("width_data", "height_data")
YES_NO_SUFFIX = "Answer with yes or no."
LENGTH_SUFFIX = "Answer with a number and its unit of length."
YES = ("yes", "indeed", "correct", "true", "right")
NO = ("no", "not", "incorrect", "false", "wrong")
# openings of the bench's answer templates that a first word misreads, with their answer, read first
OPENINGS = (("that is true", "yes"), ("that is false", "no"), ("in fact", "no"), ("actually", "no"))
OFFICIAL_FILE = "SpatialRGPT-Bench_v1.json"
QUANTITATIVE = "quantitative question (not in the qualitative subset)"
NOT_SIZE = {"qualitative": "qualitative question (not in the size subset)",
            "quantitative": "distance or direction question (not in the size subset)"}
MAX_LISTED = 20
_REGION_RE = re.compile(r"Region \[(\d+)\]")
_WORD_RE = re.compile(r"[A-Za-z]+")


def _annotation_file(src: Path, split: str) -> Path:
    """The annotation file: ``src`` itself, or in the folder the official JSON, else the one
    ``<split>_*.jsonl``, ``*.jsonl`` or ``*.json``."""
    if src.is_file():
        return src
    if not src.is_dir():
        raise FileNotFoundError(f"no such file or folder: {src}")
    if (src / OFFICIAL_FILE).is_file():
        return src / OFFICIAL_FILE
    found = sorted(src.glob(f"{split}_*.jsonl")) or sorted(src.glob("*.jsonl")) or sorted(src.glob("*.json"))
    if len(found) != 1:
        raise ValueError(f"expected {OFFICIAL_FILE} (or one {split}_*.jsonl) in {src}, found "
                         f"{[p.name for p in found] or 'none'}; pass the annotation file")
    return found[0]


def _records(path: Path) -> list[Any]:
    """The file's records: one JSON list (the official file, compact or indented), else one per line
    (JSONL; a line that does not parse becomes a ``_malformed`` record, a counted skip)."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            records = json_text.loads(text, max_depth=None)  # too deep for the parser: JSONDecodeError too
        except json.JSONDecodeError as e:  # a list that does not parse is a broken file, not bad rows
            raise ValueError(f"{path} is not valid JSON ({json_text.problem(e, 'file')} at line {e.lineno}, "
                             f"column {e.colno})") from None
        if not isinstance(records, list):
            raise ValueError(f"{path} holds a {type(records).__name__}, not SpatialRGPT-Bench's list of records")
        return records
    out: list[Any] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(json_text.loads(line))
        except json.JSONDecodeError as e:
            out.append({"_malformed": f"invalid JSON ({json_text.problem(e)} at column {e.colno})"})
    return out


def read_rows(src: Path, split: str, options: dict[str, Any]):
    mode = options.get("regions", "draw")
    if mode not in REGION_MODES:
        raise ValueError(f"--regions must be one of {REGION_MODES}, got {mode!r}")
    if options.get("subset", "size") not in SUBSETS:
        raise ValueError(f"--subset must be one of {SUBSETS} for spatialrgpt, got {options.get('subset')!r}")
    path = _annotation_file(Path(src), split)
    rows = []
    for n, rec in enumerate(_records(path)):
        if not isinstance(rec, dict):
            rec = {"_malformed": f"expected a JSON object, got {type(rec).__name__}"}
        rows.append((str(rec.get("id", n)), rec))
    folder = Path(options.get("images") or path.parent).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} not found; pass --images DIR")
    wanted = {r["image_info"]["file_path"] for _, r in rows
              if isinstance(r.get("image_info"), dict) and isinstance(r["image_info"].get("file_path"), str)}
    missing = sorted(f for f in wanted if not (folder / f).is_file())
    if missing:
        listed = ", ".join(missing[:MAX_LISTED]) + (", ..." if len(missing) > MAX_LISTED else "")
        raise FileNotFoundError(f"{len(missing)} image file(s) named in {path} are not in {folder}: {listed}")
    for _, r in rows:
        r["_images"] = folder
    return iter(rows)


def gold_yes_no(answer: str) -> str:
    """``yes`` / ``no`` from the gold sentence: a template opening of :data:`OPENINGS`, else its first word.

    >>> gold_yes_no("Indeed, Region [0] is behind Region [1]."), gold_yes_no("No, it is not.")
    ('yes', 'no')
    >>> gold_yes_no("That is True."), gold_yes_no("In fact, Region [0] may be shorter than Region [1].")
    ('yes', 'no')
    """
    words = " ".join(_WORD_RE.findall(answer)).lower()
    for opening, value in OPENINGS:
        if words == opening or words.startswith(opening + " "):
            return value
    word = words.split(" ", 1)[0]
    if word in YES:
        return "yes"
    if word in NO:
        return "no"
    raise SkipRow(f"cannot read yes/no from the gold answer {answer!r}")


def region_preamble(regions: list[int], boxes: list, size: tuple[int, int], mode: str) -> str:
    """The sentence that tells the model which region is which.

    >>> region_preamble([0, 1], [(0, 0, 10, 10), (5, 5, 20, 10)], (20, 10), "draw")
    'Region [0] is outlined in red and Region [1] in blue.'
    >>> region_preamble([0], [(2, 1, 10, 5)], (20, 10), "describe")
    'Region [0] is the box from (0.10, 0.10) to (0.50, 0.50) (fractions of the image width and height).'
    """
    if mode == "draw":
        parts = [f"Region [{k}] is outlined in {REGION_COLOURS[k]}" if i == 0 else f"Region [{k}] in {REGION_COLOURS[k]}"
                 for i, k in enumerate(regions)]
        return (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + "."
    W, H = size
    parts = []
    for k in regions:
        x1, y1, x2, y2 = boxes[k]
        parts.append(f"Region [{k}] is the box from ({x1 / W:.2f}, {y1 / H:.2f}) to ({x2 / W:.2f}, {y2 / H:.2f})")
    return "; ".join(parts) + " (fractions of the image width and height)."


def _gold_text(row: dict[str, Any]) -> str:
    turns = row.get("conversations")
    if isinstance(turns, list):
        for turn in reversed(turns):
            if isinstance(turn, dict) and turn.get("from") == "gpt" and isinstance(turn.get("value"), str):
                return turn["value"]
    if isinstance(row.get("answer"), str):
        return row["answer"]
    raise SkipRow("no gold answer (no 'gpt' turn in conversations)")


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    if "_malformed" in row:
        raise SkipRow(row["_malformed"])
    info = row.get("qa_info") if isinstance(row.get("qa_info"), dict) else {}
    category = str(info.get("category") or "")
    if ctx.options.get("subset", "size") == "size":
        if category not in SIZE_CATEGORIES:
            raise NotInSubset(NOT_SIZE.get(info.get("type"), f"{category or 'uncategorised'} question (not in the "
                                                              "size subset)"))
        kind = "size"
    elif info.get("type") == "quantitative":
        raise NotInSubset(QUANTITATIVE)
    else:
        kind = "choice" if category.endswith("_choice") else "predicate" if category.endswith("_predicate") else None
        if kind is None:
            raise SkipRow(f"unknown category {category!r}: expected *_predicate or *_choice")
    question = row.get("text_q")
    if not isinstance(question, str) or not question.strip():
        raise SkipRow(f"empty question: {question!r}")
    regions = list(dict.fromkeys(int(k) for k in _REGION_RE.findall(question)))
    boxes = row.get("bbox")
    if not regions:
        raise SkipRow("the question names no region (Region [k])")
    if not isinstance(boxes, list) or max(regions) >= len(boxes):
        raise SkipRow(f"the question names Region [{max(regions)}] but bbox has "
                      f"{len(boxes) if isinstance(boxes, list) else 0} box(es)")
    gold = _gold_text(row)
    meters = parse_length(gold) if kind == "size" else None
    if kind == "size" and (meters is None or meters < 1e-6):  # stored to 6 decimals: a micrometre at least
        raise SkipRow(f"cannot read a positive length with its unit from the gold answer {gold!r}")
    image_info = row.get("image_info") if isinstance(row.get("image_info"), dict) else {}
    if not isinstance(image_info.get("file_path"), str):
        raise SkipRow("image_info.file_path is missing")
    data = ctx.images.read(row["_images"] / image_info["file_path"])
    _, size = decode(data)
    checked = []
    for b in boxes:
        if not isinstance(b, (list, tuple)) or len(b) != 4:
            raise SkipRow(f"bbox entries must be [x1, y1, x2, y2], got {b!r}")
        checked.append(check_box(tuple(b), size))
    mode = ctx.options.get("regions", "draw")
    if mode == "draw":  # region k in colour k; regions the question does not name are not drawn
        drawn = [checked[k] if k in regions else None for k in range(max(regions) + 1)]
        image_path, _ = ctx.images.put(draw_regions(data, drawn), f"{Path(image_info['file_path']).stem}_{key}")
    else:
        image_path, _ = ctx.images.put(data, image_info["file_path"])
    text = f"{region_preamble(regions, checked, size, mode)} {' '.join(question.split())}"
    if kind == "size":  # meters as digits, at most 6 decimals
        q, answer, answer_type = f"{text}\n{LENGTH_SUFFIX}", f"{meters:.6f}".rstrip("0").rstrip("."), "length"
    elif kind == "predicate":
        q, answer, answer_type = f"{text}\n{YES_NO_SUFFIX}", gold_yes_no(gold), "exact"
    else:
        named = _REGION_RE.search(gold)
        if named is None:
            raise SkipRow(f"the gold answer {gold!r} names no region")
        if int(named.group(1)) not in regions:
            raise SkipRow(f"the gold answer names Region [{named.group(1)}], which the question does not offer")
        answer = letters_for(len(regions))[regions.index(int(named.group(1)))]
        q, answer_type = with_suffix(options_block(text, [f"Region [{k}]" for k in regions])), "choice"
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa", question=q, answer=answer,
                   answer_type=answer_type, image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split, "category": category, "regions": mode,
                         "region_boxes": [list(checked[k]) for k in regions], "gold_text": gold})]


register_source(Source(
    name="spatialrgpt", summary="SpatialRGPT-Bench object sizes (width/height, 266; --subset qualitative: the "
                                "yes/no and region-choice questions) -> vqa, a length within 25% as SpatialRGPT scores "
                                "it; regions drawn (--regions draw) or described",
    layout="SpatialRGPT-Bench_v1.json, one JSON list (or a JSONL copy, val_SpatialRGPT-Bench.jsonl), with the "
           "images under --images DIR (default: the annotation file's folder), by image_info.file_path",
    task="vqa", splits=("val",), read_rows=read_rows, convert_row=convert_row, expected_rows={"val": 1406},
    options=(SourceOption("images", "local image folder, by image_info.file_path (default: the JSONL's folder)",
                          metavar="DIR"),
             SourceOption("regions", "draw the regions on the image (default) or describe their boxes in the text",
                          choices=("draw", "describe")),
             SourceOption("subset", "size (default: width/height questions, the paper's 266) or qualitative",
                          choices=SUBSETS))))
