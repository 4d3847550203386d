"""``vrh sweep``: accuracy vs k, the top-k detected heads masked vs k random heads outside them (paper
Fig. 4, Tab. A1), over several k and random seeds, with the failure decomposition of every condition.

``samples.jsonl`` gets one line per (condition, sample), tagged ``none`` / ``top{k}`` / ``random{k}:s{seed}``;
``results.json`` holds the k-curves. A k outside [0, L * H], or one that leaves fewer than k heads outside the
top-k for the random control, is refused up front. The run is :func:`vrh.experiments.kcurves.run_sweep`; its
options are :class:`vrh.experiments.settings.SweepSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.experiments.settings import SweepSettings as Config

NAME = Config.COMMAND
HELP = "accuracy vs k: top-k detected heads vs k random heads over seeds"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=40,
    run="vrh.experiments.kcurves:run_sweep",
    results="vrh.runs.results:SweepResults",
    report=((30, "vrh.report.sections:kcurve_section"), (40, "vrh.report.sections:outcome_section")),
    example_argv=("--data", "{data}", "--heads", "{heads}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a sweep run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
