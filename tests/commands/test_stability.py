"""vrh stability: the sample-size curve from per-sample maps (no model), token choice and accuracy draws
(with the model) through the condition runner, and resume."""

import argparse
from collections import Counter

import numpy as np
import pytest
import torch

from vrh import runs
from vrh.experiments import evaluation
from vrh.analyses import stability
from vrh.options import add_options, parse_config
from vrh.analyses.stability.analysis import draw, draw_conditions, overlap_curve

FAST = dict(max_new_tokens=8, batch_size=4)
REPORT_KEYS = {"n_values", "topk_overlap_mean", "topk_overlap_std", "k", "token_choice"}


def parse(argv):
    p = argparse.ArgumentParser()
    add_options(p, stability.Config)
    return parse_config(stability.Config, p.parse_args(argv))


def fake_detection_run(path, per_sample: np.ndarray, scorers=("out/sum/mean",)):
    """A detection run folder holding only what the sample-size curve reads."""
    path.mkdir(parents=True)
    mean = per_sample.mean(0)
    variants = {s: {"scores": mean.tolist(), "ranking": []} for s in scorers}
    runs.write_json(path / runs.HEAD_SCORES, {"scorer": scorers[0], "scores": mean.tolist(), "variants": variants,
                                              "num_layers": mean.shape[0], "num_heads": mean.shape[1]})
    np.savez(path / runs.SAMPLE_SCORES, **{s.replace("/", "|"): per_sample for s in scorers})
    runs.write_json(path / runs.CONFIG, {"command": "detect"})
    return path


def _results(out):
    return {k: v for k, v in runs.read_results(out).items() if k != "elapsed_seconds"}


# --- the pure curve -----------------------------------------------------------------------------------
def test_overlap_curve_on_two_disagreeing_halves():
    # samples 0-1 favour heads (0,0),(0,1); sample 2 favours (0,2),(0,3) but weakly -> reference = first pair
    a, b = torch.tensor([[1.0, 1.0, 0.0, 0.0]]), torch.tensor([[0.0, 0.0, 0.9, 0.9]])
    ps = torch.stack([a, a, b])  # (3, 1, 4)
    c = overlap_curve(ps, "mean", 20, k=2, n_values=[1, 3], bootstrap=30, seed=0)
    assert c["topk_overlap_mean"][1] == 1.0  # n = N: the full set
    ones = c["topk_overlap"][0]
    assert set(ones) == {0.0, 1.0} and 0.4 < np.mean(ones) < 0.95  # single draws hit b 1/3 of the time
    assert c["heads"][0][0] in ([(0, 0), (0, 1)], [(0, 2), (0, 3)])


def test_draw_is_distinct_sorted_and_reproducible():
    d = draw(10, 6, seed=3)
    assert len(set(d.tolist())) == 6 and list(d) == sorted(d) and (d == draw(10, 6, seed=3)).all()
    assert not (draw(10, 6, seed=3) == draw(10, 6, seed=4)).all()


def test_draw_conditions_take_the_first_draws_of_each_n():
    heads = [[[(0, 1), (0, 0)], [(1, 1), (1, 0)], [(2, 0), (2, 1)]], [[(0, 0), (1, 0)]] * 3]
    cs = draw_conditions(heads, [2, 5], k=2, draws=2, method="out/sum/mean", seed=7, mask_mode="uniform")
    assert [c.label for c in cs] == ["draw:n2:b0", "draw:n2:b1", "draw:n5:b0", "draw:n5:b1"]
    assert cs[1].heads == ((1, 0), (1, 1)) and cs[1].seed == 8 and cs[1].k == 2
    assert {c.mask_mode for c in cs} == {"uniform"} and {c.kind for c in cs} == {"top_k"}


# --- without a model ----------------------------------------------------------------------------------
def test_identical_sample_maps_give_overlap_one_at_every_n(tmp_path):
    one = np.random.default_rng(0).random((3, 5)).astype(np.float32)
    run = fake_detection_run(tmp_path / "det", np.stack([one] * 7))
    out = tmp_path / "st"
    cfg = parse(["--heads", str(run), "--k", "4", "--n-values", "1,2,5,7,20", "--bootstrap", "4", "--out", str(out)])
    assert cfg.model is None
    stability.run(cfg)
    res = runs.read_results(out)
    assert REPORT_KEYS <= set(res) and res["schema_version"] == runs.SCHEMA_VERSION
    assert res["n_values"] == [1, 2, 5, 7] and res["n_values_dropped"] == [20] and "n=20" in res["notes"][0]
    assert res["topk_overlap_mean"] == [1.0] * 4 and res["topk_overlap_std"] == [0.0] * 4
    assert res["reference_matches_head_scores"] and res["n_total"] == 7
    assert res["token_choice"] is None and "rand1/sum/mean" in res["token_choice_skipped"]
    assert not (out / runs.SAMPLES).exists()


def test_stability_of_a_real_run_without_model(tmp_path, det_run):
    out = tmp_path / "st"
    res = stability.run(stability.Config(heads=str(det_run), k=2, n_values=(1, 3, 6, 50), bootstrap=3, out=str(out)))
    assert {**res, "schema_version": runs.SCHEMA_VERSION} == runs.read_results(out)
    assert res["n_values"] == [1, 3, 6] and res["n_values_dropped"] == [50]
    assert res["topk_overlap_mean"][-1] == 1.0 and res["reference_matches_head_scores"]
    assert res["token_choice"] is None and res["token_choice_skipped"] == "no --model given"
    assert runs.read_config(out)["command"] == "stability"


