"""lab/scripts/organism_d_figures.py reads organism D's findings folder and build records (nothing recomputed):
each figure comes from the run folder it names, the printed lines carry them, and a missing run is an error."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "lab" / "scripts" / "organism_d_figures.py"
sys.path.insert(0, str(SCRIPT.parent))
import organism_d_figures as mod  # noqa: E402


def write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def findings(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    write(model / "vrh_organism.json", {"heldout": {"grounding_n": 200, "grounding_acc_iou50": 0.005, "vqa_n": 100,
                                                    "vqa_acc": 0.34, "grounding_parse_failure": 0.0}})
    f = tmp_path / "findings"
    write(f / "demo" / "config.json", {"config": {"model": str(model)}})
    write(f / "demo" / "results.json", {
        "num_heads_total": 8, "n_eval": 100, "k": 2, "baseline_accuracy": 0.02,
        "sparsity": {"fraction_above": {"0.001": 0.5, "0.005": 0.25}, "count_above": {"0.001": 4, "0.005": 2},
                     "max": 0.108},
        "vqa": {"baseline_accuracy": 0.25, "vrh_masked_accuracy": 0.0, "random_masked_accuracy_mean": 0.283}})
    # layer 1 head 2 first, then layer 0 head 3
    write(f / "demo" / "detect" / "head_scores.json", {
        "scorer": "q_out/phi_sum/omega_mean", "num_layers": 2, "num_heads": 4, "n_scored": 100,
        "scores": [[0.0, 0.01, 0.0, 0.05], [0.0, 0.0, 0.108, 0.002]], "ranking": [[1, 2], [0, 3], [0, 1], [1, 3]]})
    write(f / "demo" / "sweep_grounding" / "results.json", {
        "k": [0, 2], "vrh": {"accuracy": [0.02, 0.0], "parse_failure_rate": [0.0, 0.24]},
        "random": {"mean": [0.02, 0.017], "std": [0.0, 0.017], "seeds": [0, 1, 2]}})
    write(f / "compare" / "results.json", {"conditions": [
        {"kind": "top_k", "k": 1, "method": m, "heads": [h]}
        for m, h in (("a", [1, 2]), ("b", [1, 2]), ("c", [0, 3]))] + [{"kind": "none", "k": 0, "heads": []}]})
    write(f / "stability" / "results.json", {"k": 2, "n_values": [1, 5], "topk_overlap_mean": [0.5, 1.0],
                                             "topk_overlap_std": [0.1, 0.0]})
    write(f / "text_base" / "results.json", {
        "n": 36, "recall": 0.472, "recall_chance": 1e-8, "text_heads_recall": 0.0, "cross_heads_recall": 0.361,
        "random_recall": [0.0, 0.306, 0.444], "random_recall_mean": 0.25, "random_recall_std": 0.186,
        "recall_by_depth": {"0.0": 1.0, "0.5": 0.25, "1.0": 0.167}, "top_heads": [[1, 1], [0, 3], [1, 0]]})
    write(f / "cmp_base" / "results.json", {
        "overlap": [{"k": 2, "intersection": 1, "chance": {"intersection": 0.5}, "p_value": 0.46}],
        "rank_correlation": {"spearman": -0.059, "kendall": -0.05, "spearman_null_sd": 0.119,
                             "kendall_null_sd": 0.08},
        "matrix": {"k": 2, "grounding": {"n": 100, "none": 0.02, "a": 0.0, "b": 0.0, "random_mean": 0.007,
                                         "random_std": 0.005}},
        "warnings": []})
    return f


def build_records(tmp_path: Path) -> Path:
    b = tmp_path / "vD"
    (b / "lm_d").mkdir(parents=True)
    (b / "lm_d" / "log.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 3.0 - s / 100, "level": "single" if s <= 2 else "easy"}) + "\n"
        for s in range(1, 5)))
    (b / "lm_d" / "eval.jsonl").write_text(json.dumps(
        {"step": 4, "n": 32, "accuracy": 0.0625, "parse_failure": 0.0, "examples": ["{}"]}) + "\n")
    return b


def test_figures_come_from_each_run_folder(tmp_path):
    f = mod.figures(findings(tmp_path))
    assert f["heldout"]["vqa_acc"] == 0.34
    assert f["k_sweep"]["top_heads"] == [[1, 2], [0, 3]]
    assert f["compare_first_head"]["head"] == [1, 2] and f["compare_first_head"]["count"] == 2
    t = f["text_heads_base"]
    assert (t["recall"], t["own_text_heads_masked"], t["d_vrhs_masked"]) == (0.472, 0.0, 0.361)
    assert t["random_by_seed"] == [0.0, 0.306, 0.444] and t["recall_by_depth"]["0.0"] == 1.0
    assert f["vrh_vs_text_heads"]["overlap"][0]["intersection"] == 1
    text = "\n".join(mod.lines(f))
    assert "2 of 8 (0.250)" in text  # heads above 0.005
    assert "0.000 / 0.017 +- 0.017 (parse failures 0.240)" in text  # k = 2: top-k / random
    assert "2 of 3 (1:2)" in text  # methods agreeing on the first head
    assert "0.472 / 0.000 / 0.361 / 0.250 +- 0.186 (0.000 0.306 0.444)" in text
    assert "0.0: 1.000" in text and "1:1 0:3" in text  # recall by depth; the base's top-2 text heads
    assert "1 (0.50, p 0.46)" in text
    assert "-0.059 (0.119) / -0.050 (0.080)" in text
    assert "0.020 / 0.000 / 0.000 / 0.007 +- 0.005" in text


def test_unfinished_run_is_an_error(tmp_path):
    f = findings(tmp_path)
    (f / "cmp_base" / "results.json").unlink()
    with pytest.raises(FileNotFoundError, match="cmp_base has no results.json"):
        mod.figures(f)


def test_cli_writes_json_curve_and_plot(tmp_path):
    f, b = findings(tmp_path), build_records(tmp_path)
    out, png = tmp_path / "figures.json", tmp_path / "curve.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(f), "--json", str(out), "--build", str(b),
                           "--plot", str(png)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = json.loads(out.read_text())
    tr = written["training"]
    assert tr["steps"] == 4 and tr["window"] == 50
    assert tr["loss"] == [{"steps": [1, 4], "level": "easy", "loss": pytest.approx(2.975)}]
    assert "4:0.062 (n=32)" in proc.stdout
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"


def test_d_frozen_part_when_it_ran(tmp_path):
    f = findings(tmp_path)
    assert mod.figures(f)["d_frozen"] is None  # not run: no D-frozen lines
    frozen = tmp_path / "frozen"
    write(frozen / "vrh_organism.json", {"heldout": {"grounding_n": 200, "grounding_acc_iou50": 0.01, "vqa_n": 100,
                                                     "vqa_acc": 0.3, "grounding_parse_failure": 0.0}})
    write(f / "det_df" / "config.json", {"config": {"model": str(frozen)}})
    write(f / "det_df" / "head_scores.json", {
        "scorer": "out/sum/mean", "num_layers": 2, "num_heads": 4, "n_scored": 100,
        "scores": [[0.3, 0.0, 0.004, 0.0], [0.0, 0.0006, 0.0, 0.0]], "ranking": [[0, 0], [0, 2], [1, 1], [1, 0]]})
    write(f / "cmp_df" / "config.json", {"config": {"model": str(frozen)}})
    write(f / "cmp_df" / "results.json", {
        "overlap": [{"k": 2, "intersection": 0, "chance": {"intersection": 0.5}, "p_value": 1.0}],
        "rank_correlation": {"spearman": 0.1, "kendall": 0.08, "spearman_null_sd": 0.119, "kendall_null_sd": 0.08},
        "matrix": {"k": 2, "needle": {"n": 36, "none": 0.472, "a": 0.4, "b": 0.0, "random_mean": 0.25,
                                      "random_std": 0.1}},
        "warnings": []})
    write(f / "df_vs_d" / "results.json", {
        "overlap": [{"k": 2, "intersection": 2, "chance": {"intersection": 0.5}, "p_value": 0.02}],
        "rank_correlation": {"spearman": 0.498, "kendall": 0.343, "spearman_null_sd": 0.119, "kendall_null_sd": 0.08}})
    fig = mod.figures(f)
    df = fig["d_frozen"]
    assert df["model"] == str(frozen) and df["heldout"]["grounding_acc_iou50"] == 0.01
    assert df["sparsity"]["count_above"] == {0.001: 2, 0.005: 1} and df["top_heads"][0] == [0, 0]
    text = "\n".join(mod.lines(fig))
    assert "DF held-out grounding / VQA after training (n=200 / 100)" in text and "0.010 / 0.300" in text
    assert "2 / 1 of 8 / 0.300" in text  # heads above 0.001 / 0.005 of 8, max score
    assert "top-2 overlap, D-frozen's VRHs vs the base's text heads (chance, p)" in text
    assert "D-frozen needle (n=36): unmasked / its VRHs / base text heads / random (k=2)" in text
    assert "0.472 / 0.400 / 0.000 / 0.250 +- 0.100" in text
    assert "top-2 overlap, D-frozen's VRHs vs D's (chance, p)" in text and "2 (0.50, p 0.02)" in text
    assert "0.498 (0.119) / 0.343 (0.080)" in text
    json.dumps(fig)  # the --json file holds it
