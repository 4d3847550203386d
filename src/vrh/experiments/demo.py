"""``vrh demo``: the whole method on the shipped model organism, offline, on a laptop CPU.

Generates the synthetic world's detection/evaluation sets and a VQA set, detects heads on the detection
set, sweeps k for the top-k detected heads vs k random heads outside them (several seeds) on the held-out
grounding set, evaluates the VQA set under the same masks (cross-task), measures sparsity, and writes a
run folder with sub-runs plus an HTML/Markdown report. ``results.json`` at the top level carries the
headline figures (every one measured in this run).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.console import console, print_table

DEMO_WORLD_SEED = 20_000  # disjoint from the organism's training streams and its held-out seed


@dataclass(frozen=True)
class DemoConfig:
    out: str
    model: str = "organism"
    n_detect: int = 200
    n_eval: int = 200
    n_vqa: int = 200
    k: int | None = None  # headline k; default: 10% of all heads
    ks: tuple[int, ...] | None = None  # sweep; default: 0, 1, k/2, k, 2k
    seeds: tuple[int, ...] = (0, 1, 2)
    world_seed: int = DEMO_WORLD_SEED
    sparsity_thresholds: tuple[float, ...] = (0.05, 0.1)
    batch_size: int = 64
    max_new_tokens: int = 24
    device: str = "cpu"


def default_ks(k: int) -> tuple[int, ...]:
    return tuple(sorted({0, 1, max(1, k // 2), k, 2 * k}))


def demo(cfg: DemoConfig) -> dict[str, Any]:
    from vrh.experiments.detect import DetectConfig, detect
    from vrh.experiments.sweep import SweepConfig, sweep
    from vrh.inference import load_model
    from vrh.organism.world import write_split
    from vrh.sparsity import sparsity_summary

    t0 = time.time()
    out = Path(cfg.out)
    run = runs.RunFolder(out, overwrite=True)
    console.print(f"[bold]vrh demo[/bold]: model {cfg.model}, writing {out}")
    grounding = write_split(out / "data", cfg.n_detect + cfg.n_eval, cfg.world_seed, "grounding")
    vqa = write_split(out / "data", cfg.n_vqa, cfg.world_seed + 1, "vqa")
    lm = load_model(cfg.model, device=cfg.device)
    total = lm.num_layers * lm.num_heads
    k = cfg.k or max(1, round(0.1 * total))
    ks = cfg.ks or default_ks(k)
    run.write_config({"command": "demo", "config": asdict(cfg), "model": lm.describe(), "k": k, "ks": list(ks)})
    common = dict(batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens, device=cfg.device)

    det = detect(DetectConfig(model=cfg.model, data=str(grounding), out=str(out / "detect"), n=cfg.n_detect,
                              n_eval=cfg.n_eval, seed=0, **common), lm)
    import torch

    scores = torch.tensor(det["scores"])
    g = sweep(SweepConfig(model=cfg.model, data=str(grounding), heads=str(out / "detect"),
                          out=str(out / "sweep_grounding"), ks=ks, seeds=cfg.seeds, **common), lm)
    v = sweep(SweepConfig(model=cfg.model, data=str(vqa), heads=str(out / "detect"), out=str(out / "sweep_vqa"),
                          ks=(0, k), seeds=cfg.seeds, task="vqa", **common), lm)
    i = g["k"].index(k)
    vi = v["k"].index(k)
    sparsity = sparsity_summary(scores, cfg.sparsity_thresholds)
    result = {
        "baseline_accuracy": g["baseline_accuracy"],
        "k": k,
        "num_heads_total": total,
        "vrh_masked_accuracy": g["vrh"]["accuracy"][i],
        "random_masked_accuracy_mean": g["random"]["mean"][i],
        "random_masked_accuracy_std": g["random"]["std"][i],
        "random_seeds": list(cfg.seeds),
        "vrh_parse_failure_rate": g["vrh"]["parse_failure_rate"][i],
        "random_parse_failure_rate_mean": g["random"]["parse_failure_rate_mean"][i],
        "top_k_heads": det["ranking"][:k],
        "sparsity": sparsity,
        "vqa": {"baseline_accuracy": v["baseline_accuracy"], "vrh_masked_accuracy": v["vrh"]["accuracy"][vi],
                "random_masked_accuracy_mean": v["random"]["mean"][vi]},
        "k_curve": {"k": g["k"], "vrh": g["vrh"]["accuracy"], "random_mean": g["random"]["mean"]},
        "n_detect": cfg.n_detect,
        "n_eval": g["conditions"][0]["n"],
        "subruns": ["detect", "sweep_grounding", "sweep_vqa"],
    }
    result["elapsed_seconds"] = time.time() - t0
    run.write(runs.RESULTS, result)  # before the report, which reads it
    run.close()
    result["report"] = str(_report(out, k) / "report.html")
    run.write(runs.RESULTS, result)
    _print_summary(result)
    return result


def _report(out: Path, k: int) -> Path:
    from vrh.report.build import build_report

    build_report([out, out / "detect", out / "sweep_grounding", out / "sweep_vqa"], out / "report", k=k)
    return out / "report"


def _print_summary(r: dict[str, Any]) -> None:
    pct = lambda x: f"{100 * x:.1f}%" if x is not None else "-"
    rows = [
        ["grounding, unmasked", pct(r["baseline_accuracy"]), ""],
        [f"grounding, top-{r['k']} VRHs masked", pct(r["vrh_masked_accuracy"]),
         f"parse failures {pct(r['vrh_parse_failure_rate'])}"],
        [f"grounding, {r['k']} random heads masked", pct(r["random_masked_accuracy_mean"]),
         f"mean of seeds {r['random_seeds']}"],
        ["VQA, unmasked", pct(r["vqa"]["baseline_accuracy"]), ""],
        [f"VQA, top-{r['k']} VRHs masked", pct(r["vqa"]["vrh_masked_accuracy"]), ""],
        [f"VQA, {r['k']} random heads masked", pct(r["vqa"]["random_masked_accuracy_mean"]), ""],
    ]
    s = r["sparsity"]
    print_table(f"vrh demo: {r['k']} of {r['num_heads_total']} heads masked ({r['elapsed_seconds']:.0f} s)",
                ["condition", "accuracy", "note"], rows)
    console.print("sparsity: " + ", ".join(f"{100 * f:.0f}% of heads score above {t}"
                                           for t, f in s["fraction_above"].items())
                  + f" (max {s['max']:.3f}, median {s['median']:.3f})")
    if r.get("report"):
        console.print(f"report: {r['report']}")
