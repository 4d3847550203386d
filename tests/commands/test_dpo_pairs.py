"""vrh dpo-pairs: run folder, drop accounting, TRL pair format, the random-negative control, and resume."""

import argparse
import json
from collections import Counter
from pathlib import Path

import pytest

from vrh import runs
from vrh.experiments import preference_pairs as dpo
from vrh.experiments import evaluation
from vrh.data import boxes as grounding
from vrh.experiments import runner
from vrh.analyses import dpo_pairs
from vrh.data import load_dataset
from vrh.options import add_options, parse_config

FAST = dict(max_new_tokens=8, batch_size=4)


def parse(argv):
    p = argparse.ArgumentParser()
    add_options(p, dpo_pairs.Config)
    return parse_config(dpo_pairs.Config, p.parse_args(["--model", "organism", *argv]))


def _by_condition(out):
    recs = runs.read_samples(out)
    by: dict[str, list[str]] = {}
    for r in recs:
        by.setdefault(r["condition"], []).append(r["id"])
    return by


def _results(out):
    return {k: v for k, v in runs.read_results(out).items() if k not in ("elapsed_seconds", "training_command")}


def test_options_parse_with_the_documented_defaults(det_run):
    cfg = parse(["--heads", str(det_run), "--out", "x"])
    assert cfg.exclude_layers == (0,) and cfg.train == "detect" and cfg.k is None and cfg.mask_mode == "zero"
    assert cfg.rejected == "any" and cfg.pairs is None
    cfg = parse(["--heads", str(det_run), "--out", "x", "--exclude-layers", "0,1", "--random-negatives",
                 "--mask-mode", "uniform", "--n", "3"])
    assert cfg.exclude_layers == (0, 1) and cfg.random_negatives and cfg.mask_mode == "uniform" and cfg.n == 3
    with pytest.raises(ValueError, match="--k"):
        parse(["--heads", str(det_run), "--out", "x", "--k", "0"])


def test_training_samples_never_include_held_out_ids(det_run, tiny_dataset):
    split = runs.read_detection_split(det_run)
    det, info = dpo.training_samples(det_run, None, "detect")
    assert [s.id for s in det] == split.detect_ids and info["n"] == len(split.detect_ids)
    data, info = dpo.training_samples(det_run, tiny_dataset, "data")
    grounding_ids = [s.id for s in load_dataset(tiny_dataset) if s.task == "grounding"]
    assert [s.id for s in data] == [i for i in grounding_ids if i not in set(split.eval_ids)]
    assert info["held_out_excluded"] == len(split.eval_ids)
    assert len(dpo.training_samples(det_run, None, "data", n=2)[0]) == 2
    with pytest.raises(ValueError, match="--train"):
        dpo.training_samples(det_run, None, "eval")


def test_build_pairs_keeps_correct_chosen_with_a_different_rejected(det_run):
    samples = dpo.training_samples(det_run, None, "detect")[0][:3]
    ok = lambda s, text: {"id": s.id, "pred_text": text, "outcome": grounding.CORRECT, "iou": 0.9}  # noqa: E731
    bad = lambda s, text: {"id": s.id, "pred_text": text, "outcome": grounding.MISLOCATED, "iou": 0.0}  # noqa: E731
    chosen = [ok(samples[0], "a"), bad(samples[1], "b"), ok(samples[2], "c")]
    rejected = [bad(samples[0], "x"), bad(samples[1], "y"), ok(samples[2], " c ")]
    p = dpo.build_pairs(samples, ["p0", "p1", "p2"], chosen, rejected, negative_heads=[[(1, 0)]] * 3)
    assert [d["drop_reason"] for d in p.decisions] == [None, dpo.DROP_CHOSEN_INCORRECT, dpo.DROP_SAME_ANSWER]
    assert p.dropped == {dpo.DROP_CHOSEN_INCORRECT: 1, dpo.DROP_SAME_ANSWER: 1}
    assert len(p.rows) == 1 and p.rows[0]["prompt"][0]["content"][1]["text"] == "p0"
    assert p.decisions[0]["negative_heads"] == [[1, 0]] and p.kept_rejected_outcomes == {grounding.MISLOCATED: 1}
    with pytest.raises(ValueError, match="do not belong"):
        dpo.build_pairs(samples[:2], ["p0", "p1"], chosen[:2], rejected[1:3])


