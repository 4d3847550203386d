"""Retrieval Heads (Wu et al. 2024), its reference implementation and its adaptation to grounding.

What every prior-method file shares: a pure per-sample function ``rows [L, H, Q, S] -> [L, H]`` plus a
scorer with the :class:`vrh.scoring.base.Scorer` interface, registered under the method's name so detection
runs it next to the design-space variants on the same captured rows. Each method's options default to what
its authors' public code computes (the *reference* variant); every adaptation to vision is a named option,
and docs/baselines.md lists each deviation with its reason. The common adaptation: the "needle" / evidence
region is ``K``, the visual tokens overlapping the ground-truth box. Edge cases follow :mod:`vrh.scoring.functions`:
empty ``K`` or empty query set -> 0 for the sample, counted.

Reference: ``nightdessert/Retrieval_Head`` @ 3ac171a6, ``retrieval_head_detection.py``:

* L285-290: prefill the prompt minus its last token, then decode feeding that last token first, so the
  row read at each step is the one that *produces* the generated token (vrh's ``out`` query kind);
* L221-228 ``retrieval_calculate``: per head, the top-1 key of that row over ALL keys seen so far; a hit
  when it lies in the needle span AND the generated token equals the prompt token there (copy); each hit
  adds ``1 / (needle_end - needle_start)``, i.e. the score is hits / needle length;
* L293-300: a test's per-head scores are kept only when the answer's ROUGE-1 recall of the needle is
  > 50, and a head's score is the mean over kept tests (L230-233, ``np.mean``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vrh.scoring.registry import Option, register_scorer
from vrh.scoring.functions import Index, argmax_in_region, as_index, check_rows, take
from vrh.scoring.base import AccumulatingScorer, SampleInfo

NORMS = ("keys", "queries")


def retrieval_heads_sample(rows: torch.Tensor, keys: Index, out_queries: Index, norm: str = "keys") -> torch.Tensor:
    """Retrieval score of one sample: output tokens whose top-1 key (over ALL keys) lies in ``K``, divided
    by ``|K|`` (``norm="keys"``, the reference's needle length, L227) or by the number of output tokens
    (``norm="queries"``, Eq. 1's mean over Q). ``[L, H]``.

    The copy condition of L226 has no visual analogue (a generated coordinate token never equals an image
    token) and is dropped; the reference's ROUGE filter becomes answer correctness in the scorer. Ties:
    the lowest key position wins (``torch.topk`` leaves ties unspecified); an all-zero row never hits.
    With ``norm="keys"`` and no copy check a score can exceed 1 when there are more output tokens than
    box tokens (the reference bounds hits by the needle length through the copy check).

    >>> A = torch.tensor([[[[0.1, 0.6, 0.3], [0.7, 0.2, 0.1]]]])  # (1, 1, 2, 3): hit, miss
    >>> retrieval_heads_sample(A, keys=[1, 2], out_queries=[0, 1])  # 1 hit / |K| = 2
    tensor([[0.5000]])
    >>> retrieval_heads_sample(A, keys=[1], out_queries=[0, 1], norm="queries")  # 1 hit / 2 tokens
    tensor([[0.5000]])
    """
    check_rows(rows)
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    k = as_index(keys, rows.shape[-1])
    q = as_index(out_queries, rows.shape[2])
    denom = k.numel() if norm == "keys" else q.numel()
    if denom == 0 or q.numel() == 0:
        return torch.zeros(rows.shape[:2])  # (L, H); the reference's unfound needle (-1, -1) never hits
    hits = argmax_in_region(take(rows, 2, q), k, among=None)  # (L, H, |Q_out|)
    return (hits.double().sum(-1) / denom).float().cpu()  # (L, H)


@register_scorer("retrieval_heads", help="Retrieval Heads: answer tokens whose top-1 key lies in the box, per box "
                                         "token (reference) or per answer token, over correctly answered samples",
                 compare_order=1,
                 options=(Option("norm", str, "keys", "keys: hits / |K| (the reference's hits / needle length); "
                                                      "queries: hits / answer tokens (Eq. 1)", choices=NORMS),))
class RetrievalHeadsScorer(AccumulatingScorer):
    """Mean of :func:`retrieval_heads_sample` over the samples answered correctly (``info.correct``).

    Per-sample scores are stored for every sample; wrong answers are excluded from :meth:`result` (the
    reference drops tests whose ROUGE-1 recall is <= 50). ``correct=None`` raises (the filter is part of
    the method). No correct sample -> all-zero map.
    """

    name = "retrieval_heads"

    def __init__(self, *, norm: str = "keys", **kw):
        super().__init__(**kw)
        if norm not in NORMS:
            raise ValueError(f"retrieval_heads option 'norm' must be one of {', '.join(NORMS)}, got {norm!r}")
        self.norm = norm

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        if sample_info.correct is None:
            raise ValueError("retrieval_heads needs SampleInfo.correct (it averages over correct answers only)")
        q = sample_info.query("out")
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(retrieval_heads_sample(sample_rows, sample_info.key_positions, q, self.norm),
                  bool(sample_info.correct))
