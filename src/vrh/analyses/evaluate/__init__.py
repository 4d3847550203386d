"""``vrh evaluate``: answer with heads masked and measure accuracy (paper Sec. 4).

One condition: no masking, the top ``--k`` heads of a detection run (or an explicit ``LAYER:HEAD`` list),
or ``--random``: k random heads drawn outside that set (the paper's control). The run is
:func:`vrh.experiments.masked_evaluation.run_evaluate`; its options are
:class:`vrh.experiments.settings.EvaluateSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.experiments.settings import EvaluateSettings as Config

NAME = Config.COMMAND
HELP = "answer with heads masked and measure accuracy (grounding: IoU >= --tau; VQA: the answer rule)"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=30,
    run="vrh.experiments.masked_evaluation:run_evaluate",
    results="vrh.runs.results:EvaluateResults",
    report=((40, "vrh.report.sections:outcome_section"),),
    example_argv=("--data", "{data}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes an evaluation run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
