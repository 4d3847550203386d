"""vrh.experiments.dpo_comparison: Fig. A3's statistics on hand-built outcomes, the held-out check, names."""

import math

import pytest

from vrh.experiments import dpo_comparison as dc


def test_accuracy_and_paired_difference_on_hand_counts():
    assert dc.accuracy_se([True] * 3 + [False]) == (0.75, math.sqrt(0.75 * 0.25 / 4))
    # d = [0, 1, 0, 1]: mean 0.5, sample sd sqrt(1/3), se sqrt(1/3) / 2
    diff, se = dc.paired_difference([True, True, False, True], [True, False, False, False])
    assert diff == 0.5 and se == pytest.approx(math.sqrt(1 / 3) / 2)
    assert dc.paired_difference([True], [False]) == (1.0, 0.0)
    assert dc.paired_difference([True, False], [True, False]) == (0.0, 0.0)  # identical answers: no spread
    with pytest.raises(ValueError, match="equally long"):
        dc.paired_difference([True], [True, False])
    with pytest.raises(ValueError, match="no samples"):
        dc.accuracy_se([])


def test_benchmark_and_average_blocks():
    a = {"base": [True, False, False, False], "dpo-random": [True, True, False, False],
         "dpo-vrh": [True, True, True, False]}
    b = {"base": [True, True], "dpo-random": [True, True], "dpo-vrh": [True, True]}
    ba, bb = dc.benchmark_block(a, {"path": "a.jsonl"}), dc.benchmark_block(b, {"path": "b.jsonl"})
    assert ba["n"] == 4 and ba["accuracy"] == {"base": 0.25, "dpo-random": 0.5, "dpo-vrh": 0.75}
    assert [(d["a"], d["b"]) for d in ba["differences"]] == list(dc.DIFFERENCES)
    assert ba["differences"][0]["diff"] == 0.5  # dpo-vrh - base
    avg = dc.average_block([ba, bb])
    assert avg["accuracy"]["dpo-vrh"] == (0.75 + 1.0) / 2
    assert avg["differences"][0]["diff"] == (0.5 + 0.0) / 2
    assert avg["differences"][0]["se"] == pytest.approx(math.sqrt(ba["differences"][0]["se"] ** 2) / 2)


def test_an_evaluation_sample_among_the_training_samples_is_refused():
    dc.check_disjoint(["a", "b"], ["c"], "x.jsonl")
    with pytest.raises(ValueError, match="1 evaluation samples of x.jsonl are DPO training samples"):
        dc.check_disjoint(["a", "b"], ["b", "c"], "x.jsonl")


def test_benchmark_names_are_unique_and_folder_safe():
    assert dc.benchmark_name("/d/refcoco/data.jsonl") == "refcoco"
    assert dc.benchmark_name("/d/world/grounding.jsonl") == "grounding"
    assert dc.benchmark_name("/e/refcoco/data.jsonl", ["refcoco"]) == "refcoco_data"
    assert dc.benchmark_name("/w2/grounding.jsonl", ["grounding"]) == "w2_grounding"
    assert dc.benchmark_name("/w2/grounding.jsonl", ["grounding", "w2_grounding"]) == "w2_grounding_2"
    assert dc.benchmark_name("/d/a b+c.jsonl") == "a_b_c"
