"""scripts/organism_acceptance.py reads a findings folder and judges each acceptance figure correctly."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "organism_acceptance.py"


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
        "vrh_parse_failure_rate": 0.01, "sparsity": {"fraction_above": {"0.05": 0.2, "0.1": frac_above}}})
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
