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


def test_vera_denominator_is_the_visual_mass_plus_1e_9():
    # the reference's full_analysis.py L329: box mass / (visual mass + 1e-9); at a visual mass of 1e-7 with
    # an eighth of it on the box that is 1.25e-8 / 1.01e-7 = 0.12376, not 0.125
    A = torch.zeros(1, 1, 1, 4)  # (L, H, Q, S): key 0 text, keys 1..3 visual
    A[0, 0, 0] = torch.tensor([1 - 1e-7, 1.25e-8, 8.75e-8, 0.0], dtype=torch.float64).float()
    got = float(vera_sample(A.double(), [1], [1, 2, 3], [0]))
    assert abs(got - 1.25e-8 / (1e-7 + 1e-9)) < 1e-6 and abs(got - 0.125) > 1e-3
    assert float(vera_sample(torch.zeros(1, 1, 1, 4), [1], [1, 2, 3], [0])) == 0.0  # no visual mass -> 0
