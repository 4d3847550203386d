"""QRHead (Zhang et al. 2025): its reference implementation and its adaptation to grounding.

The one prior method that needs a second capture pass: it calibrates against the same attention under a
content-free query, so its scorer declares ``extra_passes = ("null_query",)`` (when ``calibrate``) and
reads that pass's rows from ``update(..., extra)``. Shared conventions: :mod:`vrh.scoring.retrieval_heads`.

Reference: ``princeton-pli/QRHead`` @ 7a668e79, ``src/qrretriever/attn_retriever.py``,
``score_docs_per_head_for_detection`` (L258-320) and ``score_per_token_attention_to_query`` (L323-353):

1. L348-349: each query token's softmax row over all keys, **averaged over the query tokens** -> one
   value per (head, key);
2. L272-292: the same under the null query ``"N/A"`` (L32), subtracted **per key** (keys before the query
   share positions between the two prompts, L276-277);
3. L300-311: per document span, keys with ``CAL <= mean - 2 * std`` are dropped (``torch.std``: unbiased;
   ``>`` strict, L304-307) and the rest **summed** -> one ``[L, H]`` map per document.

Across queries the repository scores a head two ways: ``exp_scripts/detection/detect_qrhead_lme.py``
(L9-32, ``lme_eval``; L66-101) by the mean over queries of the summed step-3 scores of the gold documents
-- what vrh computes, with the box region ``K`` as the one gold document -- and
``exp_scripts/detection/detect_qrhead_beir.py`` (L83-118, ``score_heads``; NDCG@10 at L111) by ranking the
documents per head. A grounding sample has one "document" and nothing to rank, so vrh follows the LME
script. The
reference's query span is the late instruction + ``Query:`` + the query + the chat suffix (L177); vrh's
is the referring expression's tokens (``in``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vrh.scoring.registry import Option, register_scorer
from vrh.scoring.functions import NULL_QUERY_PASS, Index, as_index, check_rows, query_mean, region_sum, take
from vrh.scoring.base import AccumulatingScorer, SampleInfo

OUTLIER_AXES = ("keys", "queries")


def _key_profile(rows: torch.Tensor, keys: Index, queries: Index) -> torch.Tensor:
    """Mean over the selected queries of the attention on each key of ``K``: ``[L, H, |K|]`` (float64).
    No query -> zeros (the vrh edge policy; the reference always has query tokens)."""
    k = as_index(keys, rows.shape[-1])
    q = as_index(queries, rows.shape[2])
    if q.numel() == 0:
        return torch.zeros(*rows.shape[:2], k.numel(), dtype=torch.float64)  # (L, H, |K|)
    sel = take(take(rows, 2, q), 3, k).double().cpu()  # (L, H, |Q|, |K|)
    return sel.mean(2)  # (L, H, |Q|, |K|) -> (L, H, |K|)


def _drop_low_keys(cal: torch.Tensor, outlier_z: float) -> torch.Tensor:
    """Step 3: sum of the values above ``mean - z * std`` (unbiased std, strict ``>``) along the last axis.

    One key: its std is NaN, every comparison is False and the sum is 0 -- as in the reference, where
    ``torch.std`` of one element is NaN. Constant values: std 0, nothing is strictly above the mean -> 0.
    """
    if cal.shape[-1] <= 1:  # no key, or one key whose NaN std keeps nothing (said without torch's warning)
        return torch.zeros(cal.shape[:-1], dtype=cal.dtype)  # (L, H)
    thr = cal.mean(-1, keepdim=True) - outlier_z * cal.std(-1, unbiased=True, keepdim=True)  # (L, H, 1)
    return cal.masked_fill(~(cal > thr), 0.0).sum(-1)  # (L, H, |K|) -> (L, H)


def qrhead_sample(rows: torch.Tensor, keys: Index, in_queries: Index, null_rows: torch.Tensor | None = None,
                  null_keys: Index | None = None, null_queries: Index | None = None, *,
                  outlier_z: float = 2.0, calibrate: bool = True, outliers: str = "keys") -> torch.Tensor:
    """QRHead score of the box region for one sample; ``[L, H]`` (may be negative).

    ``outliers="keys"`` (reference, steps 1-3 of the module docstring): ``a_j`` = mean over the ``in``
    tokens of the attention on key ``j`` of ``K``; minus the same over the null pass's ``null_in`` tokens
    on its own keys ``null_keys`` (defaulting to ``keys``; the j-th key of one is paired with the j-th of
    the other, so both must have ``|K|`` keys); keys with ``cal_j <= mean - outlier_z * std`` (unbiased)
    dropped; the rest summed. Empty ``null_in`` -> nothing subtracted.

    ``outliers="queries"`` (vrh's earlier adaptation): per expression token ``s_t = sum_{j in K} a(t, j)``;
    tokens with ``mean - s_t > outlier_z * std`` (population std, so ``>=`` is kept) dropped; the kept
    ones averaged; the null pass's mean ``s_t`` subtracted.

    Without null rows this raises unless ``calibrate=False`` (then step 2 is skipped).

    >>> A = torch.tensor([[[[0.2, 0.5, 0.3], [0.4, 0.1, 0.5]]]])  # (1, 1, 2, 3): 2 queries, K = keys 1, 2
    >>> N = torch.tensor([[[[0.8, 0.1, 0.1]]]])                     # null pass, 1 query
    >>> qrhead_sample(A, [1, 2], [0, 1], N, null_queries=[0])      # a = (.3, .4) - (.1, .1): both kept
    tensor([[0.5000]])
    >>> qrhead_sample(A, [1], [0, 1], N, null_queries=[0])         # one key: std NaN -> nothing kept
    tensor([[0.]])
    """
    check_rows(rows)
    if outliers not in OUTLIER_AXES:
        raise ValueError(f"qrhead option 'outliers' must be one of {', '.join(OUTLIER_AXES)}, got {outliers!r}")
    if calibrate:
        if null_rows is None or null_queries is None:
            raise ValueError("qrhead needs the null-query ('N/A') rows and their query indices for calibration; "
                             "pass null_rows/null_queries (SampleInfo.queries['null_in']) or calibrate=False")
        check_rows(null_rows)
        if null_rows.shape[:2] != rows.shape[:2]:
            raise ValueError(f"null rows have {tuple(null_rows.shape[:2])} heads, rows {tuple(rows.shape[:2])}")
    nk = keys if null_keys is None else null_keys
    if outliers == "queries":
        return _token_outliers(rows, keys, in_queries, null_rows, nk, null_queries, outlier_z, calibrate)
    cal = _key_profile(rows, keys, in_queries)  # (L, H, |K|)
    if calibrate:
        null = _key_profile(null_rows, nk, null_queries)  # (L, H, |K_null|)
        if null.shape[-1] != cal.shape[-1]:
            raise ValueError(f"the null pass has {null.shape[-1]} box keys, the main pass {cal.shape[-1]}: "
                             "they are paired key by key")
        cal = cal - null
    return _drop_low_keys(cal, outlier_z).float()


def _token_outliers(rows, keys, in_queries, null_rows, null_keys, null_queries, outlier_z, calibrate):
    """``outliers="queries"``: outlier removal over expression tokens, mean over the kept ones."""
    q = as_index(in_queries, rows.shape[2])
    tok = region_sum(take(rows, 2, q), keys).double().cpu()  # (L, H, |Q_in|)
    if q.numel() == 0:
        base = torch.zeros(rows.shape[:2], dtype=torch.float64)  # (L, H)
    else:
        mu = tok.mean(-1, keepdim=True)  # (L, H, 1)
        sd = tok.std(-1, unbiased=False, keepdim=True)  # (L, H, 1)
        keep = (mu - tok) <= outlier_z * sd + 1e-9  # (L, H, |Q_in|); the tolerance keeps constant rows whole
        base = (tok * keep).sum(-1) / keep.sum(-1).clamp_min(1)  # (L, H)
    if not calibrate:
        return base.float()
    nq = as_index(null_queries, null_rows.shape[2])
    null = query_mean(region_sum(take(null_rows, 2, nq), null_keys)).double().cpu()  # (L, H)
    return (base - null).float()


@register_scorer("qrhead", help="QRHead: query-averaged attention on each box key minus the same under a null "
                                "query ('N/A'), low outlier keys dropped, summed", compare_order=2,
                 options=(Option("calibrate", bool, True, "subtract the null-query pass (false: one pass, "
                                                          "uncalibrated)"),
                          Option("outlier_z", float, 2.0, "drop values this many (unbiased) stds below the mean"),
                          Option("outliers", str, "keys", "keys: drop outlier box keys and sum (reference); "
                                                          "queries: drop outlier expression tokens and average "
                                                          "(vrh's earlier adaptation)", choices=OUTLIER_AXES)))
class QRHeadScorer(AccumulatingScorer):
    """Mean over samples of :func:`qrhead_sample`.

    The null pass is a second forward with the expression replaced by "N/A"; its rows come as
    ``extra["null_query"]`` and its query indices as ``info.queries["null_in"]``. ``calibrate=False``
    scores without it (then it declares no extra pass and ignores ``extra``).
    """

    name = "qrhead"

    def __init__(self, *, calibrate: bool = True, outlier_z: float = 2.0, outliers: str = "keys", **kw):
        super().__init__(**kw)
        if outliers not in OUTLIER_AXES:
            raise ValueError(f"qrhead option 'outliers' must be one of {', '.join(OUTLIER_AXES)}, got {outliers!r}")
        self.calibrate = calibrate
        self.outlier_z = outlier_z
        self.outliers = outliers

    @property
    def extra_passes(self) -> tuple[str, ...]:
        return (NULL_QUERY_PASS,) if self.calibrate else ()

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        q = sample_info.query("in")
        nq = sample_info.queries.get("null_in") if self.calibrate else None
        null_rows = (extra or {}).get(NULL_QUERY_PASS) if self.calibrate else None
        if self.calibrate and null_rows is None:
            raise ValueError(f"qrhead needs extra[{NULL_QUERY_PASS!r}], the rows of the null-query capture pass "
                             "(or the spec 'qrhead:calibrate=false' to score without it)")
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(qrhead_sample(sample_rows, sample_info.key_positions, q, null_rows,
                                sample_info.null_key_positions, nq, outlier_z=self.outlier_z,
                                calibrate=self.calibrate, outliers=self.outliers))
