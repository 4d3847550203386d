"""lab/scripts/organism_acceptance.py reads a findings folder, judges each acceptance figure correctly and reports
organism C's figures (no targets)."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "lab" / "scripts" / "organism_acceptance.py"


def load_script():
    spec = importlib.util.spec_from_file_location("organism_acceptance", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def findings(tmp_path, vrh_masked=0.2, frac_above=0.09, transferred=0.5):
    model = tmp_path / "model"
    write(model / "vrh_organism.json", {"heldout": {"grounding_n": 500, "grounding_acc_iou50": 0.93}})
    f = tmp_path / "findings"
    write(f / "demo" / "config.json", {"config": {"model": str(model)}})
    write(f / "demo" / "results.json", {
        "num_heads_total": 32, "k": 3, "baseline_accuracy": 0.9, "elapsed_seconds": 40.0,
        "vrh_masked_accuracy": vrh_masked, "random_masked_accuracy_mean": 0.88, "random_seeds": [0, 1, 2],
        "vrh_parse_failure_rate": 0.01, "sparsity": {"fraction_above": {"0.001": 0.4, "0.005": 0.3}}})
    above = round(frac_above * 32)  # heads of the demo's detection scoring above the acceptance threshold 0.1
    write(f / "demo" / "detect" / "head_scores.json", {"scores": [[0.5] * 8] * (above // 8) + [
        [0.5] * (above % 8) + [0.01] * (8 - above % 8)] + [[0.01] * 8] * (3 - above // 8)})
    write(f / "transfer" / "results.json", {"baseline_accuracy": 0.8, "own_heads_accuracy": 0.2,
                                            "transferred_heads_accuracy": transferred})
    return f


def test_all_met(tmp_path):
    rows = load_script().checks(findings(tmp_path))
    assert all(r["met"] for r in rows), rows
    by = {r["figure"]: r["value"] for r in rows}
    assert abs(by["drop with top-k VRHs masked"] - 0.7) < 1e-9
    assert abs(by["transfer: drop from A's heads / drop from B's own"] - 0.5) < 1e-9  # (0.8-0.5)/(0.8-0.2)


def test_each_failure_is_reported(tmp_path):
    rows = load_script().checks(findings(tmp_path, vrh_masked=0.5, frac_above=0.15, transferred=0.6))
    failed = {r["figure"] for r in rows if not r["met"]}
    assert failed == {"drop with top-k VRHs masked", "fraction of heads scoring above 0.1",
                      "transfer: drop from A's heads / drop from B's own"}


# --- organism C (issue 17): reported figures, no targets ------------------------------------------------
def compare_run(path: Path, first_heads: dict) -> None:
    """A compare run's results.json with one k = 1 top-k condition per method (and a k = 3 one, ignored)."""
    conds = [{"condition": "none", "kind": "none", "method": None, "k": 0, "heads": []}]
    for m, h in first_heads.items():
        conds.append({"condition": f"top1:{m}", "kind": "top_k", "method": m, "k": 1, "heads": [h]})
        conds.append({"condition": f"top3:{m}", "kind": "top_k", "method": m, "k": 3, "heads": [[0, 0], h, [0, 1]]})
    conds.append({"condition": "random1:s0", "kind": "random", "method": "out/sum/mean", "k": 1, "heads": [[2, 2]]})
    write(path / "config.json", {"command": "compare"})
    write(path / "results.json", {"conditions": conds})


def transfer_run(path: Path, model_a: str, model_b: str, base, moved, own, rnd, own_heads, random_heads) -> None:
    write(path / "config.json", {"command": "transfer"})
    write(path / "results.json", {
        "model_a": model_a, "model_b": model_b, "k": 3, "n": 200, "baseline_accuracy": base,
        "transferred_heads_accuracy": moved, "own_heads_accuracy": own, "random_accuracy_mean": sum(rnd) / len(rnd),
        "random_accuracy_std": 0.01, "random_accuracy": rnd, "spearman": 0.05, "topk_overlap": 0.0,
        "transferred_heads": [[3, 3], [3, 6], [1, 0]],
        "conditions": [{"condition": "none", "kind": "none", "heads": []},
                       {"condition": "transferred", "kind": "top_k", "heads": [[3, 3], [3, 6], [1, 0]],
                        "parse_failure_rate": 0.25},
                       {"condition": "own", "kind": "top_k", "heads": own_heads},
                       *({"condition": f"random:s{i}", "kind": "random", "heads": h}
                         for i, h in enumerate(random_heads))]})


