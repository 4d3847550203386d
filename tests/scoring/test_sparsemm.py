"""SparseMM's visual-head score against an independent, naive reading of the authors' ``hit_score`` loop
(CR400AF-A/SparseMM @ d3662cd, visual_head/llava_visual_head_coco.py): per step, per layer, per head, the
top-1 key of the step's row; a hit in the box tokens adds 1 / len(box tokens)."""

from __future__ import annotations

import pytest
import torch

from vrh.scoring import compare_baselines, make_scorer
from vrh.scoring.base import SampleInfo
from vrh.scoring.sparsemm import sparsemm_sample


def _naive(rows, box_tokens, steps):
    L, H = rows.shape[:2]
    score = [[0.0] * H for _ in range(L)]
    for q in steps:
        for layer in range(L):
            for head in range(H):
                row = rows[layer, head, q].tolist()
                best = max(range(len(row)), key=lambda j: (row[j], -j))  # top-1, the lowest index on a tie
                if row[best] > 0 and best in box_tokens:
                    score[layer][head] += 1 / len(box_tokens)
    return torch.tensor(score)


@pytest.mark.parametrize("seed", range(5))
def test_equals_a_naive_reading_of_the_reference_loop(seed):
    g = torch.Generator().manual_seed(seed)
    L, H, Q, S = 3, 4, 5, 12
    rows = torch.softmax(torch.randn(L, H, Q, S, generator=g) * 3, -1)
    rows[0, 0, 1] = 0  # an all-zero row never hits
    rows[1, 2, 0, :] = 0.5 / S
    rows[1, 2, 0, [3, 7]] = 0.25  # a tie: the lowest key wins (3, outside the box below; 7 inside)
    box = [5, 6, 7, 8]
    steps = [0, 1, 3, 4]
    got = sparsemm_sample(rows, box, steps)
    assert torch.allclose(got, _naive(rows, set(box), steps), atol=1e-6)
    assert got[1, 2] == _naive(rows, set(box), [0])[1, 2] + _naive(rows, set(box), [1, 3, 4])[1, 2]


def test_scorer_means_every_sample_and_reads_the_chosen_queries():
    rows = torch.zeros(1, 2, 3, 4)  # (L, H, Q, S)
    rows[0, 0, :, 2] = 1.0  # head 0 always looks at key 2
    rows[0, 1, :, 0] = 1.0  # head 1 at key 0
    info = SampleInfo(key_positions=[2, 3], visual_positions=[1, 2, 3], queries={"out": [0, 1], "in": [2]},
                      correct=False)
    s = make_scorer("sparsemm")
    s.update(rows, info)
    s.update(rows, SampleInfo(key_positions=[], visual_positions=[1, 2, 3], queries={"out": [0, 1], "in": [2]}))
    assert torch.allclose(s.result(), torch.tensor([[0.5, 0.0]]))  # (2 hits / |K| = 1.0 + 0) / 2 samples
    assert s.n_empty_keys == 1
    e = make_scorer("sparsemm:queries=in")
    e.update(rows, info)
    assert torch.allclose(e.result(), torch.tensor([[0.5, 0.0]]))  # one expression row / |K| = 2


def test_in_compare_defaults_and_refuses_an_unknown_query_kind():
    assert compare_baselines()[-1] == "sparsemm" and len(compare_baselines()) == 6
    with pytest.raises(ValueError, match="queries"):
        make_scorer("sparsemm:queries=answer")
