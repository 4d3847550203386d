"""``vrh stability``: how many scoring samples detection needs, and which output tokens to score (Sec. 5.4).

The sample-size curve (Fig. 8c) is computed from a detection run's per-sample maps alone (no model). With
``--model``, the token-choice comparison (Fig. 8b) and, with ``--accuracy-draws``, the top-k of the first
draws at each n are masked on the run's held-out samples. The run is
:func:`vrh.analyses.stability.analysis.run_stability`; its options are
:class:`vrh.analyses.stability.settings.StabilitySettings`, its report section
:func:`vrh.analyses.stability.section.stability_section`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.analyses.stability.settings import StabilitySettings as Config

NAME = Config.COMMAND
HELP = "top-k stability vs number of scoring samples, and which output tokens to score"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=90,
    run="vrh.analyses.stability.analysis:run_stability",
    results="vrh.runs.results_characterize:StabilityResults",
    report=((70, "vrh.analyses.stability.section:stability_section"),),
    example_argv=("--heads", "{heads}", "--accuracy-draws", "1")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a stability run folder; returns results.json. ``lm`` is used only when ``cfg.model`` is set."""
    return ANALYSIS.run_json(cfg, lm)
