"""vrh transfer on the tiny checkpoint: A's top-k masked in B, B's own top-k, random controls outside A's
and B's top-k, the grid check, resume."""

import os
from collections import Counter

import pytest

from vrh import runs
from vrh.analyses import transfer

FAST = dict(max_new_tokens=8, batch_size=2)

REPORT_KEYS = {"model_a", "model_b", "k", "baseline_accuracy", "own_heads_accuracy", "transferred_heads_accuracy",
               "random_accuracy_mean", "random_accuracy_std", "random_accuracy", "spearman", "kendall",
               "topk_overlap", "similarity", "fractions", "transferred_heads", "conditions", "n", "random_control"}


def _config(det_run, tiny_checkpoint, tiny_dataset, out, **kw):
    return transfer.Config(**{**dict(heads=str(det_run), heads_b=str(det_run), model=tiny_checkpoint,
                                     data=tiny_dataset, k=2, seeds=(0, 1), n=3, out=str(out), **FAST), **kw})


@pytest.fixture(scope="module")
def tr_run(tmp_path_factory, det_run, tiny_checkpoint, tiny_dataset, tiny_lm):
    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    out = tmp_path_factory.mktemp("tr") / "tr"
    transfer.run(_config(det_run, tiny_checkpoint, tiny_dataset, out), tiny_lm)
    return out


def test_transfer_into_the_same_model_equals_own_heads(tr_run, det_run):
    out = tr_run
    cfg, res = runs.read_config(out), runs.read_results(out)
    assert cfg["command"] == "transfer" and cfg["environment"]["torch"] and cfg["config"]["mask_mode"] == "zero"
    assert REPORT_KEYS <= set(res) and res["k"] == 2 and res["n"] == 3
    hs = runs.read_head_scores(det_run)
    assert res["transferred_heads"] == sorted(list(h) for h in hs.ranking()[:2])
    # A == B: same heads masked, so the same answers, and the maps agree perfectly
    assert res["transferred_heads_accuracy"] == res["own_heads_accuracy"]
    assert res["spearman"] == res["kendall"] == res["topk_overlap"] == 1.0
    assert res["similarity"]["top20_overlap"] == 1.0 and res["similarity"]["top20_k"] == 8
    recs = runs.read_samples(out)
    assert len(recs) == 3 * 5  # baseline, transferred, own, 2 random seeds
    assert set(Counter((r["condition"], r["id"]) for r in recs).values()) == {1}
    text = lambda label: [r["pred_text"] for r in recs if r["condition"] == label]  # noqa: E731
    assert text("transferred") == text("own")
    assert {r["id"] for r in recs} <= set(runs.read_detection_split(det_run).eval_ids)
    labels = [c["condition"] for c in res["conditions"]]
    assert labels == ["none", "transferred", "own", "random:s0", "random:s1"]
    top2 = {tuple(h) for h in hs.ranking()[:2]}
    for c in res["conditions"]:
        if c["kind"] == "random":
            assert len(c["heads"]) == 2 and not {tuple(h) for h in c["heads"]} & top2
    assert set(res["fractions"]) == {"baseline", "transferred", "own", "random_mean"}
    assert res["random_accuracy"] == [c["accuracy"] for c in res["conditions"] if c["kind"] == "random"]
    pk = res["random_control"]["per_k"]
    assert len(pk) == 1 and pk[0]["k"] == 2 and pk[0]["seeds_drawn"] == [0, 1] and pk[0]["n_eligible_heads"] == 6


def test_random_heads_avoid_both_detected_sets(tmp_path, det_run, tiny_checkpoint, tiny_dataset, tiny_lm):
    """B's own top-k differs from A's (B's map is A's negated): no random set masks a head of either."""
    import json
    import shutil

    b_run = tmp_path / "det_b"
    shutil.copytree(det_run, b_run)
    hs = json.loads((b_run / runs.HEAD_SCORES).read_text())
    for entry in (hs, *hs["variants"].values()):
        entry["scores"] = [[-v for v in row] for row in entry["scores"]]
        entry["ranking"] = entry["ranking"][::-1]
    (b_run / runs.HEAD_SCORES).write_text(json.dumps(hs))
    res = transfer.run(_config(det_run, tiny_checkpoint, tiny_dataset, tmp_path / "tr", heads_b=str(b_run),
                               seeds=(0, 1, 2, 3), n=1), tiny_lm)
    by = {c["condition"]: {tuple(h) for h in c["heads"]} for c in res["conditions"]}
    assert by["transferred"] and by["own"] and not by["transferred"] & by["own"]
    for label, heads in by.items():
        if label.startswith("random"):
            assert len(heads) == 2 and not heads & (by["transferred"] | by["own"]), label
    L, H = runs.read_head_scores(det_run).scores().shape
    assert res["random_control"]["per_k"][0]["n_eligible_heads"] == L * H - 4


