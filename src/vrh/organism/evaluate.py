"""Held-out evaluation of an organism: greedy answers, box parsing, IoU >= 0.5, and head zeroing.

``parse_box``/``iou`` come from :mod:`vrh.grounding` once it exists; the local fallbacks below only
read the bracket-list format this organism writes.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from vrh.organism.batches import prompt_batch
from vrh.organism.model import lm_o_projs
from vrh.organism.processor import ImageSpec

try:  # the project's grounding helpers, when they have landed
    from vrh.grounding import iou as _iou
    from vrh.grounding import parse_box as _parse_box
except ImportError:  # pragma: no cover - depends on the tree's state
    _iou = _parse_box = None

_BRACKET = re.compile(r"\[\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,"
                      r"\s*(-?\d+(?:\.\d+)?)\s*\]")


def parse_box(text: str) -> tuple[float, float, float, float] | None:
    if _parse_box is not None:
        try:
            box = _parse_box(text)
            return None if box is None else tuple(float(v) for v in box)[:4]
        except Exception:  # noqa: BLE001 - the shared parser's signature may differ; fall back
            pass
    m = _BRACKET.search(text)
    if not m:
        return None
    x1, y1, x2, y2 = (float(v) for v in m.groups())
    return (x1, y1, x2, y2) if x2 > x1 and y2 > y1 else None


def iou(a, b) -> float:
    if _iou is not None:
        try:
            return float(_iou(a, b))
        except Exception:  # noqa: BLE001
            pass
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@contextlib.contextmanager
def zero_heads(model: nn.Module, heads: Iterable[tuple[int, int]]) -> Iterator[None]:
    """Zero the given LM heads' slices of each o_proj input (the paper's masking intervention)."""
    heads = list(heads)
    cfg = model.config.text_config
    H, D = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)
    handles = []
    for l, hs in by_layer.items():
        keep = torch.ones(H)
        keep[hs] = 0.0

        def pre_hook(_mod, args, keep=keep):
            x = args[0]
            x = (x.view(*x.shape[:-1], H, D) * keep.to(x)[:, None]).view(x.shape)  # [..., H*D]
            return (x,) + args[1:]

        handles.append(lm_o_projs(model)[l].register_forward_pre_hook(pre_hook))
    try:
        yield
    finally:
        for hd in handles:
            hd.remove()


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
    for s, t in zip(samples, texts):
        box = parse_box(t)
        if box is None:
            fails += 1
        elif iou(box, s["box"]) >= 0.5:
            hits += 1
    n = max(1, len(samples))
    return {"acc": hits / n, "parse_fail": fails / n, "n": len(samples)}


def vqa_accuracy(model, tok, samples: list[dict[str, Any]], spec: ImageSpec,
                 heads: Iterable[tuple[int, int]] = ()) -> float:
    with zero_heads(model, heads):
        texts = generate_answers(model, tok, samples, spec, max_new_tokens=3)
    return sum(t.strip() == s["answer"] for s, t in zip(samples, texts)) / max(1, len(samples))
