"""Prior head-finding methods, adapted to referring-expression grounding (paper Sec. 3.2 Tab. 2, Fig. 3).

Each method is a pure per-sample function ``rows [L, H, Q, S] -> [L, H]`` plus a scorer class with the
:class:`vrh.scoring.Scorer` interface, so the detection loop can run them next to the design-space
variants on the same captured rows. Every docstring says what the original method did on its own task
and what changed for grounding. The common adaptation: the "needle" / evidence region is ``K``, the
visual tokens overlapping the ground-truth box; text-copy conditions (the generated token must equal the
retrieved one) have no visual analogue and become sample-level answer correctness where a method needs
one. Edge cases follow :mod:`vrh.scoring`: empty ``K`` or empty query set -> 0 for the sample, counted.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vrh.scoring import (
    AccumulatingScorer,
    Index,
    SampleInfo,
    _check_rows,
    _take,
    argmax_in_region,
    as_index,
    per_sample_score,
    query_mean,
    region_sum,
)

MIN_LAYER = 2  # Localization Heads: layers 0 and 1 are excluded


# ----------------------------------------------------------------------------------------------------------
# Retrieval Heads (Wu et al. 2024)
# ----------------------------------------------------------------------------------------------------------
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


class RetrievalHeadsScorer(AccumulatingScorer):
    """Mean retrieval score over the samples the model answered correctly (``info.correct is True``).

    Per-sample scores are stored for every sample; wrong answers are excluded from :meth:`result`.
    ``correct=None`` raises (the filter is part of the method). No correct sample -> all-zero map.
    """

    name = "retrieval_heads"

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo) -> None:
        if sample_info.correct is None:
            raise ValueError("retrieval_heads needs SampleInfo.correct (it averages over correct answers only)")
        q = sample_info.query("out")
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(retrieval_heads_sample(sample_rows, sample_info.key_positions, q), bool(sample_info.correct))


# ----------------------------------------------------------------------------------------------------------
# QRHead (Zhang et al. 2025)
# ----------------------------------------------------------------------------------------------------------
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


class QRHeadScorer(AccumulatingScorer):
    """Mean over samples of :func:`qrhead_sample`; ``update(rows, info, null_rows=None)``.

    The null pass is a second forward with the expression replaced by "N/A"; its rows come as
    ``null_rows`` and its query indices as ``info.queries["null_in"]``. ``calibrate=False`` scores without
    it (then ``null_rows`` is ignored).
    """

    name = "qrhead"

    def __init__(self, *, calibrate: bool = True, outlier_z: float = 2.0, **kw):
        super().__init__(**kw)
        self.calibrate = calibrate
        self.outlier_z = outlier_z

    @property
    def needs_null_rows(self) -> bool:
        return self.calibrate

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               null_rows: torch.Tensor | None = None) -> None:
        q = sample_info.query("in")
        nq = sample_info.queries.get("null_in") if self.calibrate else None
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(qrhead_sample(sample_rows, sample_info.key_positions, q, null_rows,
                                sample_info.null_key_positions, nq, outlier_z=self.outlier_z,
                                calibrate=self.calibrate))


# ----------------------------------------------------------------------------------------------------------
# OCR Heads (Baek et al. 2025)
# ----------------------------------------------------------------------------------------------------------
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

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo) -> None:
        value = sample_info.correct if self.weight == "correct" else sample_info.iou
        if value is None:
            raise ValueError(f"ocr_heads (weight={self.weight!r}) needs SampleInfo.{self.weight}")
        q = sample_info.query("out")
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(ocr_heads_sample(sample_rows, sample_info.key_positions, sample_info.visual_positions, q,
                                   float(value)))


# ----------------------------------------------------------------------------------------------------------
# VERA (Pei et al. 2026)
# ----------------------------------------------------------------------------------------------------------
def vera_sample(rows: torch.Tensor, keys: Index, visual: Index, queries: Index) -> torch.Tensor:
    """Share of a query's *visual* attention that lands on the evidence region, averaged over queries.

    Original: visual-evidence-retrieval heads in long visual documents score the attention a query puts on
    the evidence patches relative to all image patches. Adaptation: evidence = ``K`` (intersected with
    ``V``, so the ratio lies in [0, 1]); query = the last prompt token by default (scorer option). A row
    with no visual attention scores 0 (0/0 := 0).

    >>> A = torch.tensor([[[[0.5, 0.3, 0.2], [1.0, 0.0, 0.0]]]])  # (1, 1, 2, 3)
    >>> vera_sample(A, keys=[1], visual=[1, 2], queries=[0, 1])  # (0.3/0.5 + 0)/2
    tensor([[0.3000]])
    """
    _check_rows(rows)
    S = rows.shape[-1]
    v = as_index(visual, S)
    k = v[torch.isin(v, as_index(keys, S))]  # K intersect V
    sel = _take(rows, 2, as_index(queries, rows.shape[2]))  # (L, H, |Q_s|, S)
    k_mass = region_sum(sel, k).double()  # (L, H, |Q_s|)
    v_mass = region_sum(sel, v).double()  # (L, H, |Q_s|)
    ratio = torch.where(v_mass > 0, k_mass / v_mass.clamp_min(1e-30), torch.zeros_like(k_mass))
    return query_mean(ratio)


class VERAScorer(AccumulatingScorer):
    """Mean over samples of :func:`vera_sample`. ``query`` picks the query kind: ``"last_prompt"``
    (default, the token that starts generation) or ``"out"`` (paper Tab. 2 lists VERA under Q^out)."""

    name = "vera"

    def __init__(self, *, query: str = "last_prompt", **kw):
        super().__init__(**kw)
        self.query = query

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo) -> None:
        q = sample_info.query(self.query)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(vera_sample(sample_rows, sample_info.key_positions, sample_info.visual_positions, q))


# ----------------------------------------------------------------------------------------------------------
# Localization Heads (Kang et al., CVPR 2025)
# ----------------------------------------------------------------------------------------------------------
def elbow_index(values: torch.Tensor) -> int:
    """Index of the elbow of the DESCENDING-sorted ``values``: the point farthest from the chord joining
    the first and last points, both axes scaled to [0, 1] (so the answer does not depend on how many heads
    or on the attention scale). Ties -> the earliest point; fewer than 3 points or a flat curve -> 0.

    >>> elbow_index(torch.tensor([1.0, 10.0, 0.0, 2.0]))  # sorted 10, 2, 1, 0 -> the point 2
    1
    """
    y = torch.sort(values.detach().double().reshape(-1), descending=True).values  # (n,)
    n = y.numel()
    if n < 3 or y[0] == y[-1]:
        return 0
    x = torch.arange(n, dtype=torch.float64) / (n - 1)
    yn = (y - y[-1]) / (y[0] - y[-1])
    dist = (1.0 - x - yn).abs()  # distance to the chord x + y = 1, up to the constant 1/sqrt(2)
    return int(dist.argmax())


def connected_components(mask: torch.Tensor) -> torch.Tensor:
    """8-connected component labels of boolean maps ``[B, R, C]``; 0 = background, each component carries
    (1 + the largest row-major index among its cells). Max-label propagation over 3x3 neighbourhoods until
    stable: at most one step per cell of the longest path inside a component, cheap for token grids.

    >>> m = torch.tensor([[[1, 0, 0], [0, 1, 0], [0, 0, 0]], [[1, 0, 1], [0, 0, 0], [1, 1, 0]]]).bool()
    >>> connected_components(m)
    tensor([[[5, 0, 0],
             [0, 5, 0],
             [0, 0, 0]],
    <BLANKLINE>
            [[1, 0, 3],
             [0, 0, 0],
             [8, 8, 0]]])
    """
    if mask.dim() != 3:
        raise ValueError(f"mask must be [B, R, C], got {tuple(mask.shape)}")
    B, R, C = mask.shape
    ids = torch.arange(1, R * C + 1, dtype=torch.float64).reshape(1, R, C)  # (1, R, C)
    lab = torch.where(mask, ids, torch.zeros(()))  # (B, R, C)
    while True:
        grown = F.max_pool2d(lab.unsqueeze(1), 3, stride=1, padding=1).squeeze(1)  # (B,1,R,C) -> (B, R, C)
        grown = torch.where(mask, grown, torch.zeros(()))
        if torch.equal(grown, lab):
            return lab.long()
        lab = grown


def spatial_entropy(maps: torch.Tensor) -> torch.Tensor:
    """Spatial entropy of attention maps ``[B, R, C] -> [B]`` (Localization Heads' concentration measure).

    Binarize ``map - mean(map) > 0``, take 8-connected components, ``p_i`` = the component's attention
    mass (original values) / mass over all components, entropy ``-sum p_i log p_i`` (nats). One blob -> 0;
    scattered blobs -> high. A map with no cell above its mean (constant, incl. all-zero) has no component:
    +inf (treated as "not concentrated").

    >>> m = torch.tensor([[[0.4, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.2]],
    ...                   [[0.3, 0.3, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])  # (2, 3, 3)
    >>> spatial_entropy(m)  # -(2/3 ln 2/3 + 1/3 ln 1/3) = 0.6365; one blob = 0
    tensor([0.6365, 0.0000])
    """
    if maps.dim() != 3:
        raise ValueError(f"maps must be [B, R, C], got {tuple(maps.shape)}")
    B, R, C = maps.shape
    m = maps.detach().double()
    fg = (m - m.mean(dim=(1, 2), keepdim=True)) > 0  # (B, R, C)
    lab = connected_components(fg).reshape(B, R * C)  # (B, R, C) -> (B, R*C)
    mass = torch.zeros(B, R * C + 1, dtype=torch.float64).scatter_add_(1, lab, m.reshape(B, R * C))[:, 1:]
    total = mass.sum(1, keepdim=True)  # (B, 1)
    p = mass / total.clamp_min(1e-300)  # (B, R*C)
    ent = torch.where(p > 0, p * (1.0 / p.clamp_min(1e-300)).log(), torch.zeros_like(p)).sum(1)  # (B,); >= +0
    return torch.where(fg.reshape(B, -1).any(1) & (total[:, 0] > 0), ent, torch.full_like(ent, float("inf"))).float()


def localization_heads_sample(rows: torch.Tensor, visual: Index, grid: tuple[int, int], queries: Index, *,
                              min_layer: int = MIN_LAYER) -> torch.Tensor:
    """Per-sample Localization Heads ranking score ``[L, H]``: ``1 / (1 + entropy)`` for eligible heads, else 0.

    Original (training-free grounding): from the last input token, (1) each head's attention sum over the
    image; keep heads above the elbow of the descending-sorted sums; (2) among them, rank by LOW spatial
    entropy of the head's image attention map; layers 0-1 excluded; heads picked most often over samples
    win. Adaptation / details: several query rows are averaged into one map; the elbow runs over all
    ``L*H`` heads and keeps the heads whose sum is >= the elbow point's; eligible = above elbow AND layer
    >= ``min_layer`` AND a finite entropy. The score is a monotone stand-in for -entropy in (0, 1] so the
    scorer's top-``m`` selection frequency reproduces "top-m lowest entropy among eligible heads" (ineligible
    heads score 0 and are never selected). Needs no box: ``K`` is unused.

    >>> A = torch.zeros(3, 1, 1, 5)                       # (3 layers, 1 head, 1 query, 1 text + 2x2 grid)
    >>> A[2, 0, 0] = torch.tensor([0.2, 0.8, 0.0, 0.0, 0.0])  # one blob -> entropy 0 -> score 1
    >>> A[1, 0, 0] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])  # layer 1: excluded
    >>> A[0, 0, 0] = torch.tensor([0.9, 0.1, 0.0, 0.0, 0.0])  # below the elbow
    >>> localization_heads_sample(A, visual=[1, 2, 3, 4], grid=(2, 2), queries=[0]).flatten().tolist()
    [0.0, 0.0, 1.0]
    """
    _check_rows(rows)
    L, H = rows.shape[:2]
    v = as_index(visual, rows.shape[-1])
    R, C = grid
    if R * C != v.numel():
        raise ValueError(f"grid {grid} has {R * C} cells but there are {v.numel()} visual tokens")
    q = as_index(queries, rows.shape[2])
    if q.numel() == 0 or v.numel() == 0:
        return torch.zeros(L, H)
    img = _take(_take(rows, 2, q), 3, v).double().mean(2).cpu()  # (L, H, |Q|, V) -> (L, H, V)
    sums = img.sum(-1)  # (L, H)
    cut = torch.sort(sums.reshape(-1), descending=True).values[elbow_index(sums)]
    ent = spatial_entropy(img.reshape(L * H, R, C)).reshape(L, H).double()  # (L*H, R, C) -> (L, H)
    layer_ok = (torch.arange(L) >= min_layer).unsqueeze(1)  # (L, 1)
    eligible = (sums >= cut) & (sums > 0) & layer_ok & torch.isfinite(ent)  # (L, H)
    return torch.where(eligible, 1.0 / (1.0 + ent.clamp_min(0).nan_to_num(posinf=0.0)), torch.zeros_like(ent)).float()


class LocalizationHeadsScorer(AccumulatingScorer):
    """Selection frequency (top-``m`` per sample, ties by (layer, head)) of :func:`localization_heads_sample`.

    Needs ``info.grid`` and the ``last_prompt`` query (``query`` option to change it).
    """

    name = "localization_heads"
    omega = "freq"

    def __init__(self, *, query: str = "last_prompt", min_layer: int = MIN_LAYER, **kw):
        super().__init__(**kw)
        self.query = query
        self.min_layer = min_layer

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo) -> None:
        if sample_info.grid is None:
            raise ValueError("localization_heads needs SampleInfo.grid = (rows, cols) of the visual tokens")
        q = sample_info.query(self.query)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(localization_heads_sample(sample_rows, sample_info.visual_positions, tuple(sample_info.grid), q,
                                            min_layer=self.min_layer))


BASELINES: dict[str, type[AccumulatingScorer]] = {
    "retrieval_heads": RetrievalHeadsScorer,
    "qrhead": QRHeadScorer,
    "ocr_heads": OCRHeadsScorer,
    "vera": VERAScorer,
    "localization_heads": LocalizationHeadsScorer,
}
