import pytest
import torch

from vrh.scorers import make_scorer
from vrh.scorers.retrieval_heads import retrieval_heads_sample


def test_retrieval_heads_correct_only(rows_of, info_of):
    A = rows_of()
    sc = make_scorer("retrieval_heads")
    sc.update(A, info_of(correct=True))
    sc.update(A, info_of(key_positions=[], correct=False))
    assert sc.included().tolist() == [True, False]
    assert torch.allclose(sc.result(), retrieval_heads_sample(A, [5, 6], [4, 5]))
    with pytest.raises(ValueError, match="correct"):
        sc.update(A, info_of(correct=None))
    only_wrong = make_scorer("retrieval_heads")
    only_wrong.update(A, info_of(correct=False))
    assert torch.equal(only_wrong.result(), torch.zeros(3, 2))
