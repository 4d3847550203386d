"""``vrh dpo-pairs``: DPO preference pairs from VRH masking (paper App. B).

``chosen`` is the unmasked model's answer, ``rejected`` the answer with the top-k detected heads masked or,
with ``--random-negatives``, with k random heads drawn per sample. The pair format, the keep rule and the
stage live in :mod:`vrh.experiments.preference_pairs`; the run is
:func:`vrh.experiments.preference_pairs.run_pairs`, its options
:class:`vrh.experiments.settings.PairsSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.experiments.settings import PairsSettings as Config

NAME = Config.COMMAND
HELP = "build DPO preference pairs: unmasked answers (chosen) vs answers with the VRHs masked (rejected)"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=100,
    run="vrh.experiments.preference_pairs:run_pairs",
    results="vrh.runs.results:DpoPairsResults",
    report=((110, "vrh.report.pairs:dpo_section"),),
    example_argv=("--heads", "{heads}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a dpo-pairs run folder (samples.jsonl, pairs.jsonl); returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
