"""``vrh sweep``: accuracy vs k, the top-k detected heads masked vs k random heads outside them (paper
Fig. 4, Tab. A1), over several k and random seeds, with the failure decomposition of every condition.

``samples.jsonl`` gets one line per (condition, sample), tagged ``none`` / ``top{k}`` / ``random{k}:s{seed}``;
``results.json`` holds the k-curves (:func:`vrh.experiments.kcurves.run_sweep`). A k outside [0, L * H], or one that
leaves fewer than k heads outside the top-k for the random control, is refused up front.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrh.infra.options import (DEFAULT_K_RULE, DataOptions, EvalOptions, GenerationOptions, MaskOptions, ModelOptions,
                               RunOptions, ints, option)

NAME = "sweep"
HELP = "accuracy vs k: top-k detected heads vs k random heads over seeds"
DATA_PARALLEL = True  # torchrun / accelerate launch shard its samples (vrh.infra.distributed)


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, DataOptions, EvalOptions, MaskOptions, GenerationOptions, RunOptions):
    heads: str = option(metavar="RUN", help="detection run folder whose ranking is swept (vrh detect --out)")
    ks: tuple[int, ...] | None = option(None, parse=ints, metavar="K,K",
                                        help="k values: mask the top-k detected heads, and k random heads outside "
                                             f"them (0 = unmasked) (default: 0, 1, k/2, k and 2k, k = {DEFAULT_K_RULE}, "
                                             "less any k with no room for k random heads)")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help="random-head seeds: one random control per (k, seed)")


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    from vrh.commands._common import load
    from vrh.experiments.conditions import head_source
    from vrh.infra.console import console
    from vrh.experiments.heldout import select_eval_samples
    from vrh.core.heads import check_grid
    from vrh.experiments.kcurves import run_sweep
    from vrh.infra.options import config_record, default_k, default_ks
    from vrh.tasks import task_from_settings

    task = task_from_settings(cfg.task, cfg.task_settings())
    src = head_source(cfg.heads, cfg.scorer, option="--heads")  # before loading the model: fail fast
    if src.kind != "run":
        raise FileNotFoundError(f"--heads {cfg.heads}: a detection run folder is expected (vrh detect --out), "
                                "not a head list")
    samples, data_info = select_eval_samples(cfg.data, cfg.task, cfg.n, [cfg.heads], cfg.disjoint)
    lm = load(cfg, lm)
    check_grid(src.scores.shape, lm.num_layers, lm.num_heads, f"--heads {cfg.heads}")
    ks = cfg.ks if cfg.ks is not None else default_ks(default_k(lm.num_layers, lm.num_heads), lm.num_layers,
                                                       lm.num_heads)
    if cfg.ks is None:
        console.print(f"sweep: --ks {','.join(map(str, ks))} (default: 0, 1, k/2, k, 2k; k = {DEFAULT_K_RULE})")
    result = run_sweep(lm, task, samples, src.scores, cfg.out, ks=ks, seeds=cfg.seeds, method=src.scorer,
                       source=src.path, exclude_layers=cfg.exclude_layers, mask_mode=cfg.mask_mode,
                       batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens, overwrite=cfg.overwrite,
                       resume=cfg.resume, description=f"sweep {cfg.task}",
                       config={"command": NAME, "config": config_record(cfg), "model": lm.describe(),
                               "data": data_info, "task": task.config(), "scorer": src.scorer})
    console.print(f"sweep ({cfg.task}): {len(result.conditions)} conditions x {len(samples)} samples "
                  f"-> {cfg.out}")
    print_curves(result)
    return result.to_json()


def print_curves(result: Any) -> None:
    """Accuracy per k, the top-k detected heads masked vs k random heads (mean +- std over seeds), as a
    table on stdout (``result``: a :class:`vrh.runs.SweepResults`)."""
    from vrh.infra.console import print_table

    pct = lambda x: "-" if x is None else f"{100 * x:.1f}"  # noqa: E731
    vrh, rnd = result.vrh, result.random
    rows = [[k, pct(vrh.accuracy[i]) if vrh else "-",
             "-" if k == 0 or rnd is None else f"{pct(rnd.mean[i])} ± {pct(rnd.std[i])}"] for i, k in enumerate(result.k)]
    seeds = f" (seeds {','.join(map(str, rnd.seeds))})" if rnd is not None else ""
    print_table(f"sweep ({result.task}): accuracy (%) after masking k heads of {result.num_heads_total}",
                ["k", "top-k detected heads", f"k random heads{seeds}"], rows)
