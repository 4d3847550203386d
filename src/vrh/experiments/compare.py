"""``vrh compare``: every head-scoring method judged by the same causal test (paper Sec. 3.3, Fig. 2-3,
App. F-G, Tab. A9).

Why one command: the design-space variants and the prior-method baselines differ only in how they score
the SAME attention rows, so a fair comparison scores them all from one detection (one capture pass per
batch feeding every scorer, plus QRHead's null-query pass) on the same samples, then masks each method's
top-k heads on the same disjoint held-out set. k random heads drawn outside the default method's top-k,
over several seeds, are the control (as in :mod:`vrh.experiments.sweep`, whose ``conditions`` and
``curves`` build and fold them here too).

Masking the same head set twice gives the same greedy answers, so each distinct set is evaluated once
and its records are reused for every (method, k) that selects it -- on small models many methods agree.

Writes ``RUN/detect/`` (a full detection run), ``RUN/config.json``, ``RUN/samples.jsonl`` (one line per
(condition, sample): ``kind`` method / random / none, ``method``, ``k``, ``seed``), ``RUN/results.json``
(schema in :func:`compare`), ``RUN/compare.md`` (Tab. A9 style) and ``RUN/compare.png``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.console import console, progress
from vrh.experiments.detect import DEFAULT_SCORER, DetectConfig, detect, load_head_scores
from vrh.experiments.evaluate import evaluate_samples, select_eval_samples, summarize_records
from vrh.experiments.sweep import conditions, curves
from vrh.experiments.transfer import map_similarity
from vrh.heads import top_k
from vrh.inference import LoadedModel, load_model

DESIGN_SPACE = tuple(f"{q}/{p}/{o}" for q in ("out", "in") for p in ("sum", "argmax") for o in ("mean", "freq"))
TOKEN_CHOICE = ("rand1/sum/mean", "coord/sum/mean")  # which output tokens (Fig. 8b)
BASELINE_METHODS = ("retrieval_heads", "qrhead", "ocr_heads", "vera", "localization_heads")
DEFAULT_METHODS = DESIGN_SPACE + TOKEN_CHOICE + BASELINE_METHODS
DEFAULT_KS = (5, 10, 20, 50)
MIN_SEEDS = 3
DETECT_DIR = "detect"
TABLE_NAME = "compare.md"
PLOT_NAME = "compare.png"


@dataclass(frozen=True)
class CompareConfig:
    model: str
    data: str
    out: str
    n: int = 200  # detection samples
    n_eval: int | None = None  # held-out evaluation samples (None = all the rest)
    ks: tuple[int, ...] = DEFAULT_KS
    methods: tuple[str, ...] = DEFAULT_METHODS
    default: str = DEFAULT_SCORER  # reference method: random control drawn outside its top-k, similarity
    seeds: tuple[int, ...] = (0, 1, 2)
    mask_mode: str = "zero"
    answer: str = "model"
    min_overlap: float = 0.0
    exclude_layers: tuple[int, ...] = ()
    batch_size: int = 16
    max_new_tokens: int = 64
    tau: float = 0.5
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        if len(set(self.seeds)) < MIN_SEEDS:
            raise ValueError(f"the random control needs at least {MIN_SEEDS} distinct seeds, got {self.seeds}")
        if not [k for k in self.ks if k > 0] or any(k < 0 for k in self.ks):
            raise ValueError(f"k values must be >= 0 with at least one > 0, got {self.ks}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods are listed twice: {self.methods}")

    @property
    def scorers(self) -> tuple[str, ...]:
        """Every method, the default first (detection's primary scorer ranks ``head_scores.json``)."""
        return (self.default, *[m for m in self.methods if m != self.default])


def plan(method_scores: dict[str, Any], default: str, ks, seeds, exclude_layers=()) -> list[dict[str, Any]]:
    """Masking conditions: sweep's baseline, default top-k and random control (outside the default's top-k),
    then every other method's top-k. k with no room for k random heads (2k > L*H) is dropped for all."""
    base = conditions(method_scores[default], [0, *ks], seeds, exclude_layers)
    kept = sorted({c["k"] for c in base if c["kind"] == "vrh"})
    out = []
    for c in base:
        kind = {"vrh": "method", "none": "none"}.get(c["kind"], c["kind"])
        out.append({**c, "kind": kind, "method": default if kind == "method" else None})
    for name, scores in method_scores.items():
        if name != default:
            out += [{"kind": "method", "method": name, "k": k, "seed": None, "heads": top_k(scores, k)}
                    for k in kept]
    return out


def run_conditions(lm: LoadedModel, samples, conds, cfg: CompareConfig, run: runs.RunFolder
                   ) -> list[dict[str, Any]]:
    """Evaluate every condition (each distinct head set once); summaries in ``conds`` order."""
    cache: dict[tuple, list[dict[str, Any]]] = {}
    distinct = {tuple(sorted(map(tuple, c["heads"]))) for c in conds}
    summaries = []
    with progress(len(distinct) * len(samples), "compare") as advance:
        for c in conds:
            key = tuple(sorted(map(tuple, c["heads"])))
            if key not in cache:
                cache[key] = evaluate_samples(lm, samples, c["heads"], batch_size=cfg.batch_size,
                                              max_new_tokens=cfg.max_new_tokens, tau=cfg.tau,
                                              mask_mode=cfg.mask_mode, advance=advance)
            tag = {"kind": c["kind"], "method": c["method"], "k": c["k"], "seed": c["seed"]}
            for rec in cache[key]:
                run.append_sample({**tag, **rec})
            summaries.append(summarize_records(cache[key]))
    return summaries


def _finite(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def fold(conds, summaries, method_scores, default: str, seeds) -> dict[str, Any]:
    """results.json body: per-method accuracy curves, sweep's random curve, similarity, best per k."""
    ks = sorted({c["k"] for c in conds if c["kind"] == "method"})
    acc = {(c["method"], c["k"]): s for c, s in zip(conds, summaries) if c["kind"] == "method"}
    methods = {name: {"accuracy": [acc[name, k]["accuracy"] for k in ks],
                      "parse_failure_rate": [acc[name, k]["parse_failure_rate"] for k in ks],
                      "n_positive_heads": int((method_scores[name] > 0).sum())}
               for name in method_scores}
    sweep_like = [({**c, "kind": {"method": "vrh"}.get(c["kind"], c["kind"])}, s) for c, s in zip(conds, summaries)
                  if c["kind"] in ("none", "random") or c["method"] == default]
    rc = curves(sweep_like, seeds)
    at = [rc["k"].index(k) for k in ks]
    random = {"mean": [rc["random"]["mean"][i] for i in at], "std": [rc["random"]["std"][i] for i in at],
              "accuracy": [rc["random"]["accuracy"][i] for i in at], "seeds": list(seeds)}
    ref = method_scores[default]
    similarity = {}
    for name, scores in method_scores.items():
        sim = map_similarity(ref, scores, k=min(20, ref.numel()))
        similarity[name] = {"spearman_vs_default": _finite(sim["spearman"]),
                            "kendall_vs_default": _finite(sim["kendall"]),
                            "top20_overlap_vs_default": sim["top20_overlap"], "overlap_k": sim["top20_k"]}
    best = {}
    for i, k in enumerate(ks):
        low = min(m["accuracy"][i] for m in methods.values())
        best[str(k)] = [name for name, m in methods.items() if m["accuracy"][i] == low]
    return {"k": ks, "methods": methods, "random": random, "baseline_accuracy": rc["baseline_accuracy"],
            "similarity": similarity, "best_method_by_k": best, "default_method": default,
            "conditions": [{**{k: v for k, v in c.items() if k != "heads"}, "heads": [list(h) for h in c["heads"]],
                            "accuracy": s["accuracy"], "parse_failure_rate": s["parse_failure_rate"]}
                           for c, s in zip(conds, summaries)]}


def markdown_table(result: dict[str, Any]) -> str:
    """Tab. A9 style: rows methods, columns k, accuracy (%) after masking; per column the largest causal
    effect (lowest accuracy) is **bold**, the second <u>underlined</u>; random (mean +- std) and the
    unmasked model close the table."""
    ks, methods = result["k"], result["methods"]
    lines = [f"Accuracy (%) after masking the top-k heads of each method (mask mode: {result.get('mask_mode')}); "
             "lower = more causal. **Bold**: largest effect, <u>underlined</u>: second.", "",
             "| method | " + " | ".join(f"k={k}" for k in ks) + " |", "|---|" + "---:|" * len(ks)]
    ranks = []
    for i in range(len(ks)):
        distinct = sorted({m["accuracy"][i] for m in methods.values()})
        ranks.append(distinct[:2])
    for name, m in methods.items():
        cells = []
        for i, a in enumerate(m["accuracy"]):
            cell = f"{100 * a:.1f}"
            cells.append(f"**{cell}**" if a == ranks[i][0] else f"<u>{cell}</u>" if a in ranks[i][1:] else cell)
        label = f"{name} (default)" if name == result["default_method"] else name
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    rnd = result["random"]
    lines.append("| random | " + " | ".join(f"{100 * m:.1f} ± {100 * s:.1f}" for m, s in zip(rnd["mean"], rnd["std"]))
                 + " |")
    base = result.get("baseline_accuracy")
    if base is not None:
        lines.append("| unmasked (k=0) | " + " | ".join(f"{100 * base:.1f}" for _ in ks) + " |")
    return "\n".join(lines) + "\n"


def save_plot(result: dict[str, Any], path: Path, title: str) -> None:
    """Accuracy vs k per method, random in grey and the default in red (the report's curve style)."""
    from vrh.report.plots import curve_family

    named = {(f"{n} (ours)" if n == result["default_method"] else n): m["accuracy"]
             for n, m in result["methods"].items()}
    named["random"] = result["random"]["mean"]
    path.write_bytes(curve_family(result["k"], named, baseline=result.get("baseline_accuracy"), title=title))


def compare(cfg: CompareConfig, lm: LoadedModel | None = None) -> dict[str, Any]:
    """Run the comparison; returns results.json::

        {"k": [...], "methods": {name: {"accuracy": [...], "parse_failure_rate": [...], "n_positive_heads": n}},
         "random": {"mean": [...], "std": [...], "accuracy": [[per seed] per k], "seeds": [...]},
         "baseline_accuracy": x, "similarity": {name: {"spearman_vs_default", "kendall_vs_default",
         "top20_overlap_vs_default", "overlap_k"}}, "best_method_by_k": {"k": [names tied at the lowest
         accuracy]}, "default_method": name, "conditions": [{kind, method, k, seed, heads, accuracy, ...}], ...}
    """
    t0 = time.time()
    lm = lm or load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    run = runs.RunFolder(cfg.out, overwrite=True)
    det_dir = Path(cfg.out) / DETECT_DIR
    det = detect(DetectConfig(model=cfg.model, data=cfg.data, out=str(det_dir), n=cfg.n, n_eval=cfg.n_eval,
                              scorers=cfg.scorers, answer=cfg.answer, min_overlap=cfg.min_overlap,
                              batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                              device=cfg.device, dtype=cfg.dtype), lm)
    method_scores = {name: load_head_scores(det_dir, name)[0] for name in cfg.scorers}
    samples, data_info = select_eval_samples(cfg.data, "grounding", None, str(det_dir), True)
    conds = plan(method_scores, cfg.default, [k for k in cfg.ks if k > 0], cfg.seeds, cfg.exclude_layers)
    if not any(c["kind"] == "random" for c in conds):
        raise ValueError(f"no k in {cfg.ks} leaves room for k random heads among {lm.num_layers * lm.num_heads}")
    run.write_config({"command": "compare", "config": asdict(cfg), "model": lm.describe(), "data": data_info,
                      "detect_run": DETECT_DIR, "methods": list(cfg.scorers)})
    with run:
        summaries = run_conditions(lm, samples, conds, cfg, run)
        result = {**fold(conds, summaries, method_scores, cfg.default, cfg.seeds), "mask_mode": cfg.mask_mode,
                  "n_eval": len(samples), "n_detect": det["n_scored"], "num_heads_total": lm.num_layers * lm.num_heads,
                  "capture_forwards": det["capture_forwards"], "null_capture_forwards": det["null_capture_forwards"],
                  "elapsed_seconds": time.time() - t0}
        run.write(runs.RESULTS, result)
        (run.path / TABLE_NAME).write_text(markdown_table(result))
        save_plot(result, run.path / PLOT_NAME, f"{Path(cfg.model).name}: accuracy after masking top-k heads")
    console.print(f"compare: {len(result['methods'])} methods x k={result['k']} on {len(samples)} held-out samples "
                  f"-> {cfg.out}")
    return result
