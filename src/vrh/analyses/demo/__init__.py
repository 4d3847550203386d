"""``vrh demo``: the whole method on the shipped model organism, offline, on a laptop CPU.

Writes the synthetic world's datasets, detects heads (``detect/``), sweeps k on the held-out grounding
samples (``sweep_grounding/``) and on a VQA set (``sweep_vqa/``), measures sparsity and builds the report
(``report/``); the top-level ``results.json`` carries the headline. A non-empty ``--out`` is refused unless
``--overwrite`` or ``--resume``, as by every command. The run is :func:`vrh.analyses.demo.analysis.run_demo`; its
options are :class:`vrh.analyses.demo.settings.DemoSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.analyses.demo.settings import DemoSettings as Config

NAME = Config.COMMAND
HELP = "the whole method on the shipped model organism, offline (the README's main command)"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=10,
    run="vrh.analyses.demo.analysis:run_demo",
    results="vrh.runs.results:DemoResults",
    report=((1, "vrh.report.characterize:demo_section"),)))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes the demo's run folder; returns results.json."""
    return ANALYSIS.run_json(cfg, lm)
