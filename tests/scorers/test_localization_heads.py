import math

import pytest
import torch

from vrh.scorers import make_scorer
from vrh.scorers.localization_heads import (
    connected_components,
    elbow_index,
    localization_heads_sample,
    spatial_entropy,
)


def test_elbow_and_entropy_hand_cases():
    assert elbow_index(torch.tensor([5.0, 5.0, 5.0])) == 0
    assert elbow_index(torch.tensor([1.0, 0.5])) == 0
    # scaled: x = 0, .2, .4, .6, .8, 1; y = 1, .9, .8, .01, .005, 0 -> |1 - x - y| = 0, .1, .2, .39, .195, 0
    assert elbow_index(torch.tensor([100.0, 90.0, 80.0, 1.0, 0.5, 0.0])) == 3
    assert elbow_index(torch.tensor([10.0, 2.0, 1.0, 0.0])) == 1
    four = torch.zeros(1, 3, 3)
    four[0, 0, 0] = four[0, 0, 2] = four[0, 2, 0] = four[0, 2, 2] = 0.25  # 4 equal blobs -> ln 4
    assert math.isclose(float(spatial_entropy(four)), math.log(4), rel_tol=1e-5)
    assert math.isinf(float(spatial_entropy(torch.full((1, 2, 2), 0.25))))  # nothing above the mean


def test_connected_components_match_scipy_if_available():
    ndimage = pytest.importorskip("scipy.ndimage")
    g = torch.Generator().manual_seed(0)
    masks = torch.rand(20, 6, 7, generator=g) > 0.55  # (20, 6, 7)
    lab = connected_components(masks)
    for b in range(20):
        ref, n = ndimage.label(masks[b].numpy(), structure=[[1, 1, 1]] * 3)
        ours = lab[b].numpy()
        assert len(set(ours[ours > 0].tolist())) == n
        pairs = {(int(x), int(y)) for x, y in zip(ours.ravel(), ref.ravel())}
        assert len(pairs) == n + (1 if (ref == 0).any() else 0)  # a bijection between labelings


def _planted():
    L, H, S = 4, 2, 1 + 9
    A = torch.zeros(L, H, 1, S)  # (L, H, 1, S): key 0 text, keys 1..9 a 3x3 grid
    A[..., 0] = 1.0  # by default all attention on text -> image sum 0
    A[2, 1, 0] = 0.0
    A[2, 1, 0, 1:3] = 0.5  # one blob
    A[3, 0, 0] = 0.0
    A[3, 0, 0, [1, 9]] = 0.5  # two blobs -> ln 2
    A[1, 0, 0] = 0.0
    A[1, 0, 0, 5] = 1.0  # layer 1 excluded
    return A


def test_localization_heads_frequency(info_of):
    A = _planted()
    info = info_of(visual_positions=list(range(1, 10)), grid=(3, 3), queries={"last_prompt": [0]})
    score = localization_heads_sample(A, info.visual_positions, info.grid, [0])
    assert score[2, 1] == 1.0 and math.isclose(float(score[3, 0]), 1 / (1 + math.log(2)), rel_tol=1e-5)
    assert score[1, 0] == 0 and (score > 0).sum() == 2
    sc = make_scorer("localization_heads", m=1)
    sc.update(A, info)
    sc.update(A, info)
    assert sc.result()[2, 1] == 1.0 and sc.result().sum() == 1.0
    with pytest.raises(ValueError, match="grid"):
        make_scorer("localization_heads").update(A, info_of(grid=None))
    with pytest.raises(ValueError, match="cells"):
        localization_heads_sample(A, list(range(1, 10)), (2, 3), [0])


def test_localization_heads_spec_options(info_of):
    A = _planted()
    info = info_of(visual_positions=list(range(1, 10)), grid=(3, 3), queries={"last_prompt": [0]})
    layer1 = make_scorer("localization_heads:min_layer=1:m=1")  # the layer-1 head (one cell, entropy 0) joins
    layer1.update(A, info)
    assert layer1.name == "localization_heads:m=1:min_layer=1"
    assert layer1.result()[1, 0] == 1.0 and layer1.result().sum() == 1.0
    both = make_scorer("localization_heads:m=2")
    both.update(A, info)
    assert both.result()[2, 1] == 1.0 and both.result()[3, 0] == 1.0 and both.result().sum() == 2.0
