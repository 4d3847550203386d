"""Retrieval Heads against its reference (nightdessert/Retrieval_Head retrieval_head_detection.py
retrieval_calculate), followed line by line in :func:`_reference`, and worked examples."""

import pytest
import torch

from vrh.scoring import make_scorer
from vrh.scoring.retrieval_heads import retrieval_heads_sample


def _reference(rows, needle, steps):
    """L221-228 without the copy check: per decoding step, topk(1) of the row; hit in the span adds
    1 / (needle_end - needle_start)."""
    L, H = rows.shape[:2]
    score = torch.zeros(L, H, dtype=torch.float64)
    for t in steps:
        for l in range(L):
            for h in range(H):
                _, idx = rows[l, h, t].topk(1)
                if needle[0] <= int(idx[0]) < needle[1]:
                    score[l, h] += 1 / (needle[1] - needle[0])
    return score


@pytest.mark.parametrize("seed", range(3))
def test_reference_variant_matches_the_reference_on_random_rows(seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.softmax(torch.randn(3, 4, 6, 12, generator=g) * 3, -1)  # (L, H, Q, S)
    want = _reference(A, (4, 7), [0, 2, 3, 5])
    got = retrieval_heads_sample(A, [4, 5, 6], [0, 2, 3, 5])
    assert torch.allclose(got.double(), want, atol=1e-6)
    eq1 = retrieval_heads_sample(A, [4, 5, 6], [0, 2, 3, 5], norm="queries")
    assert torch.allclose(eq1.double(), want * 3 / 4, atol=1e-6)  # the two norms differ by |K| / |Q_out|


def test_worked_examples_and_edge_cases():
    A = torch.tensor([[[[0.1, 0.6, 0.3], [0.7, 0.2, 0.1], [0.2, 0.2, 0.6]]]])  # (1, 1, 3, 3)
    assert retrieval_heads_sample(A, [1, 2], [0, 1, 2]).item() == pytest.approx(2 / 2)  # 2 hits / |K|
    assert retrieval_heads_sample(A, [1], [0, 1, 2]).item() == pytest.approx(1.0)  # one key in K: 1 hit / 1
    assert retrieval_heads_sample(A, [1], [0, 1, 2], norm="queries").item() == pytest.approx(1 / 3)
    assert retrieval_heads_sample(A, [], [0]).item() == 0.0  # the reference's unfound needle: no hit
    tie = torch.tensor([[[[0.4, 0.4, 0.2]]]])
    assert retrieval_heads_sample(tie, [1], [0]).item() == 0.0  # ties: the lowest position wins


def test_retrieval_heads_correct_only(rows_of, info_of):
    A = rows_of()
    sc = make_scorer("retrieval_heads")
    sc.update(A, info_of(correct=True))
    sc.update(A, info_of(key_positions=[], correct=False))
    assert sc.included().tolist() == [True, False]
    assert torch.allclose(sc.result(), retrieval_heads_sample(A, [5, 6], [4, 5]))
    with pytest.raises(ValueError, match="correct"):
        sc.update(A, info_of(correct=None))
    only_wrong = make_scorer("retrieval_heads:norm=queries")
    only_wrong.update(A, info_of(correct=False))
    assert torch.equal(only_wrong.result(), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="'norm'"):
        make_scorer("retrieval_heads:norm=tokens")
