"""k-sweeps (paper Fig. 4, Tab. A1): accuracy after masking the top-k detected heads vs k random heads drawn
outside them, for several k and seeds, folded into k-curves with the failure decomposition (Fig. 8a).

``vrh sweep`` is :func:`run_sweep`; one sweep run folder is :func:`sweep_folder`.

Labels: ``none`` (k = 0), ``top{k}`` and ``random{k}:s{seed}``. Every k must lie in [0, L * H] and leave
at least k heads outside the top-k for the random control (:func:`vrh.experiments.conditions.check_room`); otherwise
the sweep is refused up front (a silently shorter curve reads like a measured one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vrh.experiments import conditions as cond
from vrh.experiments.conditions import Condition, HeadSource, RandomControl
from vrh.experiments.runner import ConditionResults
from vrh.experiments.settings import SweepSettings
from vrh.runs import ControlEntry, KCurves, RandomControlReport, RandomCurve, SweepResults, VrhCurve


def sweep_conditions(scores: torch.Tensor, ks: Sequence[int], seeds: Sequence[int], *, method: str,
                     exclude_layers: Sequence[int] = (), mask_mode: str = "zero", source: str | None = None,
                     option: str = "--ks") -> tuple[list[Condition], list[RandomControl]]:
    """The unmasked baseline, top-k per k > 0 and one random condition per (k, seed)."""
    L, H = scores.shape
    if not seeds:
        raise ValueError("a sweep needs at least one random seed (--seeds)")
    out: list[Condition] = []
    controls: list[RandomControl] = []
    for k in sorted(set(ks)):
        cond.check_k(k, L, H, option)
        if k == 0:
            out.append(cond.none(mask_mode))
            continue
        top = cond.top_k(scores, k, method=method, mask_mode=mask_mode, label=f"top{k}", source=source)
        cond.check_room(k, L, H, option, outside=top.heads, exclude_layers=exclude_layers)
        rc = cond.random_controls(L, H, k, seeds, outside=top.heads, exclude_layers=exclude_layers, method=method,
                                  mask_mode=mask_mode, label="random{k}:s{seed}")
        out += [top, *rc.conditions]
        controls.append(rc)
    if not any(c.kind == "none" for c in out):
        out.insert(0, cond.none(mask_mode))  # the baseline every curve is read against
    return out, controls


def fold_curves(res: ConditionResults, seeds: Sequence[int]) -> KCurves:
    """k-curves from the runner's summaries: top-k accuracy per k, random accuracy per (k, seed); k = 0 is the
    unmasked model for both (:class:`vrh.runs.KCurves`: the keys of a sweep's ``results.json``)."""
    by = res.by_condition()
    ks = sorted({c.k for c, _ in by})
    base = next((s for c, s in by if c.kind == "none"), None)
    vrh: dict[str, list] = {"accuracy": [], "parse_failure_rate": [], "fractions": []}
    rnd: dict[str, list] = {"accuracy": [], "mean": [], "std": [], "parse_failure_rate_mean": [], "fractions_mean": [],
                            "n_distinct_sets": []}
    for k in ks:
        if k == 0:
            v, r, distinct = [base], [base] * len(seeds), 1
        else:
            v = [s for c, s in by if c.kind == "top_k" and c.k == k]
            rc = [(c, s) for c, s in by if c.kind == "random" and c.k == k]
            r = [s for _, s in rc]
            distinct = len({c.heads for c, _ in rc})
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
        rnd["n_distinct_sets"].append(distinct if r else 0)
    return KCurves(k=ks, baseline_accuracy=base["accuracy"] if base else None, vrh=VrhCurve(**vrh),
                   random=RandomCurve(seeds=list(seeds), **rnd))


def conditions_table(res: ConditionResults) -> list[dict[str, Any]]:
    """One entry per condition: its definition and summary (for results.json)."""
    return [{**c.to_json(), **s} for c, s in res.by_condition()]


def random_control_report(controls: Sequence[RandomControl]) -> RandomControlReport:
    """What the random controls could draw, with every warning (also printed by the commands)."""
    return RandomControlReport(per_k=[ControlEntry(**rc.to_json()) for rc in controls],
                               warnings=[w for rc in controls for w in rc.warnings])



def sweep_folder(lm: Any, task: Any, samples: Sequence[Any], heads: HeadSource, settings: SweepSettings, *,
                 config: dict[str, Any], description: str = "sweep") -> SweepResults:
    """Write one sweep run folder ``settings.out``: conditions from ``heads`` (a detection run's ``[L, H]``
    scores, ranked by its scorer) at ``settings.ks`` (resolved: not None) and ``settings.seeds``, each
    evaluated on ``samples`` through the runner, then ``results.json``; returns the results.

    The conditions are built (and a bad k refused) before the folder is touched, so a refused sweep never
    clears a previous run. ``config`` is what ``config.json`` records besides the conditions (``command``,
    ``config``, ``model``, ``data``, ...); ``settings.resume`` continues an interrupted run with the same
    config. ``vrh sweep`` (:func:`run_sweep`) and ``vrh demo``'s sweep sub-runs both write through here, so
    their results carry the same keys (:class:`vrh.runs.SweepResults`): ``task``, ``num_heads_total``, the
    k-curves of :func:`fold_curves`, ``conditions``, ``random_control`` and ``elapsed_seconds``.
    """
    import time

    from vrh.infra.console import warn
    from vrh.experiments.runner import run_conditions
    from vrh.runs import RunFolder

    t0 = time.time()
    L, H = heads.scores.shape
    conds, controls = sweep_conditions(heads.scores, settings.ks, settings.seeds, method=heads.scorer,
                                       exclude_layers=settings.exclude_layers, mask_mode=settings.mask_mode,
                                       source=heads.path)
    control = random_control_report(controls)
    for w in control.warnings:
        warn(w)
    with RunFolder(settings.out, overwrite=settings.overwrite, resume=settings.resume) as run:
        run.write_config({**config, "conditions": [c.to_json() for c in conds]})
        res = run_conditions(lm, task, samples, conds, run, settings, description=description)
        curves = fold_curves(res, settings.seeds)
        result = SweepResults(task=task.name, num_heads_total=int(L * H), k=curves.k,
                              baseline_accuracy=curves.baseline_accuracy, vrh=curves.vrh, random=curves.random,
                              conditions=conditions_table(res), random_control=control,
                              elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())
    return result


def run_sweep(cfg: SweepSettings, lm: Any = None) -> SweepResults:
    """``vrh sweep``: the k-sweep of ``cfg.heads``' ranking on the held-out samples of ``cfg.data`` into
    ``cfg.out`` (:func:`sweep_folder`), the curves printed. ``cfg.ks`` None: 0, 1, k/2, k, 2k
    (:func:`vrh.options.default_ks`) for the model's grid. A bad ``--heads`` fails before the model loads."""
    from dataclasses import replace

    from vrh.core.heads import check_grid
    from vrh.experiments.conditions import head_source
    from vrh.experiments.heads_origin import adopt
    from vrh.experiments.heldout import select_eval_samples
    from vrh.experiments.setup import fit_random_pool, load
    from vrh.infra.console import console
    from vrh.options import DEFAULT_K_RULE, config_record, default_k, default_ks
    from vrh.tasks import task_from_settings

    task = task_from_settings(cfg.task, cfg.task_settings())
    src = head_source(cfg.heads, cfg.scorer, option="--heads")  # before loading the model: fail fast
    if src.kind != "run":
        raise FileNotFoundError(f"--heads {cfg.heads}: a detection run folder is expected (vrh detect --out), "
                                "not a head list")
    samples, data_info = select_eval_samples(cfg.data, cfg.task, cfg.n, [cfg.heads], cfg.disjoint)
    lm = adopt(load(cfg, lm), cfg.answer_format, cfg.heads, command=cfg.COMMAND, option="--heads", task=cfg.task,
               uses_answer_format=cfg.task == "grounding")  # the heads' answer format (heads_origin)
    cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
    check_grid(src.scores.shape, lm.num_layers, lm.num_heads, f"--heads {cfg.heads}")
    ks = cfg.ks if cfg.ks is not None else default_ks(default_k(lm.num_layers, lm.num_heads), lm.num_layers,
                                                       lm.num_heads)
    if cfg.ks is None:
        console.print(f"sweep: --ks {','.join(map(str, ks))} (default: 0, 1, k/2, k, 2k; k = {DEFAULT_K_RULE})")
    result = sweep_folder(lm, task, samples, src, replace(cfg, ks=ks), description=f"sweep {cfg.task}",
                          config={"command": cfg.COMMAND, "config": config_record(cfg), "model": lm.describe(),
                                  "data": data_info, "task": task.config(), "scorer": src.scorer})
    console.print(f"sweep ({cfg.task}): {len(result.conditions)} conditions x {len(samples)} samples "
                  f"-> {cfg.out}")
    print_curves(result)
    if cfg.task == "grounding" and result.vrh and 0 in (result.k or []):  # the unmasked row read no box at all
        from vrh.experiments.format_probe import never_parsed_line
        from vrh.infra.console import print_result

        rate = (result.vrh.parse_failure_rate or [None] * len(result.k))[result.k.index(0)]
        line = never_parsed_line(cfg.COMMAND, len(samples), len(samples) if rate == 1 else None, lm, cfg.data)
        if line:
            print_result(line)
    return result


def print_curves(result: SweepResults) -> None:
    """Accuracy per k, the top-k detected heads masked vs k random heads (mean +- std over seeds), as a
    table on stdout."""
    from vrh.infra.console import print_table

    pct = lambda x: "-" if x is None else f"{100 * x:.1f}"  # noqa: E731
    vrh, rnd = result.vrh, result.random
    rows = [[k, pct(vrh.accuracy[i]) if vrh else "-",
             "-" if k == 0 or rnd is None else f"{pct(rnd.mean[i])} ± {pct(rnd.std[i])}"] for i, k in enumerate(result.k)]
    seeds = f" (seeds {','.join(map(str, rnd.seeds))})" if rnd is not None else ""
    print_table(f"sweep ({result.task}): accuracy (%) after masking k heads of {result.num_heads_total}",
                ["k", "top-k detected heads", f"k random heads{seeds}"], rows)
