"""vrh compare end to end on the tiny checkpoint: one detection feeding every scorer (QRHead's null pass
included), each method's top-k masked on the held-out set, random control, complete run folder."""

import os

from vrh import runs
from vrh.cli import main
from vrh.heads import top_k

FAST = ["--max-new-tokens", "8", "--batch-size", "2"]
METHODS = ["out/sum/mean", "in/sum/mean", "qrhead"]  # 2 design-space variants + 1 baseline


def test_compare_writes_a_complete_run(tmp_path, tiny_checkpoint, tiny_dataset):
    import torch

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    out = tmp_path / "cmp"
    assert main(["compare", "--model", tiny_checkpoint, "--data", tiny_dataset, "--n", "4", "--n-eval", "3",
                 "--k", "1,2", "--methods", ",".join(METHODS), "--seeds", "0,1,2", "--mask-mode", "uniform",
                 "--out", str(out), *FAST]) == 0
    for name in (runs.CONFIG, runs.SAMPLES, runs.RESULTS, "compare.md", "compare.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    cfg = runs.read_json(out / runs.CONFIG)
    assert cfg["command"] == "compare" and cfg["config"]["mask_mode"] == "uniform" and cfg["detect_run"] == "detect"

    # one detection: one main capture forward per batch for all three scorers, one null pass per batch for QRHead
    det = out / "detect"
    hs = runs.read_json(det / runs.HEAD_SCORES)
    assert set(hs["variants"]) == set(METHODS) and hs["scorer"] == "out/sum/mean"
    assert hs["capture_batches"] == 2 and hs["capture_forwards"] == 2 and hs["null_capture_forwards"] == 2

    res = runs.read_json(out / runs.RESULTS)
    assert res["k"] == [1, 2] and list(res["methods"]) == METHODS and res["default_method"] == "out/sum/mean"
    for m in res["methods"].values():
        assert len(m["accuracy"]) == len(m["parse_failure_rate"]) == 2
        assert all(0.0 <= a <= 1.0 for a in m["accuracy"])
    assert len(res["random"]["mean"]) == len(res["random"]["std"]) == 2 and res["random"]["seeds"] == [0, 1, 2]
    assert 0.0 <= res["baseline_accuracy"] <= 1.0 and res["mask_mode"] == "uniform"
    assert set(res["similarity"]) == set(METHODS)
    assert res["similarity"]["out/sum/mean"]["spearman_vs_default"] == 1.0
    assert set(res["similarity"]["qrhead"]) >= {"spearman_vs_default", "kendall_vs_default", "top20_overlap_vs_default"}
    assert set(res["best_method_by_k"]) == {"1", "2"} and all(res["best_method_by_k"].values())

    # masked sets: each method's own top-k; random heads avoid the default's top-k
    for c in res["conditions"]:
        if c["kind"] == "method":
            scores = torch.tensor(hs["variants"][c["method"]]["scores"])
            assert c["heads"] == [list(h) for h in top_k(scores, c["k"])]
        if c["kind"] == "random":
            assert len(c["heads"]) == c["k"] and not {tuple(h) for h in c["heads"]} & {
                tuple(h) for h in hs["ranking"][:c["k"]]}

    # samples: one line per (condition, sample), all on the held-out split
    recs = runs.read_jsonl(out / runs.SAMPLES)
    assert len(recs) == 3 * (1 + len(METHODS) * 2 + 3 * 2)  # baseline, methods x k, seeds x k
    held_out = set(runs.read_json(det / runs.CONFIG)["eval_ids"])
    assert {r["id"] for r in recs} == held_out and len(held_out) == 3
    assert sum(r["kind"] == "method" and r["method"] == "qrhead" for r in recs) == 3 * 2

    table = (out / "compare.md").read_text()
    assert "| k=1 | k=2 |" in table and "out/sum/mean (default)" in table and "| random |" in table
    assert "qrhead" in table and "**" in table
