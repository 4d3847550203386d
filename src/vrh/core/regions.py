"""Key sets: which visual tokens cover the ground-truth box (the paper's K_s)."""

from __future__ import annotations

import torch

from vrh.data.key_cells import cells_in_box


def box_token_mask(rects: torch.Tensor, box, min_overlap: float = 0.0) -> torch.Tensor:
    """Visual tokens whose image cell overlaps ``box``.

    ``rects`` is ``[V, 4]`` (xyxy, original-image pixels, one cell per visual token), ``box`` is xyxy in
    the same frame. A token is in K when the intersection area is > 0 (``min_overlap=0``, the paper's
    default) or, with ``min_overlap > 0``, when intersection / cell area >= ``min_overlap``. The rule is
    :func:`vrh.data.key_cells.cells_in_box`, the one the report's overlays count "in the GT box" by.

    >>> rects = torch.tensor([[0., 0, 10, 10], [10, 0, 20, 10], [20, 0, 30, 10]])
    >>> box_token_mask(rects, (5, 2, 12, 8)).tolist()
    [True, True, False]
    >>> box_token_mask(rects, (5, 2, 12, 8), min_overlap=0.3).tolist()  # cells: 0.30, 0.12 covered
    [True, False, False]
    """
    mask = cells_in_box(rects.detach().to("cpu", torch.float64).numpy(), box, min_overlap)  # (V,)
    return torch.from_numpy(mask).to(rects.device)
