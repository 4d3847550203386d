"""Retrieval Heads' copy-paste criterion (vrh.scoring.copy_paste) on hand-built rows."""

import pytest
import torch

from vrh.scoring.copy_paste import copy_paste_sample


def _rows(peaks, S):
    """(1, len(peaks), Q, S) rows: head h's query q attends mostly to key peaks[h][q] (None: all-zero row)."""
    H, Q = len(peaks), len(peaks[0])
    rows = torch.zeros(1, H, Q, S)
    for h in range(H):
        for q in range(Q):
            if peaks[h][q] is not None:
                rows[0, h, q] = 0.1 / S
                rows[0, h, q, peaks[h][q]] = 0.9
    return rows


def test_a_hit_needs_the_needle_span_and_the_copied_token():
    ids = torch.tensor([1, 7, 8, 9, 7, 2])  # needle = keys 1..3 ("7 8 9"); key 4 repeats 7 outside it
    out = torch.tensor([7, 8, 9])
    rows = _rows([[1, 2, 3],  # copies the needle token by token: 3 / 3
                  [4, 2, 3],  # first token read from the 7 outside the span: 2 / 3
                  [2, 1, 3],  # looks into the needle but at the wrong token twice: 1 / 3
                  [None, None, None]], S=6)  # all-zero rows never hit
    got = copy_paste_sample(rows, ids, out, span=(1, 4))
    assert torch.allclose(got, torch.tensor([[1.0, 2 / 3, 1 / 3, 0.0]]))


def test_ties_go_to_the_lowest_key_and_bad_spans_are_refused():
    rows = torch.zeros(1, 1, 1, 4)
    rows[0, 0, 0, 1] = rows[0, 0, 0, 3] = 0.5  # tie between key 1 (outside) and key 3 (the needle)
    ids = torch.tensor([0, 5, 0, 5])
    assert copy_paste_sample(rows, ids, torch.tensor([5]), span=(3, 4)).item() == 0.0
    assert copy_paste_sample(rows, ids, torch.tensor([5]), span=(1, 2)).item() == 1.0
    with pytest.raises(ValueError, match="needle span"):
        copy_paste_sample(rows, ids, torch.tensor([5]), span=(2, 2))
    with pytest.raises(ValueError, match="output ids"):
        copy_paste_sample(rows, ids, torch.tensor([5, 5]), span=(1, 2))
