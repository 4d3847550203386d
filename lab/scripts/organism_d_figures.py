"""Organism D's figures, read from the run folders of ``organism_d_findings.sh`` (nothing is recomputed here):
one printed line per figure of the README's organism table, and ``--json FILE`` with all of them.

    bash lab/scripts/organism_d_findings.sh runs/findings_d      # writes the run folders
    python lab/scripts/organism_d_figures.py runs/findings_d --json runs/findings_d/figures.json \
        --build lab/organism_runs/vD --plot runs/findings_d/training_d.png

Figures: the training curve (``--build``: the build folder's ``lm_d/log.jsonl`` and ``eval.jsonl``; ``--plot``
draws it), held-out grounding during training (the organism's ``vrh_organism.json``), the demo's unmasked / top-k /
k random at each k of its sweep, sparsity at the paper's thresholds, VQA under the same masks, how many
scoring methods share the first head (``vrh compare``), stability of the top-k over the number of scoring
samples (``vrh stability``), the base LM's needle recall unmasked / its own text heads / D's VRHs / random heads
masked (``vrh text-heads``), and the overlap of D's VRHs with the base's text heads against chance, with both
sets masked in D's grounding and needle recall (``vrh compare-heads``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.models.loading import resolve_model_path
from vrh.scoring.sparsity import sparsity_summary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from organism_acceptance import first_head_agreement  # noqa: E402


def _results(run_dir: Path) -> dict[str, Any]:
    res = runs.read_results(run_dir)
    if res is None:
        raise FileNotFoundError(f"{run_dir} has no {runs.RESULTS}: the run is missing or did not finish")
    return res


def _model_and_records(run_dir: Path) -> tuple[str, dict[str, Any]]:
    """The model a run folder used and that organism's records (``vrh_organism.json``; empty when it has none)."""
    model = runs.read_config(run_dir)["config"]["model"]
    meta_path = Path(resolve_model_path(model, materialize=False)) / "vrh_organism.json"
    return model, json.loads(meta_path.read_text()) if meta_path.is_file() else {}


def figures(findings: Path) -> dict[str, Any]:
    demo = _results(findings / "demo")
    model, meta = _model_and_records(findings / "demo")
    sweep = _results(findings / "demo" / "sweep_grounding")
    ranking = runs.read_head_scores(findings / "demo" / "detect").ranking()
    stab = _results(findings / "stability")
    text = _results(findings / "text_base")
    cmp = _results(findings / "cmp_base")
    digits = findings / "digits.json"
    return {
        "digits": json.loads(digits.read_text()) if digits.is_file() else None,
        "model": model, "num_heads_total": demo["num_heads_total"], "n_eval": demo["n_eval"], "k": demo["k"],
        "heldout": meta.get("heldout"),
        "baseline_accuracy": demo["baseline_accuracy"],
        "k_sweep": {"k": sweep["k"], "top_k_accuracy": sweep["vrh"]["accuracy"],
                    "top_k_parse_failure_rate": sweep["vrh"]["parse_failure_rate"],
                    "random_accuracy_mean": sweep["random"]["mean"], "random_accuracy_std": sweep["random"]["std"],
                    "random_seeds": sweep["random"]["seeds"],
                    "top_heads": [list(h) for h in ranking[:max(sweep["k"])]]},
        "sparsity": demo["sparsity"],
        "vqa": {"k": demo["k"], **demo["vqa"]},
        "compare_first_head": first_head_agreement(findings / "compare"),
        "stability": {"k": stab["k"], "n_values": stab["n_values"], "topk_overlap_mean": stab["topk_overlap_mean"],
                      "topk_overlap_std": stab["topk_overlap_std"]},
        "text_heads_base": {"n": text["n"], "recall": text["recall"], "recall_chance": text["recall_chance"],
                            "own_text_heads_masked": text["text_heads_recall"],
                            "d_vrhs_masked": text["cross_heads_recall"], "random_mean": text["random_recall_mean"],
                            "random_std": text["random_recall_std"], "random_by_seed": text["random_recall"],
                            "recall_by_depth": text.get("recall_by_depth"), "top_heads": text["top_heads"][:10]},
        "vrh_vs_text_heads": {"overlap": cmp["overlap"], "rank_correlation": cmp["rank_correlation"],
                              "matrix": cmp["matrix"], "warnings": cmp["warnings"]},
        "d_frozen": frozen_figures(findings),
    }


