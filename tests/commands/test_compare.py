"""vrh compare on the tiny checkpoint: one detection feeding every scorer (QRHead's null pass included),
each method's top-k masked on the held-out set, the random control, a complete run folder, resume."""

import argparse
import os
from collections import Counter

import pytest
import torch

from vrh import runs
from vrh.analyses import compare
from vrh.core.heads import top_k
from vrh.analyses.compare import analysis as comparison
from vrh.analyses.compare import settings
from vrh.options import add_options, parse_config
from vrh.scoring import compare_baselines

FAST = dict(max_new_tokens=8, batch_size=2)
METHODS = ("out/sum/mean", "in/sum/mean", "qrhead")  # 2 design-space variants + 1 baseline


def _config(tiny_checkpoint, tiny_dataset, out, **kw):
    return compare.Config(**{**dict(model=tiny_checkpoint, data=tiny_dataset, n=4, n_eval=3, ks=(1, 2),
                                    methods=METHODS, seeds=(0, 1, 2), mask_mode="uniform", out=str(out), **FAST),
                             **kw})


@pytest.fixture(scope="module")
def cmp_run(tmp_path_factory, tiny_checkpoint, tiny_dataset, tiny_lm):
    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    compare.run(_config(tiny_checkpoint, tiny_dataset, out), tiny_lm)
    return out


def test_the_methods_table_goes_to_stdout(cmp_run, capsys):
    """compare printed no numbers and wrote only to stderr (issue 26 item 13): its table is on stdout."""
    result = runs.CompareResults.from_json(runs.read_results(cmp_run))
    comparison.print_methods(result)
    out = capsys.readouterr().out
    first = next(iter(result.methods))
    assert "k=1" in out and "k=2" in out and f"{first} (default)" in out and "random" in out
    assert f"{100 * result.methods[first].accuracy[0]:.1f}" in out


