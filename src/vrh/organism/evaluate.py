"""Held-out evaluation of an organism during training: greedy answers, IoU >= 0.5, optionally with heads
masked. Parsing, IoU, VQA judging and masking are vrh's own (:mod:`vrh.data.boxes`,
:func:`vrh.tasks.judge_answer`, :func:`vrh.core.masking.mask_heads`), so training-time numbers are measured
exactly as ``vrh evaluate`` measures them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from vrh.data import boxes as grounding
from vrh.models.adapters import get_adapter
from vrh.core.masking import mask_heads
from vrh.organism.batches import prompt_batch
from vrh.organism.processor import ImageSpec
from vrh.tasks.vqa import judge_answer


def zero_heads(model, heads: Iterable[tuple[int, int]]):
    """Zero the given LM heads' o_proj input slices (the paper's masking intervention)."""
    return mask_heads(model, get_adapter("llava"), list(heads))


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


def grounding_accuracy(model, tok, samples: list[dict[str, Any]], spec: ImageSpec,
                       heads: Iterable[tuple[int, int]] = ()) -> dict[str, float]:
    """Accuracy (IoU >= 0.5) and parse-failure rate on grounding samples, optionally with heads zeroed."""
    with zero_heads(model, heads):
        texts = generate_answers(model, tok, samples, spec)
    hits = fails = 0
    by_kind: dict[str, list[int]] = {}  # kind -> [hits, n]
    for s, t in zip(samples, texts):
        found = grounding.parse_box(t)
        ok = found is not None and grounding.iou(found[1], s["box"]) >= 0.5
        fails += found is None
        hits += ok
        k = by_kind.setdefault(s.get("kind", "?"), [0, 0])
        k[0], k[1] = k[0] + ok, k[1] + 1
    n = max(1, len(samples))
    return {"acc": hits / n, "parse_fail": fails / n, "n": len(samples),
            "acc_by_kind": {k: round(h / m, 4) for k, (h, m) in sorted(by_kind.items())}}


def vqa_accuracy(model, tok, samples: list[dict[str, Any]], spec: ImageSpec,
                 heads: Iterable[tuple[int, int]] = ()) -> float:
    """Accuracy under the VQA task's ``exact`` rule (normalised full-string match)."""
    with zero_heads(model, heads):
        texts = generate_answers(model, tok, samples, spec, max_new_tokens=3)
    hits = sum(judge_answer(t, s["answer"], "exact") == "correct" for s, t in zip(samples, texts))
    return hits / max(1, len(samples))
