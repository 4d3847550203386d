"""Top-k overlap figures and their chance levels (vrh.scoring.head_overlap), checked by simulation."""

import math
import random

import pytest

from vrh.scoring.head_overlap import chance, intersection_pmf, kendall_null_sd, p_at_least, spearman_null_sd, topk_overlap


@pytest.mark.parametrize("k,n", [(5, 32), (10, 32), (3, 8)])
def test_chance_levels_match_a_simulation_of_random_top_k_sets(k, n):
    rng = random.Random(0)
    heads = list(range(n))
    xs = [len(set(rng.sample(heads, k)) & set(rng.sample(heads, k))) for _ in range(20000)]
    c = chance(k, n)
    assert math.isclose(sum(intersection_pmf(k, n)), 1.0)
    assert abs(c.intersection - sum(xs) / len(xs)) < 0.03
    assert abs(c.jaccard - sum(x / (2 * k - x) for x in xs) / len(xs)) < 0.01
    x = 3
    assert abs(p_at_least(x, k, n) - sum(v >= x for v in xs) / len(xs)) < 0.01


def test_overlap_of_rankings_and_refusals():
    a = [(0, 0), (0, 1), (1, 0), (1, 1)]
    o = topk_overlap(a, list(reversed(a)), k=2, n=4)
    assert o.intersection == 0 and o.jaccard == 0.0 and o.p_value == 1.0
    full = topk_overlap(a, a, k=4, n=4)
    assert full.fraction == 1.0 and full.jaccard == 1.0 and full.chance.fraction == 1.0
    with pytest.raises(ValueError, match="at least 3 heads"):
        topk_overlap(a[:2], a, k=3, n=4)
    with pytest.raises(ValueError, match=r"k must lie in \[1, 4\]"):
        topk_overlap(a, a, k=5, n=4)


def test_rank_correlation_null_spread_matches_a_simulation():
    from vrh.experiments.method_comparison import kendall, spearman

    rng = random.Random(1)
    n = 32
    rho, tau = [], []
    for _ in range(400):
        a, b = list(range(n)), list(range(n))
        rng.shuffle(b)
        rho.append(spearman(a, b))
        tau.append(kendall(a, b))
    sd = lambda v: (sum(x * x for x in v) / len(v)) ** 0.5  # noqa: E731 - mean 0 under the null
    assert abs(sd(rho) - spearman_null_sd(n)) < 0.02 and abs(sd(tau) - kendall_null_sd(n)) < 0.015
