"""vrh dpo-pairs: run folder, drop accounting, TRL pair format, and the random-negative control."""

import json
from pathlib import Path

import vrh.experiments.dpo as dpo
from vrh import grounding, runs
from vrh.cli import main

FAST = ["--max-new-tokens", "8", "--batch-size", "4"]


def _ids(path):
    return [r["id"] for r in runs.read_jsonl(path / runs.SAMPLES)]


def test_dpo_pairs_end_to_end(tmp_path, det_run, tiny_checkpoint, capsys):
    out = tmp_path / "dpo"
    assert main(["dpo-pairs", "--model", tiny_checkpoint, "--heads", str(det_run), "--k", "2", "--n", "3",
                 "--out", str(out), *FAST]) == 0
    res, cfg = runs.read_json(out / runs.RESULTS), runs.read_json(out / runs.CONFIG)
    assert cfg["command"] == "dpo-pairs" and cfg["pair_format"]["name"] == dpo.PAIR_FORMAT["name"]
    assert cfg["pair_format"]["version"] == res["pair_format_version"] == dpo.PAIR_FORMAT["version"]
    assert cfg["vrh_heads"] == runs.read_json(det_run / runs.HEAD_SCORES)["ranking"][:2]
    assert res["n_samples"] == 3 and res["n_pairs"] + res["n_dropped"] == 3
    assert sum(res["dropped"].values()) == res["n_dropped"]
    assert len((out / dpo.PAIRS).read_text().splitlines()) == res["n_pairs"]
    recs = runs.read_jsonl(out / runs.SAMPLES)
    assert _ids(out) == _ids(det_run)[:3]  # default: the detection run's samples
    assert all(r["kept"] == (r["drop_reason"] is None) for r in recs)
    stdout = capsys.readouterr().out
    assert "DPOTrainer" in stdout and str(out / dpo.PAIRS) in stdout and stdout.strip() == res["training_command"]


def test_random_negatives_avoid_layer0_and_detected_heads(tmp_path, det_run, tiny_checkpoint):
    out = tmp_path / "dpo"
    assert main(["dpo-pairs", "--model", tiny_checkpoint, "--heads", str(det_run), "--k", "2", "--n", "3",
                 "--random-negatives", "--seed", "1", "--train", "data", "--out", str(out), *FAST]) == 0
    recs = runs.read_jsonl(out / runs.SAMPLES)
    held_out = set(runs.read_json(det_run / runs.CONFIG)["eval_ids"])
    assert len(recs) == 3 and not {r["id"] for r in recs} & held_out
    detected = {tuple(h) for h in runs.read_json(out / runs.CONFIG)["vrh_heads"]}
    for r in recs:
        heads = {tuple(h) for h in r["negative_heads"]}
        assert len(heads) == 2 and not heads & detected and all(l != 0 for l, _ in heads)
    assert runs.read_json(out / runs.RESULTS)["negative_policy"] == "random"


def test_kept_pairs_are_trl_vision_preference_rows(tmp_path, det_run, tiny_checkpoint, monkeypatch):
    """The tiny random model never answers correctly, so stand in for generation to exercise the keep path:
    unmasked answers are correct; masked answers differ except for the first sample."""
    def fake_evaluate(lm, samples, heads=(), **kw):
        out = []
        for i, s in enumerate(samples):
            if not heads:
                out.append({"id": s.id, "pred_text": f"({i},0),(9,9)", "outcome": grounding.CORRECT, "iou": 0.9})
            else:
                same = s.id == first
                out.append({"id": s.id, "pred_text": f"({i},0),(9,9)" if same else "(0,0),(1,1)",
                            "outcome": grounding.CORRECT if same else grounding.MISLOCATED, "iou": 0.0})
        return out

    first = _ids(det_run)[0]
    monkeypatch.setattr(dpo, "evaluate_samples", fake_evaluate)
    out = tmp_path / "dpo"
    assert main(["dpo-pairs", "--model", tiny_checkpoint, "--heads", str(det_run), "--k", "2", "--n", "4",
                 "--out", str(out)]) == 0
    res = runs.read_json(out / runs.RESULTS)
    assert res["n_pairs"] == 3 and res["dropped"] == {dpo.DROP_SAME_ANSWER: 1}
    assert res["kept_rejected_outcomes"] == {grounding.MISLOCATED: 3}
    rows = [json.loads(line) for line in (out / dpo.PAIRS).read_text().splitlines()]
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
