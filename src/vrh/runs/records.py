"""The sample record: one line of ``samples.jsonl``, what a task's judge makes, the runner tags and appends,
and the report reads back.

A record is a plain JSON object (a dict at run time: records are written with ``json.dumps`` and read with
``json.loads`` unchanged), so its type is a :class:`typing.TypedDict`, not a class: naming the keys costs
nothing at run time and no record changes. ``total=False`` because which keys a record holds depends on its
task (grounding's ``iou``, VQA's ``answer``, ...), on whether the runner has tagged it yet (the condition
keys) and on the command (detection adds its token counts). Every key a record can hold is declared here;
a test checks the records of a real run hold only these, with values of these types.

Types are those of the JSON as read back: a float written as ``1.0`` stays a float, an integer box
coordinate read from a user's dataset is an ``int`` where ``float`` is declared (``int`` is acceptable where
``float`` is, as in PEP 484).
"""

from __future__ import annotations

from typing import TypedDict


class SampleRecord(TypedDict, total=False):
    """One line of ``samples.jsonl``. Shared keys (:meth:`vrh.tasks.base.Task.record`), then the condition
    tags (:meth:`vrh.experiments.conditions.Condition.tag`), then each task's own keys."""

    # --- every record (Task.record, plus the judge's outcome) ---
    id: str  # the sample's id in its dataset
    task: str  # the task that judged it ("grounding", "vqa", "point")
    image: str  # path of the sample's image
    pred_text: str  # the model's answer, as generated
    outcome: str  # the judge's verdict, one of the task's outcomes (the correct one: "correct")

    # --- the condition it was evaluated under (the runner's tag; absent from detection's records) ---
    condition: str  # the condition's label, unique within a run
    kind: str  # the condition's kind: "none", "top_k", "random" or "list"
    method: str | None  # top_k: the scorer that ranked the heads; random: the method whose top-k was avoided
    k: int  # number of heads masked
    seed: int | None  # random: the seed of the drawn head set
    mask_mode: str  # how the heads were masked ("zero", "uniform", ...)

    # --- grounding (vrh.tasks.grounding) ---
    expression: str  # the referring expression asked
    gt_box: list[float]  # ground-truth box, xyxy, original-image pixels
    pred_box: list[float] | None  # the box read from the answer, as scored; None: no valid box found
    iou: float  # IoU of pred_box with gt_box (0 when none was found)

    # --- VQA (vrh.tasks.vqa); point shares question ---
    question: str  # the question asked
    answer: str | None  # the reference answer
    answer_type: str  # how the answer is judged, one of vrh.data.jsonl.ANSWER_TYPES ("exact", "choice", ...)
    answer_rule: str  # the rule that scored it: a benchmark's name or "lenient"
    read: str | None  # what the rule read from the answer; None when nothing
    rel_error: float  # lengths only: relative error of the read length

    # --- point (vrh.tasks.point) ---
    points: list[list[float]]  # every point read, (x, y) in original-image pixels
    n_inside: int  # how many of them lie on the mask
    score: float  # fraction of points inside the mask (0 when none was read)

    # --- detection (vrh.experiments.detection_batch), on the samples it scored ---
    n_visual_tokens: int  # visual tokens of the sample's image
    n_key_tokens: int  # visual tokens inside the ground-truth box (the scorers' keys)
    scored_answer: str  # the answer text whose attention rows were scored
