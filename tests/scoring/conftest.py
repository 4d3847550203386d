import pytest
import torch

from vrh.scoring import SampleInfo


@pytest.fixture
def rows_of():
    """Random softmax rows ``[L, H, Q, S]`` (peaked: logits x 2), reproducible per ``seed``."""

    def make(L=3, H=2, Q=6, S=10, seed=0):
        g = torch.Generator().manual_seed(seed)
        return torch.softmax(torch.randn(L, H, Q, S, generator=g) * 2, -1)  # (L, H, Q, S)

    return make


@pytest.fixture
def info_of():
    """A SampleInfo for rows from ``rows_of()`` (S = 10: prompt keys 0..7 with visual tokens 2..7 on a 2 x 3
    grid, K = {5, 6}; answer tokens at 8, 9 with producer rows 4, 5 and own rows 5, 4 -- row indices only);
    keyword arguments replace fields."""

    def make(**kw):
        base = dict(key_positions=[5, 6], visual_positions=[2, 3, 4, 5, 6, 7], grid=(2, 3),
                    queries={"out": [4, 5], "out_own": [5, 4], "in": [0, 1, 2], "coord": [5], "last_prompt": [3],
                             "null_in": [0]},
                    correct=True, iou=0.7, prompt_positions=list(range(8)), answer_lcs=0.5, answer_in_gold=[0, 1])
        base.update(kw)
        return SampleInfo(**base)

    return make