def frozen_figures(findings: Path) -> dict[str, Any] | None:
    """D-frozen's part (``det_df``, ``cmp_df``, ``df_vs_d``; run when ``DF`` is given): its held-out grounding, the
    sparsity of its detection, its top heads, its VRHs against the base's text heads (overlap, rank correlation,
    both masked in its grounding and needle recall) and against D's VRHs. None when the part was not run."""
    if not (findings / "cmp_df").is_dir():
        return None
    cmp = _results(findings / "cmp_df")
    model, meta = _model_and_records(findings / "cmp_df")
    hs = runs.read_head_scores(findings / "det_df")
    vs_d = _results(findings / "df_vs_d")
    return {"model": model, "heldout": meta.get("heldout"), "num_heads_total": hs.num_layers * hs.num_heads,
            "sparsity": sparsity_summary(hs.scores()), "top_heads": [list(h) for h in hs.ranking()[:10]],
            "overlap": cmp["overlap"], "rank_correlation": cmp["rank_correlation"], "matrix": cmp["matrix"],
            "warnings": cmp["warnings"],
            "vs_d": {"overlap": vs_d["overlap"], "rank_correlation": vs_d["rank_correlation"]}}


def training_curve(build: Path, window: int = 50) -> dict[str, Any]:
    """Stage 2's answer-token loss, averaged over ``window``-step blocks, and its held-out grounding evaluations
    (``lm_d/eval.jsonl``), with the constant-answer check: how many distinct answers the examples hold."""
    log = [json.loads(x) for x in (build / "lm_d" / "log.jsonl").read_text().splitlines() if x.strip()]
    evals = [json.loads(x) for x in (build / "lm_d" / "eval.jsonl").read_text().splitlines() if x.strip()]
    blocks = []
    for a in range(0, len(log), window):
        chunk = log[a:a + window]
        blocks.append({"steps": [chunk[0]["step"], chunk[-1]["step"]], "level": chunk[-1]["level"],
                       "loss": round(sum(r["loss"] for r in chunk) / len(chunk), 4)})
    return {"window": window, "loss": blocks, "steps": log[-1]["step"] if log else 0,
            "eval": [{"step": e["step"], "n": e["n"], "accuracy": e["accuracy"],
                      "parse_failure": e["parse_failure"], "examples": e["examples"]} for e in evals]}


def plot_curve(build: Path, dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = [json.loads(x) for x in (build / "lm_d" / "log.jsonl").read_text().splitlines() if x.strip()]
    evals = [json.loads(x) for x in (build / "lm_d" / "eval.jsonl").read_text().splitlines() if x.strip()]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([r["step"] for r in log], [r["loss"] for r in log], lw=0.6, color="0.6", label="answer loss (step)")
    w = 20
    sm = [sum(r["loss"] for r in log[max(0, i - w + 1):i + 1]) / len(log[max(0, i - w + 1):i + 1])
          for i in range(len(log))]
    ax.plot([r["step"] for r in log], sm, color="k", label=f"answer loss ({w}-step mean)")
    ax.set_xlabel("stage-2 step")
    ax.set_ylabel("loss")
    ax2 = ax.twinx()
    ax2.plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "o-", color="tab:red",
             label="held-out grounding (IoU >= 0.5)")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("held-out grounding accuracy")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax2.legend(handles, [h.get_label() for h in handles], loc="center right", fontsize=7)
    ax.set_title("organism D, stage 2")
    fig.tight_layout()
    fig.savefig(dest, dpi=120)
    plt.close(fig)


