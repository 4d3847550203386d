import doctest

import pytest
import torch

import vrh.scoring.functions as scoring
from vrh.scoring import make_scorer, scorer_names
from vrh.scoring.functions import (DEFAULT_VARIANT, argmax_in_region, per_sample_score, region_sum,
                                   selection_frequency, top_m_mask)
from vrh.scoring.base import VARIANT_NAMES, SampleInfo, Scorer, Variant, VariantScorer, select_queries


def test_doctests():
    res = doctest.testmod(scoring, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 10 and res.failed == 0


def _rows(L=2, H=3, Q=4, S=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(L, H, Q, S, generator=g), -1)  # (L, H, Q, S)


def test_region_sum_matches_manual_and_bool_mask():
    A = _rows()
    keys = torch.tensor([False, True, True, False, False, True])
    assert torch.allclose(region_sum(A, keys), A[..., [1, 2, 5]].sum(-1))
    assert torch.allclose(region_sum(A, range(6)), torch.ones(2, 3, 4))  # K = all keys -> mass 1


def test_argmax_ties_lowest_position_and_zero_rows():
    A = torch.tensor([[[[0.4, 0.4, 0.2], [0.0, 0.0, 0.0]]]])  # (1, 1, 2, 3): tie at 0 and 1; all-zero row
    assert argmax_in_region(A, [1]).tolist() == [[[0.0, 0.0]]]  # key 0 wins the tie; zero row no hit
    assert argmax_in_region(A, [0]).tolist() == [[[1.0, 0.0]]]
    assert argmax_in_region(A, [1], among=[1, 2]).tolist() == [[[1.0, 0.0]]]  # text key 0 not competing


def test_edge_cases_are_zero_and_nan_free():
    A = _rows()
    assert torch.equal(per_sample_score(A, [], [0, 1], "sum"), torch.zeros(2, 3))  # empty K
    assert torch.equal(per_sample_score(A, [], [0, 1], "argmax"), torch.zeros(2, 3))
    assert torch.equal(per_sample_score(A, [1], [], "sum"), torch.zeros(2, 3))  # Q empty
    Z = torch.zeros(2, 3, 4, 6)
    for phi in ("sum", "argmax"):
        out = per_sample_score(Z, [1, 2], [0, 3], phi)
        assert torch.equal(out, torch.zeros(2, 3))
    with pytest.raises(IndexError):
        region_sum(A, [6])
    with pytest.raises(ValueError):
        region_sum(A[0], [1])


def test_selection_frequency_ties_and_no_signal():
    ps = torch.zeros(2, 2, 2)  # (N, L, H)
    ps[0] = torch.tensor([[0.3, 0.3], [0.3, 0.1]])  # three-way tie for m=2 -> (0,0), (0,1)
    # sample 1 all zero: votes for nobody
    freq = selection_frequency(ps, m=2)
    assert freq.tolist() == [[0.5, 0.5], [0.0, 0.0]]
    assert top_m_mask(torch.tensor([[float("nan"), 1.0]]), m=2).tolist() == [[False, True]]


def test_variant_grammar_and_errors():
    assert len(VARIANT_NAMES) == 20 and DEFAULT_VARIANT in VARIANT_NAMES
    assert Variant.parse("in+out/argmax/freq") == Variant("in+out", "argmax", "freq")
    for bad, msg in [("out/sum", "QUERY/PHI/OMEGA"), ("outs/sum/mean", "query set"),
                     ("out/max/mean", "key aggregation"), ("out/sum/median", "sample aggregation")]:
        with pytest.raises(ValueError, match=msg):
            Variant.parse(bad)
    with pytest.raises(ValueError, match="unknown scorer"):
        make_scorer("nonsense")
    assert set(scorer_names()) >= {"out/sum/mean", "qrhead", "localization_heads"}


def test_select_queries_rand1_deterministic_and_seeded():
    info = SampleInfo([0], [0], queries={"out": list(range(10)), "in": [], "coord": []})
    picks = [select_queries(info, "rand1", seed=3, sample_index=i).tolist() for i in range(20)]
    assert picks == [select_queries(info, "rand1", seed=3, sample_index=i).tolist() for i in range(20)]
    assert all(len(p) == 1 for p in picks) and len({p[0] for p in picks}) > 1
    assert select_queries(SampleInfo([0], [0], queries={"out": []}), "rand1").numel() == 0
    with pytest.raises(KeyError, match="'coord'"):
        select_queries(SampleInfo([0], [0], queries={"out": [1]}), "coord")


def test_variant_scorer_accumulates_per_sample_and_counts_edges():
    A = _rows(Q=4)
    infos = [SampleInfo([1, 2], [1, 2, 3, 4], queries={"out": [2, 3], "in": [0, 1], "coord": [3]}),
             SampleInfo([], [1, 2, 3, 4], queries={"out": [2, 3], "in": [0, 1], "coord": [3]}),
             SampleInfo([4], [1, 2, 3, 4], queries={"out": [], "in": [0], "coord": []})]
    for name in VARIANT_NAMES:
        sc = make_scorer(name, seed=0)
        assert isinstance(sc, Scorer)
        for info in infos:
            sc.update(A, info)
        ps = sc.per_sample()
        assert ps.shape == (3, 2, 3) and torch.isfinite(sc.result()).all()
        assert sc.n_empty_keys == 1
    sc = VariantScorer("out/sum/mean")
    for info in infos:
        sc.update(A, info)
    expect = torch.stack([A[:, :, [2, 3]][..., [1, 2]].sum(-1).mean(-1), torch.zeros(2, 3), torch.zeros(2, 3)])
    assert torch.allclose(sc.per_sample(), expect)
    assert torch.allclose(sc.result(), expect.mean(0))
    assert sc.n_empty_queries == 1
    with pytest.raises(ValueError, match="no samples"):
        VariantScorer().result()


def test_default_variant_ranks_planted_head_first():
    L, H, Q, S = 3, 4, 5, 20
    rows = []
    for s in range(4):
        A = torch.full((L, H, Q, S), 1.0 / S)  # (L, H, Q, S) uniform
        A[1, 2, 3:] = 0.0
        A[1, 2, 3:, 10:12] = 0.5  # the planted head sends output-token attention to K = {10, 11}
        rows.append(A)
    sc = make_scorer(DEFAULT_VARIANT)
    for A in rows:
        sc.update(A, SampleInfo([10, 11], list(range(8, 20)), queries={"out": [3, 4], "in": [0, 1]}))
    from vrh.core.heads import top_k

    assert top_k(sc.result(), 1) == [(1, 2)]
    assert torch.allclose(sc.result()[1, 2], torch.tensor(1.0))


def test_freq_zero_rule_changes_rankings_when_few_heads_are_positive():
    # 2 samples, 4 heads, m = 2; sample 0 has one positive head, sample 1 two
    ps = torch.tensor([[[0.0, 0.9, 0.0, 0.0]], [[0.0, 0.0, 0.5, 0.4]]])  # (2, 1, 4)
    assert selection_frequency(ps, m=2).tolist() == [[0.0, 0.5, 0.5, 0.5]]  # sample 0 votes once
    # include: sample 0's second slot goes to the first zero head in (layer, head) order
    assert selection_frequency(ps, m=2, zeros="include").tolist() == [[0.5, 0.5, 0.5, 0.5]]
    sc = make_scorer("out/argmax/freq:m=2:zeros=include")
    assert sc.name == "out/argmax/freq:m=2:zeros=include" and sc.zeros == "include"
    nan = torch.tensor([[float("nan"), 0.0]])
    assert top_m_mask(nan, m=2, zeros="include").tolist() == [[False, True]]  # NaN is never selected
    with pytest.raises(ValueError, match="zeros"):
        top_m_mask(ps, m=2, zeros="all")
