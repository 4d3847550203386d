"""Magma: the ported processor, on its own (:mod:`vrh.models.adapters.magma.processing`).
The family end to end (loading, the adapter) is tests/models/adapters/test_magma.py."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("width, height", [(512, 512), (1024, 512), (512, 1024), (640, 480), (1792, 1344),
                                           (300, 1500), (2000, 300), (100, 80), (1500, 1500), (700, 1100)])
def test_crop_grid_is_llavas_select_best_resolution(width, height):
    """The remote processor's canvas choice is LLaVA's ``select_best_resolution`` over ``cols * 512 x rows * 512``
    with ``rows * cols <= 4``, candidates in its order (width factor outer): transformers' own copy agrees."""
    from transformers.image_processing_utils import select_best_resolution

    from vrh.models.adapters.magma.processing import best_grid

    candidates = [(rows * 512, cols * 512) for cols in range(1, 5) for rows in range(1, 4 // cols + 1)]  # (h, w)
    h, w = select_best_resolution((height, width), candidates)
    assert best_grid(width, height, 4, 512) == (h // 512, w // 512)
