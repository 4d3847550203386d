"""``vrh transfer``: cross-model masking (paper Sec. 5.3, Fig. 7): mask the top-k heads detected in model A
at the same (layer, head) indices of model B and judge B's answers, against B unmasked, B's own top-k and k
random heads outside both.

The run is :func:`vrh.analyses.transfer.analysis.run_transfer`; its options are
:class:`vrh.analyses.transfer.settings.TransferSettings`, its report section
:func:`vrh.analyses.transfer.section.transfer_section`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.analyses.transfer.settings import TransferSettings as Config

NAME = Config.COMMAND
HELP = "mask model A's top-k heads in model B (same layer x head grid) vs B's own and random"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=60,
    run="vrh.analyses.transfer.analysis:run_transfer",
    results="vrh.runs.results_characterize:TransferResults",
    report=((60, "vrh.analyses.transfer.section:transfer_section"),),
    example_argv=("--data", "{data}", "--heads", "{heads}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a transfer run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
