"""Stability of detection (paper Sec. 5.4, Fig. 8b-c): how many scoring samples, and which output tokens.

Sample size (Fig. 8c) needs no model: a detection run keeps every per-sample ``[L, H]`` map
(``sample_scores.npz``), so the top-k found with only ``n`` samples is the scorer's own Omega
(:func:`vrh.scoring.functions.aggregate`) over ``n`` of those maps. :func:`overlap_curve` resamples each ``n``
``bootstrap`` times (without replacement, seeds ``seed + b``) and compares with the top-k of all N maps by
:func:`vrh.experiments.method_comparison.topk_overlap`; ``n > N`` cannot be drawn without replacement and is dropped with a note.
The reference is re-aggregated from the same maps (not read from ``head_scores.json``) so the curve reaches
exactly 1.0 at ``n = N``.

Token choice (Fig. 8b) needs the model: :func:`token_choice_conditions` masks the top-k of
``rand1/sum/mean`` (one random answer token per sample) vs ``out/sum/mean`` (all answer tokens) vs k random
heads drawn outside out's top-k, and :func:`draw_conditions` the top-k of the first draws at each ``n``
(the accuracy form of Fig. 8c). Both are plain :class:`~vrh.experiments.conditions.Condition` lists for
:func:`vrh.experiments.runner.run_conditions`; :func:`fold_token_choice` and :func:`fold_draw_accuracy` read its
summaries back into the keys of :class:`vrh.runs.StabilityResults`.

``vrh stability`` (:func:`run_stability`) is :func:`sample_size_study` (the curve, from the detection run
alone), then, with a model, :func:`stability_conditions` masked by :func:`stability_folder`, which writes the
run folder.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh import runs
from vrh.experiments import conditions as cond
from vrh.experiments.method_comparison import topk_overlap
from vrh.experiments.conditions import Condition, RandomControl
from vrh.core.heads import Head, top_k
from vrh.experiments.kcurves import conditions_table, random_control_report
from vrh.experiments.runner import ConditionResults
from vrh.analyses.stability.settings import StabilitySettings
from vrh.infra.console import warn
from vrh.scoring import make_scorer
from vrh.scoring.functions import aggregate
from vrh.tasks import Task

OUT_SCORER, RAND1_SCORER = "out/sum/mean", "rand1/sum/mean"
TOKEN_CHOICE_SCORERS = (RAND1_SCORER, OUT_SCORER)


def draw(n_total: int, n: int, seed: int) -> np.ndarray:
    """``n`` distinct sample indices of ``n_total`` (sorted), reproducible from ``seed``.

    >>> draw(5, 5, seed=0).tolist()
    [0, 1, 2, 3, 4]
    """
    return np.sort(np.random.default_rng(seed).choice(n_total, size=n, replace=False))


def overlap_curve(per_sample: torch.Tensor, omega: str, m: int, k: int, n_values: Sequence[int], bootstrap: int,
                  seed: int) -> dict[str, Any]:
    """Top-k overlap with the all-sample ranking for each ``n`` (mean/std over ``bootstrap`` draws).

    ``per_sample`` is ``[N, L, H]``. Returns the results keys (``n_values`` kept, ``n_values_dropped``,
    ``topk_overlap`` per draw, its ``_mean`` / ``_std``, ``notes``) plus ``reference`` (the ``[L, H]``
    all-sample scores) and ``heads`` (the top-k of every draw, ``[n][b]``) for the caller to pop.
    """
    N, L, H = per_sample.shape
    if not 1 <= k <= L * H:
        raise ValueError(f"--k {k} exceeds the {L * H} heads ({L} layers x {H} heads) of this detection run"
                         if k > L * H else f"--k must be >= 1, got {k}")
    reference = aggregate(per_sample, omega, m)  # (L, H)
    kept = sorted({n for n in n_values if n <= N})
    dropped = sorted({n for n in n_values if n > N})
    overlaps: list[list[float]] = []
    heads: list[list[list[Head]]] = []
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


def token_choice_conditions(rand1: torch.Tensor, out: torch.Tensor, k: int, seeds: Sequence[int], *,
                            exclude_layers: Sequence[int] = (), mask_mode: str = "zero", source: str | None = None
                            ) -> tuple[list[Condition], RandomControl]:
    """Fig. 8b's conditions from the two ``[L, H]`` score maps: ``rand1`` / ``out`` (their top-k) and one
    ``random:s{seed}`` per seed (k heads outside out's top-k), with what the random draw could do."""
    L, H = out.shape
    r1 = cond.top_k(rand1, k, method=RAND1_SCORER, mask_mode=mask_mode, label="rand1", source=source)
    o = cond.top_k(out, k, method=OUT_SCORER, mask_mode=mask_mode, label="out", source=source)
    rc = cond.random_controls(L, H, k, seeds, outside=o.heads, exclude_layers=exclude_layers, method=OUT_SCORER,
                              mask_mode=mask_mode, label="random:s{seed}")
    return [r1, o, *rc.conditions], rc


def draw_conditions(heads: Sequence[Sequence[Sequence[Head]]], n_values: Sequence[int], k: int, draws: int, *,
                    method: str, seed: int, mask_mode: str = "zero", source: str | None = None) -> list[Condition]:
    """``draw:n{n}:b{b}``: the top-k of the first ``draws`` bootstrap draws at each ``n`` (``heads[n][b]`` as
    returned by :func:`overlap_curve`); ``seed`` is the draw's sample seed ``seed + b``."""
    return [Condition(label=f"draw:n{n}:b{b}", kind="top_k", heads=tuple(row[b]), k=k, method=method,
                      seed=seed + b, mask_mode=mask_mode, source=source)
            for n, row in zip(n_values, heads) for b in range(min(draws, len(row)))]


def fold_draw_accuracy(res: ConditionResults, n_values: Sequence[int], draws: int) -> dict[str, list[float]]:
    """``accuracy_mean`` / ``accuracy_std`` per ``n`` over its ``draw:n{n}:b{b}`` conditions."""
    accs = [[res.summary(f"draw:n{n}:b{b}")["accuracy"] for b in range(draws)] for n in n_values]
    return {"accuracy_mean": [float(np.mean(a)) for a in accs], "accuracy_std": [float(np.std(a)) for a in accs]}


def fold_token_choice(res: ConditionResults, k: int) -> runs.TokenChoice:
    """The ``token_choice`` block from the summaries of ``none``, ``rand1``, ``out`` and the ``random:s*``
    conditions; random accuracy is None when no random set could be drawn."""
    by = {c.label: (c, s) for c, s in res.by_condition()}
    (r1c, r1), (oc, o), (_, base) = by["rand1"], by["out"], by["none"]
    rnd = [(c, s) for c, s in res.by_condition() if c.kind == "random"]
    accs = [s["accuracy"] for _, s in rnd]
    return runs.TokenChoice(
        rand1_accuracy=r1["accuracy"], out_accuracy=o["accuracy"],
        random_accuracy=float(np.mean(accs)) if accs else None,
        random_accuracy_std=float(np.std(accs)) if accs else None, baseline_accuracy=base["accuracy"],
        rand1_out_topk_overlap=len(set(r1c.heads) & set(oc.heads)) / k,
        rand1_heads=[list(h) for h in r1c.heads], out_heads=[list(h) for h in oc.heads],
        random_seeds=[c.seed for c, _ in rnd], random_heads=[[list(h) for h in c.heads] for c, _ in rnd],
        fractions={"baseline": base["fractions"], "rand1": r1["fractions"], "out": o["fractions"],
                   "random": [s["fractions"] for _, s in rnd]})


# --- the stability run: the curve from the detection run, then (with a model) the masked conditions ---------
@dataclass
class StabilityStudy:
    """What a stability run knows from the detection run ``heads_run`` alone: the scorer whose Omega
    re-aggregates the per-sample maps, the sample-size curve, the top-k of every draw, and whether the
    token-choice comparison can run."""

    heads_run: str
    head_scores: runs.HeadScores
    scorer: Any
    per_sample: torch.Tensor  # (N, L, H)
    k: int
    seed: int
    result: runs.StabilityResults  # what is known without a model (the rest None until run_stability)
    drawn: list[list[list[Head]]]  # drawn[n][b]: the top-k of draw b at the n-th kept n
    token_choice_skipped: str | None  # why Fig. 8b's comparison does not run; None: it runs
    started: float = field(default_factory=time.time)

    def needs_model(self, accuracy_draws: int) -> bool:
        """Whether anything is masked: the token-choice comparison, or the accuracy of some draws."""
        return self.token_choice_skipped is None or accuracy_draws > 0


def sample_size_study(heads_run: str | Path, scorer: str | None, k: int, n_values: Sequence[int], bootstrap: int,
                      seed: int, *, mask_mode: str, has_model: bool) -> StabilityStudy:
    """Fig. 8c from the detection run's ``sample_scores.npz`` (``scorer`` None: the run's primary one); the
    token-choice comparison is skipped, with why, when the run lacks its two scorers or there is no model."""
    started = time.time()
    hs = runs.read_head_scores(heads_run)
    sc = make_scorer(scorer or hs.scorer)
    per_sample = runs.read_sample_scores(heads_run, sc.name)  # (N, L, H)
    curve = overlap_curve(per_sample, sc.omega, sc.m, k, n_values, bootstrap, seed)
    reference, drawn = curve.pop("reference"), curve.pop("heads")
    result = runs.StabilityResults(
        scorer=sc.name, omega=sc.omega, k=k, bootstrap=bootstrap, n_total=int(per_sample.shape[0]), **curve,
        mask_mode=mask_mode, reference_heads=[list(h) for h in top_k(reference, k)],
        reference_matches_head_scores=bool(torch.allclose(reference, hs.scores(sc.name), atol=1e-5)),
        elapsed_seconds=None)
    missing = [s for s in TOKEN_CHOICE_SCORERS if s not in hs.variants]
    skip = None
    if missing:
        skip = (f"detection run has no {' / '.join(missing)} scorer (detect with --scorers "
                f"{OUT_SCORER},{RAND1_SCORER})")
    elif not has_model:
        skip = "no --model given"
    return StabilityStudy(str(heads_run), hs, sc, per_sample, k, seed, result, drawn, skip, started)


def stability_conditions(study: StabilityStudy, seeds: Sequence[int], accuracy_draws: int, *,
                         exclude_layers: Sequence[int] = (), mask_mode: str = "zero"
                         ) -> tuple[list[Condition], RandomControl | None]:
    """The unmasked model, Fig. 8b's conditions (unless skipped) and the first ``accuracy_draws`` draws'
    top-k at each n, with the random control's report (None when Fig. 8b is skipped)."""
    conditions, control = [cond.none(mask_mode)], None
    if study.token_choice_skipped is None:
        hs = study.head_scores
        tc, control = token_choice_conditions(hs.scores(RAND1_SCORER), hs.scores(OUT_SCORER), study.k, seeds,
                                              exclude_layers=exclude_layers, mask_mode=mask_mode,
                                              source=study.heads_run)
        conditions += tc
    conditions += draw_conditions(study.drawn, study.result.n_values, study.k, accuracy_draws,
                                  method=study.scorer.name, seed=study.seed, mask_mode=mask_mode,
                                  source=study.heads_run)
    return conditions, control


def stability_folder(lm: Any, task: Task, samples: Sequence[Any], study: StabilityStudy, conditions: list[Condition],
                     control: RandomControl | None, settings: StabilitySettings, *, config: dict[str, Any]
                     ) -> runs.StabilityResults:
    """Write the stability run folder ``settings.out``: ``config`` plus the conditions in ``config.json``, every
    condition evaluated on ``samples`` through the runner (none: the curve only), ``results.json``."""
    from vrh.experiments.runner import run_conditions

    result = study.result
    run = runs.RunFolder(settings.out, resume=settings.resume, overwrite=settings.overwrite)
    run.write_config({**config, "conditions": [c.to_json() for c in conditions],
                      "token_choice_skipped": study.token_choice_skipped})
    with run:
        if conditions:
            res = run_conditions(lm, task, samples, conditions, run, settings, description=settings.COMMAND)
            result = replace(result, n_eval=len(samples), baseline_accuracy=res.summary("none")["accuracy"],
                             conditions=conditions_table(res))
            if study.token_choice_skipped is None and control is not None:
                result = replace(result, token_choice=fold_token_choice(res, study.k),
                                 random_control=random_control_report([control]))
                for w in control.warnings:
                    warn(w)
            if settings.accuracy_draws:
                result = replace(result, **fold_draw_accuracy(res, result.n_values, settings.accuracy_draws),
                                 accuracy_draws=settings.accuracy_draws)
        result = replace(result, token_choice_skipped=study.token_choice_skipped,
                         elapsed_seconds=time.time() - study.started)
        run.write_results(result.to_json())
    return result


def run_stability(cfg: StabilitySettings, lm: Any = None) -> runs.StabilityResults:
    """``vrh stability``: the sample-size curve of ``cfg.heads`` and, with ``cfg.model``, its conditions
    masked on the run's held-out samples, into ``cfg.out`` (:func:`stability_folder`); the figures printed.
    ``lm`` is used only when ``cfg.model`` is set."""
    from vrh.core.heads import check_grid
    from vrh.experiments.heldout import select_eval_samples
    from vrh.experiments.setup import check_out, fit_random_pool, load
    from vrh.infra.console import console, percent_text, print_result
    from vrh.options import DEFAULT_K_RULE, config_record, default_k
    from vrh.tasks import get_task

    check_out(cfg)  # here too: without --model nothing loads, and the study reads the whole detection run first
    k = cfg.k
    if k is None:
        hs = runs.read_head_scores(cfg.heads)
        k = default_k(hs.num_layers, hs.num_heads)
        console.print(f"stability: k = {k} of {hs.num_layers * hs.num_heads} heads (--k default: {DEFAULT_K_RULE})")
    study = sample_size_study(cfg.heads, cfg.scorer, k, cfg.n_values, cfg.bootstrap, cfg.seed,
                              mask_mode=cfg.mask_mode, has_model=cfg.model is not None)
    task = get_task("grounding")
    samples, data_info, conditions, control = [], None, [], None
    if cfg.model is not None and study.needs_model(cfg.accuracy_draws):
        data = cfg.data or runs.read_detection_split(cfg.heads).data_path
        samples, data_info = select_eval_samples(data, task.name, cfg.n_eval, [cfg.heads], disjoint=True)
        from vrh.experiments.heads_origin import adopt

        lm = adopt(load(cfg, lm), cfg.answer_format, cfg.heads, command=cfg.COMMAND, option="--heads",
                   task=task.name)  # masked answering in the format the heads were ranked under
        cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
        check_grid(study.per_sample.shape[1:], lm.num_layers, lm.num_heads, f"--heads {cfg.heads}",
                   f"--model {cfg.model}")
        conditions, control = stability_conditions(study, cfg.seeds, cfg.accuracy_draws,
                                                   exclude_layers=cfg.exclude_layers, mask_mode=cfg.mask_mode)
    else:
        lm = None
    config = {"command": cfg.COMMAND, "config": config_record(cfg), "scorer": study.scorer.name, "data": data_info,
              "model": lm.describe() if lm is not None else None, "task": task.config()}
    result = stability_folder(lm, task, samples, study, conditions, control, cfg, config=config)
    skip = study.token_choice_skipped
    means = ", ".join(f"n={n}: {m:.2f}" for n, m in zip(result.n_values, result.topk_overlap_mean))
    print_result(f"stability: top-{k} overlap {means}"  # the results: stdout
                 + (f"; token choice skipped ({skip})" if skip else "") + f" -> {cfg.out}")
    tc = result.token_choice
    if tc is not None:
        print_result(f"stability: accuracy with the top-{k} masked (Fig. 8b): rand1/sum/mean "
                     f"{percent_text(tc.rand1_accuracy)}, out/sum/mean {percent_text(tc.out_accuracy)}, {k} random "
                     f"heads {percent_text(tc.random_accuracy)}, unmasked {percent_text(tc.baseline_accuracy)}")
    if result.accuracy_mean is not None:
        acc = ", ".join(f"n={n}: {percent_text(a)}" for n, a in zip(result.n_values, result.accuracy_mean)
                        if a is not None)
        print_result(f"stability: accuracy with the top-{k} of each draw masked (mean over draws) {acc}")
    return result
