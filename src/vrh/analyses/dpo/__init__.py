"""``vrh dpo``: the DPO application end to end (paper App. B, Fig. A3).

Builds VRH-negative and random-negative pairs from ``--heads``' training samples, DPO-trains one model on
each, and evaluates base / DPO-random / DPO-VRH on the held-out samples of every ``--benchmarks`` dataset
(default: the detection run's held-out split); an evaluation id among the training samples is refused.
Every stage is a sub-run of ``--out`` and ``vrh report --out R OUT`` draws Fig. A3 from it. ``--resume``
continues each stage where it stopped. The loop is :func:`vrh.experiments.dpo_comparison.run_comparison`; the run
:func:`vrh.analyses.dpo.analysis.run_dpo`, its options :class:`vrh.analyses.dpo.settings.DpoSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.dpo.settings import NAME
from vrh.analyses.dpo.settings import DpoSettings as Config
from vrh.analyses.registry import Analysis, register_analysis

HELP = "DPO with VRH negatives vs random-head negatives: pairs, both trainings, base/DPO evaluations (Fig. A3)"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=120,
    run="vrh.analyses.dpo.analysis:run_dpo",
    results="vrh.runs.results_dpo:DpoResults",
    report=((120, "vrh.report.dpo:dpo_section"),),
    example_argv=("--heads", "{heads}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a dpo run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
