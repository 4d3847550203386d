"""Retrieval Heads (Wu et al. 2024), adapted to referring-expression grounding (paper Sec. 3.2, Tab. 2).

What every prior-method file shares: a pure per-sample function ``rows [L, H, Q, S] -> [L, H]`` plus a
scorer with the :class:`vrh.scoring.Scorer` interface, registered under the method's name so detection
runs it next to the design-space variants on the same captured rows. The docstrings say what the original
method did on its own task and what changed for grounding. The common adaptation: the "needle" / evidence
region is ``K``, the visual tokens overlapping the ground-truth box; text-copy conditions (the generated
token must equal the retrieved one) have no visual analogue and become sample-level answer correctness
where a method needs one. Edge cases follow :mod:`vrh.scoring`: empty ``K`` or empty query set -> 0 for
the sample, counted.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vrh.scorers.registry import register_scorer
from vrh.scoring import AccumulatingScorer, Index, SampleInfo, per_sample_score


def retrieval_heads_sample(rows: torch.Tensor, keys: Index, out_queries: Index) -> torch.Tensor:
    """Retrieval score of one sample: fraction of output tokens whose top-1 key (over ALL keys) is in ``K``.

    Original: needle-in-a-haystack; a head "retrieves" at a decoding step when its most-attended context
    token lies in the needle AND the generated token copies that token; score = fraction of needle tokens
    retrieved, averaged over tests. Adaptation: output answer tokens as queries, argmax over all ``S``
    keys must fall in ``K``; the copy condition becomes the answer-correctness filter in the scorer.

    >>> A = torch.tensor([[[[0.1, 0.6, 0.3], [0.7, 0.2, 0.1]]]])  # (1, 1, 2, 3)
    >>> retrieval_heads_sample(A, keys=[1, 2], out_queries=[0, 1])
    tensor([[0.5000]])
    """
    return per_sample_score(rows, keys, out_queries, phi="argmax", among=None)


@register_scorer("retrieval_heads", help="Retrieval Heads: top-1 key of the answer tokens in the box, "
                                         "averaged over correctly answered samples")
class RetrievalHeadsScorer(AccumulatingScorer):
    """Mean retrieval score over the samples the model answered correctly (``info.correct is True``).

    Per-sample scores are stored for every sample; wrong answers are excluded from :meth:`result`.
    ``correct=None`` raises (the filter is part of the method). No correct sample -> all-zero map.
    """

    name = "retrieval_heads"

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        if sample_info.correct is None:
            raise ValueError("retrieval_heads needs SampleInfo.correct (it averages over correct answers only)")
        q = sample_info.query("out")
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(retrieval_heads_sample(sample_rows, sample_info.key_positions, q), bool(sample_info.correct))
