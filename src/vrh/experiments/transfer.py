"""Cross-model transfer (paper Sec. 5.3, Fig. 7): mask the top-k VRHs detected in model A at the same
(layer, head) indices of model B and judge B's answers.

Why each condition: B unmasked is the ceiling; k random heads drawn outside A's top-k (mean over seeds) is
the floor a non-specific ablation reaches; B's *own* top-k (when B's detection run is given) is what a
perfect transfer would reach. If A's heads hurt B about as much as B's own, the VRHs live in the shared
language backbone rather than in one VLM's vision stack. The score-map agreement (Spearman, Kendall tau-b,
top-k and top-20 overlap, via :mod:`vrh.compare`) says the same without running B.

Transfer only makes sense between models with the same decoder grid: a different (layers, heads) shape is
refused up front with both shapes in the message. ``samples.jsonl`` gets one line per (condition, sample);
``results.json`` uses the keys the report builder reads (:mod:`vrh.report.build`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vrh import runs
from vrh.compare import jaccard, kendall, spearman, topk_overlap
from vrh.console import console, progress
from vrh.experiments.detect import held_out_ids, load_head_scores
from vrh.experiments.evaluate import evaluate_samples, resolve_heads, select_eval_samples, summarize_records
from vrh.inference import LoadedModel, load_model

FIG7_K = 20  # the paper's "top-20 overlap", reported next to the top-k overlap whatever k is


@dataclass(frozen=True)
class TransferConfig:
    heads: str  # model A's detection run folder
    model: str  # model B
    data: str
    out: str
    heads_b: str | None = None  # model B's own detection run folder (own-heads condition + map similarity)
    k: int = 20
    seeds: tuple[int, ...] = (0, 1, 2)
    scorer: str | None = None  # scorer ranking heads in both runs (default: each run's primary)
    exclude_layers: tuple[int, ...] = ()  # layers random heads are never drawn from
    task: str = "grounding"
    n: int | None = None
    disjoint: bool = True  # evaluate only on ids held out by the detection run(s) of this dataset
    batch_size: int = 16
    max_new_tokens: int = 64
    tau: float = 0.5
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        if self.k < 1:
            raise ValueError(f"transfer needs k >= 1, got {self.k}")
        if not self.seeds:
            raise ValueError("transfer needs at least one random seed")


def check_same_grid(run_dir: str, shape: tuple[int, ...], lm: LoadedModel) -> None:
    """Refuse a transfer between different decoder grids (clear message with both shapes)."""
    if tuple(shape) != (lm.num_layers, lm.num_heads):
        raise ValueError(f"cannot transfer heads: {run_dir} scored a model with {tuple(shape)} (layers, heads) but "
                         f"model B ({lm.path}) has ({lm.num_layers}, {lm.num_heads}); transfer needs the same "
                         "layer x head grid (same language backbone)")


def map_similarity(scores_a, scores_b, k: int) -> dict[str, Any]:
    """Agreement of two ``[L, H]`` score maps: rank correlations over all heads and top-k set overlaps."""
    n = scores_a.numel()
    k20 = min(FIG7_K, n)
    return {"spearman": spearman(scores_a, scores_b), "kendall": kendall(scores_a, scores_b),
            "topk_overlap": topk_overlap(scores_a, scores_b, k), "jaccard": jaccard(scores_a, scores_b, k),
            "top20_overlap": topk_overlap(scores_a, scores_b, k20), "top20_k": k20}


def transfer_samples(cfg: TransferConfig) -> tuple[list, dict[str, Any]]:
    """Held-out samples of B's detection run (else A's); when both runs scored this dataset, also drop any
    id the other run detected on, so no condition is evaluated on a sample either map was fitted to."""
    primary = cfg.heads_b or cfg.heads
    samples, info = select_eval_samples(cfg.data, cfg.task, None, primary, cfg.disjoint)
    other = cfg.heads if cfg.heads_b else None
    if cfg.disjoint and other and Path(other).is_dir() and other != primary:
        other_cfg = runs.read_json(Path(other) / runs.CONFIG)
        if other_cfg.get("data", {}).get("sha256") == info["sha256"]:
            keep = set(held_out_ids(other))
            samples = [s for s in samples if s.id in keep]
            info["also_disjoint_from"] = str(other)
    if cfg.n is not None:
        samples = samples[:cfg.n]
    if not samples:
        raise ValueError(f"no {cfg.task} samples left to evaluate in {cfg.data} (held out by both runs)")
    info["n"] = len(samples)
    return samples, info


def _model_name(run_dir: str) -> str | None:
    cfg = runs.read_json(Path(run_dir) / runs.CONFIG)
    return (cfg.get("model") or {}).get("path") or (cfg.get("config") or {}).get("model")


def transfer(cfg: TransferConfig, lm: LoadedModel | None = None) -> dict[str, Any]:
    t0 = time.time()
    scores_a, hs_a = load_head_scores(cfg.heads, cfg.scorer)
    lm = lm or load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    check_same_grid(cfg.heads, scores_a.shape, lm)
    L, H = lm.num_layers, lm.num_heads
    if 2 * cfg.k > L * H:
        raise ValueError(f"k={cfg.k} leaves no room for {cfg.k} random heads outside the top-k of {L * H} heads")
    kw = dict(scorer=cfg.scorer, exclude_layers=cfg.exclude_layers)
    conds: list[dict[str, Any]] = [{"kind": "none", "seed": None, "heads": []}]
    a_heads, _ = resolve_heads(cfg.heads, cfg.k, L, H, **kw)
    conds.append({"kind": "transferred", "seed": None, "heads": a_heads})
    similarity: dict[str, Any] = {}
    if cfg.heads_b:
        scores_b, _ = load_head_scores(cfg.heads_b, cfg.scorer)
        check_same_grid(cfg.heads_b, scores_b.shape, lm)
        conds.append({"kind": "own", "seed": None, "heads": resolve_heads(cfg.heads_b, cfg.k, L, H, **kw)[0]})
        similarity = map_similarity(scores_a, scores_b, cfg.k)
    for s in cfg.seeds:
        heads, _ = resolve_heads(cfg.heads, cfg.k, L, H, random=True, seed=s, **kw)
        conds.append({"kind": "random", "seed": s, "heads": heads})
    samples, data_info = transfer_samples(cfg)
    run = runs.RunFolder(cfg.out, overwrite=True)
    run.write_config({"command": "transfer", "config": asdict(cfg), "model": lm.describe(), "data": data_info,
                      "model_a": _model_name(cfg.heads), "scorer": cfg.scorer or hs_a["scorer"],
                      "conditions": [{**c, "heads": [list(h) for h in c["heads"]]} for c in conds]})
    by_kind: dict[str, list[dict[str, Any]]] = {}
    with run, progress(len(conds) * len(samples), "transfer") as advance:
        for c in conds:
            tag = {"kind": c["kind"], "seed": c["seed"]}
            records = evaluate_samples(
                lm, samples, c["heads"], batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens,
                tau=cfg.tau, on_record=lambda r: run.append_sample({**tag, **r}), advance=advance)
            c["summary"] = summarize_records(records)
            by_kind.setdefault(c["kind"], []).append(c["summary"])
        result = {"model_a": _model_name(cfg.heads), "model_b": lm.path, "k": cfg.k,
                  **_accuracies(by_kind), "spearman": similarity.get("spearman"),
                  "kendall": similarity.get("kendall"), "topk_overlap": similarity.get("topk_overlap"),
                  "similarity": similarity or None, "fractions": _fractions(by_kind),
                  "transferred_heads": [list(h) for h in a_heads],
                  "conditions": [{"kind": c["kind"], "seed": c["seed"], "heads": [list(h) for h in c["heads"]],
                                  **c["summary"]} for c in conds],
                  "n": len(samples), "elapsed_seconds": time.time() - t0}
        run.write(runs.RESULTS, result)
    own = result["own_heads_accuracy"]
    console.print(f"transfer: B unmasked {result['baseline_accuracy']:.3f}, A's top-{cfg.k} "
                  f"{result['transferred_heads_accuracy']:.3f}, own {'-' if own is None else f'{own:.3f}'}, "
                  f"random {result['random_accuracy_mean']:.3f} -> {cfg.out}")
    return result


def _accuracies(by_kind: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    acc = lambda kind: by_kind[kind][0]["accuracy"] if kind in by_kind else None  # noqa: E731
    rnd = [s["accuracy"] for s in by_kind["random"]]
    return {"baseline_accuracy": acc("none"), "own_heads_accuracy": acc("own"),
            "transferred_heads_accuracy": acc("transferred"), "random_accuracy_mean": float(np.mean(rnd)),
            "random_accuracy_std": float(np.std(rnd)), "random_accuracy": rnd}


def _fractions(by_kind: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Outcome fractions (correct / mislocated / parse failure ...) per condition; random: mean over seeds."""
    names = {"none": "baseline", "transferred": "transferred", "own": "own"}
    out = {names[k]: v[0]["fractions"] for k, v in by_kind.items() if k in names}
    rnd = by_kind["random"]
    keys = sorted({key for s in rnd for key in s["fractions"]})
    out["random_mean"] = {key: float(np.mean([s["fractions"].get(key, 0.0) for s in rnd])) for key in keys}
    return out
