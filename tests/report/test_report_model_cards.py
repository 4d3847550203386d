"""A report on an organism with planted retrieval heads says so under its headline, from the model's card
(issue 37 item 4): shared on its own, a demo report read as evidence that retrieval heads emerge."""

import json

import pytest

from vrh import runs
from vrh.models.loading import organism_path
from vrh.analyses.reporting import build_report
from vrh.report.model_cards import CARD, planted


def _shipped(name):
    try:
        return str(organism_path(name))
    except FileNotFoundError:  # an installed wheel ships organism_a only
        pytest.skip(f"{name} is not shipped here")


@pytest.mark.parametrize("name, heads_planted", [("organism_a", True), ("organism_b", True), ("organism_c", False),
                                                 ("organism_c_prime", False)])
def test_the_shipped_cards_say_whose_heads_were_planted(name, heads_planted):
    found = planted(_shipped(name))
    assert (found is not None) == heads_planted
    if found is not None:
        assert found.model == name and any(t.startswith("dropout_protect_top ") for t in found.terms)
        assert found.via == {"organism_a": None, "organism_b": "organism_a"}[name]  # B runs on A's language model


def test_a_model_that_inherits_a_planted_language_model_is_planted_too(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    cards = {a: {"name": "a", "train_config": {"box_warmstart": 0.3, "route_spare_protected": False}},
             b: {"name": "b", "lm_init": "runs/a/ckpt.pt", "shares_language_model_with": ["a"],
                 "train_config": {"box_warmstart": 0.0}},
             c: {"name": "c", "train_config": {"box_warmstart": 0, "dropout_protect_top": 0}}}
    for folder, card in cards.items():
        folder.mkdir()
        (folder / CARD).write_text(json.dumps(card))
    assert planted(str(a)).terms == ("box_warmstart 0.3",)
    assert planted(str(b)).via == planted(str(b)).card == "a" and planted(str(b)).terms == ("box_warmstart 0.3",)
    assert planted(str(c)) is None
    (c / CARD).write_text("{torn")
    assert planted(str(c)) is None and planted(str(tmp_path / "none")) is None and planted(None) is None


def _demo(folder, model_path):
    with runs.RunFolder(folder) as run:
        run.write_config({"command": "demo", "model": {"path": model_path, "model_type": "llava"}, "k": 3})
        run.write_results({"baseline_accuracy": 0.9, "k": 3, "num_heads_total": 32, "vrh_masked_accuracy": 0.2,
                           "random_masked_accuracy_mean": 0.88, "top_k_heads": [[3, 3], [3, 6], [1, 0]]})
    return folder


def test_the_demo_headline_is_followed_by_the_positive_control_caveat(tmp_path):
    md = build_report([_demo(tmp_path / "demo", _shipped("organism_a"))], tmp_path / "out")["md"].read_text()
    paragraphs = md.split("\n\n")
    assert paragraphs[1].startswith("demo (grounding): top-3 VRHs masked")  # the finding first
    assert paragraphs[2].startswith("> **Warning:** Positive control: organism_a's retrieval heads were planted")
    assert "not as evidence that retrieval heads emerge" in paragraphs[2]
    md = build_report([_demo(tmp_path / "demo_c", _shipped("organism_c"))], tmp_path / "out_c")["md"].read_text()
    assert "Positive control" not in md  # C's heads were not planted: nothing to add
