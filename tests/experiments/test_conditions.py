import pytest
import torch

from vrh.experiments import conditions as cond


def test_top_k_and_labels():
    scores = torch.tensor([[0.1, 0.9], [0.5, 0.0]])
    c = cond.top_k(scores, 2, method="out/sum/mean")
    assert c.heads == ((0, 1), (1, 0)) and c.k == 2 and c.kind == "top_k" and c.label == "top2:out/sum/mean"
    assert cond.top_k(scores, 0, method="m").kind == "none"
    with pytest.raises(ValueError, match=r"--k 5 is outside \[0, 4\].*2 layers x 2 heads"):
        cond.top_k(scores, 5, method="m")


def test_random_outside_never_draws_excluded_heads_and_names_k():
    for seed in range(20):
        c = cond.random_outside(4, 8, 3, seed, outside=[(3, 3), (3, 6), (1, 0)])
        assert len(c.heads) == 3 and not set(c.heads) & {(3, 3), (3, 6), (1, 0)}
    with pytest.raises(ValueError, match=r"--k 17: only 16 heads are eligible"):
        cond.random_outside(4, 8, 17, 0, outside=[(l, h) for l in range(2) for h in range(8)])


def test_check_room_is_the_one_rule_and_names_the_option():
    assert cond.check_room(4, 2, 4) == 4  # up front: any 4 top heads leave 4 of 8
    with pytest.raises(ValueError, match=r"--ks 5: no room for 5 random heads outside the top 5 of 8 heads; "
                                         r"use k <= 4"):
        cond.check_room(5, 2, 4, "--ks")
    with pytest.raises(ValueError, match=r"--ks 9 is outside \[0, 8\]"):  # the range check comes first
        cond.check_room(9, 2, 4, "--ks")
    top = [(0, 0), (0, 1), (1, 0)]
    assert cond.check_room(2, 2, 4, outside=top, exclude_layers=[0]) == 3
    with pytest.raises(ValueError, match=r"--k 4: only 3 heads are eligible .* and layers \[0\]\); use a smaller k"):
        cond.check_room(4, 2, 4, outside=top, exclude_layers=[0])
    rc = cond.random_controls(2, 4, 2, (0, 1), outside=top, exclude_layers=[0])  # the same count
    assert rc.n_eligible == 3 and all(set(c.heads) <= {(1, 1), (1, 2), (1, 3)} for c in rc.conditions)


def test_random_controls_report_identical_draws():
    top16 = [(l, h) for l in range(2) for h in range(8)]
    rc = cond.random_controls(4, 8, 16, (0, 1, 2), outside=top16)
    assert len(rc.conditions) == 3 and rc.n_distinct == 1 and rc.n_eligible == 16
    assert any("not random" in w for w in rc.warnings)
    rc = cond.random_controls(4, 8, 17, (0, 1, 2), outside=top16)
    assert rc.conditions == [] and "no random control" in rc.warnings[0]
    rc = cond.random_controls(4, 8, 3, (0, 1, 2), outside=top16)
    assert rc.n_distinct == 3 and rc.warnings == []


def test_condition_key_and_tag():
    a = cond.explicit([(1, 2), (0, 1)], label="a")
    b = cond.Condition(label="b", kind="top_k", heads=((0, 1), (1, 2)), k=2, method="m")
    assert a.key == b.key and a.heads == ((0, 1), (1, 2))
    assert cond.explicit([(0, 1)], mask_mode="uniform").key != cond.explicit([(0, 1)]).key
    assert cond.none().key == cond.none(mask_mode="uniform").key  # nothing masked either way
    assert set(a.tag()) == {"condition", "kind", "method", "k", "seed", "mask_mode"}
    with pytest.raises(ValueError, match="mask mode"):
        cond.none(mask_mode="half")


def test_head_source(tmp_path):
    assert cond.head_source(None, None).kind == "none"
    src = cond.head_source("3:1, 0:2", None, 4, 8)
    assert src.kind == "list" and src.heads == ((3, 1), (0, 2))
    with pytest.raises(ValueError, match="outside this model"):
        cond.head_source("3:9", None, 4, 8)
    with pytest.raises(FileNotFoundError, match="no such detection run folder"):
        cond.head_source(str(tmp_path / "missing_run"), None, 4, 8)
