"""How concentrated a head-score map is (paper Sec. 4, Fig. 5).

The paper's sparsity claim is quantitative: fewer than 15% of heads score above ``1e-3`` and 0-4% above
``5e-3``. These pure functions turn an ``[L, H]`` score map into exactly those numbers, plus a few robust
summaries (max, median, share of the total score held by the top 1% of heads), so that reports, tests and
notebooks all compute sparsity the same way.

Inputs may be a torch tensor, a numpy array or the nested ``[L][H]`` list stored in ``head_scores.json``.
Non-finite entries (NaN from a head that never saw a query) never count as "above" a threshold and are left
out of max / median / share, but still count in the denominator of fractions: a head without a score is a
head without evidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULT_THRESHOLDS = (1e-3, 5e-3)  # "non-negligible" and "high" in the paper's Fig. 5 discussion


def as_score_map(scores: Any) -> np.ndarray:
    """``scores`` as a floating ``[L, H]`` numpy array; anything that is not 2-D is an error.

    float32 / float16 maps keep their precision: a float32 score stored as ``1e-3`` is not "above" the
    threshold ``1e-3`` just because widening it to float64 makes it a hair larger. Everything else is float64.

    >>> as_score_map([[0.0, 1.0], [2.0, 3.0]]).shape
    (2, 2)
    """
    if hasattr(scores, "detach"):  # torch tensor, without importing torch here
        scores = scores.detach().cpu()
        scores = scores.numpy() if str(scores.dtype) in ("torch.float32", "torch.float16") else scores.double().numpy()
    arr = np.asarray(scores)
    arr = arr if arr.dtype in (np.float32, np.float16) else arr.astype(np.float64)
    if arr.ndim != 2:
        raise ValueError(f"score map must be [L, H], got shape {arr.shape}")
    return arr


def _above(arr: np.ndarray, threshold: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isfinite(arr) & (arr > arr.dtype.type(threshold))


def fraction_above(scores: Any, threshold: float) -> float:
    """Fraction of all heads whose score is strictly above ``threshold``.

    >>> fraction_above([[0.0, 0.002], [0.01, 0.0005]], 1e-3)
    0.5
    >>> fraction_above([[float("nan"), 1.0]], 0.5)
    0.5
    """
    arr = as_score_map(scores)
    if arr.size == 0:
        return 0.0
    return float(_above(arr, threshold).sum() / arr.size)


def top_share(scores: Any, fraction: float = 0.01) -> float:
    """Share of the total (finite, non-negative part of the) score held by the top ``ceil(fraction * n)``
    heads; 1.0 means every bit of score sits in those heads, ``fraction`` means the score is flat.
    An all-zero map has no mass to share and gives 0.0.

    >>> top_share([[8.0, 1.0], [1.0, 0.0]], fraction=0.25)  # the top 1 of 4 heads holds 8 of 10
    0.8
    """
    arr = as_score_map(scores)
    vals = np.clip(arr[np.isfinite(arr)].astype(np.float64), 0.0, None)
    total = vals.sum()
    if vals.size == 0 or total <= 0:
        return 0.0
    m = max(1, math.ceil(fraction * arr.size))
    return float(np.sort(vals)[::-1][:m].sum() / total)


def sparsity_summary(scores: Any, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> dict[str, Any]:
    """Everything the report says about sparsity, in one dict.

    Keys: ``num_layers``, ``num_heads``, ``n_heads`` (L*H), ``fraction_above`` and ``count_above``
    (threshold -> value), ``max``, ``median``, ``top1pct_share`` (:func:`top_share` at 1%) and
    ``top1pct_heads`` (how many heads that 1% is).

    >>> s = sparsity_summary([[0.0, 0.002, 0.0], [0.01, 0.0005, 0.0]])
    >>> s["n_heads"], s["fraction_above"][1e-3], s["count_above"][5e-3]
    (6, 0.333..., 1)
    >>> s["max"], s["median"], s["top1pct_heads"], round(s["top1pct_share"], 3)
    (0.01, 0.00025, 1, 0.8)
    """
    arr = as_score_map(scores)
    finite = arr[np.isfinite(arr)]
    n = int(arr.size)
    counts = {float(t): int(_above(arr, t).sum()) for t in thresholds}
    return {
        "num_layers": int(arr.shape[0]),
        "num_heads": int(arr.shape[1]),
        "n_heads": n,
        "fraction_above": {t: (c / n if n else 0.0) for t, c in counts.items()},
        "count_above": counts,
        "max": float(finite.max()) if finite.size else float("nan"),
        "median": float(np.median(finite)) if finite.size else float("nan"),
        "top1pct_share": top_share(arr, 0.01),
        "top1pct_heads": max(1, math.ceil(0.01 * n)) if n else 0,
    }


def histogram(scores: Any, bins: int | Sequence[float] = 50) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, edges)`` of the finite scores (numpy's convention: ``len(edges) == len(counts) + 1``).

    >>> counts, edges = histogram([[0.0, 0.1], [0.2, 0.9]], bins=[0.0, 0.5, 1.0])
    >>> counts.tolist(), edges.tolist()
    ([3, 1], [0.0, 0.5, 1.0])
    """
    arr = as_score_map(scores)
    counts, edges = np.histogram(arr[np.isfinite(arr)], bins=bins)
    return counts, edges
