"""The organism's figures against the acceptance figures of issues 3 and 4, read from a findings folder.

    bash scripts/organism_findings.sh runs/findings     # writes the run folders (about 5 min)
    python scripts/organism_acceptance.py runs/findings  # prints one line per figure (+ --json FILE)

Reads only run folders (demo/results.json, demo/config.json, transfer/results.json) and the
``vrh_organism.json`` of the checkpoint the demo ran on; nothing is recomputed here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vrh.inference import resolve_model_path

SPARSITY_THRESHOLD = "0.1"  # the score threshold stated for the sparsity figure (docs/organism.md)


def checks(findings: Path) -> list[dict]:
    demo = json.loads((findings / "demo" / "results.json").read_text())
    model = json.loads((findings / "demo" / "config.json").read_text())["config"]["model"]
    meta = json.loads((Path(resolve_model_path(model)) / "vrh_organism.json").read_text())
    tr_path = findings / "transfer" / "results.json"
    tr = json.loads(tr_path.read_text()) if tr_path.exists() else None

    n, k = demo["num_heads_total"], demo["k"]
    base = demo["baseline_accuracy"]
    sp = demo["sparsity"]
    rows = [
        ("3", "held-out grounding accuracy (n=%d)" % meta["heldout"]["grounding_n"],
         meta["heldout"]["grounding_acc_iou50"], ">= 0.90", meta["heldout"]["grounding_acc_iou50"] >= 0.90),
        ("3/4", "demo baseline accuracy", base, ">= 0.90", base >= 0.90),
        ("3", "demo elapsed seconds", demo["elapsed_seconds"], "<= 300", demo["elapsed_seconds"] <= 300),
        ("4", f"k = {k} of {n} heads", k / n, "<= 0.10", k / n <= 0.10 + 1e-9),
        ("4", "drop with top-k VRHs masked", base - demo["vrh_masked_accuracy"], ">= 0.50",
         base - demo["vrh_masked_accuracy"] >= 0.50),
        ("4", f"drop with k random heads (mean of {len(demo['random_seeds'])} seeds)",
         base - demo["random_masked_accuracy_mean"], "<= 0.10", base - demo["random_masked_accuracy_mean"] <= 0.10),
        ("4", "parse failures under VRH masking", demo["vrh_parse_failure_rate"], "<= 0.05",
         demo["vrh_parse_failure_rate"] <= 0.05),
        ("4", f"fraction of heads scoring above {SPARSITY_THRESHOLD}", sp["fraction_above"][SPARSITY_THRESHOLD],
         "< 0.15", sp["fraction_above"][SPARSITY_THRESHOLD] < 0.15),
    ]
    if tr is not None:
        own = tr["baseline_accuracy"] - tr["own_heads_accuracy"]
        moved = tr["baseline_accuracy"] - tr["transferred_heads_accuracy"]
        ratio = moved / own if own > 0 else float("nan")
        rows.append(("4", "transfer: drop from A's heads / drop from B's own", ratio, ">= 0.5", ratio >= 0.5))
    return [{"issue": i, "figure": f, "value": v, "target": t, "met": bool(m)} for i, f, v, t, m in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("findings", nargs="?", default="runs/findings")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    a = ap.parse_args()
    rows = checks(Path(a.findings))
    for r in rows:
        print(f"issue {r['issue']:>3}  {r['figure']:<55} {r['value']:8.3f}  {r['target']:>8}  "
              f"{'met' if r['met'] else 'NOT met'}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
