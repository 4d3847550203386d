import doctest
import math

import pytest
import torch

import vrh.baselines as baselines
from vrh.baselines import (
    BASELINES,
    connected_components,
    elbow_index,
    localization_heads_sample,
    ocr_heads_sample,
    qrhead_sample,
    retrieval_heads_sample,
    spatial_entropy,
    vera_sample,
)
from vrh.scoring import SampleInfo, make_scorer


def test_doctests():
    res = doctest.testmod(baselines, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 10 and res.failed == 0


def _rows(L=3, H=2, Q=6, S=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(L, H, Q, S, generator=g) * 2, -1)  # (L, H, Q, S)


def _info(**kw):
    base = dict(key_positions=[5, 6], visual_positions=[2, 3, 4, 5, 6, 7], grid=(2, 3),
                queries={"out": [4, 5], "in": [0, 1, 2], "coord": [5], "last_prompt": [3], "null_in": [0]},
                correct=True, iou=0.7)
    base.update(kw)
    return SampleInfo(**base)


def test_all_baselines_run_finite_on_edge_cases():
    A = _rows()
    N = _rows(Q=2, seed=1)
    Z = torch.zeros_like(A)
    edge = [_info(), _info(key_positions=[]), _info(key_positions=[2, 3, 4, 5, 6, 7]),
            _info(queries={"out": [], "in": [], "last_prompt": [], "null_in": []})]
    for name in BASELINES:
        sc = make_scorer(name, seed=0)
        for info in edge:
            for rows in (A, Z):
                if name == "qrhead":
                    sc.update(rows, info, null_rows=N)
                else:
                    sc.update(rows, info)
        assert sc.per_sample().shape == (8, 3, 2)
        assert torch.isfinite(sc.per_sample()).all() and torch.isfinite(sc.result()).all()


def test_retrieval_heads_correct_only():
    A = _rows()
    sc = make_scorer("retrieval_heads")
    sc.update(A, _info(correct=True))
    sc.update(A, _info(key_positions=[], correct=False))
    assert sc.included().tolist() == [True, False]
    assert torch.allclose(sc.result(), retrieval_heads_sample(A, [5, 6], [4, 5]))
    with pytest.raises(ValueError, match="correct"):
        sc.update(A, _info(correct=None))
    only_wrong = make_scorer("retrieval_heads")
    only_wrong.update(A, _info(correct=False))
    assert torch.equal(only_wrong.result(), torch.zeros(3, 2))


def test_qrhead_outlier_removal_and_calibration():
    # 7 query tokens, one outlier: scores 0.5 x6 and 0.0 -> mean 0.4286, std 0.1750, cut 0.0786 -> drop 0.0
    A = torch.zeros(1, 1, 7, 2)  # (1, 1, 7, 2)
    A[0, 0, :, 1] = torch.tensor([0.5] * 6 + [0.0])
    A[0, 0, :, 0] = 1 - A[0, 0, :, 1]
    assert torch.allclose(qrhead_sample(A, [1], range(7), calibrate=False), torch.tensor([[0.5]]))
    # 5 tokens can never be 2 population stds below the mean -> nothing dropped
    assert torch.allclose(qrhead_sample(A[:, :, 2:], [1], range(5), calibrate=False), torch.tensor([[0.4]]))
    N = torch.tensor([[[[0.75, 0.25]]]])
    assert torch.allclose(qrhead_sample(A, [1], range(7), N, null_queries=[0]), torch.tensor([[0.25]]))
    with pytest.raises(ValueError, match="null"):
        qrhead_sample(A, [1], range(7))
    with pytest.raises(ValueError, match="null"):
        make_scorer("qrhead").update(_rows(), _info())
    sc = make_scorer("qrhead", calibrate=False)
    sc.update(_rows(), _info())  # documented fallback
    assert sc.per_sample().shape == (1, 3, 2)


def test_ocr_heads_weight_and_visual_argmax():
    A = _rows()
    hits = ocr_heads_sample(A, [5, 6], [2, 3, 4, 5, 6, 7], [4, 5])
    sc = make_scorer("ocr_heads")
    sc.update(A, _info(correct=True))
    sc.update(A, _info(correct=False))
    assert torch.allclose(sc.result(), hits / 2)
    iou = make_scorer("ocr_heads", weight="iou")
    iou.update(A, _info(iou=0.7))
    assert torch.allclose(iou.result(), hits * 0.7)
    with pytest.raises(ValueError, match="iou"):
        iou.update(A, _info(iou=None))


def test_vera_ratio_and_k_equals_v():
    A = _rows()
    v = [2, 3, 4, 5, 6, 7]
    assert torch.allclose(vera_sample(A, v, v, [3]), torch.ones(3, 2))  # K = V -> 1
    r = vera_sample(A, [5, 6, 0], v, [3])  # non-visual key 0 ignored (K intersect V)
    assert torch.allclose(r, A[:, :, 3, [5, 6]].sum(-1) / A[:, :, 3, v].sum(-1))
    assert torch.equal(vera_sample(torch.zeros_like(A), v, v, [3]), torch.zeros(3, 2))


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


def test_localization_heads_frequency():
    L, H, S = 4, 2, 1 + 9
    A = torch.zeros(L, H, 1, S)  # (L, H, 1, S): key 0 text, keys 1..9 a 3x3 grid
    A[..., 0] = 1.0  # by default all attention on text -> image sum 0
    A[2, 1, 0] = 0.0
    A[2, 1, 0, 1:3] = 0.5  # one blob
    A[3, 0, 0] = 0.0
    A[3, 0, 0, [1, 9]] = 0.5  # two blobs -> ln 2
    A[1, 0, 0] = 0.0
    A[1, 0, 0, 5] = 1.0  # layer 1 excluded
    info = _info(visual_positions=list(range(1, 10)), grid=(3, 3), queries={"last_prompt": [0]})
    score = localization_heads_sample(A, info.visual_positions, info.grid, [0])
    assert score[2, 1] == 1.0 and math.isclose(float(score[3, 0]), 1 / (1 + math.log(2)), rel_tol=1e-5)
    assert score[1, 0] == 0 and (score > 0).sum() == 2
    sc = make_scorer("localization_heads", m=1)
    sc.update(A, info)
    sc.update(A, info)
    assert sc.result()[2, 1] == 1.0 and sc.result().sum() == 1.0
    with pytest.raises(ValueError, match="grid"):
        make_scorer("localization_heads").update(A, _info(grid=None))
    with pytest.raises(ValueError, match="cells"):
        localization_heads_sample(A, list(range(1, 10)), (2, 3), [0])
