"""``vrh demo``: the whole method on the shipped model organism, offline, on a laptop CPU.

Writes the synthetic world's grounding set (detection + held-out) and a VQA set under ``--out``/data,
detects heads on the detection samples (``detect/``), sweeps k for the top-k detected heads vs k random
heads outside them on the held-out grounding samples (``sweep_grounding/``), evaluates the VQA set under
the same masks (``sweep_vqa/``, cross-task), measures sparsity, and builds the report (``report/``).
Every sub-run is an ordinary run folder (what ``vrh detect`` / ``vrh sweep`` write); the top-level
``results.json`` carries the headline figures (:func:`vrh.analyses.demo.headline.headline`), every one
measured in this run.

:func:`run_demo` is the demo. A non-empty ``--out`` is refused unless ``--overwrite`` (replace the previous run
in it) or ``--resume``, as by every command (the README's one-liner carries ``--overwrite``, so it works twice). ``--resume`` keeps
what an interrupted demo finished: a finished detection is reused and a sweep continues where it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.analyses.demo.settings import DemoSettings
from vrh.runs import DemoResults

SUBRUNS = ("detect", "sweep_grounding", "sweep_vqa")


def run_demo(cfg: DemoSettings, lm: Any = None) -> DemoResults:
    """``vrh demo``: the demo's run folder at ``cfg.out`` with its sub-runs and report; the headline printed."""
    import dataclasses
    import time

    from rich.text import Text

    from vrh import runs
    from vrh.experiments.conditions import HeadSource, check_room
    from vrh.experiments.detection import run_detection
    from vrh.analyses.demo.headline import headline
    from vrh.experiments.heldout import select_eval_samples
    from vrh.experiments.kcurves import sweep_folder
    from vrh.experiments.settings import DetectSettings, SweepSettings
    from vrh.experiments.setup import fit_random_pool, load
    from vrh.infra.console import console
    from vrh.options import DEFAULT_K_RULE, DetectOptions, config_record, default_k, default_ks
    from vrh.organism.world import write_split
    from vrh.scoring.sparsity import sparsity_summary
    from vrh.tasks import get_task

    t0 = time.time()
    out = Path(cfg.out)
    for name in ("n_detect", "n_eval", "n_vqa"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    lm = load(cfg, lm)
    cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
    total = lm.num_layers * lm.num_heads
    k = cfg.k if cfg.k is not None else default_k(lm.num_layers, lm.num_heads)
    if k < 1:
        raise ValueError(f"--k must be >= 1 (the headline masks heads), got {k}")
    ks = tuple(sorted(set(cfg.ks or default_ks(k, lm.num_layers, lm.num_heads)) | {0, k}))
    for kk, opt in [(k, "--k"), *((kk, "--ks") for kk in ks)]:  # refused before --out is touched
        check_room(kk, lm.num_layers, lm.num_heads, opt)
    run = runs.RunFolder(out, overwrite=cfg.overwrite, resume=cfg.resume)
    rule = "" if cfg.k is not None else f" (default: {DEFAULT_K_RULE})"
    console.print(Text.assemble(("vrh demo", "bold"), f": model {cfg.model}, k = {k} of {total} heads{rule}, "
                                                       f"writing {out}"))
    with run:
        run.write_config({"command": cfg.COMMAND, "config": config_record(cfg), "model": lm.describe(), "k": k,
                          "ks": list(ks), "subruns": list(SUBRUNS)})
        grounding = write_split(out / "data", cfg.n_detect + cfg.n_eval, cfg.world_seed, "grounding")
        vqa = write_split(out / "data", cfg.n_vqa, cfg.world_seed + 1, "vqa")
        gen = dict(batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens)

        det_dir = out / "detect"
        scorers = DetectOptions.scorers if cfg.scorer is None else tuple(dict.fromkeys((cfg.scorer,
                                                                                        *DetectOptions.scorers)))
        hs = run_detection(lm, grounding, det_dir, DetectSettings(n=cfg.n_detect, n_eval=cfg.n_eval, seed=0,
                                                                  scorers=scorers, **gen), resume=cfg.resume)
        method = hs.scorer  # --scorer, when given, was detected first: the primary
        scores = hs.scores(method)  # (L, H)

        sweeps = {}
        for sub, data, task_name, sweep_ks in (("sweep_grounding", grounding, "grounding", ks),
                                               ("sweep_vqa", vqa, "vqa", (0, k))):
            task = get_task(task_name)
            # the demo wrote both datasets: the VQA set is another file by design, not a surprise to print
            samples, data_info = select_eval_samples(data, task_name, None, [det_dir], other_dataset_expected=True)
            # the sub-run is a vrh sweep of these settings; its config.json records the demo's own summary of them
            sweep = SweepSettings(model=cfg.model, device=cfg.device, dtype=cfg.dtype, data=str(data),
                                  heads=str(det_dir), task=task_name, ks=sweep_ks, seeds=cfg.seeds, scorer=method,
                                  mask_mode=cfg.mask_mode, exclude_layers=cfg.exclude_layers, disjoint=True,
                                  out=str(out / sub), resume=cfg.resume, **gen)
            sweep_cfg = {"model": cfg.model, "device": cfg.device, "dtype": cfg.dtype, "data": str(data),
                         "heads": str(det_dir), "task": task_name, "ks": list(sweep_ks), "seeds": list(cfg.seeds),
                         "scorer": method, "mask_mode": cfg.mask_mode, "exclude_layers": list(cfg.exclude_layers),
                         "disjoint": True, "out": str(out / sub), **gen}
            sweeps[task_name] = sweep_folder(
                lm, task, samples, HeadSource("run", path=str(det_dir), scorer=method, scores=scores), sweep,
                description=f"sweep {task_name}",
                config={"command": SweepSettings.COMMAND, "config": sweep_cfg, "model": lm.describe(),
                        "data": data_info, "task": task.config(), "scorer": method, "part_of": str(out)})
        result = headline(sweeps["grounding"], sweeps["vqa"], k, cfg.seeds, hs.ranking(method)[:k],
                          sparsity_summary(scores, cfg.sparsity_thresholds), n_detect=cfg.n_detect,
                          subruns=SUBRUNS, mask_mode=cfg.mask_mode)
        result = dataclasses.replace(result, elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())  # before the report, which reads it
        result = dataclasses.replace(result, report=str(_report(out, k) / "report.html"))
        run.write_results(result.to_json())
    print_summary(result)
    return result


def _report(out: Path, k: int) -> Path:
    from vrh.analyses.reporting import build_report

    build_report([out, *(out / s for s in SUBRUNS)], out / "report", k=k)
    return out / "report"


def print_summary(r: DemoResults) -> None:
    """The headline as a console table."""
    from vrh.infra.console import console, print_table

    pct = lambda x: f"{100 * x:.1f}%" if x is not None else "-"  # noqa: E731
    pm = lambda m, s: f"{100 * m:.1f} ± {100 * s:.1f}%" if m is not None and s is not None else pct(m)  # noqa: E731
    rows = [
        ["grounding, unmasked", pct(r.baseline_accuracy), ""],
        [f"grounding, top-{r.k} VRHs masked", pct(r.vrh_masked_accuracy),
         f"parse failures {pct(r.vrh_parse_failure_rate)}"],
        [f"grounding, {r.k} random heads masked", pm(r.random_masked_accuracy_mean, r.random_masked_accuracy_std),
         f"mean ± std of seeds {r.random_seeds}"],
        ["VQA, unmasked", pct(r.vqa.baseline_accuracy), ""],
        [f"VQA, top-{r.k} VRHs masked", pct(r.vqa.vrh_masked_accuracy), ""],
        [f"VQA, {r.k} random heads masked", pm(r.vqa.random_masked_accuracy_mean, r.vqa.random_masked_accuracy_std),
         f"mean ± std of seeds {r.random_seeds}"],
    ]
    s = r.sparsity
    print_table(f"vrh demo: {r.k} of {r.num_heads_total} heads masked ({r.elapsed_seconds:.0f} s)",
                ["condition", "accuracy", "note"], rows)
    console.print("sparsity: " + ", ".join(f"{100 * f:.0f}% of heads score above {t}"
                                           for t, f in s["fraction_above"].items())
                  + f" (max {s['max']:.3f}, median {s['median']:.3f})")
    if r.report:
        console.print(f"report: {r.report}")
