import torch

from vrh.scoring import make_scorer
from vrh.scoring.vera import vera_sample


def test_vera_ratio_and_k_equals_v(rows_of):
    A = rows_of()
    v = [2, 3, 4, 5, 6, 7]
    assert torch.allclose(vera_sample(A, v, v, [3]), torch.ones(3, 2))  # K = V -> 1
    r = vera_sample(A, [5, 6, 0], v, [3])  # non-visual key 0 ignored (K intersect V)
    assert torch.allclose(r, A[:, :, 3, [5, 6]].sum(-1) / A[:, :, 3, v].sum(-1))
    assert torch.equal(vera_sample(torch.zeros_like(A), v, v, [3]), torch.zeros(3, 2))


def test_vera_query_option_picks_the_rows(rows_of, info_of):
    A = rows_of()
    v = [2, 3, 4, 5, 6, 7]
    last, out = make_scorer("vera"), make_scorer("vera:query=out")
    for sc in (last, out):
        sc.update(A, info_of())
    assert torch.equal(last.result(), vera_sample(A, [5, 6], v, [3]))
    assert torch.equal(out.result(), vera_sample(A, [5, 6], v, [4, 5]))
