"""Stability of detection (paper Sec. 5.4, Fig. 8b-c): how many scoring samples and which output tokens.

Sample size (Fig. 8c) needs no model: a detection run keeps every per-sample ``[L, H]`` map
(``sample_scores.npz``), so the top-k found with only ``n`` samples is the scorer's own Omega
(:func:`vrh.scoring.aggregate`) over ``n`` of those maps. Each ``n`` is resampled ``bootstrap`` times
(without replacement, seeds ``seed + b``) and compared with the top-k of all N maps by
:func:`vrh.compare.topk_overlap`; ``n > N`` cannot be drawn without replacement and is dropped with a note.
The reference is re-aggregated from the same maps (not read from ``head_scores.json``) so the curve
reaches exactly 1.0 at ``n = N``; ``reference_matches_head_scores`` records that both agree (they differ
only for baselines that aggregate a subset of samples, whose inclusion flags the npz does not store).

Token choice (Fig. 8b) needs the model: masking the top-k of ``rand1/sum/mean`` (one random answer token
per sample) vs ``out/sum/mean`` (all answer tokens) vs k random heads on the run's held-out samples. It is
skipped -- with the reason in ``results.json`` -- when no model is given or the run lacks either scorer.
With ``accuracy_draws > 0`` the top-k of the first draws at each ``n`` are also masked (``accuracy_mean``),
the accuracy form of Fig. 8c; identical head sets are evaluated once.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh import runs
from vrh.compare import topk_overlap
from vrh.console import console, progress
from vrh.experiments.evaluate import evaluate_samples, resolve_heads, select_eval_samples, summarize_records
from vrh.heads import Head, top_k
from vrh.inference import LoadedModel, load_model
from vrh.scoring import aggregate, make_scorer

SAMPLE_SCORES = "sample_scores.npz"
DEFAULT_N_VALUES = (1, 2, 5, 10, 20, 50, 100, 200)
OUT_SCORER, RAND1_SCORER = "out/sum/mean", "rand1/sum/mean"


@dataclass(frozen=True)
class StabilityConfig:
    heads: str  # detection run folder
    out: str
    model: str | None = None  # needed only for token choice / accuracy_draws
    data: str | None = None  # default: the detection run's dataset
    k: int = 20
    n_values: tuple[int, ...] = DEFAULT_N_VALUES
    bootstrap: int = 10
    scorer: str | None = None  # default: the run's primary scorer
    seed: int = 0
    seeds: tuple[int, ...] = (0, 1, 2)  # random-head seeds of the token-choice control
    accuracy_draws: int = 0  # per n, mask the top-k of this many draws (needs the model)
    n_eval: int | None = None  # cap on held-out samples evaluated
    batch_size: int = 16
    max_new_tokens: int = 64
    tau: float = 0.5
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        if self.k < 1 or self.bootstrap < 1:
            raise ValueError(f"k and bootstrap must be >= 1, got k={self.k}, bootstrap={self.bootstrap}")
        if any(n < 1 for n in self.n_values):
            raise ValueError(f"n values must be >= 1, got {self.n_values}")


def load_sample_scores(run_dir: str | Path, scorer: str) -> torch.Tensor:
    """The ``[N, L, H]`` per-sample maps of one scorer of a detection run."""
    path = Path(run_dir) / SAMPLE_SCORES
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: stability needs a detection run's per-sample maps")
    with np.load(path) as z:
        key = scorer.replace("/", "|")
        if key not in z.files:
            raise ValueError(f"{path} has no scorer {scorer!r}; it has {sorted(f.replace('|', '/') for f in z.files)}")
        return torch.from_numpy(z[key])


def draw(n_total: int, n: int, seed: int) -> np.ndarray:
    """``n`` distinct sample indices of ``n_total`` (sorted), reproducible from ``seed``."""
    return np.sort(np.random.default_rng(seed).choice(n_total, size=n, replace=False))


def overlap_curve(per_sample: torch.Tensor, omega: str, m: int, k: int, n_values, bootstrap: int, seed: int
                  ) -> dict[str, Any]:
    """Top-k overlap with the all-sample ranking for each ``n`` (mean/std over ``bootstrap`` draws)."""
    N, L, H = per_sample.shape
    if k > L * H:
        raise ValueError(f"k={k} exceeds the {L * H} heads of this run")
    reference = aggregate(per_sample, omega, m)  # (L, H)
    kept = sorted({n for n in n_values if n <= N})
    dropped = sorted({n for n in n_values if n > N})
    overlaps, heads = [], []
    for n in kept:
        row, row_heads = [], []
        for b in range(bootstrap):
            scores = aggregate(per_sample[torch.from_numpy(draw(N, n, seed + b))], omega, m)  # (L, H)
            row.append(topk_overlap(scores, reference, k))
            row_heads.append(top_k(scores, k))
        overlaps.append(row)
        heads.append(row_heads)
    return {"n_values": kept, "n_values_dropped": dropped, "topk_overlap": overlaps,
            "topk_overlap_mean": [float(np.mean(r)) for r in overlaps],
            "topk_overlap_std": [float(np.std(r)) for r in overlaps], "reference": reference, "heads": heads,
            "notes": [f"n={n} > N={N} scored samples: cannot draw without replacement, dropped" for n in dropped]}


def stability(cfg: StabilityConfig, lm: LoadedModel | None = None) -> dict[str, Any]:
    from vrh.experiments.detect import load_head_scores

    t0 = time.time()
    run_scores, hs = load_head_scores(cfg.heads, cfg.scorer)
    scorer = cfg.scorer or hs["scorer"]
    proto = make_scorer(scorer)
    per_sample = load_sample_scores(cfg.heads, scorer)  # (N, L, H)
    curve = overlap_curve(per_sample, proto.omega, proto.m, cfg.k, cfg.n_values, cfg.bootstrap, cfg.seed)
    reference, draws = curve.pop("reference"), curve.pop("heads")
    out = runs.RunFolder(cfg.out, overwrite=True)
    result: dict[str, Any] = {
        "scorer": scorer, "omega": proto.omega, "k": cfg.k, "bootstrap": cfg.bootstrap, "n_total": per_sample.shape[0],
        **curve, "reference_heads": [list(h) for h in top_k(reference, cfg.k)],
        "reference_matches_head_scores": bool(torch.allclose(reference, run_scores.float(), atol=1e-5))}
    skip = _token_choice_skip(cfg, hs)
    needs_model = skip is None or cfg.accuracy_draws > 0
    if needs_model and cfg.model is None:
        skip = skip or "no --model given"
    if needs_model and cfg.model is not None:
        lm = lm or load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
        samples, data_info = select_eval_samples(cfg.data or _run_data(cfg.heads), "grounding", cfg.n_eval,
                                                 cfg.heads, True)
    else:
        samples, data_info = [], None
    out.write_config({"command": "stability", "config": asdict(cfg), "scorer": scorer, "data": data_info,
                      "model": lm.describe() if lm is not None else None, "token_choice_skipped": skip})
    with out:
        if samples:
            ev = _Evaluator(lm, samples, cfg, out)
            if skip is None:
                result["token_choice"] = token_choice(ev, cfg, lm.num_layers, lm.num_heads)
            if cfg.accuracy_draws > 0:
                result["accuracy_mean"] = [ev.mean_accuracy(row[:cfg.accuracy_draws]) for row in draws]
                result["accuracy_draws"] = cfg.accuracy_draws
            result["n_eval"] = len(samples)
        if skip is not None:
            result["token_choice"] = None
            result["token_choice_skipped"] = skip
        result["elapsed_seconds"] = time.time() - t0
        out.write(runs.RESULTS, result)
    means = ", ".join(f"n={n}: {m:.2f}" for n, m in zip(result["n_values"], result["topk_overlap_mean"]))
    console.print(f"stability: top-{cfg.k} overlap {means}"
                  + (f"; token choice skipped ({skip})" if skip else "") + f" -> {cfg.out}")
    return result


def _run_data(run_dir: str) -> str:
    return runs.read_json(Path(run_dir) / runs.CONFIG)["data"]["path"]


def _token_choice_skip(cfg: StabilityConfig, hs: dict[str, Any]) -> str | None:
    missing = [s for s in (OUT_SCORER, RAND1_SCORER) if s not in hs.get("variants", {})]
    if missing:
        return f"detection run has no {' / '.join(missing)} scorer (detect with --scorers {OUT_SCORER},{RAND1_SCORER})"
    if cfg.model is None:
        return "no --model given"
    return None


class _Evaluator:
    """Masked evaluations on the held-out samples, each distinct head set once (greedy decoding is
    deterministic), every record tagged with its condition in ``samples.jsonl``."""

    def __init__(self, lm: LoadedModel, samples, cfg: StabilityConfig, run: runs.RunFolder):
        self.lm, self.samples, self.cfg, self.run = lm, samples, cfg, run
        self.cache: dict[frozenset, dict[str, Any]] = {}

    def summary(self, heads: list[Head], tag: dict[str, Any]) -> dict[str, Any]:
        key = frozenset(heads)
        if key not in self.cache:
            with progress(len(self.samples), f"stability {tag['condition']}") as advance:
                recs = evaluate_samples(self.lm, self.samples, heads, batch_size=self.cfg.batch_size,
                                        max_new_tokens=self.cfg.max_new_tokens, tau=self.cfg.tau, advance=advance,
                                        on_record=lambda r: self.run.append_sample(
                                            {**tag, "heads": [list(h) for h in heads], **r}))
            self.cache[key] = summarize_records(recs)
        return self.cache[key]

    def mean_accuracy(self, head_sets: list[list[Head]]) -> float:
        return float(np.mean([self.summary(h, {"condition": "n-draw"})["accuracy"] for h in head_sets]))


def token_choice(ev: _Evaluator, cfg: StabilityConfig, L: int, H: int) -> dict[str, Any]:
    """Fig. 8b: accuracy after masking the top-k of one random output token vs all output tokens vs k
    random heads (drawn outside the all-token top-k, mean over seeds), plus the unmasked baseline."""
    heads = {name: resolve_heads(cfg.heads, cfg.k, L, H, scorer=name)[0] for name in (RAND1_SCORER, OUT_SCORER)}
    rand = [resolve_heads(cfg.heads, cfg.k, L, H, scorer=OUT_SCORER, random=True, seed=s)[0] for s in cfg.seeds]
    base = ev.summary([], {"condition": "none"})
    r1 = ev.summary(heads[RAND1_SCORER], {"condition": "rand1"})
    o = ev.summary(heads[OUT_SCORER], {"condition": "out"})
    rs = [ev.summary(h, {"condition": "random", "seed": s}) for h, s in zip(rand, cfg.seeds)]
    return {"rand1_accuracy": r1["accuracy"], "out_accuracy": o["accuracy"],
            "random_accuracy": float(np.mean([r["accuracy"] for r in rs])),
            "random_accuracy_std": float(np.std([r["accuracy"] for r in rs])), "baseline_accuracy": base["accuracy"],
            "rand1_out_topk_overlap": len(set(heads[RAND1_SCORER]) & set(heads[OUT_SCORER])) / cfg.k,
            "rand1_heads": [list(h) for h in heads[RAND1_SCORER]], "out_heads": [list(h) for h in heads[OUT_SCORER]],
            "random_heads": [[list(h) for h in r] for r in rand],
            "fractions": {"baseline": base["fractions"], "rand1": r1["fractions"], "out": o["fractions"],
                          "random": [r["fractions"] for r in rs]}}