def test_transfer_without_b_run_has_no_own_condition(tmp_path, det_run, tiny_checkpoint, tiny_dataset, tiny_lm):
    out = tmp_path / "tr"
    res = transfer.run(_config(det_run, tiny_checkpoint, tiny_dataset, out, heads_b=None, k=1, seeds=(0,), n=2,
                               mask_mode="uniform"), tiny_lm)
    assert res["own_heads_accuracy"] is None and res["spearman"] is None and res["similarity"] is None
    assert [c["kind"] for c in res["conditions"]] == ["none", "top_k", "random"]
    assert all(c["mask_mode"] == "uniform" for c in res["conditions"])
    assert set(res["fractions"]) == {"baseline", "transferred", "random_mean"}
    assert runs.read_results(out)["random_accuracy_std"] == 0.0


def test_the_printed_line_names_the_models(tmp_path, capsys, det_run, tiny_checkpoint, tiny_dataset, tiny_lm):
    """Not "B unmasked ..., A's top-k": A, B, C are also the organisms' names (C -> C' printed "B" and "A")."""
    import json
    import shutil

    a_run = tmp_path / "det_c"
    shutil.copytree(det_run, a_run)
    cfg = json.loads((a_run / runs.CONFIG).read_text())
    cfg["model"]["path"] = "/checkpoints/organism_c"
    (a_run / runs.CONFIG).write_text(json.dumps(cfg))
    capsys.readouterr()
    transfer.run(_config(a_run, tiny_checkpoint, tiny_dataset, tmp_path / "tr", heads_b=None, k=1, seeds=(0,), n=1),
                 tiny_lm)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    b = os.path.basename(tiny_checkpoint)
    assert line.startswith(f"transfer: {b} unmasked ") and ", organism_c's top-1 " in line, line


def test_interrupted_transfer_resumes_without_loss_or_duplicates(tmp_path, crash_after, tr_run, det_run,
                                                                 tiny_checkpoint, tiny_dataset, tiny_lm):
    out = tmp_path / "tr"
    restore = crash_after(3)
    with pytest.raises(KeyboardInterrupt):
        transfer.run(_config(det_run, tiny_checkpoint, tiny_dataset, out), tiny_lm)
    assert not runs.is_finished(out) and runs.read_samples(out)
    restore()
    with pytest.raises(ValueError, match="config.k: 2 -> 1"):  # resume refuses other settings
        transfer.run(_config(det_run, tiny_checkpoint, tiny_dataset, out, k=1, resume=True), tiny_lm)
    res = transfer.run(_config(det_run, tiny_checkpoint, tiny_dataset, out, resume=True), tiny_lm)

    recs = runs.read_samples(out)
    counts = Counter((r["condition"], r["id"]) for r in recs)
    assert set(counts.values()) == {1} and len(counts) == 3 * 5
    full = runs.read_results(tr_run)
    assert {k: v for k, v in res.items() if k != "elapsed_seconds"} == {
        k: v for k, v in full.items() if k not in ("elapsed_seconds", "schema_version")}
    by_key = lambda rs: {(r["condition"], r["id"]): r["pred_text"] for r in rs}  # noqa: E731
    assert by_key(recs) == by_key(runs.read_samples(tr_run))


def test_layer_grid_mismatch_is_a_clear_error(tmp_path, det_run, tiny_dataset):
    from vrh.testing.tiny_models import save_tiny, tiny_qwen2_5_vl

    model, processor = tiny_qwen2_5_vl(seed=1, text_config={"num_hidden_layers": 3})
    other = save_tiny(model, processor, tmp_path / "three_layers")
    out = tmp_path / "x"
    with pytest.raises(ValueError) as err:
        transfer.run(transfer.Config(heads=str(det_run), model=str(other), data=tiny_dataset, k=2, out=str(out)))
    assert "same layer x head grid" in str(err.value) and "(2, 4)" in str(err.value) and "(3, 4)" in str(err.value)
    assert not out.exists()


def test_bad_options_are_refused(tmp_path, det_run, tiny_dataset):
    with pytest.raises(ValueError, match="--k"):
        transfer.Config(heads="a", model="m", data="d", out="x", k=0)
    with pytest.raises(ValueError, match="--seeds"):
        transfer.Config(heads="a", model="m", data="d", out="x", seeds=())
    with pytest.raises(FileNotFoundError, match="--heads 3:1.*detection run folder"):
        transfer.run(transfer.Config(heads="3:1", model="m", data=tiny_dataset, out=str(tmp_path / "x")))
    with pytest.raises(FileNotFoundError, match="--heads-b"):
        transfer.run(transfer.Config(heads=str(det_run), heads_b=str(tmp_path / "nope"), model="m", data=tiny_dataset,
                                     out=str(tmp_path / "x")))
