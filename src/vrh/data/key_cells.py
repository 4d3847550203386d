"""Which visual-token cells count as "in the ground-truth box": the one rule detection's key set (the paper's
K_s, :func:`vrh.core.regions.box_token_mask`) and the report's overlays ("% of it on cells overlapping the GT
box", :mod:`vrh.report.overlay`) share. numpy only, so the report, which never imports torch, reads it too."""

from __future__ import annotations

import numpy as np


def cells_in_box(rects, box, min_overlap: float = 0.0) -> np.ndarray:
    """Bool ``[V]``: the cells (``rects`` ``[V, 4]``, xyxy, original-image pixels, one per visual token) that
    overlap ``box`` (xyxy, same frame): any intersection of positive area (``min_overlap=0``, the paper's
    default), or, with ``min_overlap > 0``, intersection / cell area >= ``min_overlap``.

    >>> rects = np.array([[0., 0, 10, 10], [10, 0, 20, 10], [20, 0, 30, 10]])
    >>> cells_in_box(rects, (5, 2, 12, 8)).tolist()
    [True, True, False]
    >>> cells_in_box(rects, (5, 2, 12, 8), min_overlap=0.3).tolist()  # cells: 0.30, 0.12 covered
    [True, False, False]
    """
    rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)  # (V, 4)
    x1, y1, x2, y2 = (float(v) for v in box)
    iw = np.clip(np.minimum(rects[:, 2], x2) - np.maximum(rects[:, 0], x1), 0, None)  # (V,)
    ih = np.clip(np.minimum(rects[:, 3], y2) - np.maximum(rects[:, 1], y1), 0, None)  # (V,)
    inter = iw * ih  # (V,)
    if min_overlap <= 0:
        return inter > 0
    cell = np.clip((rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1]), 1e-12, None)  # (V,)
    return inter / cell >= min_overlap - 1e-12


def rule_words(min_overlap: float = 0.0) -> str:
    """The rule in a few words, for a figure's title: ``"on cells overlapping the GT box"``.

    >>> rule_words(0.3)
    'on cells >= 30% inside the GT box'
    """
    if min_overlap <= 0:
        return "on cells overlapping the GT box"
    return f"on cells >= {100 * min_overlap:.3g}% inside the GT box"
