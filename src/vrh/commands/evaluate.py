"""``vrh evaluate``: answer with heads masked and measure accuracy (paper Sec. 4).

One condition: no masking, the top ``--k`` heads of a detection run (or an explicit ``LAYER:HEAD`` list),
or ``--random``: k random heads drawn outside that set (the paper's control).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrh.infra.options import (DEFAULT_K_RULE, DataOptions, EvalOptions, GenerationOptions, MaskOptions, ModelOptions,
                               RunOptions, option, optional_int)

NAME = "evaluate"
HELP = "answer with heads masked and measure accuracy (IoU >= 0.5)"
DATA_PARALLEL = True  # torchrun / accelerate launch shard its samples (vrh.infra.distributed)


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, DataOptions, EvalOptions, MaskOptions, GenerationOptions, RunOptions):
    mask_heads: str | None = option(None, metavar="RUN|L:H,...",
                                    help="detection run folder (its top --k heads) or a head list LAYER:HEAD,...; "
                                         "omit for no masking")
    k: int | None = option(None, parse=optional_int,
                           help="how many top heads of the detection run --mask-heads to mask (or random heads to "
                                f"draw with --random) (default: {DEFAULT_K_RULE})")
    random: bool = option(False, help="mask --k random heads drawn outside the detected set instead")
    seed: int = option(0, help="seed of the random heads")


def check_k(cfg: Config, source_kind: str) -> None:
    """Refuse a ``--k`` that nothing would read: without --mask-heads and --random (no masking: it was
    ignored, "0 heads masked"), or with a head list (its length is the k)."""
    if cfg.k is None:
        return
    if cfg.k < 0:
        raise ValueError(f"--k must be >= 0, got {cfg.k}")
    if cfg.mask_heads is None and not cfg.random:
        raise ValueError(f"--k {cfg.k} needs --mask-heads RUN (mask its top-k heads) or --random (k random "
                         "heads); without them nothing is masked")
    if source_kind == "list":
        raise ValueError(f"--k {cfg.k} is not used with a head list (--mask-heads {cfg.mask_heads} masks exactly "
                         "those heads, --random as many); drop --k, or pass a detection run folder")


def resolve_k(cfg: Config, num_layers: int, num_heads: int) -> int:
    """``--k``, or its default (:data:`vrh.infra.options.DEFAULT_K_RULE`) for this model's head grid."""
    from vrh.infra.options import default_k

    return cfg.k if cfg.k is not None else default_k(num_layers, num_heads)


def resolve_condition(cfg: Config, num_layers: int, num_heads: int):
    """The one masking condition of this evaluation, and where its heads came from."""
    from vrh.experiments import conditions as cond
    from vrh.experiments.conditions import head_source

    k = resolve_k(cfg, num_layers, num_heads)
    src = head_source(cfg.mask_heads, cfg.scorer, num_layers, num_heads)
    if src.kind == "none":
        if cfg.random:
            return cond.random_outside(num_layers, num_heads, k, cfg.seed, exclude_layers=cfg.exclude_layers,
                                       mask_mode=cfg.mask_mode), {"source": "random", "seed": cfg.seed}
        return cond.none(cfg.mask_mode), {"source": "none"}
    if src.kind == "run":
        detected = cond.top_k(src.scores, k, method=src.scorer, mask_mode=cfg.mask_mode, source=src.path)
    else:
        detected = cond.explicit(src.heads, mask_mode=cfg.mask_mode)
    info = {"source": src.path or "list", "scorer": src.scorer}
    if cfg.random:
        c = cond.random_outside(num_layers, num_heads, len(detected.heads) if src.kind == "list" else k,
                                cfg.seed, outside=detected.heads, exclude_layers=cfg.exclude_layers,
                                method=src.scorer, mask_mode=cfg.mask_mode)
        return c, {**info, "random": True, "seed": cfg.seed, "detected": [list(h) for h in detected.heads]}
    return detected, info


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    import time

    from vrh import runs
    from vrh.commands._common import load
    from vrh.experiments.conditions import head_source
    from vrh.infra.console import console, print_result
    from vrh.experiments.heldout import select_eval_samples
    from vrh.infra.options import config_record
    from vrh.experiments.runner import run_conditions
    from vrh.runs import EvaluateResults, TaskSummary
    from vrh.tasks import task_from_settings

    t0 = time.time()
    task = task_from_settings(cfg.task, cfg.task_settings())
    samples, data_info = select_eval_samples(cfg.data, cfg.task, cfg.n, [cfg.mask_heads] if cfg.mask_heads else [],
                                             cfg.disjoint)
    src = head_source(cfg.mask_heads, cfg.scorer)  # a missing run folder or a bad head list fails before loading
    check_k(cfg, src.kind)
    lm = load(cfg, lm)
    condition, head_info = resolve_condition(cfg, lm.num_layers, lm.num_heads)
    if condition.kind in ("top_k", "random"):
        rule = "" if cfg.k is not None else f" (--k default: {DEFAULT_K_RULE})"
        console.print(f"evaluate: masking {len(condition.heads)} of {lm.num_layers * lm.num_heads} heads "
                      f"({condition.kind.replace('_', '-')}){rule}")
    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
    run.write_config({"command": NAME, "config": config_record(cfg), "model": lm.describe(), "data": data_info,
                      "task": task.config(), "conditions": [condition.to_json()], "heads": head_info})
    with run:
        res = run_conditions(lm, task, samples, [condition], run, batch_size=cfg.batch_size,
                             max_new_tokens=cfg.max_new_tokens, description=NAME)
        result = EvaluateResults(summary=TaskSummary.from_json(res.summary(condition.label)), k=condition.k,
                                 mask_mode=cfg.mask_mode, masked_heads=[list(h) for h in condition.heads],
                                 heads=head_info, condition=condition.to_json(), elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())
    # the result on stdout (``vrh evaluate ... > acc.txt`` keeps it); progress and notes went to stderr
    print_result(f"evaluate: accuracy {result.summary.accuracy:.3f} on {result.summary.n} samples "
                 f"({len(condition.heads)} heads masked) -> {cfg.out}")
    return result.to_json()
