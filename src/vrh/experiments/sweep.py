"""k-sweeps (paper Fig. 4, Tab. A1): accuracy after masking the top-k detected heads vs k random heads
drawn outside the detected set, for several k and seeds, with the failure decomposition of every masked
evaluation (correct / mislocated / parse failure, Fig. 8a).

``samples.jsonl`` gets one line per (condition, sample); ``results.json`` holds the curves.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vrh import runs
from vrh.console import console, progress
from vrh.experiments.evaluate import config_record, evaluate_samples, select_eval_samples, summarize_records
from vrh.heads import random_heads, top_k
from vrh.inference import LoadedModel, load_model

DEFAULT_KS = (0, 1, 3, 5, 10, 20, 50)


@dataclass(frozen=True)
class SweepConfig:
    model: str
    data: str
    heads: str  # detection run folder
    out: str
    ks: tuple[int, ...] = DEFAULT_KS
    seeds: tuple[int, ...] = (0, 1, 2)
    task: str = "grounding"
    n: int | None = None
    scorer: str | None = None
    exclude_layers: tuple[int, ...] = ()  # layers random heads are never drawn from (e.g. 0)
    mask_mode: str = "zero"  # "zero" or "uniform", see vrh.masking.mask_heads
    disjoint: bool = True
    batch_size: int = 16
    max_new_tokens: int = 64
    tau: float = 0.5
    device: str = "cpu"
    dtype: str = "float32"
    resume: bool = False  # keep the finished (condition, sample) records of an interrupted run

    def __post_init__(self):
        if len(self.seeds) < 1:
            raise ValueError("a sweep needs at least one random seed")
        if any(k < 0 for k in self.ks):
            raise ValueError(f"k must be >= 0, got {self.ks}")


def conditions(scores, ks, seeds, exclude_layers=()) -> list[dict[str, Any]]:
    """Masking conditions of a sweep: the unmasked baseline, top-k per k, and k random heads outside the
    top-k per (k, seed). k larger than the number of heads that can be drawn is dropped."""
    L, H = scores.shape
    out: list[dict[str, Any]] = []
    for k in sorted(set(ks)):
        if k == 0:
            out.append({"kind": "none", "k": 0, "seed": None, "heads": []})
            continue
        if 2 * k > L * H:
            continue  # no room for k random heads outside the top-k
        detected = top_k(scores, k)
        out.append({"kind": "vrh", "k": k, "seed": None, "heads": detected})
        for s in seeds:
            try:
                heads = random_heads(L, H, k, s, exclude=detected, exclude_layers=exclude_layers)
            except ValueError:
                continue
            out.append({"kind": "random", "k": k, "seed": s, "heads": heads})
    return out


def curves(by_condition: list[tuple[dict[str, Any], dict[str, Any]]], seeds) -> dict[str, Any]:
    """Fold per-condition summaries into k-curves: vrh accuracy per k, random accuracy per (k, seed)."""
    ks = sorted({c["k"] for c, _ in by_condition})
    base = next((s for c, s in by_condition if c["kind"] == "none"), None)
    vrh: dict[str, list] = {"accuracy": [], "parse_failure_rate": [], "fractions": []}
    rnd: dict[str, list] = {"accuracy": [], "mean": [], "std": [], "parse_failure_rate_mean": [], "fractions_mean": []}
    for k in ks:
        if k == 0:
            v, r = [base], [base] * len(seeds)
        else:
            v = [s for c, s in by_condition if c["kind"] == "vrh" and c["k"] == k]
            r = [s for c, s in by_condition if c["kind"] == "random" and c["k"] == k]
        vrh["accuracy"].append(v[0]["accuracy"] if v else None)
        vrh["parse_failure_rate"].append(v[0]["parse_failure_rate"] if v else None)
        vrh["fractions"].append(v[0]["fractions"] if v else None)
        accs = [s["accuracy"] for s in r]
        rnd["accuracy"].append(accs)
        rnd["mean"].append(float(np.mean(accs)) if accs else None)
        rnd["std"].append(float(np.std(accs)) if accs else None)
        rnd["parse_failure_rate_mean"].append(float(np.mean([s["parse_failure_rate"] for s in r])) if r else None)
        keys = sorted({key for s in r for key in s["fractions"]})
        rnd["fractions_mean"].append({key: float(np.mean([s["fractions"].get(key, 0.0) for s in r]))
                                      for key in keys} if r else None)
    return {"k": ks, "baseline_accuracy": base["accuracy"] if base else None, "vrh": vrh,
            "random": {"seeds": list(seeds), **rnd}}


def sweep(cfg: SweepConfig, lm: LoadedModel | None = None) -> dict[str, Any]:
    from vrh.experiments.detect import load_head_scores

    t0 = time.time()
    lm = lm or load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    scores, hs = load_head_scores(cfg.heads, cfg.scorer)
    if tuple(scores.shape) != (lm.num_layers, lm.num_heads):
        raise ValueError(f"{cfg.heads} scored {tuple(scores.shape)} (layers, heads); the model has "
                         f"({lm.num_layers}, {lm.num_heads})")
    samples, data_info = select_eval_samples(cfg.data, cfg.task, cfg.n, cfg.heads, cfg.disjoint)
    conds = conditions(scores, cfg.ks, cfg.seeds, cfg.exclude_layers)
    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=not cfg.resume)
    run.write_config({"command": "sweep", "config": config_record(cfg), "model": lm.describe(), "data": data_info,
                      "scorer": cfg.scorer or hs["scorer"],
                      "conditions": [{**c, "heads": [list(h) for h in c["heads"]]} for c in conds]})
    by_condition = []
    finished: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in run.finished_samples():
        finished.setdefault((r["kind"], r["k"], r["seed"]), {})[r["id"]] = r
    with run, progress(len(conds) * len(samples), f"sweep {cfg.task}") as advance:
        for c in conds:
            tag = {"kind": c["kind"], "k": c["k"], "seed": c["seed"]}
            records = evaluate_samples(
                lm, samples, c["heads"], batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens,
                tau=cfg.tau, mask_mode=cfg.mask_mode, on_record=lambda r: run.append_sample({**tag, **r}),
                advance=advance, finished=finished.get((c["kind"], c["k"], c["seed"])))
            by_condition.append((c, summarize_records(records)))
        result = {"task": cfg.task, "num_heads_total": lm.num_layers * lm.num_heads,
                  **curves(by_condition, cfg.seeds),
                  "conditions": [{**{k: v for k, v in c.items() if k != "heads"},
                                  "heads": [list(h) for h in c["heads"]], **s} for c, s in by_condition],
                  "elapsed_seconds": time.time() - t0}
        run.write(runs.RESULTS, result)
    console.print(f"sweep ({cfg.task}): {len(conds)} conditions x {len(samples)} samples -> {cfg.out}")
    return result