def test_rejected_wrong_and_the_pair_cap(det_run):
    """--rejected wrong drops a pair whose masked answer is still correct; --pairs keeps the first N pairs."""
    samples = dpo.training_samples(det_run, None, "detect")[0][:4]
    ok = lambda s, text: {"id": s.id, "pred_text": text, "outcome": grounding.CORRECT, "iou": 0.9}  # noqa: E731
    bad = lambda s, text: {"id": s.id, "pred_text": text, "outcome": grounding.MISLOCATED, "iou": 0.0}  # noqa: E731
    chosen = [ok(s, f"c{i}") for i, s in enumerate(samples)]
    rejected = [ok(samples[0], "r0"), bad(samples[1], "r1"), bad(samples[2], "r2"), bad(samples[3], "r3")]
    prompts = ["p"] * 4
    assert len(dpo.build_pairs(samples, prompts, chosen, rejected).rows) == 4  # the paper's recipe keeps all
    wrong = dpo.build_pairs(samples, prompts, chosen, rejected, rejected_rule="wrong")
    assert wrong.dropped == {dpo.DROP_REJECTED_CORRECT: 1} and len(wrong.rows) == 3
    capped = dpo.build_pairs(samples, prompts, chosen, rejected, rejected_rule="wrong", max_pairs=2)
    assert [d["drop_reason"] for d in capped.decisions] == [dpo.DROP_REJECTED_CORRECT, None, None, dpo.DROP_OVER_LIMIT]
    assert [r["chosen"][0]["content"][0]["text"] for r in capped.rows] == ["c1", "c2"]
    with pytest.raises(ValueError, match="--rejected"):
        dpo.build_pairs(samples, prompts, chosen, rejected, rejected_rule="right")
    with pytest.raises(ValueError, match="--pairs"):
        parse(["--heads", str(det_run), "--out", "x", "--pairs", "0"])


def test_dpo_pairs_end_to_end(tmp_path, det_run, tiny_checkpoint, tiny_lm, capsys):
    out = tmp_path / "dpo"
    res = dpo_pairs.run(dpo_pairs.Config(model=tiny_checkpoint, heads=str(det_run), k=2, n=3, out=str(out), **FAST),
                        tiny_lm)
    cfg = runs.read_config(out)
    assert runs.read_results(out)["schema_version"] == runs.SCHEMA_VERSION
    assert cfg["command"] == "dpo-pairs" and cfg["pair_format"]["name"] == dpo.PAIR_FORMAT["name"]
    assert cfg["pair_format"]["version"] == res["pair_format_version"] == dpo.PAIR_FORMAT["version"]
    ranking = runs.read_head_scores(det_run).ranking()
    assert cfg["vrh_heads"] == sorted(list(h) for h in ranking[:2])
    assert res["n_samples"] == 3 and res["n_pairs"] + res["n_dropped"] == 3
    assert sum(res["dropped"].values()) == res["n_dropped"]
    assert len((out / runs.PAIRS).read_text().splitlines()) == res["n_pairs"]
    detect_ids = runs.read_detection_split(det_run).detect_ids
    assert _by_condition(out) == {"none": detect_ids[:3], "top2": detect_ids[:3]}  # default: the detection samples
    assert all(d["kept"] == (d["drop_reason"] is None) for d in res["decisions"])
    assert [c["condition"] for c in res["conditions"]] == ["none", "top2"] and "random_control" not in res
    stdout = capsys.readouterr().out
    script = "\n".join(ln for ln in stdout.splitlines() if not ln.startswith("# "))  # the counts: shell comments
    assert script == res["training_command"] and f"# dpo-pairs: {res['n_pairs']} pairs from 3 samples" in stdout
    assert f"vrh dpo-train --pairs {out} --model {tiny_checkpoint} --out {out}-dpo" in stdout


def test_random_negatives_avoid_layer0_and_detected_heads(tmp_path, det_run, tiny_checkpoint, tiny_lm):
    out = tmp_path / "dpo"
    res = dpo_pairs.run(dpo_pairs.Config(model=tiny_checkpoint, heads=str(det_run), k=2, n=3, random_negatives=True,
                                         seed=1, train="data", mask_mode="uniform", out=str(out), **FAST), tiny_lm)
    held_out = set(runs.read_detection_split(det_run).eval_ids)
    by = _by_condition(out)
    seeds = [dpo.negative_seed(1, i) for i in range(3)]
    assert set(by) == {"none"} | {f"random:s{s}" for s in seeds}
    assert all(len(ids) == 1 for label, ids in by.items() if label != "none")
    assert len(by["none"]) == 3 and not set(by["none"]) & held_out
    assert {r["mask_mode"] for r in runs.read_samples(out)} == {"uniform"}
    detected = {tuple(h) for h in runs.read_config(out)["vrh_heads"]}
    for d in res["decisions"]:
        heads = {tuple(h) for h in d["negative_heads"]}
        assert len(heads) == 2 and not heads & detected and all(l != 0 for l, _ in heads)
    assert res["negative_policy"] == "random"
    assert res["random_control"]["per_k"][0]["seeds_drawn"] == seeds


