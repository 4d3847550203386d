"""Pointing (RefSpatial-Bench's own metric): the model answers one or more points ``(x, y)``; a point is
correct when it falls on a non-zero pixel of the sample's mask image.

RefSpatial-Bench scores the *fraction of predicted points inside the mask*, averaged over samples; that
is this task's ``point_accuracy`` (a sample with no readable point scores 0). ``accuracy`` (the share of
``correct`` records) counts a sample correct only when every point it gave lies in the mask, so the two
agree whenever the model answers a single point, the benchmark's usual case.

Frame: the benchmark's answer suffix asks for coordinates "between 0 and 1", fractions of the image's
width and height; that is the default ``frame="norm"``. ``"norm1000"`` (0-1000 per side, the Qwen2-VL /
InternVL convention) and ``"pixel"`` (original-image pixels) serve prompts that ask otherwise. The point
is read from the text as the family wrote it -- unlike boxes, the frame is set by the benchmark's
instruction, not by the model family, so no adapter is involved in reading it back. Pixel ``i`` spans
``[i, i + 1)``: ``(x, y)`` hits ``mask[floor(y), floor(x)]``; a point off the image is a miss.

Samples are ``task: "point"`` lines (``question`` asked as it is, ``mask`` a path, see
:mod:`vrh.data.jsonl`), e.g. ``vrh data convert refspatial SRC --task point``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from vrh.data import Sample
from vrh.tasks.base import CORRECT, PARSE_FAILURE, Task, TaskAdapter, register_task
from vrh.tasks.vqa import VQATask

if TYPE_CHECKING:
    from vrh.runs import SampleRecord

OUTSIDE = "outside"  # read, but at least one point is off the mask
FRAMES = {"norm": 1.0, "norm1000": 1000.0, "pixel": None}  # frame -> value of a full side (None: pixels)

# A number is an atomic group and every run of blanks has one possessive owner, so the search stays linear
# in the (untrusted) answer text. "(x, y)" or "[x, y]" with exactly two numbers: a 4-number box is no point.
_NUM = r"(?>[-+]?(?:\d+(?:\.\d*)?|\.\d+))"
_POINT_RE = re.compile(rf"[\[(]\s*+({_NUM})\s*+,\s*+({_NUM})\s*+[\])]")


def parse_points(text: str) -> list[tuple[float, float]]:
    """Every ``(x, y)`` / ``[x, y]`` pair in the answer, in order, as written.

    >>> parse_points("[(0.25, 0.5), (0.3,0.6)]"), parse_points('{"point_2d": [120, 45]}')
    ([(0.25, 0.5), (0.3, 0.6)], [(120.0, 45.0)])
    >>> parse_points("[10, 20, 30, 40]"), parse_points("at (x, y)")
    ([], [])
    """
    if not isinstance(text, str):
        return []
    return [(float(x), float(y)) for x, y in _POINT_RE.findall(text)]


def to_pixels(point: tuple[float, float], frame: str, size: tuple[int, int]) -> tuple[float, float]:
    """A point in ``frame`` -> original-image pixels.

    >>> to_pixels((0.5, 0.25), "norm", (200, 100)), to_pixels((500, 250), "norm1000", (200, 100))
    ((100.0, 25.0), (100.0, 25.0))
    """
    side = FRAMES[frame]
    if side is None:
        return float(point[0]), float(point[1])
    W, H = size
    return point[0] * W / side, point[1] * H / side


def inside(mask, point: tuple[float, float]) -> bool:
    """Whether pixel point ``(x, y)`` lies on a non-zero pixel of ``mask`` (a boolean array ``[H, W]``)."""
    x, y = point
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    i, j = math.floor(y), math.floor(x)
    return 0 <= i < mask.shape[0] and 0 <= j < mask.shape[1] and bool(mask[i, j])


def load_mask(sample: Sample):
    """The sample's mask as a boolean array ``[H, W]`` (non-zero pixels), checked against the image size."""
    import numpy as np
    from PIL import Image

    path = sample.meta.get("mask")
    if not path:
        raise ValueError(f"point sample {sample.id!r} has no 'mask' (the image whose non-zero pixels are the target)")
    with Image.open(path) as im:
        mask = np.asarray(im.convert("L")) > 0  # [H, W]
    size = sample.read_image_size()
    if (mask.shape[1], mask.shape[0]) != tuple(size):
        raise ValueError(f"point sample {sample.id!r}: mask {path} is {mask.shape[1]}x{mask.shape[0]} but the image "
                         f"is {size[0]}x{size[1]}")
    return mask


@register_task
@dataclass(frozen=True)
class PointTask(Task):
    """Prompt: ``adapter.vqa_prompt(question)`` (the benchmark's instruction, asked as it is). Record: the
    shared keys plus ``question``, ``points`` (every point read, original pixels), ``n_inside``, ``score``
    (fraction inside the mask, 0 when none was read) and ``outcome`` (correct: every point inside /
    outside / parse_failure). Summary: the shared one plus ``point_accuracy`` (mean ``score``: the
    benchmark's metric)."""

    name: ClassVar[str] = "point"
    help: ClassVar[str] = "a point inside the mask"  # in --task's help
    outcomes: ClassVar[tuple[str, ...]] = (CORRECT, OUTSIDE, PARSE_FAILURE)

    frame: str = "norm"  # how the answer's coordinates are written, one of FRAMES

    def __post_init__(self):
        if self.frame not in FRAMES:
            raise ValueError(f"point option 'frame' must be one of {', '.join(FRAMES)}, got {self.frame!r}")

    prompt = VQATask.prompt  # the question, worded by the family as any VQA question (adapter.vqa_prompt)

    def judge(self, adapter: TaskAdapter, sample: Sample, text: str, meta: dict[str, Any] | None = None
              ) -> SampleRecord:
        rec = self.record(sample, text)
        mask = load_mask(sample)
        size = (mask.shape[1], mask.shape[0])
        points = [to_pixels(p, self.frame, size) for p in parse_points(text)]
        hits = sum(inside(mask, p) for p in points)
        if not points:
            outcome = PARSE_FAILURE
        else:
            outcome = CORRECT if hits == len(points) else OUTSIDE
        rec.update(question=sample.question, points=[list(p) for p in points], n_inside=hits,
                   score=hits / len(points) if points else 0.0, outcome=outcome)
        return rec

    def summarize(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        out = super().summarize(records)
        out["point_accuracy"] = sum(float(r["score"]) for r in records) / len(records) if records else 0.0
        return out
