"""Grounding (referring expressions): the model answers a box; correct when IoU with the GT >= ``tau``.

Parsing the box is the adapter's job (each family writes boxes in its own frame and format, see
:mod:`vrh.data.boxes`); this task only asks for the prompt, reads the box back in original-image pixels
and scores it with :func:`vrh.data.boxes.judge`.

Scoring protocol: as lmms-eval's RefCOCO evaluation (``refcoco_bbox_rec``) computes IoU and Acc@0.5 by
default, the predicted box is scored **as written, not clipped to the image**: a box that overflows the
image keeps its whole area in the union, so its IoU is lower than the clipped box's would be. ``clip=True``
(``--clip-boxes``) clips it first; the setting is recorded in the run's ``config.json`` (``task.clip``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from vrh.data import boxes as grounding
from vrh.data import Sample
from vrh.tasks.base import Task, TaskAdapter, register_task

if TYPE_CHECKING:
    from vrh.runs import SampleRecord


@register_task
@dataclass(frozen=True)
class GroundingTask(Task):
    """Prompt: ``adapter.grounding_prompt(expression)``. Record: the shared keys plus ``expression``,
    ``gt_box``, ``pred_box`` (original pixels as scored -- clipped only with ``clip`` --, or ``None`` when no
    valid box was found), ``iou`` and ``outcome`` (correct / mislocated / parse_failure). Summary: the shared
    one plus ``mean_iou`` (unparsed answers count as IoU 0, so it does not flatter a model that often fails
    to answer)."""

    name: ClassVar[str] = "grounding"
    help: ClassVar[str] = "IoU >= --tau"  # in --task's help
    outcomes: ClassVar[tuple[str, ...]] = grounding.Outcome.ALL  # correct, mislocated, parse_failure

    tau: float = 0.5  # IoU threshold for "correct" (paper: 0.5), inclusive
    clip: bool = False  # clip the predicted box to the image before IoU (lmms-eval: no)

    def __post_init__(self):
        if (isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or not math.isfinite(self.tau)
                or not 0.0 < self.tau <= 1.0):
            raise ValueError(f"grounding option 'tau' (IoU threshold) must be a number in (0, 1], got {self.tau!r}")
        if not isinstance(self.clip, bool):
            raise ValueError(f"grounding option 'clip' must be True or False, got {self.clip!r}")
        object.__setattr__(self, "tau", float(self.tau))  # 1 and 1.0 are one setting; config.json agrees

    def prompt(self, adapter: TaskAdapter, sample: Sample) -> str:
        self.check_sample(sample)
        return adapter.grounding_prompt(sample.expression)

    def judge(self, adapter: TaskAdapter, sample: Sample, text: str, meta: dict[str, Any] | None = None
              ) -> SampleRecord:
        rec = self.record(sample, text)
        size = sample.read_image_size()
        box = adapter.parse_box(text, meta or {}, size)
        if box is not None and self.clip:
            box = grounding.clip_box(box, size)
        outcome, iou = grounding.judge(box, sample.box, self.tau)
        rec.update(expression=sample.expression, gt_box=list(sample.box),
                   pred_box=list(box) if box is not None else None, iou=iou, outcome=outcome)
        return rec

    def summarize(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        out = super().summarize(records)
        out["mean_iou"] = sum(float(r["iou"]) for r in records) / len(records) if records else None
        return out
