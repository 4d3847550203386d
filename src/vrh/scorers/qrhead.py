"""QRHead (Zhang et al. 2025), adapted to referring-expression grounding (paper Sec. 3.2, Tab. 2).

The one prior method that needs a second capture pass: it calibrates against the same attention under a
content-free query, so its scorer declares ``extra_passes = ("null_query",)`` (when ``calibrate``) and
reads that pass's rows from ``update(..., extra)``. Shared conventions: :mod:`vrh.scorers.retrieval_heads`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vrh.scorers.registry import Option, register_scorer
from vrh.scoring import (
    NULL_QUERY_PASS,
    AccumulatingScorer,
    Index,
    SampleInfo,
    _check_rows,
    _take,
    as_index,
    query_mean,
    region_sum,
)


def qrhead_sample(rows: torch.Tensor, keys: Index, in_queries: Index, null_rows: torch.Tensor | None = None,
                  null_keys: Index | None = None, null_queries: Index | None = None, *,
                  outlier_z: float = 2.0, calibrate: bool = True) -> torch.Tensor:
    """Calibrated query-to-region attention of one sample; ``[L, H]`` (may be negative).

    Original: query-focused retrieval heads score attention from the *input query* tokens to a document,
    calibrated by subtracting the same attention under a content-free null query ("N/A"), with outlier
    query tokens dropped. Adaptation: the query is the referring expression (``in``), the document is the
    box region ``K``; per token ``s_t = sum_{j in K} a(t, j)``. For each head, tokens with
    ``s_t < mean - outlier_z * std`` (population std over that head's tokens) are dropped, the kept ones
    averaged (a mean, not QRHead's sum, so expressions of different lengths weigh equally, as in Eq. 1);
    then the mean of ``s_t`` over the null pass's ``null_in`` tokens (its own rows ``[L, H, Qn, Sn]``, no
    outlier removal, keys ``null_keys`` defaulting to ``keys``) is subtracted. Without null rows this
    raises unless ``calibrate=False`` (documented fallback: uncalibrated score).

    >>> A = torch.tensor([[[[0.2, 0.8], [0.6, 0.4]]]])      # (1, 1, 2, 2): s_t = 0.8, 0.4
    >>> N = torch.tensor([[[[0.9, 0.1]]]])                  # null pass: 0.1
    >>> qrhead_sample(A, [1], [0, 1], N, null_queries=[0])  # (0.8 + 0.4)/2 - 0.1
    tensor([[0.5000]])
    """
    _check_rows(rows)
    q = as_index(in_queries, rows.shape[2])
    tok = region_sum(_take(rows, 2, q), keys).double()  # (L, H, |Q_in|)
    if q.numel() == 0:
        base = torch.zeros(rows.shape[:2], dtype=torch.float64, device=rows.device)  # (L, H)
    else:
        mu = tok.mean(-1, keepdim=True)  # (L, H, 1)
        sd = tok.std(-1, unbiased=False, keepdim=True)  # (L, H, 1)
        keep = (mu - tok) <= outlier_z * sd + 1e-9  # (L, H, |Q_in|); the tolerance keeps constant rows whole
        base = (tok * keep).sum(-1) / keep.sum(-1).clamp_min(1)  # (L, H)
    if not calibrate:
        return base.float()
    if null_rows is None or null_queries is None:
        raise ValueError("qrhead needs the null-query ('N/A') rows and their query indices for calibration; "
                         "pass null_rows/null_queries (SampleInfo.queries['null_in']) or calibrate=False")
    _check_rows(null_rows)
    if null_rows.shape[:2] != rows.shape[:2]:
        raise ValueError(f"null rows have {tuple(null_rows.shape[:2])} heads, rows {tuple(rows.shape[:2])}")
    nk = keys if null_keys is None else null_keys
    nq = as_index(null_queries, null_rows.shape[2])
    null = query_mean(region_sum(_take(null_rows, 2, nq), nk)).double().to(rows.device)  # (L, H)
    return (base - null).float()


@register_scorer("qrhead", help="QRHead: expression-token attention on the box minus the same under a "
                                "null query ('N/A'), outlier tokens dropped",
                 options=(Option("calibrate", bool, True, "subtract the null-query pass (false: one pass, "
                                                          "uncalibrated)"),
                          Option("outlier_z", float, 2.0, "drop expression tokens this many stds below "
                                                          "the mean")))
class QRHeadScorer(AccumulatingScorer):
    """Mean over samples of :func:`qrhead_sample`.

    The null pass is a second forward with the expression replaced by "N/A"; its rows come as
    ``extra["null_query"]`` and its query indices as ``info.queries["null_in"]``. ``calibrate=False``
    scores without it (then it declares no extra pass and ignores ``extra``).
    """

    name = "qrhead"

    def __init__(self, *, calibrate: bool = True, outlier_z: float = 2.0, **kw):
        super().__init__(**kw)
        self.calibrate = calibrate
        self.outlier_z = outlier_z

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
                                calibrate=self.calibrate))
