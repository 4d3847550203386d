"""Key sets: which visual tokens cover the ground-truth box (the paper's K_s)."""

from __future__ import annotations

import torch


def box_token_mask(rects: torch.Tensor, box, min_overlap: float = 0.0) -> torch.Tensor:
    """Visual tokens whose image cell overlaps ``box``.

    ``rects`` is ``[V, 4]`` (xyxy, original-image pixels, one cell per visual token), ``box`` is xyxy in
    the same frame. A token is in K when the intersection area is > 0 (``min_overlap=0``, the paper's
    default) or, with ``min_overlap > 0``, when intersection / cell area >= ``min_overlap``.

    >>> rects = torch.tensor([[0., 0, 10, 10], [10, 0, 20, 10], [20, 0, 30, 10]])
    >>> box_token_mask(rects, (5, 2, 12, 8)).tolist()
    [True, True, False]
    >>> box_token_mask(rects, (5, 2, 12, 8), min_overlap=0.3).tolist()  # cells: 0.30, 0.12 covered
    [True, False, False]
    """
    rects = rects.double()
    x1, y1, x2, y2 = (float(v) for v in box)
    iw = (torch.minimum(rects[:, 2], torch.tensor(x2)) - torch.maximum(rects[:, 0], torch.tensor(x1))).clamp(min=0)
    ih = (torch.minimum(rects[:, 3], torch.tensor(y2)) - torch.maximum(rects[:, 1], torch.tensor(y1))).clamp(min=0)
    inter = iw * ih  # (V,)
    if min_overlap <= 0:
        return inter > 0
    cell = ((rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])).clamp(min=1e-12)  # (V,)
    return inter / cell >= min_overlap - 1e-12
