"""OCR Heads (Baek et al. 2025), adapted to referring-expression grounding (paper Sec. 3.2, Tab. 2).
Shared conventions: :mod:`vrh.scorers.retrieval_heads`."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vrh.scorers.registry import Option, register_scorer
from vrh.scoring import (
    AccumulatingScorer,
    Index,
    SampleInfo,
    _check_rows,
    _take,
    argmax_in_region,
    as_index,
    query_mean,
)


def ocr_heads_sample(rows: torch.Tensor, keys: Index, visual: Index, out_queries: Index,
                     weight: float = 1.0) -> torch.Tensor:
    """Weighted fraction of output tokens whose top-1 *visual* key lies in the box; ``[L, H]``.

    Original: the retrieval score of Retrieval Heads on images of text -- an output token counts when the
    head's most-attended image token lies in the region of the text being read and the token is correct.
    Adaptation: the argmax competes among visual tokens only (``among=V``: the method reads the image, not
    the prompt), ``K`` is the box region, and token correctness becomes a per-sample weight (see scorer).

    >>> A = torch.tensor([[[[0.5, 0.3, 0.2], [0.5, 0.1, 0.4]]]])  # (1, 1, 2, 3); key 0 is text
    >>> ocr_heads_sample(A, keys=[1], visual=[1, 2], out_queries=[0, 1], weight=0.5)  # hits 1, 0
    tensor([[0.2500]])
    """
    _check_rows(rows)
    q = as_index(out_queries, rows.shape[2])
    hit = argmax_in_region(_take(rows, 2, q), keys, among=visual)  # (L, H, |Q_out|)
    return query_mean(hit) * float(weight)


@register_scorer("ocr_heads", help="OCR Heads: top-1 visual key of the answer tokens in the box, weighted by "
                                   "answer correctness, averaged over all samples",
                 options=(Option("weight", str, "correct", "per-sample weight: correct (0/1 at IoU >= 0.5) or "
                                                           "iou (the predicted box's IoU)",
                                 choices=("correct", "iou")),))
class OCRHeadsScorer(AccumulatingScorer):
    """Mean over ALL samples of :func:`ocr_heads_sample` with weight = answer correctness.

    ``weight="correct"`` (default): 1 for a correct answer (IoU >= 0.5), 0 otherwise -- the closest analogue
    of the original's binary "the generated token is right" condition. ``weight="iou"``: the graded IoU of
    the predicted box (missing IoU raises). Stored per-sample scores are the weighted ones.
    """

    name = "ocr_heads"

    def __init__(self, *, weight: str = "correct", **kw):
        super().__init__(**kw)
        if weight not in ("correct", "iou"):
            raise ValueError(f"weight must be 'correct' or 'iou', got {weight!r}")
        self.weight = weight

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        value = sample_info.correct if self.weight == "correct" else sample_info.iou
        if value is None:
            raise ValueError(f"ocr_heads (weight={self.weight!r}) needs SampleInfo.{self.weight}")
        q = sample_info.query("out")
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(ocr_heads_sample(sample_rows, sample_info.key_positions, sample_info.visual_positions, q,
                                   float(value)))
