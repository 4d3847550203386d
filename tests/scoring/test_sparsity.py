import math

import numpy as np
import pytest
import torch

from vrh.scoring.sparsity import fraction_above, histogram, sparsity_summary, top_share


def paper_like_map():
    """28 x 28 heads: 100 'non-negligible' (0.002), 20 of them 'high' (0.01), the rest ~0."""
    s = np.full((28, 28), 1e-5)
    s.flat[:100] = 0.002
    s.flat[:20] = 0.01
    return s


def test_fractions_match_counts_on_a_known_map():
    s = paper_like_map()
    assert fraction_above(s, 1e-3) == pytest.approx(100 / 784)
    assert fraction_above(s, 5e-3) == pytest.approx(20 / 784)
    summary = sparsity_summary(s)
    assert summary["count_above"] == {1e-3: 100, 5e-3: 20}
    assert summary["n_heads"] == 784 and summary["num_layers"] == 28 and summary["num_heads"] == 28
    assert summary["max"] == 0.01 and summary["median"] == 1e-5
    assert summary["top1pct_heads"] == 8
    total = 20 * 0.01 + 80 * 0.002 + 684 * 1e-5
    assert summary["top1pct_share"] == pytest.approx(8 * 0.01 / total)


def test_threshold_is_strict_and_inputs_may_be_tensor_or_list():
    s = [[1e-3, 2e-3]]
    assert fraction_above(s, 1e-3) == 0.5
    assert fraction_above(torch.tensor(s), 1e-3) == 0.5
    assert fraction_above(np.array(s, dtype=np.float32), 1e-3) == 0.5  # compared in float32, not widened
    assert fraction_above(np.array(s), 0.0) == 1.0


def test_custom_thresholds_and_nan_heads():
    s = [[float("nan"), 0.5], [0.2, 0.0]]
    summary = sparsity_summary(s, thresholds=(0.1, 0.3))
    assert summary["fraction_above"] == {0.1: 0.5, 0.3: 0.25}  # NaN counts in the denominator only
    assert summary["max"] == 0.5 and summary["median"] == 0.2


def test_flat_and_empty_maps():
    assert top_share(np.ones((10, 10)), 0.01) == pytest.approx(0.01)
    assert top_share(np.zeros((3, 3))) == 0.0
    empty = sparsity_summary(np.zeros((0, 4)))
    assert empty["n_heads"] == 0 and empty["fraction_above"][1e-3] == 0.0 and math.isnan(empty["max"])


def test_histogram_counts_every_finite_head():
    s = paper_like_map()
    counts, edges = histogram(s, bins=10)
    assert counts.sum() == 784 and len(edges) == 11
    counts, _ = histogram([[0.0, float("nan")], [1.0, 1.0]], bins=2)
    assert counts.tolist() == [1, 2]


def test_not_a_score_map_is_an_error():
    with pytest.raises(ValueError, match=r"\[L, H\]"):
        sparsity_summary(np.zeros(5))
