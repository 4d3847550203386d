"""``vrh compare``: every head-scoring method judged by the same causal test (paper Sec. 3.3, Fig. 2-3,
App. F-G, Tab. A9): one detection scoring the same attention rows with every method, then each method's
top-k heads masked on the same held-out samples, k random heads outside the default's top-k the control.

Writes ``RUN/detect/`` (a full detection run), ``RUN/samples.jsonl``, ``RUN/compare.md`` (Tab. A9 style),
``RUN/compare.png`` and ``RUN/results.json``. The run is :func:`vrh.analyses.compare.analysis.run_compare`;
its options are :class:`vrh.analyses.compare.settings.CompareSettings`, its report section
:func:`vrh.analyses.compare.section.compare_section`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.analyses.compare.settings import CompareSettings as Config

NAME = Config.COMMAND
HELP = "every head-scoring variant and prior method, one detection, causal test per k (Tab. A9)"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=50,
    run="vrh.analyses.compare.analysis:run_compare",
    results="vrh.runs.results_characterize:CompareResults",
    report=((80, "vrh.analyses.compare.section:compare_section"),),
    example_argv=("--data", "{data}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a comparison run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