def with_c(tmp_path):
    f = findings(tmp_path)
    model_c = tmp_path / "model_c"
    write(model_c / "vrh_organism.json", {"steps": 4500, "planned_steps": 10000,
                                          "heldout": {"grounding_n": 128, "grounding_acc_iou50": 0.484375}})
    demo = f / "demo_c"
    write(demo / "config.json", {"command": "demo", "config": {"model": str(model_c)}})
    write(demo / "results.json", {
        "num_heads_total": 32, "k": 3, "n_eval": 200, "baseline_accuracy": 0.5,
        "sparsity": {"fraction_above": {"0.05": 0.25, "0.1": 0.125}, "count_above": {"0.05": 8, "0.1": 4},
                     "max": 0.4, "median": 0.01, "top1pct_share": 0.2},
        "vqa": {"baseline_accuracy": 0.52, "vrh_masked_accuracy": 0.4, "random_masked_accuracy_mean": 0.5}})
    write(demo / "sweep_grounding" / "results.json", {
        "k": [0, 1, 2], "vrh": {"accuracy": [0.5, 0.45, 0.3], "parse_failure_rate": [0.0, 0.0, 0.01]},
        "random": {"seeds": [0, 1, 2], "mean": [0.5, 0.49, 0.48], "std": [0.0, 0.01, 0.02]}})
    ranking = [[2, 1], [0, 4], [3, 0], [1, 1]]
    scores = [[0.0] * 8 for _ in range(4)]
    for i, (layer, head) in enumerate(ranking):
        scores[layer][head] = 0.4 - 0.1 * i
    write(demo / "detect" / "config.json", {"command": "detect"})
    write(demo / "detect" / "head_scores.json", {"scorer": "out/sum/mean", "num_layers": 4, "num_heads": 8,
                                                 "scores": scores, "ranking": ranking})
    compare_run(f / "compare", {"out/sum/mean": [3, 3], "in/sum/mean": [3, 3], "vera": [3, 3], "qrhead": [3, 6]})
    compare_run(f / "compare_c", {"out/sum/mean": [2, 1], "in/sum/mean": [0, 4], "vera": [2, 1], "qrhead": [1, 1]})
    transfer_run(f / "transfer_a_to_c", "A", str(model_c), base=0.5, moved=0.48, own=0.3, rnd=[0.49, 0.47, 0.5],
                 own_heads=[[2, 1], [0, 4], [3, 0]],
                 random_heads=[[[1, 5], [3, 1]], [[0, 4], [2, 3]], [[0, 1], [0, 2]]])
    transfer_run(f / "transfer_c_to_a", str(model_c), "A", base=0.9, moved=0.88, own=0.1, rnd=[0.9, 0.89, 0.88],
                 own_heads=[[3, 3], [3, 6], [1, 0]],
                 random_heads=[[[1, 7], [3, 3]], [[3, 6], [2, 5]], [[0, 1], [0, 2]]])
    return f


def test_organism_c_absent_is_none(tmp_path):
    assert load_script().organism_c(findings(tmp_path)) is None


