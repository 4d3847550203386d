"""``vrh detect``: score every LM head on grounding samples and rank them (paper Sec. 3).

The run is :func:`vrh.experiments.detection.run_detect`; its options are
:class:`vrh.experiments.settings.DetectRunSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.experiments.settings import DetectRunSettings as Config

NAME = Config.COMMAND
HELP = "score every LM head on grounding samples and rank them"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=20,
    run="vrh.experiments.detection:run_detect",
    results="vrh.runs.results:DetectResults",
    report=((20, "vrh.report.sections:scores_section"), (50, "vrh.report.sections:overlay_section")),
    example_argv=("--data", "{data}", "--n", "6")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a detection run folder; returns head_scores.json."""
    return ANALYSIS.run_json(cfg, lm)
