"""The project's dataset format: JSON Lines, one sample per line, validated on load.

A grounding line::

    {"id": "rc-17", "image": "images/17.png", "task": "grounding",
     "expression": "the red mug left of the laptop", "box": [40, 52, 118, 130], "box_format": "xyxy"}

A VQA line::

    {"id": "vqa-3", "image": "/data/img/3.jpg", "task": "vqa", "question": "What color is the mug?",
     "answer": "red"}

A point line (RefSpatial-Bench's own metric): the question is asked as it is, and the answer is a point
judged inside the ``mask`` image (non-zero pixels; a path resolved like ``image``, kept in ``meta["mask"]``)::

    {"id": "rs-1", "image": "images/1.png", "task": "point", "question": "Point to ... (x, y).",
     "mask": "images/1_mask.png"}

A VQA line may say how its ``answer`` is judged with ``"answer_type"`` (default ``"exact"``): ``"exact"``
(normalised full-string match; the answer needs a letter or digit), ``"choice"`` (the answer is one option
letter ``A``-``Z``), ``"number"`` (a number in digits, e.g. ``3`` or ``-2.5``), ``"integer"`` (``12``),
``"float"`` (``1.45``, with the line's ``"precision"``: the decimal places the benchmark rounds to) or
``"length"`` (a positive length in meters, e.g. ``0.76``). ``"answer_rule"`` (optional, a name from
:func:`vrh.data.answer_rule_registry.answer_rule_names`) names the benchmark's own scoring rule, which the
VQA task applies by default. The rules
for reading a *prediction* live in :mod:`vrh.tasks.answer_rules`; this module only checks that the gold
answer fits its type, so a bad line fails at load time rather than mid-run.

``image`` is relative to the JSONL file's folder, or absolute. ``box_format`` is required wherever ``box``
is given: guessing it from the numbers is how datasets silently get corrupted. ``"xyxy"`` and ``"xywh"``
are original-image pixels; ``"xyxy_norm"`` and ``"xywh_norm"`` are fractions of the image's width and
height (0-1), and ``"xyxy_1000"`` is 0-1000 per side (the Qwen2-VL / InternVL convention); those three are
converted to pixels at load, from the image's size. A pixel box whose four numbers are all <= 1 on an
image of at least ``MIN_SIDE_FOR_NORM_CHECK`` px per side is refused as "looks normalised": read as
pixels it is a sub-pixel box, and every correct answer would score as mislocated. Any other field is kept
in :attr:`Sample.meta`.

Every error names the file and the 1-based line, e.g. ``data.jsonl:7: grounding sample needs 'box'``. A
line nested more than :data:`vrh.data.json_text.MAX_DEPTH` levels deep is invalid JSON here (real lines
nest 2-4 levels; Python's parser would crash on a deep enough one).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh.data import json_text
from vrh.data.answer_rule_registry import answer_rule_names
from vrh.data.boxes import Box, xywh_to_xyxy

TASKS = ("grounding", "vqa", "point")  # point: a question asked as it is, answered by a point inside `mask`
PIXEL_BOX_FORMATS = ("xyxy", "xywh")
SCALED_BOX_FORMATS = {"xyxy_norm": 1.0, "xywh_norm": 1.0, "xyxy_1000": 1000.0}  # format -> value of a full side
BOX_FORMATS = PIXEL_BOX_FORMATS + tuple(SCALED_BOX_FORMATS)
MIN_SIDE_FOR_NORM_CHECK = 16  # px; on smaller images a box within 0-1 px may be real
BOUNDS_TOLERANCE = 1.0  # pixels a GT box may stick out of the image (rounding in annotation tools)
# how a VQA answer is judged (vrh.tasks.answer_rules); a benchmark's own rule is named by the answer-rule registry
ANSWER_TYPES = ("exact", "choice", "number", "integer", "float", "length")
_BOX_ALIASES = ("bbox", "bbox_2d", "bounding_box", "boxes", "gt_box")  # other datasets' names for `box`: hinted
_VQA_ONLY = ("answer_type", "precision", "answer_rule")
_KNOWN = ("id", "image", "task", "expression", "box", "box_format", "question", "answer") + _VQA_ONLY
_DECIMAL = r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)"
# What a gold answer of each type must look like, and the rule in words for the error message.
_GOLD_FORMS = {
    "exact": (re.compile(r".*[^\W_].*", re.DOTALL), "contain a letter or digit"),
    "choice": (re.compile(r"[A-Z]"), "be one option letter A-Z"),
    "number": (re.compile(_DECIMAL), "be a number in digits, e.g. 3 or -2.5"),
    "integer": (re.compile(r"[-+]?\d+"), "be a whole number in digits, e.g. 12"),
    "float": (re.compile(_DECIMAL), "be a number in digits, e.g. 1.45"),
    "length": (re.compile(r"\+?(?=[\d.]*[1-9])(?:\d+(?:\.\d+)?|\.\d+)"), "be a positive length in meters, e.g. 0.76"),
}


class DatasetError(ValueError):
    """A dataset line failed validation; the message starts with ``file:line:``."""


def check_answer(answer: str, answer_type: str) -> None:
    """Raise ValueError unless ``answer`` is a valid gold answer of ``answer_type`` (surrounding blanks
    are ignored).

    >>> check_answer("B", "choice"), check_answer(" -2.5 ", "number")
    (None, None)
    >>> check_answer("two", "number")
    Traceback (most recent call last):
    ...
    ValueError: answer 'two' does not fit answer_type 'number': it must be a number in digits, e.g. 3 or -2.5
    """
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"unknown answer_type {answer_type!r}; expected one of {ANSWER_TYPES}")
    pattern, rule = _GOLD_FORMS[answer_type]
    if not isinstance(answer, str) or not pattern.fullmatch(answer.strip()):
        raise ValueError(f"answer {answer!r} does not fit answer_type {answer_type!r}: it must {rule}")


@dataclass(frozen=True)
class Sample:
    """One validated sample. ``box`` is always xyxy floats in original-image pixels.

    ``image_size`` is ``(width, height)`` read from the image header at load time
    (``check_images=True``), else ``None``; :meth:`read_image_size` works either way.
    """

    id: str
    image_path: Path  # absolute
    task: str  # "grounding" | "vqa"
    expression: str | None = None
    box: Box | None = None
    question: str | None = None
    answer: str | None = None
    image_size: tuple[int, int] | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False)  # hash=False keeps Sample hashable
    answer_type: str = "exact"  # VQA: how `answer` is judged, one of ANSWER_TYPES
    precision: int | None = None  # answer_type "float": the decimal places the benchmark rounds to
    answer_rule: str | None = None  # the benchmark's own scoring rule (answer_rule_names()); None: vrh's rule

    def __post_init__(self):
        if self.answer_type not in ANSWER_TYPES:
            raise ValueError(f"unknown answer_type {self.answer_type!r}; expected one of {ANSWER_TYPES}")
        if self.answer_rule is not None and self.answer_rule not in (rules := answer_rule_names()):
            raise ValueError(f"unknown answer_rule {self.answer_rule!r}; expected one of {rules}")
        float_type = self.answer_type == "float"
        if float_type != (self.precision is not None) or not (
                self.precision is None or (type(self.precision) is int and self.precision >= 0)):
            raise ValueError(f"'precision' (decimal places, an integer >= 0) goes with answer_type 'float' and "
                             f"only with it; got precision {self.precision!r} with answer_type {self.answer_type!r}")
        if self.task == "vqa" and self.answer is not None:
            check_answer(self.answer, self.answer_type)

    def read_image_size(self) -> tuple[int, int]:
        """``image_size`` if known, else read from the file header (no pixel decoding)."""
        return self.image_size or _image_size(self.image_path)

    def load_image(self):
        """The image as an RGB ``PIL.Image``."""
        from PIL import Image

        with Image.open(self.image_path) as im:
            return im.convert("RGB")


@dataclass
class LoadReport:
    """What :func:`load_dataset` did: how many samples it kept and which lines it skipped, and why."""

    path: Path
    n_loaded: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, reason)
    other_tasks: dict[str, int] = field(default_factory=dict)  # task -> valid lines passed over by ``task=``

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)


class Samples(list):
    """A ``list[Sample]`` that also carries the :class:`LoadReport` of the load that made it."""

    def __init__(self, items: Iterable[Sample] = (), report: LoadReport | None = None):
        super().__init__(items)
        self.report = report


def _image_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:  # lazy: reads the header only
        return int(im.width), int(im.height)


def _decoded_size(path: Path) -> tuple[int, int]:
    """The image's (width, height), after decoding all of its pixel data: a truncated or corrupt file
    whose header reads fine fails here, at load time, not mid-run. JPEGs decode at 1/8 scale
    (``draft``), which still reads the whole entropy-coded stream, at a fraction of the cost (3.4 ms for a
    640x480 noise JPEG, against 0.2 ms for the header alone); an image several lines share (RefCOCO's
    expressions) is decoded once per file version."""
    st = path.stat()
    return _decoded_size_of(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=65536)
def _decoded_size_of(path: str, mtime_ns: int, nbytes: int) -> tuple[int, int]:  # the version keys the cache
    from PIL import Image

    with Image.open(path) as im:
        size = int(im.width), int(im.height)
        if im.format == "JPEG":
            im.draft("RGB", (max(1, size[0] // 8), max(1, size[1] // 8)))
        im.load()
    return size


def _text(rec: dict, key: str, required: bool) -> str | None:
    value = rec.get(key)
    if value is None:
        if required:
            raise ValueError(f"{rec.get('task')} sample needs {key!r}")
        return None
    if not isinstance(value, str) or (required and not visible(value)):
        raise ValueError(f"{key!r} must be a non-empty string with visible characters, got {value!r}")
    return value


def visible(text: str) -> bool:
    """Whether ``text`` has a character a reader can see: not only blanks, zero-width characters, bidi
    controls or other format characters (Unicode categories Z*, Cc, Cf).

    >>> visible("the mug"), visible("\u200b\u200e \u2067\ufeff"), visible("")
    (True, False, False)
    """
    return any(not (c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zs", "Zl", "Zp")) for c in text)


def _box(rec: dict, size: tuple[int, int] | None) -> Box:
    """The line's box as xyxy pixels. ``size`` (width, height) is needed for the scaled formats and
    enables the "looks normalised" check; ``None`` only when images are not checked."""
    raw, fmt = rec["box"], rec.get("box_format")
    if fmt is None:
        raise ValueError(f"'box' needs an explicit 'box_format' (one of {BOX_FORMATS})")
    if fmt not in BOX_FORMATS:
        raise ValueError(f"unknown box_format {fmt!r}; expected one of {BOX_FORMATS}")
    if (not isinstance(raw, (list, tuple)) or len(raw) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw)):
        raise ValueError(f"'box' must be a list of 4 numbers, got {raw!r}")
    if not all(math.isfinite(v) for v in raw):
        raise ValueError(f"'box' has a non-finite value: {raw!r}")
    values = [float(v) for v in raw]
    if fmt in SCALED_BOX_FORMATS:
        if size is None:
            raise ValueError(f"box_format {fmt!r} needs the image's size to convert the box to pixels")
        sx, sy = size[0] / SCALED_BOX_FORMATS[fmt], size[1] / SCALED_BOX_FORMATS[fmt]
        values = [values[0] * sx, values[1] * sy, values[2] * sx, values[3] * sy]
    elif size is not None and _looks_normalised(values, size):
        W, H = size
        raise ValueError(f"box {list(raw)} ({fmt}) looks normalised (0-1), but {fmt!r} means pixels of the "
                         f"{W}x{H} image; convert it to pixels, or declare box_format "
                         f"\"{fmt}_norm\" to have it converted at load")
    box = xywh_to_xyxy(values) if fmt.startswith("xywh") else tuple(values)
    x1, y1, x2, y2 = box
    if x2 <= x1 or y2 <= y1:
        hint = ""
        if fmt.startswith("xyxy") and fmt != "xyxy_1000" and raw[2] > 0 and raw[3] > 0:  # valid as [x, y, w, h]
            hint = f"; if it is [x, y, width, height], declare box_format \"{fmt.replace('xyxy', 'xywh')}\""
        raise ValueError(f"box {list(raw)} ({fmt}) has non-positive area (as xyxy pixels: {list(box)}){hint}")
    return box  # type: ignore[return-value]


def _looks_normalised(values: Sequence[float], size: tuple[int, int]) -> bool:
    """All four numbers in [0, 1] on an image big enough that a real box would not be sub-pixel."""
    return all(0.0 <= v <= 1.0 for v in values) and min(size) >= MIN_SIDE_FOR_NORM_CHECK


def _check_bounds(box: Box, size: tuple[int, int], raw: Sequence[float] = (), fmt: str = "xyxy") -> Box:
    """Reject boxes more than BOUNDS_TOLERANCE outside the image; clip the rest onto it.

    ``raw``/``fmt`` (the line's numbers and format) only shape the message: a pixel box that overflows
    while all its numbers lie in 0-1000 was most likely written in the 0-1000 convention.
    """
    W, H = size
    x1, y1, x2, y2 = box
    tol = BOUNDS_TOLERANCE
    if x1 < -tol or y1 < -tol or x2 > W + tol or y2 > H + tol:
        hint = ""
        if fmt == "xyxy" and raw and all(0 <= v <= 1000 for v in raw) and min(W, H) < 1000:
            hint = ("; if it is in 0-1000 coordinates (Qwen2-VL / InternVL style), declare box_format "
                    "\"xyxy_1000\" to have it converted to pixels at load")
        raise ValueError(f"box {list(box)} lies outside the {W}x{H} image (tolerance {tol:g}px){hint}")
    return (max(x1, 0.0), max(y1, 0.0), min(x2, float(W)), min(y2, float(H)))


def _mask_path(rec: dict, folder: Path, check_images: bool) -> Path:
    """The line's ``mask`` image path, absolute (relative paths are to the JSONL's folder, as ``image``)."""
    value = rec.get("mask")
    if not isinstance(value, str) or not value:
        raise ValueError(f"'mask' must be a non-empty path string (a point sample needs one), got {value!r}")
    path = _absolute(value, folder)
    if check_images and not path.is_file():
        raise ValueError(f"mask file not found: {path}")
    return path


def _absolute(value: str, folder: Path) -> Path:
    """A line's path, absolute (relative paths are to the JSONL's folder); a symlink loop is a ValueError."""
    path = Path(value).expanduser()
    path = path if path.is_absolute() else folder / path
    try:
        return path.resolve()
    except (RuntimeError, OSError) as e:  # RuntimeError: Python < 3.13's "Symlink loop from ..."
        raise ValueError(f"cannot resolve {path}: {e}") from None


def _parse_line(rec: Any, folder: Path, check_images: bool) -> Sample:
    """Validate one decoded line; raises ValueError with a reason (the caller adds file:line)."""
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    missing = [k for k in ("id", "image", "task") if k not in rec]
    if missing:
        raise ValueError(f"missing field(s) {missing}")
    if not isinstance(rec["id"], str) or not rec["id"]:
        raise ValueError(f"'id' must be a non-empty string, got {rec['id']!r}")
    task = rec["task"]
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    if not isinstance(rec["image"], str) or not rec["image"]:
        raise ValueError(f"'image' must be a non-empty path string, got {rec['image']!r}")
    image_path = _absolute(rec["image"], folder)

    grounding = task == "grounding"
    expression = _text(rec, "expression", required=grounding)
    question = _text(rec, "question", required=not grounding)
    answer = _text(rec, "answer", required=task == "vqa")
    if rec.get("box_format") is not None and rec["box_format"] not in BOX_FORMATS:
        raise ValueError(f"unknown box_format {rec['box_format']!r}; expected one of {BOX_FORMATS}")
    if grounding and any(k in rec for k in _VQA_ONLY):
        raise ValueError(f"{next(k for k in _VQA_ONLY if k in rec)!r} applies to vqa samples only")
    if grounding and rec.get("box") is None:
        alias = next((k for k in _BOX_ALIASES if k in rec), None)
        raise ValueError("grounding sample needs 'box'" + (" (it is null)" if "box" in rec else "")
                         + (f"; this line has {alias!r}: vrh's field is 'box', with its 'box_format'" if alias else ""))
    has_box = rec.get("box") is not None

    size = None
    # scaled boxes need the image's size even when images are not otherwise checked
    if check_images or (has_box and rec.get("box_format") in SCALED_BOX_FORMATS):
        if not image_path.is_file():
            raise ValueError(f"image file not found: {image_path}")
        try:
            size = _decoded_size(image_path) if check_images else _image_size(image_path)
        except Exception as e:  # noqa: BLE001 - PIL raises many types for unreadable files
            raise ValueError(f"cannot read image {image_path}: {e}") from None
    box = _box(rec, size) if has_box else None
    if box is not None and size is not None:
        box = _check_bounds(box, size, rec["box"], rec["box_format"])
    if not check_images:
        size = None  # documented: image_size is known only when images are checked
    meta = {k: v for k, v in rec.items() if k not in _KNOWN}
    if task == "point" or "mask" in rec:  # a mask image (RefSpatial): resolved like `image`, kept in meta
        meta["mask"] = str(_mask_path(rec, folder, check_images))
    return Sample(id=rec["id"], image_path=image_path, task=task, expression=expression, box=box,
                  question=question, answer=answer, image_size=size, meta=meta,
                  answer_type=rec.get("answer_type", "exact"), precision=rec.get("precision"),
                  answer_rule=rec.get("answer_rule"))


def load_dataset(path: str | os.PathLike, *, limit: int | None = None, check_images: bool = True,
                 on_error: str = "raise", keep: Callable[[dict[str, Any]], bool] | None = None,
                 task: str | None = None) -> Samples:
    """Read and validate a JSONL dataset, one line at a time (never the whole file at once).

    ``on_error="raise"`` stops at the first bad line with a :class:`DatasetError` naming file and line;
    ``"skip"`` drops bad lines (including later duplicates of an id) and lists them in the result's
    ``.report`` (:class:`LoadReport`). ``limit`` stops reading after that many valid samples. ``keep``: only
    records it accepts (it sees the parsed JSON object) are loaded and count towards ``limit``; the rest are
    checked (images aside) and passed over: a selection by task or id that stops reading once it has
    ``limit`` samples. ``task``: only samples of that task (a file may mix grounding and VQA lines); the valid
    lines of other tasks are checked, passed over and counted in ``.report.other_tasks``.
    Blank lines are ignored. With ``check_images`` every image must exist; its size is read from the header
    and GT boxes must lie within it (up to 1px, then clipped onto it).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if task is not None and task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    path = Path(path)
    if not path.is_file():
        if path.is_symlink():
            raise FileNotFoundError(f"dataset file {path} is a symlink that leads nowhere (a loop, or a missing target)")
        raise FileNotFoundError(f"dataset file not found: {path}")
    report = LoadReport(path=path)
    samples = Samples(report=report)
    first_line: dict[str, int] = {}  # id -> line it was first seen on
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if limit is not None and len(samples) >= limit:
                break
            try:
                try:
                    line = raw.decode("utf-8")
                    if lineno == 1:
                        line = line.removeprefix("\ufeff")  # a BOM, as Windows tools write first: not the record's
                except UnicodeDecodeError as e:
                    raise ValueError(f"not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                                     "JSONL files must be UTF-8") from None
                if not line.strip():
                    continue
                try:  # without its line ending: an error at the end of the line is placed there, not on "line 2"
                    rec = json_text.loads(line.rstrip("\r\n"))  # nesting past json_text.MAX_DEPTH is invalid too
                except json.JSONDecodeError as e:
                    raise ValueError(f"invalid JSON at column {e.colno}: {json_text.problem(e)}") from None
                kept = keep is None or (isinstance(rec, dict) and keep(rec))
                other = task is not None and isinstance(rec, dict) and rec.get("task") != task
                kept = kept and not other
                # a line passed over is still checked, but not its image (opening images is the slow part)
                sample = _parse_line(rec, path.parent, check_images and kept)
                if sample.id in first_line:
                    raise ValueError(f"duplicate id {sample.id!r} (first on line {first_line[sample.id]})")
                if not kept:
                    first_line[sample.id] = lineno
                    if other:
                        report.other_tasks[sample.task] = report.other_tasks.get(sample.task, 0) + 1
                    continue
            except ValueError as e:
                if on_error == "raise":
                    raise DatasetError(f"{path}:{lineno}: {e}") from None
                report.skipped.append((lineno, str(e)))
                continue
            first_line[sample.id] = lineno
            samples.append(sample)
    report.n_loaded = len(samples)
    return samples


def _record(sample: Sample, folder: Path) -> dict[str, Any]:
    clash = sorted(set(sample.meta) & set(_KNOWN))
    if clash:
        raise ValueError(f"sample {sample.id!r}: meta keys {clash} would shadow dataset fields")
    image = Path(sample.image_path)
    try:  # relative when the image lives under the dataset's folder, so the pair can be moved together
        image_str = image.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        image_str = str(image.resolve())
    rec: dict[str, Any] = {"id": sample.id, "image": image_str, "task": sample.task}
    if sample.expression is not None:
        rec["expression"] = sample.expression
    if sample.box is not None:
        rec["box"] = [float(v) for v in sample.box]
        rec["box_format"] = "xyxy"
    if sample.question is not None:
        rec["question"] = sample.question
    if sample.answer is not None:
        rec["answer"] = sample.answer
    if sample.answer_type != "exact":  # the default stays implicit, so existing files round-trip byte for byte
        rec["answer_type"] = sample.answer_type
    rec.update({k: getattr(sample, k) for k in ("precision", "answer_rule") if getattr(sample, k) is not None})
    rec.update(sample.meta)
    return rec


def write_dataset(samples: Iterable[Sample], path: str | os.PathLike, *, root: str | os.PathLike | None = None
                  ) -> Path:
    """Write samples as JSONL (boxes as xyxy; images relative to ``path``'s folder when beneath it).

    Written to a temporary file and renamed, so a crash never leaves a half-written dataset (whose
    hash would then silently differ). ``root``: the folder vrh was given that ``path`` lies in (default: its
    own folder); neither name is followed if it is a symlink (:mod:`vrh.runs.safe_paths`).
    """
    from vrh.runs import safe_paths

    path = Path(path)
    if root is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(_record(s, path.parent), ensure_ascii=False) + "\n" for s in samples]
    safe_paths.write_atomic(path.parent if root is None else root, path, "".join(lines), mkdir=True)
    return path


def dataset_hash(path: str | os.PathLike) -> str:
    """sha256 (hex) of the JSONL file's bytes: identifies exactly which dataset a run used."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
