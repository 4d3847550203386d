import doctest
import math

import pytest
import torch

import vrh.experiments.method_comparison as compare
from vrh.experiments.method_comparison import average_ranks, jaccard, kendall, spearman, topk_overlap


def test_doctests():
    res = doctest.testmod(compare, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted >= 5 and res.failed == 0


def test_hand_cases():
    a = torch.arange(12.0).reshape(3, 4)
    assert spearman(a, a) == pytest.approx(1.0) and kendall(a, a) == pytest.approx(1.0)
    assert spearman(a, -a) == pytest.approx(-1.0) and kendall(a, -a) == pytest.approx(-1.0)
    assert topk_overlap(a, a, 5) == 1.0 and jaccard(a, a, 5) == 1.0
    assert topk_overlap(a, -a, 5) == 0.0 and jaccard(a, -a, 5) == 0.0
    assert math.isnan(spearman(torch.ones(2, 2), a[:2, :2])) and math.isnan(kendall(torch.ones(2, 2), a[:2, :2]))
    # ties in top-k are broken by (layer, head): zeros map picks heads (0,0),(0,1)
    assert topk_overlap(torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [0.0, 0.0]]), 2) == 1.0
    with pytest.raises(ValueError):
        topk_overlap(a, a[:2], 3)
    with pytest.raises(ValueError):
        jaccard(a, a, 0)


def test_against_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(0)
    for trial in range(5):
        a = torch.randint(0, 6, (7, 9), generator=g).double()  # (7, 9) many ties
        b = a + torch.randint(-3, 4, (7, 9), generator=g)
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a.flatten(), b.flatten()).statistic, abs=1e-12)
        assert kendall(a, b) == pytest.approx(stats.kendalltau(a.flatten(), b.flatten()).statistic, abs=1e-12)
    x = torch.rand(40, generator=g)
    assert average_ranks(x).tolist() == pytest.approx(stats.rankdata(x.numpy()).tolist())


def test_kendall_chunked_matches_unchunked(monkeypatch):
    g = torch.Generator().manual_seed(1)
    a, b = torch.rand(50, generator=g), torch.rand(50, generator=g)
    full = kendall(a, b)
    monkeypatch.setattr(compare, "_PAIR_CHUNK", 7)
    assert kendall(a, b) == pytest.approx(full, abs=1e-12)


def test_map_similarity_on_known_maps():
    from vrh.experiments.method_comparison import finite_or_none, map_similarity

    a = torch.arange(8.0).reshape(2, 4)
    same = map_similarity(a, a.clone(), k=3)
    assert same["spearman"] == same["kendall"] == same["topk_overlap"] == same["jaccard"] == 1.0
    rev = map_similarity(a, -a, k=3)
    assert rev["spearman"] == pytest.approx(-1.0) and rev["kendall"] == pytest.approx(-1.0)
    assert rev["topk_overlap"] == 0.0 and rev["jaccard"] == 0.0
    assert rev["top20_k"] == 8 and rev["top20_overlap"] == 1.0  # top-20 capped at the 8 heads: all of them
    flat = map_similarity(torch.ones(2, 4), a, k=2)
    assert math.isnan(flat["spearman"]) and finite_or_none(flat["spearman"]) is None
