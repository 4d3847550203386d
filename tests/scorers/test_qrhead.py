import pytest
import torch

from vrh.scorers import make_scorer
from vrh.scorers.qrhead import qrhead_sample


def test_qrhead_outlier_removal_and_calibration(rows_of, info_of):
    # 7 query tokens, one outlier: scores 0.5 x6 and 0.0 -> mean 0.4286, std 0.1750, cut 0.0786 -> drop 0.0
    A = torch.zeros(1, 1, 7, 2)  # (1, 1, 7, 2)
    A[0, 0, :, 1] = torch.tensor([0.5] * 6 + [0.0])
    A[0, 0, :, 0] = 1 - A[0, 0, :, 1]
    assert torch.allclose(qrhead_sample(A, [1], range(7), calibrate=False), torch.tensor([[0.5]]))
    # 5 tokens can never be 2 population stds below the mean -> nothing dropped
    assert torch.allclose(qrhead_sample(A[:, :, 2:], [1], range(5), calibrate=False), torch.tensor([[0.4]]))
    N = torch.tensor([[[[0.75, 0.25]]]])
    assert torch.allclose(qrhead_sample(A, [1], range(7), N, null_queries=[0]), torch.tensor([[0.25]]))
    with pytest.raises(ValueError, match="null"):
        qrhead_sample(A, [1], range(7))
    with pytest.raises(ValueError, match="null"):
        make_scorer("qrhead").update(rows_of(), info_of())
    sc = make_scorer("qrhead", calibrate=False)
    sc.update(rows_of(), info_of())  # documented fallback
    assert sc.per_sample().shape == (1, 3, 2)


def test_qrhead_reads_the_null_pass_from_extra(rows_of, info_of):
    A, N = rows_of(), rows_of(Q=2, seed=1)
    info = info_of()
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
    strict = make_scorer("qrhead:outlier_z=0.5")
    strict.update(A, info, {"null_query": N})
    assert torch.equal(strict.per_sample()[0], qrhead_sample(A, [5, 6], [0, 1, 2], N, None, [0], outlier_z=0.5))
