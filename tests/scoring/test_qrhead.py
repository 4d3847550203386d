"""QRHead against its reference (princeton-pli/QRHead attn_retriever.py score_docs_per_head_for_detection),
followed line by line in :func:`_reference`, and hand-computed worked examples."""

import pytest
import torch

from vrh.scoring import make_scorer
from vrh.scoring.qrhead import qrhead_sample


def _reference(rows, q, null_rows, nq, span):
    """L323-353 then L291-311: mean over query tokens per key, minus the null pass, 2-std key filter, sum."""
    per_tok = rows[:, :, q].mean(2)  # (L, H, S): attn_weights.mean(1) over query tokens
    null_tok = null_rows[:, :, nq].mean(2)
    n = min(per_tok.shape[-1], null_tok.shape[-1])
    cal = per_tok[..., :n] - null_tok[..., :n]
    doc = cal[:, :, span[0]: span[1] + 1]
    thr = doc.mean(dim=-1) - 2 * doc.std(dim=-1)
    return doc.masked_fill(~(doc > thr.unsqueeze(-1)), 0.0).sum(-1)


@pytest.mark.parametrize("seed", range(4))
def test_reference_variant_matches_the_reference_on_random_rows(seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.softmax(torch.randn(4, 3, 5, 20, generator=g) * 2, -1).double()  # (L, H, Q, S)
    N = torch.softmax(torch.randn(4, 3, 2, 18, generator=g) * 2, -1).double()  # null pass, shorter
    span = (3, 11)  # the box's keys, before the query in both passes
    want = _reference(A, [1, 2, 4], N, [0, 1], span)
    got = qrhead_sample(A, range(3, 12), [1, 2, 4], N, None, [0, 1])
    assert torch.allclose(got.double(), want, atol=1e-6)
    assert torch.equal(torch.argsort(got.flatten(), descending=True, stable=True),
                       torch.argsort(want.float().flatten(), descending=True, stable=True))


def test_worked_examples_one_key_ties_and_outliers():
    # 4 box keys, one query: cal = (.2, .2, .2, -.4) after a zero null pass: mean .05, unbiased std .3,
    # threshold .05 - .6 = -.55 -> nothing dropped, sum .2
    A = torch.zeros(1, 1, 1, 5)
    A[0, 0, 0] = torch.tensor([0.2, 0.2, 0.2, 0.0, 0.4])
    N = torch.zeros(1, 1, 1, 5)
    N[0, 0, 0, 3] = 0.4  # subtracts .4 from key 3
    assert torch.allclose(qrhead_sample(A, [0, 1, 2, 3], [0], N, null_queries=[0]), torch.tensor([[0.2]]))
    # with outlier_z=1: threshold .05 - .3 = -.25 -> key 3 (-.4) dropped, sum .6
    assert torch.allclose(qrhead_sample(A, [0, 1, 2, 3], [0], N, null_queries=[0], outlier_z=1.0),
                          torch.tensor([[0.6]]))
    # one key in K: unbiased std of one value is NaN in the reference -> nothing kept -> 0
    assert qrhead_sample(A, [4], [0], N, null_queries=[0]).item() == 0.0
    # ties / constant values: nothing is strictly above mean - 0 -> 0
    assert qrhead_sample(A, [0, 1, 2], [0], calibrate=False).item() == 0.0
    # empty K -> 0; no query -> 0 (vrh's edge policy)
    assert qrhead_sample(A, [], [0], calibrate=False).item() == 0.0
    assert qrhead_sample(A, [0, 4], [], calibrate=False).item() == 0.0


def test_query_outlier_variant_is_vrhs_earlier_adaptation():
    # 7 query tokens, one outlier: scores 0.5 x6 and 0.0 -> mean 0.4286, std 0.1750, cut 0.0786 -> drop 0.0
    A = torch.zeros(1, 1, 7, 2)  # (1, 1, 7, 2)
    A[0, 0, :, 1] = torch.tensor([0.5] * 6 + [0.0])
    A[0, 0, :, 0] = 1 - A[0, 0, :, 1]
    tok = dict(calibrate=False, outliers="queries")
    assert torch.allclose(qrhead_sample(A, [1], range(7), **tok), torch.tensor([[0.5]]))
    # 5 tokens can never be 2 population stds below the mean -> nothing dropped
    assert torch.allclose(qrhead_sample(A[:, :, 2:], [1], range(5), **tok), torch.tensor([[0.4]]))
    N = torch.tensor([[[[0.75, 0.25]]]])
    assert torch.allclose(qrhead_sample(A, [1], range(7), N, null_queries=[0], outliers="queries"),
                          torch.tensor([[0.25]]))


def test_qrhead_reads_the_null_pass_from_extra(rows_of, info_of):
    A, N = rows_of(), rows_of(Q=2, seed=1)
    info = info_of()
    with pytest.raises(ValueError, match="null"):
        make_scorer("qrhead").update(A, info)
    with pytest.raises(ValueError, match="null"):
        qrhead_sample(A, [1], range(3))
    sc = make_scorer("qrhead")
    assert sc.extra_passes == ("null_query",)
    sc.update(A, info, {"null_query": N})
    want = qrhead_sample(A, [5, 6], [0, 1, 2], N, None, [0])
    assert torch.equal(sc.per_sample()[0], want)
    raw = make_scorer("qrhead:calibrate=false")
    assert raw.extra_passes == ()
    raw.update(A, info, {"null_query": N})  # a pass it did not ask for is ignored
    assert torch.equal(raw.per_sample()[0], qrhead_sample(A, [5, 6], [0, 1, 2], calibrate=False))
    assert not torch.equal(raw.per_sample()[0], want)
    tokens = make_scorer("qrhead:outliers=queries:outlier_z=0.5")
    tokens.update(A, info, {"null_query": N})
    assert torch.equal(tokens.per_sample()[0], qrhead_sample(A, [5, 6], [0, 1, 2], N, None, [0], outlier_z=0.5,
                                                             outliers="queries"))
    with pytest.raises(ValueError, match="paired key by key"):
        qrhead_sample(A, [5, 6], [0], N, [5], [0])