def lines(f: dict[str, Any]) -> list[str]:
    row = lambda figure, value: f"D  {figure:<76} {value}"  # noqa: E731
    n, k = f["num_heads_total"], f["k"]
    out = [f"organism D: {f['model']} ({n} heads); figures to report, no targets"]
    if f.get("training"):
        tr = f["training"]
        out.append(row(f"stage-2 answer loss, {tr['window']}-step means (to step {tr['steps']})",
                       " ".join(f"{b['loss']:.2f}" for b in tr["loss"])))
        out.append(row("held-out grounding during training (step: accuracy, n)",
                       " ".join(f"{e['step']}:{e['accuracy']:.3f}" for e in tr["eval"])
                       + (f" (n={tr['eval'][0]['n']})" if tr["eval"] else "")))
    out += _heldout_lines(row, f["heldout"])
    if f.get("digits"):
        d = f["digits"]
        out.append(row(f"teacher-forced first digit / whole number / best constant (n={d['n']})",
                       "  ".join(f"{c} {v['leading_digit']:.2f}/{v['whole_number']:.2f}/{v['constant_leading_digit']:.2f}"
                                 for c, v in d["coords"].items())))
        if d.get("probe"):
            pr = d["probe"]
            out.append(row(f"place probe R^2 (fit {pr['n_fit']}): centre cell's visual token / mean visual token",
                           f"{pr['r2_centre_cell_token']:.3f} / {pr['r2_visual_tokens_mean']:.3f}"))
            out.append(row("place probe R^2 before ymin's first digit, max over layers (layer)",
                           f"{max(pr['r2_by_layer']):.3f} ({pr['r2_by_layer'].index(max(pr['r2_by_layer']))})"))
    out.append(row(f"demo baseline accuracy (n={f['n_eval']})", f"{f['baseline_accuracy']:.3f}"))
    sw = f["k_sweep"]
    for i, kk in enumerate(sw["k"]):
        if kk:
            out.append(row(f"k = {kk} of {n}: top-k masked / k random (mean +- std, {len(sw['random_seeds'])} seeds)",
                           f"{sw['top_k_accuracy'][i]:.3f} / {sw['random_accuracy_mean'][i]:.3f} +- "
                           f"{sw['random_accuracy_std'][i]:.3f} (parse failures {sw['top_k_parse_failure_rate'][i]:.3f})"))
    out.append(row(f"top {max(sw['k'])} heads (LAYER:HEAD)", " ".join(f"{a}:{b}" for a, b in sw["top_heads"])))
    sp = f["sparsity"]
    for t, frac in sp["fraction_above"].items():
        out.append(row(f"heads scoring above {t}", f"{sp['count_above'][t]} of {n} ({frac:.3f})"))
    out.append(row("max head score", f"{sp['max']:.3f}"))
    v = f["vqa"]
    out.append(row(f"VQA: unmasked / top-{k} / {k} random (mean)", f"{v['baseline_accuracy']:.3f} / "
                   f"{v['vrh_masked_accuracy']:.3f} / {v['random_masked_accuracy_mean']:.3f}"))
    ag = f["compare_first_head"]
    out.append(row("methods sharing the most common first head", f"{ag['count']} of {ag['n_methods']} "
                   f"({ag['head'][0]}:{ag['head'][1]})"))
    st = f["stability"]
    out.append(row(f"top-{st['k']} overlap with the full ranking at n = {st['n_values']}",
                   " ".join(f"{m:.2f}" for m in st["topk_overlap_mean"])))
    t = f["text_heads_base"]
    out.append(row(f"base LM needle recall (n={t['n']}): unmasked / own top-{k} / D's VRHs / random",
                   f"{t['recall']:.3f} / {t['own_text_heads_masked']:.3f} / {t['d_vrhs_masked']:.3f} / "
                   f"{t['random_mean']:.3f} +- {t['random_std']:.3f} ("
                   + " ".join(f"{r:.3f}" for r in t["random_by_seed"]) + ")"))
    if t.get("recall_by_depth"):
        out.append(row("base LM needle recall by needle depth", "  ".join(
            f"{d}: {r:.3f}" for d, r in t["recall_by_depth"].items())))
    out.append(row(f"base LM top {min(len(t['top_heads']), k)} text heads (LAYER:HEAD)",
                   " ".join(f"{a}:{b}" for a, b in t["top_heads"][:k])))
    out += _versus_text_heads(row, "D", f["vrh_vs_text_heads"])
    df = f.get("d_frozen")
    if df:
        rowf = lambda figure, value: f"DF {figure:<75} {value}"  # noqa: E731
        out.append(rowf(f"D-frozen: {df['model']}", ""))
        out += _heldout_lines(rowf, df["heldout"])
        sp = df["sparsity"]
        out.append(rowf(f"heads scoring above {' / '.join(str(t) for t in sp['count_above'])} / max score",
                        " / ".join(str(c) for c in sp["count_above"].values()) + f" of {df['num_heads_total']}"
                        f" / {sp['max']:.3f}"))
        out.append(rowf(f"top {k} heads (LAYER:HEAD)", " ".join(f"{a}:{b}" for a, b in df["top_heads"][:k])))
        out += _versus_text_heads(rowf, "D-frozen", df)
        out += _overlap_lines(rowf, "D-frozen's VRHs vs D's", df["vs_d"])
    return out


