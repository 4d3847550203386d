import pytest
import torch

from vrh.core.heads import parse_head_list, random_heads, rank_heads, top_k


def test_rank_heads_orders_by_score_then_layer_head():
    scores = torch.tensor([[0.1, 0.5, 0.2], [0.5, 0.0, 0.9]])
    assert rank_heads(scores) == [(1, 2), (0, 1), (1, 0), (0, 2), (0, 0), (1, 1)]
    assert top_k(scores, 2) == [(1, 2), (0, 1)]


def test_rank_heads_puts_nan_last_and_rejects_bad_shape():
    scores = torch.tensor([[float("nan"), 0.2]])
    assert rank_heads(scores) == [(0, 1), (0, 0)]
    with pytest.raises(ValueError, match=r"\[L, H\]"):
        rank_heads(torch.zeros(3))


def test_random_heads_avoid_excluded_and_are_seeded():
    detected = [(0, 0), (1, 1)]
    a = random_heads(2, 3, 3, seed=1, exclude=detected)
    assert not set(a) & set(detected) and len(set(a)) == 3
    assert a == random_heads(2, 3, 3, seed=1, exclude=detected)
    assert all(l != 0 for l, _ in random_heads(2, 3, 2, seed=0, exclude_layers=[0]))
    with pytest.raises(ValueError, match="cannot draw"):
        random_heads(2, 3, 5, seed=0, exclude=detected)


def test_parse_head_list():
    assert parse_head_list("3:1, 10:4") == [(3, 1), (10, 4)]
    with pytest.raises(ValueError, match="LAYER:HEAD"):
        parse_head_list("3-1")
