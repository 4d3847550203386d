"""``vrh text-heads``: the Retrieval Heads protocol (Wu et al. 2024) on the VLM's language model with text only:
needle-in-a-haystack prompts, a head's copy-paste retrieval score, and needle recall with the top-k text heads
masked against k random heads.

The run is :func:`vrh.experiments.text_heads.run_text_heads`; its options are
:class:`vrh.experiments.settings.TextHeadsSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.experiments.settings import TextHeadsSettings as Config

NAME = Config.COMMAND
HELP = "find the language model's text retrieval heads (needle in a haystack, no image) and mask them"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=70,
    run="vrh.experiments.text_heads:run_text_heads",
    results="vrh.runs.results_characterize:TextHeadsResults",
    report=((90, "vrh.report.head_comparison:head_comparison_section"),)))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a text-heads run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
