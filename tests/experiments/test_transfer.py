"""vrh transfer end to end on the tiny checkpoint, the map-similarity statistics, and the grid check."""

import pytest
import torch

from vrh import runs
from vrh.cli import main
from vrh.experiments.transfer import map_similarity

FAST = ["--max-new-tokens", "8", "--batch-size", "4"]

REPORT_KEYS = {"model_a", "model_b", "k", "baseline_accuracy", "own_heads_accuracy", "transferred_heads_accuracy",
               "random_accuracy_mean", "spearman", "kendall", "topk_overlap"}


def test_transfer_into_the_same_model_equals_own_heads(tmp_path, det_run, tiny_checkpoint, tiny_dataset):
    out = tmp_path / "tr"
    assert main(["transfer", "--heads", str(det_run), "--heads-b", str(det_run), "--model", tiny_checkpoint,
                 "--data", tiny_dataset, "--k", "2", "--seeds", "0,1", "--n", "3", "--out", str(out), *FAST]) == 0
    cfg, res = runs.read_json(out / runs.CONFIG), runs.read_json(out / runs.RESULTS)
    assert cfg["command"] == "transfer" and cfg["environment"]["torch"]
    assert REPORT_KEYS <= set(res) and res["k"] == 2 and res["n"] == 3
    hs = runs.read_json(det_run / runs.HEAD_SCORES)
    assert res["transferred_heads"] == hs["ranking"][:2]
    # A == B: same heads masked, so the same answers, and the maps agree perfectly
    assert res["transferred_heads_accuracy"] == res["own_heads_accuracy"]
    assert res["spearman"] == res["kendall"] == res["topk_overlap"] == 1.0
    assert res["similarity"]["top20_overlap"] == 1.0
    recs = runs.read_jsonl(out / runs.SAMPLES)
    assert len(recs) == 3 * 5  # baseline, transferred, own, 2 random seeds
    text = lambda kind: [r["pred_text"] for r in recs if r["kind"] == kind]  # noqa: E731
    assert text("transferred") == text("own")
    held_out = set(runs.read_json(det_run / runs.CONFIG)["eval_ids"])
    assert {r["id"] for r in recs} <= held_out
    for c in res["conditions"]:
        if c["kind"] == "random":
            assert len(c["heads"]) == 2 and not {tuple(h) for h in c["heads"]} & {tuple(h) for h in hs["ranking"][:2]}
    assert set(res["fractions"]) == {"baseline", "transferred", "own", "random_mean"}
    assert len(res["random_accuracy"]) == 2


def test_transfer_without_b_run_has_no_own_condition(tmp_path, det_run, tiny_checkpoint, tiny_dataset):
    out = tmp_path / "tr"
    assert main(["transfer", "--heads", str(det_run), "--model", tiny_checkpoint, "--data", tiny_dataset,
                 "--k", "1", "--seeds", "0", "--n", "2", "--out", str(out), *FAST]) == 0
    res = runs.read_json(out / runs.RESULTS)
    assert res["own_heads_accuracy"] is None and res["spearman"] is None
    assert [c["kind"] for c in res["conditions"]] == ["none", "transferred", "random"]


def test_layer_grid_mismatch_is_a_clear_error(tmp_path, det_run, tiny_dataset, capsys):
    from vrh.testing.tiny_models import save_tiny, tiny_qwen2_5_vl

    model, processor = tiny_qwen2_5_vl(seed=1, text_config={"num_hidden_layers": 3})
    other = save_tiny(model, processor, tmp_path / "three_layers")
    assert main(["transfer", "--heads", str(det_run), "--model", str(other), "--data", tiny_dataset,
                 "--k", "2", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "same layer x head grid" in err and "(2, 4)" in err and "(3, 4)" in err
    assert not (tmp_path / "x" / runs.RESULTS).exists()


def test_map_similarity_on_known_maps():
    a = torch.arange(8.0).reshape(2, 4)
    same = map_similarity(a, a.clone(), k=3)
    assert same["spearman"] == same["kendall"] == same["topk_overlap"] == same["jaccard"] == 1.0
    rev = map_similarity(a, -a, k=3)
    assert rev["spearman"] == pytest.approx(-1.0) and rev["kendall"] == pytest.approx(-1.0)
    assert rev["topk_overlap"] == 0.0 and rev["top20_k"] == 8 and rev["top20_overlap"] == 1.0
