"""``vrh evaluate`` (paper Sec. 4): one masking condition resolved from the settings and evaluated.

The condition: no masking, the top ``k`` heads of a detection run (or an explicit ``LAYER:HEAD`` list), or
``random``: k random heads drawn outside that set (the paper's control). :func:`check_k` refuses a ``k``
that nothing would read, :func:`resolve_condition` builds the condition for the model's head grid and
:func:`run_evaluate` writes the run folder through :func:`vrh.experiments.runner.run_conditions`.
"""

from __future__ import annotations

from typing import Any

from vrh.experiments import conditions as cond
from vrh.experiments.settings import EvaluateSettings
from vrh.runs import EvaluateResults


def check_k(cfg: EvaluateSettings, source_kind: str) -> None:
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


def resolve_k(cfg: EvaluateSettings, num_layers: int, num_heads: int) -> int:
    """``--k``, or its default (:data:`vrh.options.DEFAULT_K_RULE`) for this model's head grid."""
    from vrh.options import default_k

    return cfg.k if cfg.k is not None else default_k(num_layers, num_heads)


def resolve_condition(cfg: EvaluateSettings, num_layers: int, num_heads: int) -> tuple[cond.Condition, dict[str, Any]]:
    """The one masking condition of this evaluation, and where its heads came from."""
    k = resolve_k(cfg, num_layers, num_heads)
    src = cond.head_source(cfg.mask_heads, cfg.scorer, num_layers, num_heads)
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


def run_evaluate(cfg: EvaluateSettings, lm: Any = None) -> EvaluateResults:
    """``vrh evaluate``: the condition of ``cfg`` evaluated on the held-out samples of ``cfg.data`` into
    ``cfg.out``; the accuracy printed on stdout. A missing run folder, a bad head list or a ``--k`` nothing
    reads fails before the model loads."""
    import time

    from vrh import runs
    from vrh.experiments.heads_origin import adopt
    from vrh.experiments.heldout import select_eval_samples
    from vrh.experiments.runner import run_conditions
    from vrh.experiments.setup import fit_random_pool, load
    from vrh.infra.console import console, percent_text, print_result
    from vrh.options import DEFAULT_K_RULE, config_record
    from vrh.runs import TaskSummary
    from vrh.tasks import task_from_settings

    t0 = time.time()
    task = task_from_settings(cfg.task, cfg.task_settings())
    samples, data_info = select_eval_samples(cfg.data, cfg.task, cfg.n, [cfg.mask_heads] if cfg.mask_heads else [],
                                             cfg.disjoint)
    src = cond.head_source(cfg.mask_heads, cfg.scorer)  # a missing run folder or a bad head list fails before loading
    check_k(cfg, src.kind)
    lm = adopt(load(cfg, lm), cfg.answer_format, cfg.mask_heads, command=cfg.COMMAND, option="--mask-heads",
               task=cfg.task, uses_answer_format=cfg.task == "grounding")  # the heads' answer format (heads_origin)
    cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
    condition, head_info = resolve_condition(cfg, lm.num_layers, lm.num_heads)
    if condition.kind in ("top_k", "random"):
        rule = ("" if cfg.k is not None else f" (as many as {src.path or 'the list'} names)" if src.kind == "list"
                else f" (--k default: {DEFAULT_K_RULE})")
        console.print(f"evaluate: masking {len(condition.heads)} of {lm.num_layers * lm.num_heads} heads "
                      f"({condition.kind.replace('_', '-')}){rule}")
    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
    run.write_config({"command": cfg.COMMAND, "config": config_record(cfg), "model": lm.describe(),
                      "data": data_info, "task": task.config(), "conditions": [condition.to_json()],
                      "heads": head_info})
    with run:
        res = run_conditions(lm, task, samples, [condition], run, cfg, description=cfg.COMMAND)
        result = EvaluateResults(summary=TaskSummary.from_json(res.summary(condition.label)), k=condition.k,
                                 mask_mode=cfg.mask_mode, masked_heads=[list(h) for h in condition.heads],
                                 heads=head_info, condition=condition.to_json(), elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())
    # the result on stdout (``vrh evaluate ... > acc.txt`` keeps it); progress and notes went to stderr
    print_result(f"evaluate: accuracy {percent_text(result.summary.accuracy)} on {result.summary.n} samples "
                 f"({len(condition.heads)} heads masked) -> {cfg.out}")
    if cfg.task == "grounding":
        from vrh.experiments.format_probe import never_parsed_line

        counts = result.summary.counts or {}
        line = never_parsed_line(cfg.COMMAND, result.summary.n, counts.get("parse_failure"), lm, cfg.data)
        if line:
            print_result(line)
    return result