def test_token_choice_skipped_when_a_scorer_is_missing(tmp_path, tiny_checkpoint, tiny_lm):
    run = fake_detection_run(tmp_path / "det", np.random.default_rng(1).random((4, 2, 4)).astype(np.float32))
    out = tmp_path / "st"
    stability.run(stability.Config(heads=str(run), model=tiny_checkpoint, k=2, n_values=(2,), bootstrap=2,
                                   out=str(out)), tiny_lm)
    res = runs.read_results(out)
    assert res["token_choice"] is None and "rand1/sum/mean" in res["token_choice_skipped"]


@pytest.mark.parametrize("argv, message", [
    (["--k", "4"], "exceeds"),
    (["--k", "0"], "--k"),
    (["--bootstrap", "2", "--accuracy-draws", "3", "--model", "organism"], "--accuracy-draws 3"),
    (["--accuracy-draws", "1"], "needs --model"),
    (["--n-values", "0,2"], "--n-values"),
])
def test_bad_settings_are_errors_naming_the_option(tmp_path, argv, message):
    run = fake_detection_run(tmp_path / "det", np.ones((2, 1, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=message):
        stability.run(parse(["--heads", str(run), "--out", str(tmp_path / "st"), *argv]))


# --- with the model -----------------------------------------------------------------------------------
def test_token_choice_and_accuracy_draws_with_model(tmp_path, det_run, tiny_checkpoint, tiny_lm):
    out = tmp_path / "st"
    res = stability.run(stability.Config(heads=str(det_run), model=tiny_checkpoint, k=2, n_values=(2, 6),
                                         bootstrap=2, seeds=(0, 1), n_eval=2, accuracy_draws=1, mask_mode="uniform",
                                         out=str(out), **FAST), tiny_lm)
    tc = res["token_choice"]
    for key in ("rand1_accuracy", "out_accuracy", "random_accuracy", "baseline_accuracy"):
        assert 0.0 <= tc[key] <= 1.0
    hs = runs.read_head_scores(det_run)
    assert tc["out_heads"] == sorted(list(h) for h in hs.ranking("out/sum/mean")[:2])
    assert tc["rand1_heads"] == sorted(list(h) for h in hs.ranking("rand1/sum/mean")[:2])
    assert tc["random_seeds"] == [0, 1] and len(tc["random_heads"]) == 2
    for r in tc["random_heads"]:
        assert not {tuple(h) for h in r} & {tuple(h) for h in tc["out_heads"]}
    assert res["random_control"]["per_k"][0]["seeds_requested"] == [0, 1]
    assert len(res["accuracy_mean"]) == len(res["n_values"]) == 2 and res["n_eval"] == 2
    labels = ["none", "rand1", "out", "random:s0", "random:s1", "draw:n2:b0", "draw:n6:b0"]
    assert [c["condition"] for c in res["conditions"]] == labels
    recs = runs.read_samples(out)
    held_out = set(runs.read_config(det_run)["eval_ids"])
    assert {r["id"] for r in recs} <= held_out and {r["mask_mode"] for r in recs} == {"uniform"}
    counts = Counter((r["condition"], r["id"]) for r in recs)
    assert set(c for c, _ in counts) == set(labels) and set(counts.values()) == {1}
    # n = N draws all samples: its top-k is the reference top-k, so its accuracy is the out top-k's
    assert res["accuracy_mean"][1] == tc["out_accuracy"]


def test_resume_after_an_interrupted_run_matches_an_uninterrupted_one(tmp_path, det_run, tiny_checkpoint, tiny_lm,
                                                                    monkeypatch):
    kw = dict(heads=str(det_run), model=tiny_checkpoint, k=2, n_values=(2, 6), bootstrap=2, seeds=(0,), n_eval=4,
              accuracy_draws=1, max_new_tokens=8, batch_size=2)
    real, calls = evaluation.answer_and_judge, []

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    def flaky(*a, **k):
        if len(calls) >= 3:
            raise RuntimeError("interrupted")
        return counting(*a, **k)

    monkeypatch.setattr(evaluation, "answer_and_judge", counting)
    stability.run(stability.Config(out=str(tmp_path / "full"), **kw), tiny_lm)
    full_batches = len(calls)
    assert full_batches > 3

    calls.clear()
    monkeypatch.setattr(evaluation, "answer_and_judge", flaky)
    out = tmp_path / "st"
    with pytest.raises(RuntimeError, match="interrupted"):
        stability.run(stability.Config(out=str(out), **kw), tiny_lm)
    assert runs.read_results(out) is None and len({r["id"] for r in runs.read_samples(out)}) >= 2
    with pytest.raises(FileExistsError, match="--resume"):
        stability.run(stability.Config(out=str(out), **kw), tiny_lm)

    calls.clear()
    monkeypatch.setattr(evaluation, "answer_and_judge", counting)
    stability.run(stability.Config(out=str(out), resume=True, **kw), tiny_lm)
    assert len(calls) == full_batches - 3  # the finished batches were not generated again
    counts = Counter((r["condition"], r["id"]) for r in runs.read_samples(out))
    assert set(counts.values()) == {1}
    assert counts.keys() == Counter((r["condition"], r["id"]) for r in runs.read_samples(tmp_path / "full")).keys()
    assert _results(out) == _results(tmp_path / "full")
