"""k-sweeps (paper Fig. 4, Tab. A1): accuracy after masking the top-k detected heads vs k random heads drawn
outside them, for several k and seeds, folded into k-curves with the failure decomposition (Fig. 8a).

Labels: ``none`` (k = 0), ``top{k}`` and ``random{k}:s{seed}``. Every k must lie in [0, L * H] and leave
at least k heads outside the top-k for the random control (:func:`vrh.experiments.conditions.check_room`); otherwise
the sweep is refused up front (a silently shorter curve reads like a measured one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh.experiments import conditions as cond
from vrh.experiments.conditions import Condition, RandomControl
from vrh.experiments.runner import ConditionResults
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



def run_sweep(lm: Any, task: Any, samples: Sequence[Any], scores: torch.Tensor, out: str | Path, *,
              ks: Sequence[int], seeds: Sequence[int], method: str, config: dict[str, Any], source: str | None = None,
              exclude_layers: Sequence[int] = (), mask_mode: str = "zero", batch_size: int = 16,
              max_new_tokens: int = 64, overwrite: bool = False, resume: bool = False,
              description: str = "sweep") -> SweepResults:
    """Write one sweep run folder ``out``: conditions from ``scores`` (``[L, H]``, ranked by ``method``),
    each evaluated on ``samples`` through the runner, then ``results.json``; returns the results.

    The conditions are built (and a bad k refused) before ``out`` is touched, so a refused sweep never
    clears a previous run. ``config`` is what ``config.json`` records besides the conditions (``command``,
    ``config``, ``model``, ``data``, ...); ``resume`` continues an interrupted run with the same config.
    ``vrh sweep`` and ``vrh demo``'s sweep sub-runs both write through here, so their results carry the
    same keys (:class:`vrh.runs.SweepResults`): ``task``, ``num_heads_total``, the k-curves of
    :func:`fold_curves`, ``conditions``, ``random_control`` and ``elapsed_seconds``.
    """
    import time

    from vrh.infra.console import warn
    from vrh.experiments.runner import run_conditions
    from vrh.runs import RunFolder

    t0 = time.time()
    L, H = scores.shape
    conds, controls = sweep_conditions(scores, ks, seeds, method=method, exclude_layers=exclude_layers,
                                       mask_mode=mask_mode, source=source)
    control = random_control_report(controls)
    for w in control.warnings:
        warn(w)
    with RunFolder(out, overwrite=overwrite, resume=resume) as run:
        run.write_config({**config, "conditions": [c.to_json() for c in conds]})
        res = run_conditions(lm, task, samples, conds, run, batch_size=batch_size, max_new_tokens=max_new_tokens,
                             description=description)
        curves = fold_curves(res, seeds)
        result = SweepResults(task=task.name, num_heads_total=int(L * H), k=curves.k,
                              baseline_accuracy=curves.baseline_accuracy, vrh=curves.vrh, random=curves.random,
                              conditions=conditions_table(res), random_control=control,
                              elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())
    return result
