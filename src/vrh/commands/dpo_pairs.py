"""``vrh dpo-pairs``: DPO preference pairs from VRH masking (paper App. B).

``chosen`` is the unmasked model's answer (condition ``none``), ``rejected`` the answer with the top-k
detected heads masked (``top{k}``) or, with ``--random-negatives``, with k random heads drawn per sample
(``random:s{seed}``, seed ``--seed * 1000003 + i``, outside the detected set and ``--exclude-layers``).
Every answer goes through :func:`vrh.experiments.runner.run_conditions` (tagged records in ``samples.jsonl``, so
``--resume`` redoes only what is missing); ``pairs.jsonl`` is rebuilt from those records at the end. The
pair format, the keep rule and the training command live in :mod:`vrh.experiments.preference_pairs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrh.infra.options import GenerationOptions, MaskOptions, ModelOptions, RunOptions, ints, option, optional_int

NAME = "dpo-pairs"
HELP = "build DPO preference pairs: unmasked answers (chosen) vs answers with the VRHs masked (rejected)"


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, MaskOptions, GenerationOptions, RunOptions):
    heads: str = option(help="detection run folder (its top --k heads are the negative policy)")
    data: str | None = option(None, help="dataset of the training samples (none: the detection run's)")
    train: str = option("detect", choices=("detect", "data"),
                        help="training samples: the run's detection samples ('detect'), or every grounding sample "
                             "of --data the run did not hold out ('data')")
    k: int = option(20, help="how many heads the negative policy masks")
    random_negatives: bool = option(False, help="control: mask --k random heads outside the detected set, redrawn "
                                                "for every sample, instead of the detected heads")
    seed: int = option(0, help="seed of the random negatives (sample i uses seed * 1000003 + i)")
    exclude_layers: tuple[int, ...] = option((0,), parse=ints, metavar="L,L",
                                             help="layers random negatives are never drawn from (paper: the first)")
    n: int | None = option(None, parse=optional_int, help="use at most this many training samples (none: all)")

    def __post_init__(self):
        if self.k < 1:
            raise ValueError(f"--k must be >= 1, got {self.k}")


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a dpo-pairs run folder (samples.jsonl, pairs.jsonl); returns results.json."""
    import time
    from collections import Counter

    from vrh.experiments import conditions as cond
    from vrh import runs
    from vrh.experiments import preference_pairs as dpo
    from vrh.commands._common import load
    from vrh.experiments.conditions import head_source
    from vrh.infra.console import console
    from vrh.experiments.kcurves import conditions_table, random_control_report
    from vrh.infra.options import config_record
    from vrh.experiments.runner import run_conditions
    from vrh.runs import DpoPairsResults
    from vrh.tasks import get_task

    t0 = time.time()
    task = get_task("grounding")
    samples, data_info = dpo.training_samples(cfg.heads, cfg.data, cfg.train, cfg.n)
    lm = load(cfg, lm)
    L, H = lm.num_layers, lm.num_heads
    src = head_source(cfg.heads, cfg.scorer, L, H, option="--heads")
    if src.kind != "run":
        raise FileNotFoundError(f"--heads {cfg.heads}: a detection run folder is expected")
    chosen = cond.none(cfg.mask_mode)
    detected = cond.top_k(src.scores, cfg.k, method=src.scorer, mask_mode=cfg.mask_mode, source=cfg.heads,
                          label=f"top{cfg.k}")
    control = None
    if cfg.random_negatives:
        cond.check_room(cfg.k, L, H, outside=detected.heads, exclude_layers=cfg.exclude_layers)
        control = cond.random_controls(L, H, cfg.k, [dpo.negative_seed(cfg.seed, i) for i in range(len(samples))],
                                       outside=detected.heads, exclude_layers=cfg.exclude_layers, method=src.scorer,
                                       mask_mode=cfg.mask_mode, label="random:s{seed}")
        for w in control.warnings:
            console.print(f"[yellow]warning:[/yellow] {w}")
    policy = "random" if cfg.random_negatives else "vrh"

    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
    run.write_config({"command": NAME, "config": config_record(cfg), "model": lm.describe(), "data": data_info,
                      "task": task.config(), "heads": {"source": cfg.heads, "scorer": src.scorer},
                      "vrh_heads": [list(h) for h in detected.heads], "negative_policy": policy,
                      "conditions": [c.to_json() for c in ([chosen] if cfg.random_negatives else [chosen, detected])],
                      "pair_format": dpo.PAIR_FORMAT})
    kw = dict(batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens)
    with run:
        if control is None:
            main = run_conditions(lm, task, samples, [chosen, detected], run, description=NAME, **kw)
            rejected_recs, negative_heads = main.records[detected.label], None
        else:  # a fresh head set per sample: each sample is its own condition, all in one runner call
            negs = control.conditions
            main = run_conditions(lm, task, samples, [chosen, *negs], run, description=NAME,
                                  subsets={c.label: [s.id] for s, c in zip(samples, negs)}, **kw)
            rejected_recs = [main.records[c.label][0] for c in negs]
            negative_heads = [c.heads for c in negs]
        chosen_recs = main.records[chosen.label]
        pairs = dpo.build_pairs(samples, [task.prompt(lm.adapter, s) for s in samples], chosen_recs, rejected_recs,
                                negative_heads)
        pairs_path = dpo.write_pairs(run.path / runs.PAIRS, pairs.rows)
        n = len(samples)
        command = dpo.training_command(cfg.out, lm.path, data_info["path"], cfg.heads)
        result = DpoPairsResults(
            n_samples=n, n_pairs=len(pairs.rows), n_dropped=n - len(pairs.rows), dropped=dict(pairs.dropped),
            chosen_accuracy=task.summarize(chosen_recs)["accuracy"],
            rejected_accuracy=task.summarize(rejected_recs)["accuracy"],
            chosen_outcomes=dict(Counter(r["outcome"] for r in chosen_recs)),
            rejected_outcomes=dict(Counter(r["outcome"] for r in rejected_recs)),
            kept_rejected_outcomes=dict(pairs.kept_rejected_outcomes), negative_policy=policy, k=cfg.k,
            mask_mode=cfg.mask_mode, pair_format=dpo.PAIR_FORMAT["name"],
            pair_format_version=dpo.PAIR_FORMAT["version"], pairs_file=runs.PAIRS,
            conditions=conditions_table(main)[:1 if control is not None else None], decisions=pairs.decisions,
            training_command=command, elapsed_seconds=time.time() - t0,
            random_control=random_control_report([control]) if control is not None else None)
        run.write_results(result.to_json())
    drops = ", ".join(f"{v} {k}" for k, v in pairs.dropped.items()) or "none"
    console.print(f"dpo-pairs: {len(pairs.rows)} pairs from {n} samples (dropped: {drops}) -> {pairs_path}")
    console.print("train with TRL (not a vrh dependency); command on stdout, also in results.json:")
    print(command)  # plain stdout: no console wrapping, so it copies and pipes as is
    return result.to_json()
