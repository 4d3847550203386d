"""One rule for "in the ground-truth box": detection's key set and the report's overlays read the same
function (issue 46 item 7: the overlay counted cell centres, detection any overlap)."""

import numpy as np
import pytest
import torch

from vrh.core.regions import box_token_mask
from vrh.data.key_cells import cells_in_box, rule_words
from vrh.report import overlay


@pytest.mark.parametrize("min_overlap", [0.0, 0.3, 1.0])
def test_detection_and_the_overlay_count_the_same_cells(min_overlap):
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 90, size=(200, 2))
    rects = np.concatenate([xy, xy + rng.uniform(1, 12, size=(200, 2))], axis=1)  # (V, 4) xyxy
    for box in ([10.0, 20.0, 40.5, 33.0], [0, 0, 100, 100], [50, 50, 50.5, 50.5]):
        k = box_token_mask(torch.from_numpy(rects).float(), box, min_overlap)
        assert k.dtype == torch.bool and k.tolist() == cells_in_box(rects.astype(np.float32), box, min_overlap).tolist()
        share = overlay.mass_in_box(np.ones(len(rects)), rects, box, min_overlap)
        assert share == pytest.approx(cells_in_box(rects, box, min_overlap).mean())


def test_a_cell_overlapping_the_box_counts_though_its_centre_is_outside():
    rects = np.array([[0.0, 0, 10, 10], [10, 0, 20, 10]])
    box = (8, 0, 12, 10)  # covers 20% of each cell, neither centre
    assert cells_in_box(rects, box).tolist() == [True, True]
    assert cells_in_box(rects, box, min_overlap=0.25).tolist() == [False, False]
    assert overlay.mass_in_box(np.array([0.5, 0.5]), rects, box) == 1.0  # the centre rule gave 0
    assert rule_words() == "on cells overlapping the GT box"


def test_box_token_mask_keeps_the_device_and_leaves_rects_alone():
    rects = torch.tensor([[0.0, 0, 10, 10], [10, 0, 20, 10]], requires_grad=True)
    out = box_token_mask(rects, (0, 0, 5, 5))
    assert out.device == rects.device and out.tolist() == [True, False]
