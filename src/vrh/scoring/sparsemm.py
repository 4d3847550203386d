"""SparseMM's visual heads (Wang et al., ICCV 2025), its reference implementation and its adaptation to grounding.

Shared conventions: :mod:`vrh.scoring.retrieval_heads`.

Reference: ``CR400AF-A/SparseMM`` @ d3662cd, ``visual_head/llava_visual_head_coco.py`` (and the OCR variant
``visual_head/qwen_visual_head.py`` @ 33f2f0a, which differs where noted). Read for facts, not copied:

* the model describes the image greedily ("Describe objects in the picture.", eager attention); each decode
  step reads the attention row of the query that *produces* the new token (vrh's ``out`` query kind), over
  every key seen so far (``decode``);
* the new token, decoded to a string, must be longer than two characters ("all categories are more than 2
  characters") and a substring of an annotated object's category name; the first such object is scored, the
  next one only if no head hit the first (the OCR variant scores a token only when exactly ONE object's text
  contains it, with no length rule);
* ``hit_score``: per head, the top-1 key of that row (``topk=1``) over all keys; when it lies in the object's
  box tokens, the head scores ``+1 / |box tokens|``;
* the box tokens: the cells of the image feature grid the box touches (``x // cell`` to ``x2 // cell + 1``,
  plus a newline column), offset by ``prompt_len = image_start + 576``: LLaVA-NeXT's base image's 576 tokens
  are skipped, so the positions are right only for that layout;
* a sample's per-head sums are appended per sample (``head_counter``); the ranking step is not in
  ``visual_head/``, so vrh aggregates by the mean over samples (any positive scaling of the sum ranks alike).

The adaptation (docs/baselines.md):

* **which tokens "name the object"**: a grounding answer writes the referent's box, not its category, and the
  referent is named once, in the expression. The default (``queries=out``) scores the rows that produce the
  answer tokens: the tokens the model generates about the referent, as SparseMM's are the tokens it generates
  naming an object; ``queries=in`` scores the expression tokens' rows instead (the prompt's naming of the
  object, read where it is written, not generated). The two-character rule and the substring match need
  token strings of a category name, which a grounding sample does not have, and are dropped: every answer
  token counts;
* **one object per sample**: vrh's sample has one referent, so the first-hit / exactly-one rules are moot;
* **box tokens**: K, the cell tokens whose rectangle overlaps the GT box (Eq. 1's key set, the same rule for
  every method), at the positions the processor gives; the reference's LLaVA-only 576 offset and its
  floor-based grid are not reproduced;
* **no correctness filter**: the reference keeps every sample, so unlike Retrieval Heads (which this then
  equals with ``norm=keys``, up to that filter) wrong answers count too.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vrh.scoring.base import AccumulatingScorer, SampleInfo
from vrh.scoring.functions import Index, argmax_in_region, as_index, check_rows, take
from vrh.scoring.registry import Option, register_scorer

QUERY_KINDS = ("out", "in")


def sparsemm_sample(rows: torch.Tensor, keys: Index, queries: Index) -> torch.Tensor:
    """SparseMM's visual-head score of one sample, ``[L, H]``: for each query row (a token naming the object),
    ``+1 / |K|`` to every head whose top-1 key over ALL keys lies in ``K``.

    Ties: the lowest key position wins; an all-zero row never hits; empty ``K`` or no query -> 0.

    >>> A = torch.tensor([[[[0.1, 0.6, 0.3], [0.7, 0.2, 0.1], [0.0, 0.1, 0.9]],    # head 0: hit, miss, hit
    ...                    [[0.5, 0.2, 0.3], [0.5, 0.4, 0.1], [0.6, 0.3, 0.1]]]])  # head 1: three misses
    >>> sparsemm_sample(A, keys=[1, 2], queries=[0, 1, 2])  # head 0: 2 hits x 1/|K| = 2 x 1/2
    tensor([[1., 0.]])
    >>> sparsemm_sample(A, keys=[2], queries=[2])
    tensor([[1., 0.]])
    """
    check_rows(rows)
    k = as_index(keys, rows.shape[-1])
    q = as_index(queries, rows.shape[2])
    if k.numel() == 0 or q.numel() == 0:
        return torch.zeros(rows.shape[:2])  # (L, H)
    hits = argmax_in_region(take(rows, 2, q), k, among=None)  # (L, H, |Q|)
    return (hits.double().sum(-1) / k.numel()).float().cpu()  # (L, H)


@register_scorer("sparsemm", compare_order=6,
                 help="SparseMM: tokens naming the object whose top-1 key lies in its box, +1/|box tokens| each, "
                      "over every sample",
                 options=(Option("queries", str, "out", "out: the rows producing the answer tokens (what the model "
                                                        "generates about the referent); in: the expression tokens "
                                                        "(where the referent is named)", choices=QUERY_KINDS),))
class SparseMMScorer(AccumulatingScorer):
    """Mean of :func:`sparsemm_sample` over every sample (the reference keeps wrong answers too)."""

    name = "sparsemm"

    def __init__(self, *, queries: str = "out", **kw):
        super().__init__(**kw)
        if queries not in QUERY_KINDS:
            raise ValueError(f"sparsemm option 'queries' must be one of {', '.join(QUERY_KINDS)}, got {queries!r}")
        self.queries = queries

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        q = sample_info.query(self.queries)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(sparsemm_sample(sample_rows, sample_info.key_positions, q))