def test_organism_c_figures(tmp_path):
    c = load_script().organism_c(with_c(tmp_path))
    assert c["checkpoint"]["steps"] == 4500 and c["checkpoint"]["heldout"]["grounding_acc_iou50"] == 0.484375
    assert c["baseline_accuracy"] == 0.5 and c["k"] == 3
    assert c["k_sweep"]["top_k_accuracy"] == [0.5, 0.45, 0.3]
    assert c["k_sweep"]["random_accuracy_mean"] == [0.5, 0.49, 0.48]
    assert c["k_sweep"]["top_heads"] == [[2, 1], [0, 4]]  # the ranking up to the sweep's largest k
    assert c["sparsity"]["fraction_above"]["0.1"] == 0.125 and c["vqa"]["vrh_masked_accuracy"] == 0.4
    a_first, c_first = c["compare_first_head"]["A"], c["compare_first_head"]["C"]
    assert (a_first["count"], a_first["n_methods"], a_first["head"]) == (3, 4, [3, 3])
    assert (c_first["count"], c_first["n_methods"], c_first["head"]) == (2, 4, [2, 1])
    a_to_c, c_to_a = c["transfer"]["A_to_C"], c["transfer"]["C_to_A"]
    assert abs(a_to_c["drop_ratio"] - 0.1) < 1e-9  # (0.5 - 0.48) / (0.5 - 0.3)
    assert abs(c_to_a["drop_ratio"] - 0.025) < 1e-9  # (0.9 - 0.88) / (0.9 - 0.1)
    assert a_to_c["own_heads"] == [[2, 1], [0, 4], [3, 0]]
    # runs written when random sets were drawn outside the source's heads only: those holding the target's
    # own heads are counted
    assert a_to_c["random_sets_with_own_heads"] == 1 and c_to_a["random_sets_with_own_heads"] == 2
    assert a_to_c["transferred_parse_failure_rate"] == 0.25
    assert abs(a_to_c["random_accuracy_mean"] - 1.46 / 3) < 1e-9


def test_c_prime_transfer_is_reported_when_measured(tmp_path, monkeypatch, capsys):
    f = with_c(tmp_path)
    assert "C_to_Cp" not in load_script().organism_c(f)["transfer"]
    transfer_run(f / "transfer_c_to_cp", "C", "Cp", base=0.6, moved=0.2, own=0.15, rnd=[0.58, 0.6, 0.57],
                 own_heads=[[2, 1], [0, 4], [1, 1]], random_heads=[[[1, 5], [3, 1]]] * 3)
    c = load_script().organism_c(f)
    assert abs(c["transfer"]["C_to_Cp"]["drop_ratio"] - 0.4 / 0.45) < 1e-9
    monkeypatch.setattr("sys.argv", ["organism_acceptance.py", str(f)])
    assert load_script().main() == 0
    assert "transfer C -> C' (k=3): C' unmasked / C's / C''s own" in capsys.readouterr().out


def test_organism_c_missing_run_is_an_error(tmp_path):
    f = with_c(tmp_path)
    shutil.rmtree(f / "transfer_c_to_a")
    with pytest.raises(FileNotFoundError, match="transfer_c_to_a"):
        load_script().organism_c(f)


def test_compare_without_k1_is_refused(tmp_path):
    path = tmp_path / "compare"
    write(path / "config.json", {"command": "compare"})
    write(path / "results.json", {"conditions": [{"condition": "top3", "kind": "top_k", "method": "m", "k": 3,
                                                  "heads": [[0, 0]]}]})
    with pytest.raises(ValueError, match="k = 1"):
        load_script().first_head_agreement(path)


def test_main_prints_c_reports_and_writes_json(tmp_path, monkeypatch, capsys):
    f = with_c(tmp_path)
    out = tmp_path / "acceptance.json"
    monkeypatch.setattr("sys.argv", ["organism_acceptance.py", str(f), "--json", str(out)])
    assert load_script().main() == 0
    printed = capsys.readouterr().out
    assert printed.count(" met") >= 9 and "NOT met" not in printed  # A's checks keep their verdicts
    report = [line for line in printed.splitlines() if line.startswith("report  C")]
    # held-out, baseline, 2 ks, top heads, 2 thresholds, max/share, VQA, 2 compare, 2 x 2 transfer lines
    assert len(report) == 15, report
    assert any("compare on A" in line and "3 of 4 (3,3)" in line for line in report)
    assert any("transfer A -> C" in line and "0.500 / 0.480 / 0.300" in line for line in report)
    saved = json.loads(out.read_text())
    assert len(saved["checks"]) == 9 and saved["organism_c"]["transfer"]["C_to_A"]["own_heads_accuracy"] == 0.1


def test_main_without_c_says_so(tmp_path, monkeypatch, capsys):
    f = findings(tmp_path)
    out = tmp_path / "acceptance.json"
    monkeypatch.setattr("sys.argv", ["organism_acceptance.py", str(f), "--json", str(out)])
    assert load_script().main() == 0
    assert "organism C: not in" in capsys.readouterr().out
    assert json.loads(out.read_text())["organism_c"] is None
