"""``vrh dpo``: the DPO application end to end (paper App. B, Fig. A3).

Builds VRH-negative and random-negative pairs from ``--heads``' training samples, DPO-trains one model on
each, and evaluates base / DPO-random / DPO-VRH on the held-out samples of every ``--benchmarks`` dataset
(default: the detection run's held-out split); an evaluation id among the training samples is refused.
Every stage is a sub-run of ``--out`` and ``vrh report --out R OUT`` draws Fig. A3 from it. ``--resume``
continues each stage where it stopped. The loop is :func:`vrh.experiments.dpo_comparison.run_comparison`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vrh.options import (DpoTrainOptions, GenerationOptions, MaskOptions, ModelOptions, PairOptions,
                               RunOptions, ShareOptions, names, option, optional_int)

NAME = "dpo"
HELP = "DPO with VRH negatives vs random-head negatives: pairs, both trainings, base/DPO evaluations (Fig. A3)"


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, PairOptions, MaskOptions, DpoTrainOptions, GenerationOptions, ShareOptions,
             RunOptions):
    COMMAND: ClassVar[str] = NAME  # named in a refused data-parallel launch (vrh.experiments.setup)

    benchmarks: tuple[str, ...] = option((), parse=names, metavar="DATA,DATA",
                                         help="grounding datasets to evaluate on, comma-separated, each on the "
                                              "samples the detection run did not score (none: its dataset)")
    n_eval: int | None = option(None, parse=optional_int,
                                help="evaluate the first N held-out samples of each benchmark (none: all)")


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
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
    return res.to_json()
