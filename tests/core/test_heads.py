import pytest
import torch

from vrh.core.heads import parse_head_list, random_heads, rank_heads, top_k


def test_rank_heads_orders_by_score_then_layer_head():
    scores = torch.tensor([[0.1, 0.5, 0.2], [0.5, 0.0, 0.9]])
    assert rank_heads(scores) == [(1, 2), (0, 1), (1, 0), (0, 2), (0, 0), (1, 1)]
    assert top_k(scores, 2) == [(1, 2), (0, 1)]


def test_rank_heads_puts_nan_last_and_rejects_bad_shape():
    scores = torch.tensor([[float("nan"), 0.2]])
    assert rank_heads(scores) == [(0, 1), (0, 0)]
    with pytest.raises(ValueError, match=r"\[L, H\]"):
        rank_heads(torch.zeros(3))


def test_random_heads_avoid_excluded_and_are_seeded():
    detected = [(0, 0), (1, 1)]
    a = random_heads(2, 3, 3, seed=1, exclude=detected)
    assert not set(a) & set(detected) and len(set(a)) == 3
    assert a == random_heads(2, 3, 3, seed=1, exclude=detected)
    assert all(l != 0 for l, _ in random_heads(2, 3, 2, seed=0, exclude_layers=[0]))
    with pytest.raises(ValueError, match="cannot draw"):
        random_heads(2, 3, 5, seed=0, exclude=detected)


def test_parse_head_list():
    assert parse_head_list("3:1, 10:4") == [(3, 1), (10, 4)]
    with pytest.raises(ValueError, match="LAYER:HEAD"):
        parse_head_list("3-1")


# --- values refused before any work (issue 45 item 16) -----------------------------------------------------------

def test_a_head_listed_twice_is_refused_not_counted_twice():
    from vrh.core.heads import DuplicateHead, parse_head_list
    from vrh.experiments import conditions as cond
    from vrh.analyses.compare_heads.analysis import head_side

    assert parse_head_list("0:1,1:0") == [(0, 1), (1, 0)]
    for read in (parse_head_list, lambda s: cond.head_source(s, None, 4, 2, option="--mask-heads"),
                 lambda s: head_side(s, None, "--heads")):
        with pytest.raises(DuplicateHead, match=r"^head 0:1 is listed twice in '0:1,1:0,0:1'; a head list names"):
            read("0:1,1:0,0:1")


def test_excluded_layers_beyond_the_model_are_refused():
    from vrh.core.heads import eligible_heads

    assert eligible_heads(2, 1, exclude_layers=[1]) == [(0, 0)]
    with pytest.raises(ValueError, match=r"^--exclude-layers 9: this model has 4 layers \(0-3\)"):
        eligible_heads(4, 2, exclude_layers=[0, 9])
    with pytest.raises(ValueError, match=r"^--exclude-layers -1:"):
        eligible_heads(4, 2, exclude_layers=[-1])


@pytest.mark.parametrize("value", ["0", "-1", "5,0"])
def test_compare_heads_refuses_an_overlap_k_below_1(value, capsys):
    from vrh.cli import main

    with pytest.raises(SystemExit) as e:  # argparse's own refusal, before anything runs
        main(["compare-heads", "--heads", "0:0", "--heads-b", "0:1", "--overlap-ks", value])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert f"--overlap-ks: expected comma-separated integers >= 1, got {value!r}" in err
