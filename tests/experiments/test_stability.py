"""vrh stability: the sample-size curve from per-sample maps (no model) and token choice (with the model)."""

import json

import numpy as np
import pytest
import torch

from vrh import runs
from vrh.cli import main
from vrh.experiments.stability import draw, overlap_curve

FAST = ["--max-new-tokens", "8", "--batch-size", "4"]
REPORT_KEYS = {"n_values", "topk_overlap_mean", "topk_overlap_std", "k", "token_choice"}


def fake_detection_run(path, per_sample: np.ndarray, scorers=("out/sum/mean",)):
    """A detection run folder holding only what stability reads: head_scores.json + sample_scores.npz."""
    path.mkdir(parents=True)
    mean = per_sample.mean(0)
    variants = {s: {"scores": mean.tolist(), "ranking": []} for s in scorers}
    runs.write_json(path / runs.HEAD_SCORES, {"scorer": scorers[0], "scores": mean.tolist(), "variants": variants,
                                              "num_layers": mean.shape[0], "num_heads": mean.shape[1]})
    np.savez(path / "sample_scores.npz", **{s.replace("/", "|"): per_sample for s in scorers})
    runs.write_json(path / runs.CONFIG, {"command": "detect"})
    return path


def test_identical_sample_maps_give_overlap_one_at_every_n(tmp_path):
    one = np.random.default_rng(0).random((3, 5)).astype(np.float32)
    run = fake_detection_run(tmp_path / "det", np.stack([one] * 7))
    out = tmp_path / "st"
    assert main(["stability", "--heads", str(run), "--k", "4", "--n-values", "1,2,5,7,20",
                 "--bootstrap", "4", "--out", str(out)]) == 0
    res = runs.read_json(out / runs.RESULTS)
    assert REPORT_KEYS <= set(res)
    assert res["n_values"] == [1, 2, 5, 7] and res["n_values_dropped"] == [20] and "n=20" in res["notes"][0]
    assert res["topk_overlap_mean"] == [1.0] * 4 and res["topk_overlap_std"] == [0.0] * 4
    assert res["reference_matches_head_scores"] and res["n_total"] == 7
    assert res["token_choice"] is None and "rand1/sum/mean" in res["token_choice_skipped"]


def test_overlap_curve_on_two_disagreeing_halves():
    # samples 0-1 favour heads (0,0),(0,1); sample 2 favours (0,2),(0,3) but weakly -> reference = first pair
    a, b = torch.tensor([[1.0, 1.0, 0.0, 0.0]]), torch.tensor([[0.0, 0.0, 0.9, 0.9]])
    ps = torch.stack([a, a, b])  # (3, 1, 4)
    c = overlap_curve(ps, "mean", 20, k=2, n_values=[1, 3], bootstrap=30, seed=0)
    assert c["topk_overlap_mean"][1] == 1.0  # n = N: the full set
    ones = c["topk_overlap"][0]
    assert set(ones) == {0.0, 1.0} and 0.4 < np.mean(ones) < 0.95  # single draws hit b 1/3 of the time


def test_draw_is_distinct_sorted_and_reproducible():
    d = draw(10, 6, seed=3)
    assert len(set(d.tolist())) == 6 and list(d) == sorted(d) and (d == draw(10, 6, seed=3)).all()


def test_stability_of_a_real_run_without_model(tmp_path, det_run):
    out = tmp_path / "st"
    assert main(["stability", "--heads", str(det_run), "--k", "2", "--n-values", "1,3,6,50", "--bootstrap", "3",
                 "--out", str(out)]) == 0
    res = runs.read_json(out / runs.RESULTS)
    assert res["n_values"] == [1, 3, 6] and res["n_values_dropped"] == [50]
    assert res["topk_overlap_mean"][-1] == 1.0 and res["reference_matches_head_scores"]
    assert res["token_choice"] is None and res["token_choice_skipped"] == "no --model given"
    assert runs.read_json(out / runs.CONFIG)["command"] == "stability"


def test_token_choice_with_model(tmp_path, det_run, tiny_checkpoint):
    out = tmp_path / "st"
    assert main(["stability", "--heads", str(det_run), "--model", tiny_checkpoint, "--k", "2", "--n-values", "2,6",
                 "--bootstrap", "2", "--seeds", "0", "--n-eval", "2", "--accuracy-draws", "1",
                 "--out", str(out), *FAST]) == 0
    res = runs.read_json(out / runs.RESULTS)
    tc = res["token_choice"]
    for key in ("rand1_accuracy", "out_accuracy", "random_accuracy", "baseline_accuracy"):
        assert 0.0 <= tc[key] <= 1.0
    assert tc["out_heads"] == runs.read_json(det_run / runs.HEAD_SCORES)["ranking"][:2]
    assert not {tuple(h) for h in tc["random_heads"][0]} & {tuple(h) for h in tc["out_heads"]}
    assert len(res["accuracy_mean"]) == len(res["n_values"]) == 2 and res["n_eval"] == 2
    recs = runs.read_jsonl(out / runs.SAMPLES)
    held_out = set(runs.read_json(det_run / runs.CONFIG)["eval_ids"])
    assert recs and {r["id"] for r in recs} <= held_out
    assert {"none", "rand1", "out"} <= {r["condition"] for r in recs}


def test_token_choice_skipped_when_a_scorer_is_missing(tmp_path, tiny_checkpoint):
    run = fake_detection_run(tmp_path / "det", np.random.default_rng(1).random((4, 2, 4)).astype(np.float32))
    out = tmp_path / "st"
    assert main(["stability", "--heads", str(run), "--model", tiny_checkpoint, "--k", "2", "--n-values", "2",
                 "--bootstrap", "2", "--out", str(out)]) == 0
    res = json.loads((out / runs.RESULTS).read_text())
    assert res["token_choice"] is None and "rand1/sum/mean" in res["token_choice_skipped"]


def test_k_larger_than_the_grid_is_an_error(tmp_path, capsys):
    run = fake_detection_run(tmp_path / "det", np.ones((2, 1, 3), dtype=np.float32))
    assert main(["stability", "--heads", str(run), "--k", "4", "--out", str(tmp_path / "st")]) == 2
    assert "exceeds" in capsys.readouterr().err
