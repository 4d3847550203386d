"""OCR Heads (Baek et al. 2025): its reference implementation and its adaptation to grounding.
Shared conventions: :mod:`vrh.scoring.retrieval_heads`.

Reference: ``baekingeol/OCR_Head`` @ 25471315, ``step2_ocr_retrieval_head.py`` (run with
``--fine_grained``, L293-295) and ``utils/utils.py`` ``return_attention`` (L69-114):

* attention matrix (utils L69-114): the prefill's rows plus one row per decoding step, so row ``i`` is the
  query AT sequence position ``i``; L192/L218 read row ``ans_idx = prompt_len + n``, the row of generated
  token ``n`` itself (the one that predicts token ``n + 1``) -- vrh's ``out_own`` query kind;
* keys (L218/L236): ``attn[row, :-G]`` with ``G`` generated tokens and ``total_length = prompt_len + G - 1``
  keeps positions ``0 .. prompt_len - 2``: every prompt key (text and image) **but the last one**;
* answer tokens (L189-196): generated tokens whose id occurs in the tokenized ground-truth answer;
* fine-grained mode (L209-228): one box per entry, the ``box_len``-th such token -- with one box, the
  first; a sample without one adds no entry (L219-220); coarse mode (L231-244): every such token;
* a hit (``argmax in the box's tiles``) adds the sample's correctness score, a miss adds 0; the score is
  ``utils/metrics.py`` ``compute_score`` (L34-43): the longest common contiguous run of token ids between
  the gold answer and ``outputs.sequences`` over the gold length (L203-206). For Qwen (L204) that sequence
  is prompt + generated tokens (``generate`` on ``input_ids``), so gold ids that occur in the prompt count;
  for InternVL (L206) it is the generated tokens only (its ``generate`` runs on embeddings; L175 takes
  ``outputs.sequences`` as the generated ids).
  :func:`hit_weight` follows that per family: generated only for :data:`ANSWER_ONLY_FAMILIES`, prompt +
  generated for every other family (what ``generate`` on ``input_ids`` returns; the reference has no
  other branch);
* a head's score is the mean over ALL its entries, samples and tokens pooled (L253-256).

Box tiles are those covering > 0.1 % of the box (utils L55-60, ``valuable_weights``); vrh's ``K`` is the
visual tokens overlapping the box (detection's ``--min-overlap``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from vrh.scoring.registry import Option, register_scorer
from vrh.scoring.functions import Index, as_index, check_rows, lcs_ratio, take
from vrh.scoring.base import AccumulatingScorer, SampleInfo  # noqa: F401 (re-exported)

# families whose reference LCS runs over the generated tokens only (step2_ocr_retrieval_head.py L206); vrh
# adapter names
ANSWER_ONLY_FAMILIES = ("internvl",)

KEY_SETS = ("prompt", "visual")
ROWS = ("own", "producer")
TOKENS = ("first", "all")
ANSWER_TOKENS = ("gold", "all")
WEIGHTS = ("lcs", "correct", "iou")
POOLS = ("entries", "sample")


def hit_weight(gold_ids: Sequence[int], prompt_ids: Sequence[int], answer_ids: Sequence[int], family: str) -> float:
    """OCR Heads' correctness weight of a sample as its reference computes it for model family ``family``
    (an adapter name): :func:`lcs_ratio` of the gold ids against prompt + answer ids, or against the answer
    ids alone for :data:`ANSWER_ONLY_FAMILIES`. Detection fills ``SampleInfo.answer_lcs`` with it.

    >>> gold, prompt, answer = [5, 6, 7, 8], [1, 5, 6, 7, 2], [5, 9, 9, 9]
    >>> hit_weight(gold, prompt, answer, "qwen2_5_vl"), hit_weight(gold, prompt, answer, "internvl")
    (0.75, 0.25)
    """
    seq = list(answer_ids) if family in ANSWER_ONLY_FAMILIES else [*prompt_ids, *answer_ids]
    return lcs_ratio(gold_ids, seq)


def ocr_heads_hits(rows: torch.Tensor, keys: Index, candidates: Index, queries: Index) -> torch.Tensor:
    """Per selected query: 1 where the most-attended key among ``candidates`` lies in ``K``; ``[L, H, |Q|]``.

    The argmax runs over ``candidates`` only (the reference: every prompt key but the last; the
    ``keys=visual`` adaptation: the visual tokens). Ties: the lowest key position wins (``torch.argmax``
    returns the first maximum, as in the reference). No candidate -> no hit.

    >>> A = torch.tensor([[[[0.5, 0.3, 0.2], [0.5, 0.1, 0.4]]]])  # (1, 1, 2, 3); key 0 is text
    >>> ocr_heads_hits(A, keys=[1], candidates=[0, 1, 2], queries=[0, 1]).tolist()  # text key 0 wins both
    [[[0.0, 0.0]]]
    >>> ocr_heads_hits(A, keys=[1], candidates=[1, 2], queries=[0, 1]).tolist()  # among visual keys
    [[[1.0, 0.0]]]
    """
    check_rows(rows)
    S = rows.shape[-1]
    k, cand = as_index(keys, S), as_index(candidates, S)
    q = as_index(queries, rows.shape[2])
    if cand.numel() == 0 or q.numel() == 0:
        return torch.zeros(*rows.shape[:2], q.numel())  # (L, H, |Q|)
    sub = take(take(rows, 2, q), 3, cand).cpu()  # (L, H, |Q|, |C|)
    best = cand[sub.argmax(-1)]  # (L, H, |Q|) key positions; first maximum on ties
    return torch.isin(best, k).float()


def ocr_heads_sample(rows: torch.Tensor, keys: Index, candidates: Index, queries: Index,
                     weight: float = 1.0) -> tuple[torch.Tensor, int]:
    """``(mean entry [L, H], number of entries)`` of one sample: each selected query is one entry worth
    ``weight`` on a hit and 0 on a miss. No entry -> ``(zeros, 0)``.

    >>> A = torch.tensor([[[[0.5, 0.3, 0.2], [0.5, 0.1, 0.4]]]])  # (1, 1, 2, 3)
    >>> ocr_heads_sample(A, keys=[1], candidates=[1, 2], queries=[0, 1], weight=0.5)  # hits 1, 0
    (tensor([[0.2500]]), 2)
    """
    hits = ocr_heads_hits(rows, keys, candidates, queries)  # (L, H, n)
    n = hits.shape[-1]
    if n == 0:
        return torch.zeros(rows.shape[:2]), 0
    return hits.double().mean(-1).mul(float(weight)).float(), n


def answer_facts(lm: Any, sample: Any, meta: Mapping[str, Any], prompt_ids: Sequence[int],
                 answer_ids: Sequence[int]) -> dict[str, Any]:
    """OCR Heads' per-sample facts, for its capture hook (:attr:`OCRHeadsScorer.sample_facts`): which answer
    tokens occur in the tokenized ground-truth answer (the GT box as ``lm``'s family writes it, for ``meta``:
    the sample's batch meta) and the correctness weight :func:`hit_weight` of the GT ids against the prompt's
    ids and the answer's. Detection calls it once per sample, only when an OCR Heads scorer runs."""
    tok = getattr(lm.processor, "tokenizer", lm.processor)
    gold_ids = tok(lm.adapter.format_box(sample.box, meta, sample.read_image_size()),
                   add_special_tokens=False)["input_ids"]
    gold = set(gold_ids)
    return {"answer_in_gold": [i for i, t in enumerate(answer_ids) if t in gold],
            "answer_lcs": hit_weight(gold_ids, prompt_ids, answer_ids, lm.adapter.name)}


@register_scorer(
    "ocr_heads", compare_order=3,
    help="OCR Heads: answer tokens whose top-1 prompt key lies in the box, weighted by answer correctness "
         "(LCS ratio), mean over all (sample, token) entries",
    options=(Option("keys", str, "prompt", "argmax over: prompt (every prompt key but the last, the reference) or "
                                           "visual (visual tokens only)", choices=KEY_SETS),
             Option("row", str, "own", "query row of an answer token: own (the token's own row, the reference) "
                                       "or producer (the row predicting it, Eq. 1's Q^out)", choices=ROWS),
             Option("tokens", str, "first", "answer tokens per sample: first (fine-grained mode, one box) or all "
                                            "(coarse mode)", choices=TOKENS),
             Option("answer", str, "gold", "answer tokens eligible: gold (ids that occur in the tokenized "
                                           "ground-truth answer, the reference) or all", choices=ANSWER_TOKENS),
             Option("weight", str, "lcs", "a hit is worth: lcs (gold vs output-sequence token LCS ratio, the "
                                          "reference's per family: hit_weight), "
                                          "correct (0/1 at IoU >= 0.5) or iou", choices=WEIGHTS),
             Option("pool", str, "entries", "mean over all (sample, token) entries (the reference) or over "
                                            "per-sample means (sample)", choices=POOLS)))
class OCRHeadsScorer(AccumulatingScorer):
    """OCR Heads over samples. Defaults are the reference; ``per_sample()`` holds each sample's mean entry
    and :meth:`result` pools entries (``pool="entries"``: samples weighted by their entry count, samples
    with none left out) or averages the per-sample means over all samples (``pool="sample"``).

    vrh's earlier adaptation is ``ocr_heads:keys=visual:row=producer:tokens=all:answer=all:weight=correct:
    pool=sample``. Reference options need optional :class:`~vrh.scoring.base.SampleInfo` fields:
    ``prompt_positions`` (keys=prompt), ``queries["out_own"]`` (row=own), ``answer_in_gold`` (answer=gold),
    ``answer_lcs`` (weight=lcs); a missing one raises, naming the option that avoids it.
    """

    name = "ocr_heads"
    # the capture hook: detection merges what it returns into each sample's SampleInfo (detection_batch)
    sample_facts = staticmethod(answer_facts)

    def __init__(self, *, keys: str = "prompt", row: str = "own", tokens: str = "first", answer: str = "gold",
                 weight: str = "lcs", pool: str = "entries", **kw):
        super().__init__(**kw)
        for opt, value, allowed in (("keys", keys, KEY_SETS), ("row", row, ROWS), ("tokens", tokens, TOKENS),
                                    ("answer", answer, ANSWER_TOKENS), ("weight", weight, WEIGHTS),
                                    ("pool", pool, POOLS)):
            if value not in allowed:
                raise ValueError(f"ocr_heads option {opt!r} must be one of {', '.join(allowed)}, got {value!r}")
        self.keys, self.row, self.tokens, self.answer, self.weight, self.pool = keys, row, tokens, answer, weight, pool
        self._counts: list[int] = []

    def _candidates(self, rows: torch.Tensor, info: SampleInfo) -> torch.Tensor:
        if self.keys == "visual":
            return as_index(info.visual_positions, rows.shape[-1])
        if info.prompt_positions is None:
            raise ValueError("ocr_heads (keys=prompt) needs SampleInfo.prompt_positions; or use 'ocr_heads:keys=visual'")
        return as_index(info.prompt_positions, rows.shape[-1])[:-1]  # the reference's [:-G] drops the last one

    def _queries(self, info: SampleInfo) -> torch.Tensor:
        kind = "out_own" if self.row == "own" else "out"
        if kind not in info.queries or info.queries[kind] is None:
            raise ValueError(f"ocr_heads (row={self.row}) needs SampleInfo.queries[{kind!r}]"
                             + ("; or use 'ocr_heads:row=producer'" if kind == "out_own" else ""))
        q = info.query(kind).long()  # one row per answer token, answer order
        if self.answer == "gold":
            if info.answer_in_gold is None:
                raise ValueError("ocr_heads (answer=gold) needs SampleInfo.answer_in_gold; or use "
                                 "'ocr_heads:answer=all'")
            q = q[as_index(info.answer_in_gold, q.numel())]
        return q[:1] if self.tokens == "first" else q

    def _weight(self, info: SampleInfo) -> float:
        field = {"lcs": "answer_lcs", "correct": "correct", "iou": "iou"}[self.weight]
        value = getattr(info, field)
        if value is None:
            raise ValueError(f"ocr_heads (weight={self.weight}) needs SampleInfo.{field}")
        return float(value)

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        check_rows(sample_rows)
        q = self._queries(sample_info)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        score, n = ocr_heads_sample(sample_rows, sample_info.key_positions, self._candidates(sample_rows, sample_info),
                                    q, self._weight(sample_info))
        self._add(score)
        self._counts.append(n)

    def entry_counts(self) -> torch.Tensor:
        """``[N]`` entries each sample contributed (the weights of ``pool="entries"``)."""
        return torch.tensor(self._counts, dtype=torch.float64)

    def result(self) -> torch.Tensor:
        ps = self.per_sample().double()  # (N, L, H)
        if self.pool == "sample":
            return ps.mean(0).float()
        n = self.entry_counts()  # (N,)
        if n.sum() == 0:
            return torch.zeros(ps.shape[1:])
        return ((ps * n[:, None, None]).sum(0) / n.sum()).float()  # (L, H)
