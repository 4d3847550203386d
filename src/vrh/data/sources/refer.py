"""RefCOCO, RefCOCO+ and RefCOCOg from the original refer release (``lichengunc/refer``): the
annotations folder (``refs(<splitBy>).p`` or ``.json`` plus ``instances.json``) and a COCO image folder.

Layout, e.g. ``data/refcoco/``: ``instances.json`` (COCO ``images`` and ``annotations``: the object's
``bbox`` [x, y, w, h] in pixels) and one ``refs(unc).p`` (RefCOCO, RefCOCO+), ``refs(umd).p`` or
``refs(google).p`` (RefCOCOg): a list of refs, each ``ref_id``, ``ann_id``, ``image_id``, ``split``
(train / val / testA / testB / test) and ``sentences`` (``sent``, ``raw``). The images are COCO
train2014 files named by ``instances.json`` (``COCO_train2014_000000581857.jpg``), looked up in
``--images DIR`` (default ``images/`` beside ``instances.json``); missing files are one error listing them.

**Pickles are never opened unless ``--allow-pickle`` is given**: unpickling runs whatever code the file's
author put in it, so a ``.p`` from an untrusted copy could execute commands on this machine. A ``refs(...)
.json`` with the same list is read without the flag (convert the pickle once where you trust it). With
several refs files, ``--refs NAME`` picks one.

One sample per ref, expression = the first sentence's ``sent`` (its tokenised, lower-cased form, as the
refer loaders use; ``raw`` when ``sent`` is empty), the box from the ref's annotation; ``--all-expressions``
gives one sample per sentence (ids get ``:<index>``). Ids: ``<source>-<split>-<ref_id>``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vrh.data.json_text import read_json
from vrh.data.jsonl import Sample
from vrh.data.sources.images import check_box, xywh_box
from vrh.data.sources.refcoco import ALL_EXPRESSIONS
from vrh.data.sources.registry import RowContext, SkipRow, Source, SourceOption, register_source

MAX_LISTED = 20  # missing image files named in the error
_REFS_RE = re.compile(r"refs\((\w+)\)\.(p|json)$")


def refs_file(folder: Path, name: str | None) -> Path:
    """The refs file to read: ``name`` (a file name in ``folder``), else the only ``refs(*)`` file there
    (a ``.json`` preferred to a ``.p`` of the same splitBy)."""
    if name:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"--refs {name}: no such file in {folder}")
        return path
    found = sorted(p for p in folder.iterdir() if _REFS_RE.fullmatch(p.name))
    by_split: dict[str, Path] = {}
    for p in found:  # sorted: "refs(unc).json" < "refs(unc).p", so the JSON wins
        by_split.setdefault(_REFS_RE.fullmatch(p.name).group(1), p)
    if not by_split:
        raise FileNotFoundError(f"no refs(<splitBy>).p or .json in {folder} (the refer annotations folder, "
                                "e.g. data/refcoco/)")
    if len(by_split) > 1:
        raise ValueError(f"{folder} holds refs for several splitBy ({', '.join(p.name for p in by_split.values())});"
                         " choose one with --refs NAME")
    return next(iter(by_split.values()))


def load_refs(path: Path, allow_pickle: bool) -> list[dict[str, Any]]:
    """The refs list of a ``.json`` file, or of a ``.p`` pickle only when ``allow_pickle``."""
    if path.suffix == ".json":
        refs = read_json(path)
    elif not allow_pickle:
        raise ValueError(f"refusing to unpickle {path}: loading a pickle runs code chosen by whoever wrote the "
                         "file, so an untrusted copy could execute commands on this machine. Pass --allow-pickle "
                         "if you trust it (e.g. you downloaded it from the refer authors yourself), or save its "
                         f"list as {path.with_suffix('.json').name} beside it, which is read without the flag")
    else:
        import pickle

        with open(path, "rb") as f:
            refs = pickle.load(f, encoding="latin1")  # the release was pickled by Python 2
    if not isinstance(refs, list):
        raise ValueError(f"{path} holds a {type(refs).__name__}, not the list of refs the refer release has")
    return refs


def read_rows(src: Path, split: str, options: dict[str, Any]):
    folder = Path(src)
    if not folder.is_dir():
        raise FileNotFoundError(f"{src} is not the refer annotations folder (e.g. data/refcoco/ with "
                                "instances.json and refs(unc).p)")
    instances = folder / "instances.json"
    if not instances.is_file():
        raise FileNotFoundError(f"no instances.json in {folder}: the refer release keeps the COCO boxes there")
    refs = [r for r in load_refs(refs_file(folder, options.get("refs")), bool(options.get("allow_pickle")))
            if isinstance(r, dict) and r.get("split") == split]
    if not refs:
        raise ValueError(f"no refs of split {split!r} in {folder} (choose one with --split)")
    coco = read_json(instances)
    images = {im["id"]: im for im in coco.get("images", [])}
    anns = {a["id"]: a for a in coco.get("annotations", [])}
    image_dir = Path(options.get("images") or folder / "images").expanduser()
    if not image_dir.is_dir():
        raise FileNotFoundError(f"COCO image folder {image_dir} not found; pass --images DIR (the train2014 folder)")
    names = {images[r["image_id"]]["file_name"] for r in refs if r.get("image_id") in images}
    missing = sorted(n for n in names if not (image_dir / n).is_file())
    if missing:
        listed = ", ".join(missing[:MAX_LISTED]) + (", ..." if len(missing) > MAX_LISTED else "")
        raise FileNotFoundError(f"{len(missing)} COCO image file(s) of split {split!r} are not in {image_dir}: {listed}")
    rows = []
    for r in refs:
        image = images.get(r.get("image_id"))
        rows.append((str(r.get("ref_id")), {**r, "_ann": anns.get(r.get("ann_id")),
                                            "_image_path": image_dir / image["file_name"] if image else None}))
    return iter(rows)


def sentences(ref: dict[str, Any], all_expressions: bool) -> list[tuple[int, str]]:
    """(index, expression) pairs of a ref that become samples; SkipRow on an empty one.

    >>> sentences({"sentences": [{"sent": "man  left", "raw": "Man left!"}, {"sent": "", "raw": "guy"}]}, True)
    [(0, 'man left'), (1, 'guy')]
    """
    sents = ref.get("sentences")
    if not isinstance(sents, list) or not sents:
        raise SkipRow(f"empty expression: sentences is {sents!r}")
    chosen = list(enumerate(sents)) if all_expressions else [(0, sents[0])]
    out = []
    for i, s in chosen:
        text = (s.get("sent") or s.get("raw")) if isinstance(s, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise SkipRow(f"empty expression: sentences[{i}] is {s!r}")
        out.append((i, " ".join(text.split())))
    return out


def convert_row(key: str, row: dict[str, Any], ctx: RowContext) -> list[Sample]:
    all_expr = bool(ctx.options.get("all_expressions"))
    chosen = sentences(row, all_expr)
    if row["_ann"] is None:
        raise SkipRow(f"ann_id {row.get('ann_id')!r} is not in instances.json")
    if row["_image_path"] is None:
        raise SkipRow(f"image_id {row.get('image_id')!r} is not in instances.json")
    box = xywh_box(row["_ann"].get("bbox"))
    image_path, size = ctx.images.put_file(row["_image_path"])
    box = check_box(box, size)
    meta = {"benchmark": ctx.source, "split": ctx.split, "ref_id": row.get("ref_id"), "ann_id": row.get("ann_id"),
            "file_name": row["_image_path"].name,
            "expressions": [" ".join(str(s.get("sent") or s.get("raw") or "").split()) for s in row["sentences"]
                            if isinstance(s, dict)]}
    return [Sample(id=ctx.sample_id(key, f":{i}" if all_expr else ""), image_path=image_path, task="grounding",
                   expression=text, box=box, image_size=size, meta={**meta, "expression_index": i})
            for i, text in chosen]


_SPLITS = {"refcoco": ("val", "testA", "testB", "train"), "refcoco+": ("val", "testA", "testB", "train"),
           "refcocog": ("val", "test", "train")}

for _name, _splits in _SPLITS.items():
    register_source(Source(
        name=f"{_name}-refer", summary=f"{_name} from the original refer release (refs + instances.json + COCO "
                                       "images) -> grounding (IoU >= 0.5)",
        layout="the refer annotations folder (instances.json, refs(<splitBy>).p or .json) and the COCO train2014 "
               "images (--images DIR); a .p pickle is read only with --allow-pickle",
        task="grounding", splits=_splits, read_rows=read_rows, convert_row=convert_row,
        options=(ALL_EXPRESSIONS, SourceOption("images", "COCO train2014", metavar="DIR"),
                 SourceOption("allow_pickle", "read a refs(...).p pickle (unpickling runs code the file's author "
                                              "chose; only for a copy you trust)", type=bool),
                 SourceOption("refs", "the refs file to read when the folder holds several, e.g. 'refs(umd).p'",
                              metavar="NAME"))))