def test_compare_writes_a_complete_run(cmp_run):
    out = cmp_run
    for name in (runs.CONFIG, runs.SAMPLES, runs.RESULTS, comparison.TABLE_NAME, comparison.PLOT_NAME):
        assert (out / name).stat().st_size > 0, name
    assert (out / comparison.PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
    cfg = runs.read_config(out)
    assert cfg["command"] == "compare" and cfg["config"]["mask_mode"] == "uniform" and cfg["detect_run"] == "detect"
    assert cfg["config"]["ks"] == [1, 2] and cfg["config"]["methods"] == list(METHODS)

    # one detection: one main capture forward per batch for all three scorers, one null pass per batch for QRHead
    hs = runs.read_json(out / "detect" / runs.HEAD_SCORES)
    assert set(hs["variants"]) == set(METHODS) and hs["scorer"] == "out/sum/mean"
    assert hs["capture_batches"] == 2 and hs["capture_forwards"] == 2
    assert hs["extra_capture_forwards"] == {"null_query": 2}

    res = runs.read_results(out)
    assert res["schema_version"] == runs.SCHEMA_VERSION
    assert res["k"] == [1, 2] and list(res["methods"]) == list(METHODS) and res["default_method"] == "out/sum/mean"
    for m in res["methods"].values():
        assert len(m["accuracy"]) == len(m["parse_failure_rate"]) == 2
        assert all(0.0 <= a <= 1.0 for a in m["accuracy"])
    assert len(res["random"]["mean"]) == len(res["random"]["std"]) == 2 and res["random"]["seeds"] == [0, 1, 2]
    assert 0.0 <= res["baseline_accuracy"] <= 1.0 and res["mask_mode"] == "uniform"
    assert res["n_eval"] == 3 and res["n_detect"] == 4 and res["num_heads_total"] == 8
    assert set(res["similarity"]) == set(METHODS)
    assert res["similarity"]["out/sum/mean"]["spearman_vs_default"] == 1.0
    assert set(res["similarity"]["qrhead"]) >= {"spearman_vs_default", "kendall_vs_default", "top20_overlap_vs_default"}
    assert set(res["best_method_by_k"]) == {"1", "2"} and all(res["best_method_by_k"].values())
    rc = res["random_control"]
    assert [p["k"] for p in rc["per_k"]] == [1, 2] and all(p["seeds_drawn"] == [0, 1, 2] for p in rc["per_k"])
    assert res["random"]["n_distinct_sets"] == [p["n_distinct_sets"] for p in rc["per_k"]]

    # masked sets: each method's own top-k; random heads avoid the default's top-k
    default_top = {k: {tuple(h) for h in hs["ranking"][:k]} for k in (1, 2)}
    labels = [c["condition"] for c in res["conditions"]]
    assert len(labels) == len(set(labels)) == 1 + 2 + 2 * 2 + 3 * 2  # none, default, others x k, seeds x k
    for c in res["conditions"]:
        assert c["mask_mode"] == "uniform"
        if c["kind"] == "top_k":
            scores = torch.tensor(hs["variants"][c["method"]]["scores"])
            assert c["heads"] == [list(h) for h in sorted(top_k(scores, c["k"]))]
            assert c["condition"] == (f"top{c['k']}" if c["method"] == "out/sum/mean" else f"top{c['k']}:{c['method']}")
            assert res["methods"][c["method"]]["accuracy"][c["k"] - 1] == c["accuracy"]
        if c["kind"] == "random":
            assert len(c["heads"]) == c["k"] and not {tuple(h) for h in c["heads"]} & default_top[c["k"]]

    # samples: one line per (condition, sample), all on the held-out split
    recs = runs.read_samples(out)
    assert len(recs) == 3 * len(labels)
    assert set(Counter((r["condition"], r["id"]) for r in recs).values()) == {1}
    held_out = set(runs.read_detection_split(out / "detect").eval_ids)
    assert {r["id"] for r in recs} == held_out and len(held_out) == 3
    assert sum(r["kind"] == "top_k" and r["method"] == "qrhead" for r in recs) == 3 * 2
    # every distinct head set evaluated once (many methods' top-k coincide on 8 heads)
    distinct = {(frozenset(map(tuple, c["heads"]))) for c in res["conditions"]}
    assert res["n_evaluations"] == len(distinct) <= len(labels)

    table = (out / comparison.TABLE_NAME).read_text()
    assert "| k=1 | k=2 |" in table and "out/sum/mean (default)" in table and "| random |" in table
    assert "qrhead" in table and "**" in table


def test_interrupted_compare_resumes_without_loss_or_duplicates(tmp_path, monkeypatch, crash_after, cmp_run, tiny_checkpoint,
                                                                tiny_dataset, tiny_lm):
    import vrh.experiments.detection

    out = tmp_path / "cmp"
    restore = crash_after(5)
    with pytest.raises(KeyboardInterrupt):
        compare.run(_config(tiny_checkpoint, tiny_dataset, out), tiny_lm)
    assert not runs.is_finished(out) and 0 < len(runs.read_samples(out))

    # resume: the finished detection is reused (not redone), only missing samples are generated
    restore()
    monkeypatch.setattr(vrh.experiments.detection, "detect_heads", lambda *a, **k: pytest.fail("detection was redone"))
    with pytest.raises(FileExistsError, match="--resume"):
        compare.run(_config(tiny_checkpoint, tiny_dataset, out), tiny_lm)
    res = compare.run(_config(tiny_checkpoint, tiny_dataset, out, resume=True), tiny_lm)

    recs = runs.read_samples(out)
    counts = Counter((r["condition"], r["id"]) for r in recs)
    assert set(counts.values()) == {1} and len(counts) == 3 * len(res["conditions"])
    full = runs.read_results(cmp_run)
    skip = ("elapsed_seconds", "data")
    assert {k: v for k, v in res.items() if k not in skip} == {k: v for k, v in full.items() if k not in skip
                                                               and k != "schema_version"}
    by_key = lambda rs: {(r["condition"], r["id"]): r["pred_text"] for r in rs}  # noqa: E731
    assert by_key(recs) == by_key(runs.read_samples(cmp_run))


def test_options_ks_methods_default_and_seed_checks(tiny_dataset):
    parser = argparse.ArgumentParser()
    add_options(parser, compare.Config)
    cfg = parse_config(compare.Config, parser.parse_args(["--model", "m", "--data", tiny_dataset, "--out", "x", "--ks", "1,3",
                                                          "--methods", "in/sum/mean,qrhead", "--default",
                                                          "out/sum/mean"]))
    assert cfg.ks == (1, 3) and cfg.methods == ("in/sum/mean", "qrhead")
    # detection scores the default first (it ranks head_scores.json); the random control avoids its top-k
    assert cfg.scorers == ("out/sum/mean", "in/sum/mean", "qrhead") and cfg.scorer == "out/sum/mean"
    # today's --k still works (argparse abbreviation of --ks: no other compare flag starts with --k)
    assert parse_config(compare.Config, parser.parse_args(["--model", "m", "--data", "d", "--out", "x", "--k", "5,10"])).ks == (5, 10)
    default = parse_config(compare.Config, parser.parse_args(["--model", "m", "--data", "d", "--out", "x"]))
    # --ks default: 1, k/2, k, 2k of the model's default k (10% of its heads), resolved once the model loaded
    assert default.methods == settings.default_methods() and default.ks is None
    assert default.methods == settings.DESIGN_SPACE + settings.TOKEN_CHOICE + compare_baselines()  # from the registry
    help_text = parser.format_help()
    assert "--methods" in help_text and "--scorers" not in help_text and "--scorer " not in help_text

    with pytest.raises(ValueError, match="at least 3 distinct seeds"):
        compare.Config(model="m", data="d", out="x", seeds=(0, 0, 1))
    with pytest.raises(ValueError, match="--ks"):
        compare.Config(model="m", data="d", out="x", ks=(0,))
    with pytest.raises(ValueError, match="twice"):
        compare.Config(model="m", data="d", out="x", methods=("qrhead", "qrhead"))


def test_k_without_room_for_a_random_control_is_refused(tmp_path, tiny_checkpoint, tiny_dataset, tiny_lm):
    """8 heads: k = 5 leaves 3 outside the top-5, too few for 5 random heads -- refused up front, naming --ks."""
    out = tmp_path / "c"
    with pytest.raises(ValueError, match="--ks 5"):
        compare.run(_config(tiny_checkpoint, tiny_dataset, out, ks=(1, 5), methods=("out/sum/mean",)), tiny_lm)
    assert not out.exists()  # refused before detection: nothing written
