"""VAW, Visual Attributes in the Wild (``adobe-research/vaw_dataset``), turned into multiple choice.

Layout: the release's ``data/`` folder with ``<split>.json`` (``val``, ``test``, ``train_part1``, ...) and
``attribute_types.json``; the Visual Genome images in ``--images DIR`` (default ``images/`` beside the
JSON; ``<image_id>.jpg`` there or in its ``VG_100K`` / ``VG_100K_2`` subfolders). Missing images are one
error listing them. Each JSON entry is one object instance: ``image_id``, ``instance_id``,
``instance_bbox`` ([x, y, w, h] pixels), ``object_name``, ``positive_attributes`` and
``negative_attributes`` (attributes annotators marked present / absent).

**The generator** (one question per instance, deterministic in ``--seed``, default 0, and the instance id,
so a ``--limit`` or a reordered file never changes a question):

1. Candidates: each (positive attribute, one of its types) with at least 3 *negative* attributes of that
   type (``attribute_types.json``: color, material, shape, ...; without that file every attribute is one
   type). An attribute keeps **every** type the file lists it under: 14 attributes are under 2-4 types
   ("short" is a height and a length, "thin" under four), so "short" can be asked as a height, with height
   distractors, or as a length, with length distractors. Distractors come only from the instance's
   negative labels (minus its positive ones, where an annotator marked both), so every wrong option was
   marked absent -- never merely unlabelled, and never another attribute true of the object.
2. With ``rng = random.Random(f"{seed}:{instance_id}")``: the (attribute, type) is ``rng.choice`` of the
   candidates (sorted by attribute, then in the file's type order), its 3 distractors ``rng.sample`` of
   that type's negatives (sorted), and the four options are shuffled by ``rng``, so the gold letter is
   uniform over A-D.
3. The question: ``What is the <type> of the <object> in the red box?`` (``Which attribute describes the
   <object> in the red box?`` when the type is unknown), the options as ``(A) ...`` lines and
   :data:`~vrh.data.sources.choices.CHOICE_SUFFIX`. The instance's box is **drawn in red on the image**
   (:func:`~vrh.data.sources.images.draw_regions`; Visual Genome scenes hold many objects of a kind), so
   each sample has its own PNG.

An instance with no candidate is a counted skip, by reason: no positive attribute, no negative attribute,
or fewer than 3 negatives of each of its positives' types (the usual one: VAW labels few negatives per
instance). ``convert`` reports the skip rate and these reasons.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from vrh.data.json_text import read_json
from vrh.data.jsonl import Sample
from vrh.data.sources.choices import letters_for, options_block, with_suffix
from vrh.data.sources.images import check_box, decode, draw_regions, xywh_box
from vrh.data.sources.registry import RowContext, SkipRow, Source, SourceOption, register_source

N_OPTIONS = 4
MAX_LISTED = 20
IMAGE_SUBFOLDERS = ("", "VG_100K", "VG_100K_2")


def _json_file(src: Path, split: str) -> Path:
    if src.is_file():
        return src
    if src.is_dir():
        path = src / f"{split}.json"
        if path.is_file():
            return path
        found = sorted(p.name for p in src.glob("*.json") if p.name != "attribute_types.json")
        raise ValueError(f"no {split}.json in {src} (JSON files there: {', '.join(found) or 'none'}); choose one "
                         "with --split or pass the JSON file")
    raise FileNotFoundError(f"no such file or folder: {src}")


def attribute_types(folder: Path) -> dict[str, tuple[str, ...]]:
    """attribute -> every type it is listed under (in the file's order), from ``attribute_types.json``
    (type -> attributes) in ``folder``; {} if absent."""
    path = folder / "attribute_types.json"
    if not path.is_file():
        return {}
    by_type = read_json(path)
    if not isinstance(by_type, dict) or not all(isinstance(v, list) for v in by_type.values()):
        raise ValueError(f"{path} is not VAW's attribute_types.json (an object: type -> list of attributes)")
    types: dict[str, tuple[str, ...]] = {}
    for t, attrs in by_type.items():
        for a in attrs:
            if t not in types.get(a, ()):
                types[a] = (*types.get(a, ()), t)
    return types


def _image_file(folder: Path, image_id: Any) -> Path | None:
    for sub in IMAGE_SUBFOLDERS:
        path = folder / sub / f"{image_id}.jpg"
        if path.is_file():
            return path
    return None


def read_rows(src: Path, split: str, options: dict[str, Any]):
    path = _json_file(Path(src), split)
    entries = read_json(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path} holds a {type(entries).__name__}, not VAW's list of instances")
    folder = Path(options.get("images") or path.parent / "images").expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} not found; put the Visual Genome images there or pass "
                                "--images DIR")
    files = {e.get("image_id"): _image_file(folder, e.get("image_id")) for e in entries if isinstance(e, dict)}
    missing = sorted(f"{i}.jpg" for i, f in files.items() if f is None)
    if missing:
        listed = ", ".join(missing[:MAX_LISTED]) + (", ..." if len(missing) > MAX_LISTED else "")
        raise FileNotFoundError(f"{len(missing)} image file(s) named in {path} are not in {folder} (or its "
                                f"VG_100K, VG_100K_2): {listed}")
    types = attribute_types(path.parent)
    rows = []
    for n, e in enumerate(entries):
        e = e if isinstance(e, dict) else {"_malformed": e}
        rows.append((str(e.get("instance_id", f"row{n}")), {**e, "_image_path": files.get(e.get("image_id")),
                                                     "_types": types}))
    return iter(rows)


def make_question(row: dict[str, Any], seed: int) -> tuple[str, list[str], int, str | None]:
    """(question text before the options, options, index of the correct one, attribute type) for one
    instance, by the generator in the module docstring; SkipRow when no attribute can be asked.

    >>> row = {"instance_id": "7", "object_name": "mug", "positive_attributes": ["red"],
    ...        "negative_attributes": ["blue", "green", "white", "wooden"],
    ...        "_types": {"red": ("color",), "blue": ("color",), "green": ("color",), "white": ("color",)}}
    >>> q, options, gold, kind = make_question(row, seed=0)
    >>> q, options[gold], sorted(options), kind
    ('What is the color of the mug in the red box?', 'red', ['blue', 'green', 'red', 'white'], 'color')
    """
    obj = row.get("object_name")
    pos, neg = row.get("positive_attributes"), row.get("negative_attributes")
    if not isinstance(obj, str) or not obj.strip():
        raise SkipRow(f"empty object_name: {obj!r}")
    if not isinstance(pos, list) or not isinstance(neg, list):
        raise SkipRow("positive_attributes and negative_attributes must be lists")
    types: dict[str, tuple[str, ...]] = row.get("_types") or {}

    def kinds(attribute: str) -> tuple[str | None, ...]:
        return types.get(attribute) or (None,)  # None: untyped (no types file, or not listed in it)

    positives = {a for a in pos if isinstance(a, str) and a.strip()}
    negatives = sorted({a for a in neg if isinstance(a, str) and a.strip()} - positives)
    if not positives:
        raise SkipRow("no positive attribute to ask about")
    if not negatives:
        raise SkipRow("no negative attribute to draw distractors from")
    same_type = {(a, t): [n for n in negatives if t in kinds(n)] for a in sorted(positives) for t in kinds(a)}
    candidates = [k for k, ns in same_type.items() if len(ns) >= N_OPTIONS - 1]
    if not candidates:
        raise SkipRow(f"no positive attribute has enough negative attributes of one of its types for "
                      f"{N_OPTIONS - 1} distractors ({len(positives)} positive, {len(negatives)} negative)")
    rng = random.Random(f"{seed}:{row.get('instance_id')}")
    correct, kind = rng.choice(candidates)
    options = [correct, *rng.sample(same_type[correct, kind], N_OPTIONS - 1)]
    rng.shuffle(options)
    obj = " ".join(obj.split())
    text = (f"What is the {kind} of the {obj} in the red box?" if kind
            else f"Which attribute describes the {obj} in the red box?")
    return text, options, options.index(correct), kind


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    if "_malformed" in row:
        raise SkipRow(f"entry is not a JSON object: {row['_malformed']!r}")
    text, options, gold, kind = make_question(row, int(ctx.options.get("seed") or 0))
    box = xywh_box(row.get("instance_bbox"))
    data = ctx.images.read(row["_image_path"])
    _, size = decode(data)
    box = check_box(box, size)
    image_path, _ = ctx.images.put(draw_regions(data, [box]), f"{row.get('image_id')}_{key}")
    return [Sample(id=ctx.sample_id(key), image_path=image_path, task="vqa",
                   question=with_suffix(options_block(text, options)), answer=letters_for(N_OPTIONS)[gold],
                   answer_type="choice", image_size=size,
                   meta={"benchmark": ctx.source, "split": ctx.split, "choices": options, "attribute": options[gold],
                         "category": kind, "object": row.get("object_name"), "image_id": row.get("image_id"),
                         "region_box": list(box)})]


register_source(Source(
    name="vaw", summary="VAW attributes -> seeded 4-way multiple choice (distractors from negative labels), vqa "
                        "choice",
    layout="<split>.json (or the JSON file) with attribute_types.json beside it; Visual Genome images "
           "<image_id>.jpg in --images DIR (default images/ beside the JSON)",
    task="vqa", splits=("val", "test", "train_part1", "train_part2"), read_rows=read_rows, convert_row=convert_row,
    options=(SourceOption("images", "Visual Genome's <image_id>.jpg folder", metavar="DIR"),
             SourceOption("seed", "seed of the multiple-choice generator (default: 0)", type=int))))
