"""The organism's figures against the acceptance figures of issues 3 and 4, read from a findings folder,
and organism C's figures (issue 17) beside them.

    bash lab/scripts/organism_findings.sh runs/findings     # writes the run folders (about 5 min, plus C's part)
    python lab/scripts/organism_acceptance.py runs/findings  # prints one line per figure (+ --json FILE)

A's and B's figures are checked against targets (``met`` / ``NOT met``). Organism C has no targets (whatever
emerges is the result): its figures are printed as ``report`` lines -- baseline, top-k vs random at each k of
its sweep, sparsity, VQA under the same masks, how many scoring methods agree on the first head (A and C),
and transfer both ways between A and C (A's heads in C vs C's own vs random, and the reverse). C's part is
read when the findings folder has ``demo_c/`` (the findings script writes it only when C's checkpoint
resolves). ``--json FILE`` writes ``{"checks": [A/B rows], "organism_c": {...} or null}``.

Reads only run folders (demo/, demo_c/ and their sub-runs, compare/, compare_c/, transfer*/) and the
``vrh_organism.json`` of the checkpoint each demo ran on; nothing is recomputed here.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from vrh import runs
from vrh.scoring.sparsity import fraction_above
from vrh.models.loading import resolve_model_path

SPARSITY_THRESHOLD = 0.1  # the acceptance threshold of the sparsity figure (docs/organism.md); the demo records
# sparsity at the paper's thresholds (0.001 / 0.005), so this one is read off the demo's detection scores


def checks(findings: Path) -> list[dict]:
    demo = json.loads((findings / "demo" / "results.json").read_text())
    model = json.loads((findings / "demo" / "config.json").read_text())["config"]["model"]
    meta = json.loads((Path(resolve_model_path(model)) / "vrh_organism.json").read_text())
    tr_path = findings / "transfer" / "results.json"
    tr = json.loads(tr_path.read_text()) if tr_path.exists() else None

    n, k = demo["num_heads_total"], demo["k"]
    base = demo["baseline_accuracy"]
    scores = np.asarray(json.loads((findings / "demo" / "detect" / "head_scores.json").read_text())["scores"],
                        dtype=float)  # (L, H)
    above = fraction_above(scores, SPARSITY_THRESHOLD)
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
        ("4", f"fraction of heads scoring above {SPARSITY_THRESHOLD}", above, "< 0.15", above < 0.15),
    ]
    if tr is not None:
        own = tr["baseline_accuracy"] - tr["own_heads_accuracy"]
        moved = tr["baseline_accuracy"] - tr["transferred_heads_accuracy"]
        ratio = moved / own if own > 0 else float("nan")
        rows.append(("4", "transfer: drop from A's heads / drop from B's own", ratio, ">= 0.5", ratio >= 0.5))
    return [{"issue": i, "figure": f, "value": v, "target": t, "met": bool(m)} for i, f, v, t, m in rows]


def _results(run_dir: Path) -> dict[str, Any]:
    res = runs.read_results(run_dir)
    if res is None:
        raise FileNotFoundError(f"{run_dir} has no {runs.RESULTS}: the run is missing or did not finish")
    return res


def first_head_agreement(compare_dir: Path) -> dict[str, Any]:
    """How many of a ``vrh compare`` run's methods mask the same first head: each method's k = 1 condition
    (what the comparison masked), the most common head and how many methods picked it."""
    res = _results(compare_dir)
    first = {c["method"]: tuple(c["heads"][0]) for c in res["conditions"] if c["kind"] == "top_k" and c["k"] == 1}
    if not first:
        raise ValueError(f"{compare_dir}: no k = 1 conditions (run vrh compare with 1 in --ks)")
    head, count = Counter(first.values()).most_common(1)[0]
    return {"head": list(head), "count": count, "n_methods": len(first),
            "first_heads": {m: list(h) for m, h in first.items()}}


def transfer_figures(run_dir: Path) -> dict[str, Any]:
    """A transfer run's accuracies: the target model unmasked, the source's top-k, its own top-k, random.

    ``vrh transfer`` draws its random heads outside the source's and the target's own top-k (runs written
    before that drew outside the source's only); ``random_sets_with_own_heads`` counts random sets holding
    the target's own top heads (0 in a clean floor)."""
    tr = _results(run_dir)
    base, moved, own = tr["baseline_accuracy"], tr["transferred_heads_accuracy"], tr["own_heads_accuracy"]
    by = {c["condition"]: c for c in tr["conditions"]}
    own_heads = by["own"]["heads"] if "own" in by else None
    randoms = [c for c in tr["conditions"] if c["kind"] == "random"]
    touching = sum(bool({tuple(h) for h in c["heads"]} & {tuple(h) for h in own_heads}) for c in randoms) \
        if own_heads else None
    return {"model_from": tr["model_a"], "model_in": tr["model_b"], "k": tr["k"], "n": tr["n"],
            "baseline_accuracy": base, "transferred_heads_accuracy": moved, "own_heads_accuracy": own,
            "random_accuracy_mean": tr["random_accuracy_mean"], "random_accuracy_std": tr["random_accuracy_std"],
            "random_accuracy": tr["random_accuracy"],
            "transferred_parse_failure_rate": by["transferred"]["parse_failure_rate"],
            "drop_ratio": (base - moved) / (base - own) if own is not None and base > own else None,
            "transferred_heads": tr["transferred_heads"], "own_heads": own_heads,
            "random_heads": [c["heads"] for c in randoms], "random_sets_with_own_heads": touching,
            "spearman": tr["spearman"], "topk_overlap": tr["topk_overlap"]}


def organism_c(findings: Path) -> dict[str, Any] | None:
    """Organism C's figures from ``demo_c/``, ``compare_c/`` and the two A <-> C transfer runs (None when the
    findings folder has no ``demo_c/``); A's compare agreement beside C's."""
    demo_dir = findings / "demo_c"
    if not demo_dir.is_dir():
        return None
    demo = _results(demo_dir)
    model = runs.read_config(demo_dir)["config"]["model"]
    meta_path = Path(resolve_model_path(model)) / "vrh_organism.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    sweep = _results(demo_dir / "sweep_grounding")
    ranking = runs.read_head_scores(demo_dir / "detect").ranking()
    return {
        "model": str(resolve_model_path(model)),
        "checkpoint": {"steps": meta.get("steps"), "planned_steps": meta.get("planned_steps"),
                       "heldout": meta.get("heldout")},
        "num_heads_total": demo["num_heads_total"], "n_eval": demo["n_eval"],
        "baseline_accuracy": demo["baseline_accuracy"], "k": demo["k"],
        "k_sweep": {"k": sweep["k"], "top_k_accuracy": sweep["vrh"]["accuracy"],
                    "top_k_parse_failure_rate": sweep["vrh"]["parse_failure_rate"],
                    "random_accuracy_mean": sweep["random"]["mean"], "random_accuracy_std": sweep["random"]["std"],
                    "random_seeds": sweep["random"]["seeds"],
                    "top_heads": [list(h) for h in ranking[:max(sweep["k"])]]},
        "sparsity": demo["sparsity"],
        "vqa": {"k": demo["k"], **demo["vqa"]},
        "compare_first_head": {"A": first_head_agreement(findings / "compare"),
                               "C": first_head_agreement(findings / "compare_c")},
        "transfer": {"A_to_C": transfer_figures(findings / "transfer_a_to_c"),
                     "C_to_A": transfer_figures(findings / "transfer_c_to_a"),
                     # the positive control, when C' (C's LM on tower B) was measured
                     **({"C_to_Cp": transfer_figures(findings / "transfer_c_to_cp")}
                        if (findings / "transfer_c_to_cp").is_dir() else {})},
    }


def report_lines(c: dict[str, Any]) -> list[str]:
    """One printed line per figure of organism C (no targets)."""
    ck, n, k = c["checkpoint"], c["num_heads_total"], c["k"]
    step = f"step {ck['steps']} of {ck['planned_steps']}" if ck["steps"] is not None else "no vrh_organism.json"
    lines = [f"organism C: {c['model']} ({step}); figures to report, no targets"]
    row = lambda figure, value: f"report  C  {figure:<72} {value}"  # noqa: E731
    if ck["heldout"]:
        lines.append(row(f"held-out grounding accuracy (n={ck['heldout']['grounding_n']})",
                         f"{ck['heldout']['grounding_acc_iou50']:.3f}"))
    lines.append(row(f"demo baseline accuracy (n={c['n_eval']})", f"{c['baseline_accuracy']:.3f}"))
    sw = c["k_sweep"]
    for i, kk in enumerate(sw["k"]):
        if kk == 0:
            continue
        seeds = len(sw["random_seeds"])
        lines.append(row(f"k = {kk} of {n}: top-k masked / k random (mean +- std, {seeds} seeds)",
                         f"{sw['top_k_accuracy'][i]:.3f} / {sw['random_accuracy_mean'][i]:.3f} +- "
                         f"{sw['random_accuracy_std'][i]:.3f}  "
                         f"(parse failures {sw['top_k_parse_failure_rate'][i]:.3f})"))
    lines.append(row(f"top {max(sw['k'])} heads (LAYER:HEAD), best first",
                     " ".join(f"{layer}:{head}" for layer, head in sw["top_heads"])))
    sp = c["sparsity"]
    for t, frac in sp["fraction_above"].items():
        lines.append(row(f"fraction of heads scoring above {t}", f"{frac:.3f} ({sp['count_above'][t]} of {n})"))
    lines.append(row("max head score / top-1% share of the total score",
                     f"{sp['max']:.3f} / {sp['top1pct_share']:.3f}"))
    v = c["vqa"]
    lines.append(row(f"VQA: unmasked / top-{k} masked / {k} random (mean)",
                     f"{v['baseline_accuracy']:.3f} / {v['vrh_masked_accuracy']:.3f} / "
                     f"{v['random_masked_accuracy_mean']:.3f}"))
    for name, ag in c["compare_first_head"].items():
        lines.append(row(f"compare on {name}: methods sharing the most common first head",
                         f"{ag['count']} of {ag['n_methods']} ({ag['head'][0]},{ag['head'][1]})"))
    for name, (src, dst) in (("A_to_C", ("A", "C")), ("C_to_A", ("C", "A")), ("C_to_Cp", ("C", "C'"))):
        if name not in c["transfer"]:
            continue
        t = c["transfer"][name]
        ratio = "-" if t["drop_ratio"] is None else f"{t['drop_ratio']:.2f}"
        lines.append(row(f"transfer {src} -> {dst} (k={t['k']}): {dst} unmasked / {src}'s / {dst}'s own / random",
                         f"{t['baseline_accuracy']:.3f} / {t['transferred_heads_accuracy']:.3f} / "
                         f"{t['own_heads_accuracy']:.3f} / {t['random_accuracy_mean']:.3f} +- "
                         f"{t['random_accuracy_std']:.3f}  (drop ratio {ratio}, spearman {t['spearman']:.2f})"))
        lines.append(row(f"transfer {src} -> {dst}: parse failures ({src}'s heads); random sets holding {dst}'s top-k",
                         f"{t['transferred_parse_failure_rate']:.3f}; {t['random_sets_with_own_heads']} of "
                         f"{len(t['random_heads'])}"))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("findings", nargs="?", default="runs/findings")
    ap.add_argument("--json", default=None, help="also write the rows (and organism C's figures) to this file")
    a = ap.parse_args()
    rows = checks(Path(a.findings))
    for r in rows:
        print(f"issue {r['issue']:>3}  {r['figure']:<55} {r['value']:8.3f}  {r['target']:>8}  "
              f"{'met' if r['met'] else 'NOT met'}")
    c = organism_c(Path(a.findings))
    print("\n".join(report_lines(c)) if c is not None else
          f"organism C: not in {a.findings} (no demo_c/; the findings script skips C while its checkpoint is absent)")
    if a.json:
        Path(a.json).write_text(json.dumps({"checks": rows, "organism_c": c}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
