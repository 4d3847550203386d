"""``vrh transfer``: cross-model masking (paper Sec. 5.3, Fig. 7): mask the top-k heads detected in model A
at the same (layer, head) indices of model B and judge B's answers.

Why each condition: B unmasked (``none``) is the ceiling; k random heads drawn outside A's top-k and B's own
top-k (``random:s{seed}``, mean over seeds) is the floor a non-specific ablation reaches; B's ``own`` top-k
(when B's detection run is given with ``--heads-b``) is what a perfect transfer would reach. (Drawing only
outside A's heads would let a random set hit B's own retrieval heads whenever the two sets differ, as between
unrelated models, and the "random" floor would then measure B's heads.) If A's heads
(``transferred``) hurt B about as much as B's own, the heads live in the shared language backbone rather
than in one VLM's vision stack. The score-map agreement (Spearman, Kendall tau-b, top-k and top-20
overlap, :func:`vrh.experiments.method_comparison.map_similarity`) says the same without running B.

Transfer only makes sense between models with the same decoder grid: a different (layers, heads) shape is
refused up front with both shapes in the message. Samples are held out from both detection runs.
``results.json`` is a :class:`vrh.runs.TransferResults`; :func:`run_transfer` writes the run folder.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.transfer.settings import TransferSettings
from vrh.runs import TransferResults


def _run_source(spec: str, scorer: str | None, option: str):
    from vrh.experiments.conditions import head_source

    src = head_source(spec, scorer, option=option)
    if src.kind != "run":
        raise FileNotFoundError(f"{option} {spec}: a detection run folder is expected (vrh detect --out), not a "
                                "head list")
    return src


def _model_name(run_dir: str) -> str | None:
    from vrh import runs

    cfg = runs.read_config(run_dir)
    return (cfg.get("model") or {}).get("path") or (cfg.get("config") or {}).get("model")


def fold(res: Any, k: int) -> dict[str, Any]:
    """The accuracy keys of :class:`vrh.runs.TransferResults` (``k`` to ``fractions``) from the runner's
    summaries (``res``: :class:`vrh.experiments.runner.ConditionResults`); random ones as mean / std / list
    over seeds."""
    import numpy as np

    by = {c.label: s for c, s in res.by_condition()}
    rnd = [s for c, s in res.by_condition() if c.kind == "random"]
    acc = [s["accuracy"] for s in rnd]
    get = lambda label: by[label]["accuracy"] if label in by else None  # noqa: E731
    keys = sorted({key for s in rnd for key in s["fractions"]})
    fractions = {name: by[label]["fractions"] for label, name in
                 (("none", "baseline"), ("transferred", "transferred"), ("own", "own")) if label in by}
    fractions["random_mean"] = {key: float(np.mean([s["fractions"].get(key, 0.0) for s in rnd])) for key in keys}
    return {"k": k, "baseline_accuracy": get("none"), "own_heads_accuracy": get("own"),
            "transferred_heads_accuracy": get("transferred"), "random_accuracy_mean": float(np.mean(acc)),
            "random_accuracy_std": float(np.std(acc)), "random_accuracy": acc, "fractions": fractions}


def run_transfer(cfg: TransferSettings, lm: Any = None) -> TransferResults:
    """``vrh transfer``: the transfer run folder at ``cfg.out``, its line printed on stdout. A ``--heads`` or
    ``--heads-b`` that is not a detection run fails before the model loads, a grid other than B's after."""
    import time

    from vrh import runs
    from vrh.core.heads import check_grid
    from vrh.experiments import conditions as cond
    from vrh.experiments.heldout import select_eval_samples
    from vrh.experiments.kcurves import conditions_table, random_control_report
    from vrh.experiments.method_comparison import finite_or_none, map_similarity
    from vrh.experiments.runner import run_conditions
    from vrh.experiments.setup import fit_random_pool, load
    from vrh.infra.console import console, percent_text, print_result, warn
    from vrh.options import DEFAULT_K_RULE, config_record, default_k
    from vrh.report.load import model_pair
    from vrh.tasks import task_from_settings

    t0 = time.time()
    task = task_from_settings(cfg.task, cfg.task_settings())
    src_a = _run_source(cfg.heads, cfg.scorer, "--heads")  # before loading the model: fail fast
    src_b = _run_source(cfg.heads_b, cfg.scorer, "--heads-b") if cfg.heads_b else None
    samples, data_info = select_eval_samples(cfg.data, cfg.task, cfg.n,
                                             [p for p in (cfg.heads_b, cfg.heads) if p], cfg.disjoint)
    lm = load(cfg, lm)
    if cfg.heads_b:  # B's own ranking: its answer format is this run's (vrh.experiments.heads_origin)
        from vrh.experiments.heads_origin import adopt

        lm = adopt(lm, cfg.answer_format, cfg.heads_b, command=cfg.COMMAND, option="--heads-b", task=cfg.task,
                   uses_answer_format=cfg.task == "grounding")
    cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
    L, H = lm.num_layers, lm.num_heads
    k = cfg.k if cfg.k is not None else default_k(L, H)
    if cfg.k is None:
        console.print(f"transfer: k = {k} of {L * H} heads (--k default: {DEFAULT_K_RULE})")
    for flag, src in (("--heads", src_a), ("--heads-b", src_b)):
        if src is not None:
            check_grid(src.scores.shape, L, H, f"{flag} {src.path}", f"model B ({lm.path})")

    transferred = cond.top_k(src_a.scores, k, method=src_a.scorer, mask_mode=cfg.mask_mode,
                             label="transferred", source=src_a.path)
    conds = [cond.none(cfg.mask_mode), transferred]
    similarity = None
    if src_b is not None:
        conds.append(cond.top_k(src_b.scores, k, method=src_b.scorer, mask_mode=cfg.mask_mode, label="own",
                                source=src_b.path))
        similarity = {name: finite_or_none(v) if isinstance(v, float) else v
                      for name, v in map_similarity(src_a.scores, src_b.scores, k).items()}
    # random heads lie outside every detected set of the test: A's top-k and, when given, B's own top-k (so a
    # random set never masks one of B's retrieval heads, which would lower the floor between unrelated models)
    outside = {*transferred.heads, *(conds[2].heads if src_b is not None else ())}
    cond.check_room(k, L, H, outside=outside, exclude_layers=cfg.exclude_layers)
    rc = cond.random_controls(L, H, k, cfg.seeds, outside=sorted(outside), exclude_layers=cfg.exclude_layers,
                              method=src_a.scorer, mask_mode=cfg.mask_mode, label="random:s{seed}")
    conds += rc.conditions
    control = random_control_report([rc])
    for w in control.warnings:
        warn(w)

    model_a = _model_name(cfg.heads)
    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
    run.write_config({"command": cfg.COMMAND, "config": config_record(cfg), "model": lm.describe(), "data": data_info,
                      "task": task.config(), "model_a": model_a, "scorer": src_a.scorer,
                      "conditions": [c.to_json() for c in conds]})
    with run:
        res = run_conditions(lm, task, samples, conds, run, cfg, description=cfg.COMMAND)
        sim = similarity or {}
        result = TransferResults(
            model_a=model_a, model_b=lm.path, **fold(res, k), spearman=sim.get("spearman"),
            kendall=sim.get("kendall"), topk_overlap=sim.get("topk_overlap"), similarity=similarity,
            transferred_heads=[list(h) for h in transferred.heads], mask_mode=cfg.mask_mode,
            conditions=conditions_table(res), random_control=control, n=len(samples),
            elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())
    own = result.own_heads_accuracy
    # the models by name: "A" and "B" would read as the organisms of those names
    name_a, name_b = model_pair(model_a or "model A", lm.path)
    print_result(f"transfer: {name_b} unmasked {percent_text(result.baseline_accuracy)}, "  # stdout
                 f"{name_a}'s top-{k} {percent_text(result.transferred_heads_accuracy)}, own {percent_text(own)}, "
                 f"random {percent_text(result.random_accuracy_mean)} -> {cfg.out}")
    return result
