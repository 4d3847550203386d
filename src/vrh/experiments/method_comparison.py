"""Compare two ``[L, H]`` head score maps: top-k set agreement and rank correlations.

Why these four: the paper's cross-model (Sec. 5.3, Fig. 7) and stability (Sec. 5.4, Fig. 8c) analyses ask
both "do the two maps pick the same top heads?" (top-k overlap, Jaccard -- what masking cares about) and
"do they order all heads alike?" (Spearman, Kendall tau-b -- robust to the long tail of near-zero heads
only through ties, so both handle ties exactly). Top-k sets come from :func:`vrh.core.heads.top_k`, so ties
are broken by (layer, head) order everywhere in vrh. Correlations of a constant map are undefined: NaN
(as scipy returns).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from vrh.core.heads import top_k

_PAIR_CHUNK = 1024  # rows of the pairwise sign matrix built at once in kendall (bounds memory at chunk * n)


def _pair(a, b) -> tuple[torch.Tensor, torch.Tensor]:
    ta = torch.as_tensor(np.asarray(a, dtype=np.float64) if not isinstance(a, torch.Tensor) else a)
    tb = torch.as_tensor(np.asarray(b, dtype=np.float64) if not isinstance(b, torch.Tensor) else b)
    if ta.shape != tb.shape:
        raise ValueError(f"score maps differ in shape: {tuple(ta.shape)} vs {tuple(tb.shape)}")
    return ta.detach().double().cpu(), tb.detach().double().cpu()


def _sets(a, b, k: int) -> tuple[set, set]:
    ta, tb = _pair(a, b)
    if ta.dim() != 2:
        raise ValueError(f"score maps must be [L, H], got shape {tuple(ta.shape)}")
    if not 1 <= k <= ta.numel():
        raise ValueError(f"k must lie in [1, {ta.numel()}], got {k}")
    return set(top_k(ta, k)), set(top_k(tb, k))


def topk_overlap(a, b, k: int) -> float:
    """Fraction of ``a``'s top-``k`` heads that are also in ``b``'s top-``k``: ``|A & B| / k``.

    >>> topk_overlap(torch.tensor([[4., 3.], [2., 1.]]), torch.tensor([[4., 1.], [3., 2.]]), k=2)
    0.5
    """
    sa, sb = _sets(a, b, k)
    return len(sa & sb) / k


def jaccard(a, b, k: int) -> float:
    """Jaccard index of the two top-``k`` sets: ``|A & B| / |A | B|``.

    >>> jaccard(torch.tensor([[4., 3.], [2., 1.]]), torch.tensor([[4., 1.], [3., 2.]]), k=2)  # 1 / 3
    0.3333333333333333
    """
    sa, sb = _sets(a, b, k)
    return len(sa & sb) / len(sa | sb)


def average_ranks(x) -> torch.Tensor:
    """1-based ranks of the flattened values, ties sharing their average rank (float64).

    >>> average_ranks(torch.tensor([10., 20., 10., 30.])).tolist()
    [1.5, 3.0, 1.5, 4.0]
    """
    v = torch.as_tensor(x).detach().double().reshape(-1)  # (n,)
    if torch.isnan(v).any():
        raise ValueError("score map contains NaN")
    vals, order = torch.sort(v, stable=True)
    _, counts = torch.unique_consecutive(vals, return_counts=True)  # tie groups in sorted order
    ends = torch.cumsum(counts, 0).double()  # last 1-based rank of each group
    group_rank = ends - (counts.double() - 1) / 2  # average of ranks (end - c + 1 .. end)
    ranks = torch.empty_like(v)
    ranks[order] = torch.repeat_interleave(group_rank, counts)
    return ranks


def _pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float((xc * xc).sum()) * float((yc * yc).sum()))
    return float("nan") if den == 0 else max(-1.0, min(1.0, float((xc * yc).sum()) / den))


def spearman(a, b) -> float:
    """Spearman rank correlation over all heads (Pearson of average ranks; ties handled).

    >>> spearman(torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([[1., 3.], [2., 9.]]))
    0.8
    """
    ta, tb = _pair(a, b)
    return _pearson(average_ranks(ta), average_ranks(tb))


def kendall(a, b) -> float:
    """Kendall's tau-b over all heads: ``(C - D) / sqrt((P - T_a) (P - T_b))`` with ``P`` pairs and ``T_x``
    the pairs tied in ``x`` -- computed as ``sum sgn(da) sgn(db) / sqrt(sum |sgn(da)| * sum |sgn(db)|)``
    over all ordered pairs (the factor 2 cancels), in row chunks so memory stays ``O(chunk * n)``.

    >>> kendall([1, 2, 3, 4], [1, 2, 3, 4]), kendall([1, 2, 3, 4], [4, 3, 2, 1])
    (1.0, -1.0)
    >>> round(kendall([1, 2, 2, 3], [1, 2, 3, 3]), 4)  # C=4, D=0, 1 tie in each: 4 / sqrt(5 * 5)
    0.8
    """
    ta, tb = _pair(a, b)
    x, y = ta.reshape(-1), tb.reshape(-1)  # (n,)
    if torch.isnan(x).any() or torch.isnan(y).any():
        raise ValueError("score map contains NaN")
    num = nx = ny = 0.0
    for s in range(0, x.numel(), _PAIR_CHUNK):
        sx = torch.sign(x[s : s + _PAIR_CHUNK, None] - x[None, :])  # (chunk, n)
        sy = torch.sign(y[s : s + _PAIR_CHUNK, None] - y[None, :])  # (chunk, n)
        num += float((sx * sy).sum())
        nx += float(sx.abs().sum())
        ny += float(sy.abs().sum())
    den = math.sqrt(nx * ny)
    return float("nan") if den == 0 else max(-1.0, min(1.0, num / den))


FIG7_K = 20  # the paper's "top-20 overlap" (Fig. 7), reported next to the top-k overlap whatever k is


def map_similarity(scores_a, scores_b, k: int) -> dict[str, float | int]:
    """Agreement of two ``[L, H]`` score maps, as ``vrh transfer`` and ``vrh compare`` report it: rank
    correlations over all heads, and the overlap of the top-``k`` and top-20 sets (top-20 is capped at
    the number of heads, recorded as ``top20_k``).

    >>> a = torch.arange(8.0).reshape(2, 4)
    >>> sim = map_similarity(a, -a, k=3)
    >>> sim["spearman"], sim["topk_overlap"], sim["top20_k"], sim["top20_overlap"]
    (-1.0, 0.0, 8, 1.0)
    """
    n = torch.as_tensor(scores_a).numel()
    k20 = min(FIG7_K, n)
    return {"spearman": spearman(scores_a, scores_b), "kendall": kendall(scores_a, scores_b),
            "topk_overlap": topk_overlap(scores_a, scores_b, k), "jaccard": jaccard(scores_a, scores_b, k),
            "top20_overlap": topk_overlap(scores_a, scores_b, k20), "top20_k": k20}


def finite_or_none(x: float | None) -> float | None:
    """An undefined correlation (NaN) as None, so results.json stays strict JSON.

    >>> finite_or_none(float("nan")), finite_or_none(0.5)
    (None, 0.5)
    """
    return None if x is None or math.isnan(x) else float(x)
