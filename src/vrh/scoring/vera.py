"""VERA (Pei et al. 2026), adapted to referring-expression grounding (paper Sec. 3.2, Tab. 2).
Shared conventions: :mod:`vrh.scoring.retrieval_heads`.

Reference: ``Prongcan/VERA`` @ 4cc7a5e2 (the code the paper links):

* ``vera/models/qwen.py`` L66-88 (``capture_attention``): a prefill of all input tokens but the last, then
  one probe step on the last input token with attentions on -- one query row, the last prompt token's
  (vrh's ``last_prompt`` query kind), saved as ``attn_first_token.json``;
* ``vera/analysis/full_analysis.py`` L290-306: the evidence patches are those whose pixels touch the
  evidence box (vrh's ``K``: the visual tokens overlapping the box), L318 the visual tokens' slice of the
  row;
* L328-330: a head's score is the attention on the evidence patches over the attention on all visual
  tokens **plus** ``1e-9`` (:data:`EPS`), so a row whose visual mass is tiny scores a little below the
  plain ratio (0.1238 instead of 0.125 at a visual mass of 1e-7) and a row with none scores 0;
* L482-519: the mean over samples, heads ranked by it (the top 5 kept; vrh ranks them all).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vrh.scoring.registry import Option, register_scorer
from vrh.scoring.functions import Index, as_index, check_rows, query_mean, region_sum, take
from vrh.scoring.base import AccumulatingScorer, SampleInfo

EPS = 1e-9  # the reference's denominator offset (full_analysis.py L329)


def vera_sample(rows: torch.Tensor, keys: Index, visual: Index, queries: Index) -> torch.Tensor:
    """Share of a query's *visual* attention that lands on the evidence region, averaged over queries.

    Original: visual-evidence-retrieval heads in long visual documents score the attention a query puts on
    the evidence patches relative to all image patches. Adaptation: evidence = ``K`` (intersected with
    ``V``, so the ratio lies in [0, 1)); query = the last prompt token by default (scorer option). The
    denominator is the visual mass + :data:`EPS`, as in the reference, so a row with no visual attention
    scores 0.

    >>> A = torch.tensor([[[[0.5, 0.3, 0.2], [1.0, 0.0, 0.0]]]])  # (1, 1, 2, 3)
    >>> vera_sample(A, keys=[1], visual=[1, 2], queries=[0, 1])  # (0.3/(0.5 + 1e-9) + 0)/2
    tensor([[0.3000]])
    """
    check_rows(rows)
    S = rows.shape[-1]
    v = as_index(visual, S)
    k = v[torch.isin(v, as_index(keys, S))]  # K intersect V
    sel = take(rows, 2, as_index(queries, rows.shape[2]))  # (L, H, |Q_s|, S)
    k_mass = region_sum(sel, k).double()  # (L, H, |Q_s|)
    v_mass = region_sum(sel, v).double()  # (L, H, |Q_s|)
    return query_mean(k_mass / (v_mass + EPS))  # (L, H, |Q_s|) -> (L, H)


@register_scorer("vera", compare_order=4, help="VERA: share of the query's visual attention that lands on the box",
                 options=(Option("query", str, "last_prompt", "query kind: last_prompt (the token that starts "
                                                              "generation), out, in or coord",
                                 choices=("last_prompt", "out", "in", "coord")),))
class VERAScorer(AccumulatingScorer):
    """Mean over samples of :func:`vera_sample`. ``query`` picks the query kind: ``"last_prompt"``
    (default, the token that starts generation) or ``"out"`` (paper Tab. 2 lists VERA under Q^out)."""

    name = "vera"

    def __init__(self, *, query: str = "last_prompt", **kw):
        super().__init__(**kw)
        self.query = query

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        q = sample_info.query(self.query)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(vera_sample(sample_rows, sample_info.key_positions, sample_info.visual_positions, q))