def test_kept_pairs_are_trl_vision_preference_rows(tmp_path, det_run, tiny_checkpoint, tiny_lm, monkeypatch):
    """The tiny random model never answers correctly, so stand in for generation to exercise the keep path:
    unmasked answers are correct; masked answers differ except for the first sample."""
    first = runs.read_detection_split(det_run).detect_ids[0]

    def fake_evaluate(lm, task, samples, heads=(), *, on_record=None, finished=None, **kw):
        out = []
        for i, s in enumerate(samples):
            same = not heads or s.id == first
            out.append({"id": s.id, "pred_text": f"({i},0),(9,9)" if same else "(0,0),(1,1)",
                        "outcome": grounding.CORRECT if same else grounding.MISLOCATED, "iou": 0.9 if same else 0.0})
            if on_record is not None:
                on_record(out[-1])
        return out

    def fake_rows(lm, task, rows, *, on_record=None, **kw):  # batched conditions: (sample, heads) rows
        recs = [fake_evaluate(lm, task, [s], hs)[0] for s, hs in rows]
        for i, rec in enumerate(recs):
            on_record(i, rec)
        return recs

    monkeypatch.setattr(runner, "evaluate_samples", fake_evaluate)
    monkeypatch.setattr(runner, "evaluate_rows", fake_rows)
    out = tmp_path / "dpo"
    res = dpo_pairs.run(dpo_pairs.Config(model=tiny_checkpoint, heads=str(det_run), k=2, n=4, out=str(out)), tiny_lm)
    assert res["n_pairs"] == 3 and res["dropped"] == {dpo.DROP_SAME_ANSWER: 1}
    assert res["kept_rejected_outcomes"] == {grounding.MISLOCATED: 3} and res["chosen_accuracy"] == 1.0
    rows = [json.loads(line) for line in (out / runs.PAIRS).read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert list(row) == dpo.PAIR_FORMAT["keys"]
        assert len(row["images"]) == 1 and Path(row["images"][0]).is_absolute() and Path(row["images"][0]).exists()
        (user,) = row["prompt"]
        assert user["role"] == "user" and user["content"][0] == {"type": "image"}
        assert user["content"][1]["type"] == "text" and "the red box" in user["content"][1]["text"]
        for key in ("chosen", "rejected"):
            (msg,) = row[key]
            assert msg["role"] == "assistant" and msg["content"][0]["type"] == "text"
        assert row["chosen"][0]["content"][0]["text"] != row["rejected"][0]["content"][0]["text"]


@pytest.mark.parametrize("random_negatives", [False, True])
def test_resume_after_an_interrupted_run_matches_an_uninterrupted_one(tmp_path, det_run, tiny_checkpoint, tiny_lm,
                                                                    monkeypatch, random_negatives):
    kw = dict(model=tiny_checkpoint, heads=str(det_run), k=2, n=4, random_negatives=random_negatives,
              max_new_tokens=8, batch_size=2)
    real, calls = evaluation.answer_and_judge, []

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    def flaky(*a, **k):
        if len(calls) >= 3:  # none: 2 batches; then the 1st masked batch (top2) or sample (random) is done
            raise RuntimeError("interrupted")
        return counting(*a, **k)

    monkeypatch.setattr(evaluation, "answer_and_judge", counting)
    dpo_pairs.run(dpo_pairs.Config(out=str(tmp_path / "full"), **kw), tiny_lm)
    full_batches = len(calls)

    calls.clear()
    monkeypatch.setattr(evaluation, "answer_and_judge", flaky)
    out = tmp_path / "dpo"
    with pytest.raises(RuntimeError, match="interrupted"):
        dpo_pairs.run(dpo_pairs.Config(out=str(out), **kw), tiny_lm)
    assert runs.read_results(out) is None and not (out / runs.PAIRS).exists()

    calls.clear()
    monkeypatch.setattr(evaluation, "answer_and_judge", counting)
    dpo_pairs.run(dpo_pairs.Config(out=str(out), resume=True, **kw), tiny_lm)
    assert len(calls) == full_batches - 3
    counts = Counter((r["condition"], r["id"]) for r in runs.read_samples(out))
    assert set(counts.values()) == {1}
    assert counts.keys() == Counter((r["condition"], r["id"]) for r in runs.read_samples(tmp_path / "full")).keys()
    assert _results(out) == _results(tmp_path / "full")
    assert (out / runs.PAIRS).read_text() == (tmp_path / "full" / runs.PAIRS).read_text()
