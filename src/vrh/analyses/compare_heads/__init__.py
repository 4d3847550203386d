"""``vrh compare-heads``: are two head sets the same heads (e.g. the VRHs and the text retrieval heads)? Top-k
overlap and Jaccard with chance levels, rank correlation, and, with ``--model``, the cross-masking matrix.

The run is :func:`vrh.analyses.compare_heads.analysis.run_compare_heads`; its options are
:class:`vrh.analyses.compare_heads.settings.CompareHeadsSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.analyses.compare_heads.settings import CompareHeadsSettings as Config

NAME = Config.COMMAND
HELP = "overlap of two head rankings with chance levels, and cross-masking (e.g. VRHs vs text retrieval heads)"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=80,
    run="vrh.analyses.compare_heads.analysis:run_compare_heads",
    results="vrh.runs.results_characterize:CompareHeadsResults",
    report=((90, "vrh.report.head_comparison:head_comparison_section"),),
    example_argv=("--heads", "{heads}", "--heads-b", "{heads}", "--data", "{data}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a compare-heads run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
