"""``vrh dpo``'s run: pairs, both trainings and the evaluations (:func:`vrh.experiments.dpo_comparison.run_comparison`),
then the table the command prints."""

from __future__ import annotations

from typing import Any

from vrh.analyses.dpo.settings import NAME, DpoSettings
from vrh.runs import DpoResults


def run_dpo(cfg: DpoSettings, lm: Any = None) -> DpoResults:
    """Writes a dpo run folder (every stage a sub-run of ``cfg.out``); returns its results."""
    import shlex

    from dataclasses import replace

    from vrh.experiments.heads_origin import adopt
    from vrh.experiments.setup import fit_random_pool, load
    from vrh.experiments import preference_pairs as pp
    from vrh.experiments.dpo import require_trl
    from vrh.experiments.dpo_comparison import run_comparison
    from vrh.infra.console import console, print_table
    from vrh.options import config_record

    require_trl()
    pp.training_samples(cfg.heads, cfg.data, cfg.train, cfg.n)  # bad --heads / --data fail before the model loads
    lm = load(cfg, lm)
    adopted = adopt(lm, cfg.answer_format, cfg.heads, command=NAME, option="--heads", task="grounding")
    if adopted is not lm:  # the heads' answer format, for the pairs and for the trained models it reloads
        lm, cfg = adopted, replace(cfg, answer_format=adopted.adapter.answer_format)
    cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
    res = run_comparison(lm, cfg, cfg.out, benchmarks=cfg.benchmarks, resume=cfg.resume, overwrite=cfg.overwrite,
                         config={"command": NAME, "config": config_record(cfg)})
    rows = []
    for name, b in res.benchmarks.items():
        cells = [f"{100 * b['accuracy'][m]:.1f} ± {100 * b['se'][m]:.1f}" for m in res.models]
        rows.append([name, str(b["n"]), *cells,
                     f"{100 * b['differences'][0]['diff']:+.1f} ± {100 * b['differences'][0]['se']:.1f}"])
    print_table(f"vrh dpo ({res.elapsed_seconds:.0f} s): held-out grounding accuracy (%)",
                ["benchmark", "n", *res.models, "dpo-vrh - base"], rows)
    console.print(f"report: vrh report --out REPORT {shlex.quote(cfg.out)}")
    return res