def _heldout_lines(row, h: dict[str, Any] | None) -> list[str]:
    if not h:
        return []
    return [row(f"held-out grounding / VQA after training (n={h['grounding_n']} / {h['vqa_n']})",
                f"{h['grounding_acc_iou50']:.3f} / {h['vqa_acc']:.3f} (parse failures "
                f"{h['grounding_parse_failure']:.3f})")]


def _overlap_lines(row, label: str, v: dict[str, Any]) -> list[str]:
    """The top-k overlaps with their chance levels and the rank correlation of a ``vrh compare-heads`` run."""
    out = [row(f"top-{o['k']} overlap, {label} (chance, p)",
               f"{o['intersection']} ({o['chance']['intersection']:.2f}, p {o['p_value']:.2g})") for o in v["overlap"]]
    rc = v["rank_correlation"]
    if rc:
        out.append(row(f"rank correlation, {label}: Spearman (null sd) / Kendall tau-b (null sd)",
                       f"{rc['spearman']:.3f} ({rc['spearman_null_sd']:.3f}) / {rc['kendall']:.3f} "
                       f"({rc['kendall_null_sd']:.3f})"))
    return out


def _versus_text_heads(row, name: str, v: dict[str, Any]) -> list[str]:
    """The printed lines of a ``vrh compare-heads`` run of ``name``'s VRHs (A) against the base's text heads (B)."""
    out = _overlap_lines(row, f"{name}'s VRHs vs the base's text heads", v)
    m = v["matrix"] or {}
    for task in ("grounding", "needle"):
        if task in m:
            c = m[task]
            out.append(row(f"{name} {task} (n={c['n']}): unmasked / its VRHs / base text heads / random (k={m['k']})",
                           f"{c['none']:.3f} / {c['a']:.3f} / {c['b']:.3f} / {c['random_mean']:.3f} +- "
                           f"{c['random_std']:.3f}"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("findings", nargs="?", default="runs/findings_d")
    ap.add_argument("--k", type=int, default=None, help="(recorded by the runs; accepted for the script's symmetry)")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    ap.add_argument("--build", default=None, help="D's build folder (or its records, lab/organism_runs/vD)")
    ap.add_argument("--plot", default=None, help="with --build: draw the training curve to this PNG")
    a = ap.parse_args()
    f = figures(Path(a.findings))
    if a.build:
        f["training"] = training_curve(Path(a.build))
        if a.plot:
            plot_curve(Path(a.build), Path(a.plot))
    print("\n".join(lines(f)))
    if a.json:
        Path(a.json).write_text(json.dumps(f, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
