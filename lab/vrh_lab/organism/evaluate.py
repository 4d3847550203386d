"""Held-out evaluation of an organism during training: greedy answers judged by vrh's grounding and VQA
rules, optionally with heads masked. Box parsing (the LLaVA adapter's), the IoU judge at the grounding task's
threshold (:func:`vrh.data.boxes.judge`, ``tau`` of :class:`vrh.tasks.grounding.GroundingTask`), VQA judging
(:func:`vrh.tasks.vqa.judge_answer`) and masking (:func:`vrh.core.masking.mask_heads`) are vrh's own, so
training-time numbers are measured as ``vrh evaluate`` measures them.

Why not vrh's runner itself: it evaluates a JSONL dataset of image files through a checkpoint's saved
processor; during training there is neither (samples are rendered in memory, tensors built by
:mod:`vrh_lab.organism.batches`), so this module generates answers itself and judges them with vrh's rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from vrh.core.masking import mask_heads
from vrh.data import boxes as grounding
from vrh.models.adapters import get_adapter
from vrh.tasks import get_task
from vrh.tasks.vqa import judge_answer
from vrh_lab.organism.batches import prompt_batch
from vrh_lab.organism.processor import ImageSpec


FAMILY = "llava"  # the organisms' adapter: its masking and its box parsing are what vrh evaluate uses on them
GROUNDING = get_task("grounding")  # vrh's grounding task with its defaults: correct when IoU >= tau (0.5)


def zero_heads(model, heads: Iterable[tuple[int, int]]):
    """Zero the given LM heads' o_proj input slices (the paper's masking intervention)."""
    return mask_heads(model, get_adapter(FAMILY), list(heads))


@torch.no_grad()
def generate_answers(model, tok, samples: list[dict[str, Any]], spec: ImageSpec,
                     batch_size: int = 128, max_new_tokens: int = 10) -> list[str]:
    model.eval()
    texts: list[str] = []
    for i in range(0, len(samples), batch_size):
        enc = prompt_batch(samples[i: i + batch_size], tok, spec)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        new = out[:, enc["input_ids"].shape[1]:]  # [B, T_new]
        texts += tok.batch_decode(new, skip_special_tokens=True)
    return texts


def judge_grounding(samples: list[dict[str, Any]], texts: list[str]) -> dict[str, Any]:
    """Accuracy and parse-failure rate of answers ``texts`` to grounding ``samples``, each judged as ``vrh
    evaluate`` judges it (:meth:`vrh.tasks.grounding.GroundingTask.judge`, which needs image files): the LLaVA
    adapter's box parsing, then :func:`vrh.data.boxes.judge` at the task's IoU threshold and clipping rule
    (:data:`GROUNDING`); plus the accuracy per expression kind."""
    adapter, outcomes = get_adapter(FAMILY), []
    by_kind: dict[str, list[int]] = {}  # kind -> [hits, n]
    for s, t in zip(samples, texts):
        size = (s["scene"].size, s["scene"].size)
        box = adapter.parse_box(t, {}, size)
        if box is not None and GROUNDING.clip:  # as GroundingTask.judge (off by default)
            box = grounding.clip_box(box, size)
        outcome, _ = grounding.judge(box, s["box"], GROUNDING.tau)
        outcomes.append(outcome)
        k = by_kind.setdefault(s.get("kind", "?"), [0, 0])
        k[0], k[1] = k[0] + (outcome == grounding.CORRECT), k[1] + 1
    summary = grounding.summarize(outcomes)
    return {"acc": summary["accuracy"], "parse_fail": summary[grounding.PARSE_FAILURE], "n": len(samples),
            "acc_by_kind": {k: round(h / m, 4) for k, (h, m) in sorted(by_kind.items())}}


def grounding_accuracy(model, tok, samples: list[dict[str, Any]], spec: ImageSpec,
                       heads: Iterable[tuple[int, int]] = ()) -> dict[str, Any]:
    """:func:`judge_grounding` of the model's greedy answers, optionally with heads zeroed."""
    with zero_heads(model, heads):
        texts = generate_answers(model, tok, samples, spec)
    return judge_grounding(samples, texts)


def vqa_accuracy(model, tok, samples: list[dict[str, Any]], spec: ImageSpec,
                 heads: Iterable[tuple[int, int]] = ()) -> float:
    """Accuracy under the VQA task's ``exact`` rule (normalised full-string match)."""
    with zero_heads(model, heads):
        texts = generate_answers(model, tok, samples, spec, max_new_tokens=3)
    hits = sum(judge_answer(t, s["answer"], "exact") == "correct" for s, t in zip(samples, texts))
    return hits / max(1, len(samples))
