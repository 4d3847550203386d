"""What every prior method shares: worked examples, the common update signature, finite scores on edge cases."""

import doctest

import pytest
import torch

from vrh.scorers import localization_heads, make_scorer, ocr_heads, qrhead, retrieval_heads, vera

PRIOR_METHODS = ("retrieval_heads", "qrhead", "ocr_heads", "vera", "localization_heads")
MODULES = (retrieval_heads, qrhead, ocr_heads, vera, localization_heads)


def test_doctests():
    results = [doctest.testmod(m, optionflags=doctest.NORMALIZE_WHITESPACE) for m in MODULES]
    assert all(r.attempted > 0 for r in results)  # every method file carries a worked example
    assert sum(r.attempted for r in results) > 10 and sum(r.failed for r in results) == 0


@pytest.mark.parametrize("name", PRIOR_METHODS)
def test_all_baselines_run_finite_on_edge_cases(name, rows_of, info_of):
    A = rows_of()
    N = rows_of(Q=2, seed=1)
    Z = torch.zeros_like(A)
    edge = [info_of(), info_of(key_positions=[]), info_of(key_positions=[2, 3, 4, 5, 6, 7]),
            info_of(queries={"out": [], "in": [], "last_prompt": [], "null_in": []})]
    sc = make_scorer(name, seed=0)
    for info in edge:
        for rows in (A, Z):
            sc.update(rows, info, {"null_query": N})  # one signature for every scorer
    assert sc.per_sample().shape == (8, 3, 2)
    assert torch.isfinite(sc.per_sample()).all() and torch.isfinite(sc.result()).all()
