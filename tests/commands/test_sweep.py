"""``vrh sweep`` on the tiny checkpoint: k-curves, tagged samples, refusals, VQA on the detection dataset,
and an interrupted sweep resumed to the same result."""

import argparse
import json

import pytest

from vrh import runs
from vrh.analyses import sweep
from vrh.options import add_options, parse_config

from .conftest import FAST

L, H = 2, 4  # the tiny checkpoint's LM: 2 layers x 4 heads


def config(tiny_checkpoint, tiny_dataset, det_run, out, **kw):
    base = dict(model=tiny_checkpoint, data=tiny_dataset, heads=str(det_run), out=str(out), ks=(0, 1, 2),
                seeds=(0, 1), n=4, **FAST)
    return sweep.Config(**{**base, **kw})


def without_time(result):
    return {k: v for k, v in result.items() if k != "elapsed_seconds"}


def test_cli_options_parse_into_the_config():
    p = argparse.ArgumentParser()
    add_options(p, sweep.Config)
    cfg = parse_config(sweep.Config, p.parse_args(["--model", "m", "--data", "d.jsonl", "--heads", "det", "--out", "o", "--ks",
                                                   "0,3", "--seeds", "4", "--mask-mode", "uniform"]))
    assert cfg.ks == (0, 3) and cfg.seeds == (4,) and cfg.mask_mode == "uniform" and cfg.heads == "det"
    # the default: 0, 1, k/2, k, 2k of the model's default k, resolved once the model loaded
    assert parse_config(sweep.Config, p.parse_args(["--model", "m", "--data", "d", "--heads", "h", "--out", "o"])
                        ).ks is None
    with pytest.raises(SystemExit):  # --heads is required
        p.parse_args(["--model", "m", "--data", "d", "--out", "o"])


def test_sweep_writes_curves_and_tagged_samples(tmp_path, tiny_checkpoint, tiny_dataset, det_run, tiny_lm):
    out = tmp_path / "sw"
    res = sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out), tiny_lm)
    assert runs.read_results(out) == json.loads(json.dumps({**res, "schema_version": runs.SCHEMA_VERSION}))
    for key in ("task", "num_heads_total", "k", "baseline_accuracy", "vrh", "random", "conditions",
                "random_control", "elapsed_seconds"):
        assert key in res, key
    assert res["task"] == "grounding" and res["num_heads_total"] == L * H
    assert res["k"] == [0, 1, 2] and len(res["vrh"]["accuracy"]) == 3
    assert res["vrh"]["accuracy"][0] == res["baseline_accuracy"]
    assert res["random"]["seeds"] == [0, 1] and all(len(a) == 2 for a in res["random"]["accuracy"])
    ranking = [tuple(h) for h in runs.read_head_scores(det_run).ranking()]
    by_label = {c["condition"]: c for c in res["conditions"]}
    assert set(by_label) == {"none", "top1", "top2", "random1:s0", "random1:s1", "random2:s0", "random2:s1"}
    for k in (1, 2):
        top = {tuple(h) for h in by_label[f"top{k}"]["heads"]}
        assert top == set(ranking[:k])
        for s in (0, 1):
            rnd = {tuple(h) for h in by_label[f"random{k}:s{s}"]["heads"]}
            assert len(rnd) == k and not rnd & top  # random heads are drawn outside the top-k
    assert [c["k"] for c in res["random_control"]["per_k"]] == [1, 2]

    lines = runs.read_samples(out)
    assert len(lines) == 4 * len(by_label)
    assert {(l["condition"], l["kind"]) for l in lines} == {(c, by_label[c]["kind"]) for c in by_label}
    assert {l["kind"] for l in lines} == {"none", "top_k", "random"}
    assert len({(l["condition"], l["id"]) for l in lines}) == len(lines)
    cfg = runs.read_config(out)
    assert cfg["command"] == "sweep" and [c["condition"] for c in cfg["conditions"]] == list(by_label)


def test_k_without_room_for_the_random_control_is_refused_naming_ks(tmp_path, tiny_checkpoint, tiny_dataset,
                                                                    det_run, tiny_lm):
    out = tmp_path / "sw"
    with pytest.raises(ValueError, match="--ks") as e:  # 5 top heads leave 3 of 8 for 5 random ones
        sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out, ks=(0, 5)), tiny_lm)
    assert "3 heads" in str(e.value)
    with pytest.raises(ValueError, match=r"--ks 9 is outside \[0, 8\]"):
        sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out, ks=(9,)), tiny_lm)
    assert not out.exists()  # refused before the run folder is touched


def test_vqa_on_the_detection_runs_own_dataset(tmp_path, tiny_checkpoint, tiny_dataset, det_run, tiny_lm):
    """The VQA samples of the detection dataset were never scored: all of them may be evaluated."""
    out = tmp_path / "vqa"
    res = sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out, task="vqa", ks=(0, 1), n=5), tiny_lm)
    assert res["task"] == "vqa" and res["k"] == [0, 1]
    ids = {l["id"] for l in runs.read_samples(out)}
    assert len(ids) == 5 and all(i.startswith("q") for i in ids)
    data = runs.read_config(out)["data"]
    assert data["task"] == "vqa" and "removed" in data["disjointness"]
    # which rule scored the answers is in the run's config and on every record (issue 29 item 9)
    assert runs.read_config(out)["task"] == {"name": "vqa", "answer_rule": "official"}
    assert {l["answer_rule"] for l in runs.read_samples(out)} == {"lenient"}  # own data: no benchmark rule


def test_interrupted_sweep_resumes_to_the_same_result(tmp_path, crash_after, tiny_checkpoint, tiny_dataset,
                                                      det_run, tiny_lm):
    full = sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, tmp_path / "full"), tiny_lm)

    out = tmp_path / "sw"

    restore = crash_after(3)
    with pytest.raises(KeyboardInterrupt):
        sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out), tiny_lm)
    restore()
    partial = runs.read_samples(out)
    assert 0 < len(partial) < 4 * 7 and not runs.is_finished(out)

    with pytest.raises(FileExistsError, match="--resume"):  # neither flag: the interrupted run is kept
        sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out), tiny_lm)
    with pytest.raises(ValueError, match="n: 4 -> 3"):  # other settings cannot resume this run
        sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out, n=3, resume=True), tiny_lm)
    again = sweep.run(config(tiny_checkpoint, tiny_dataset, det_run, out, resume=True), tiny_lm)
    lines = runs.read_samples(out)
    assert lines[:len(partial)] == partial  # nothing finished was redone
    keys = [(l["condition"], l["id"]) for l in lines]
    assert len(keys) == len(set(keys)) == 4 * 7
    assert without_time(again) == without_time(full)
