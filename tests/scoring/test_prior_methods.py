"""What every prior method shares: worked examples, the common update signature, finite scores on edge cases,
and documented deviations (docs/baselines.md names every option of every method)."""

import doctest
import importlib

import pytest
import torch

from vrh.scoring import describe_scorers, make_scorer, scorer_names

# whatever is registered: the methods with one name each (not the QUERY/PHI/OMEGA grammar), and their files
PRIOR_METHODS = tuple(m for m in describe_scorers() if m in scorer_names())
MODULES = tuple({importlib.import_module(type(make_scorer(m)).__module__): None for m in PRIOR_METHODS})


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
            info_of(queries={"out": [], "out_own": [], "in": [], "last_prompt": [], "null_in": []}, answer_in_gold=[]),
            info_of(key_positions=[6])]  # one key token in K
    sc = make_scorer(name, seed=0)
    for info in edge:
        for rows in (A, Z):
            sc.update(rows, info, {"null_query": N})  # one signature for every scorer
    assert sc.per_sample().shape == (10, 3, 2)
    assert torch.isfinite(sc.per_sample()).all() and torch.isfinite(sc.result()).all()


def test_every_option_is_in_the_deviations_table():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "baselines.md").read_text()
    for name in PRIOR_METHODS:
        assert f"`{name}`" in doc
        for opt in describe_scorers()[name]["options"]:
            assert f"`{opt}" in doc, (name, opt)
