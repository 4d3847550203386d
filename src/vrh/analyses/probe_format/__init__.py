"""``vrh probe-format``: try each prompt/answer variant of a checkpoint's family on a few grounding samples
and say which one the other commands use and how to choose another (docs/guide.md, "When your checkpoint's
box format is unknown").

The run is :func:`vrh.experiments.format_probe.run_probe_format`; its options are
:class:`vrh.experiments.settings.ProbeFormatSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.registry import Analysis, register_analysis
from vrh.experiments.settings import ProbeFormatSettings as Config

NAME = Config.COMMAND
HELP = "try each prompt/answer variant on a few samples: parse rate, accuracy, one raw answer"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=180,
    run="vrh.experiments.format_probe:run_probe_format"))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Prints the table (and writes --json); returns it as JSON."""
    return ANALYSIS.run_json(cfg, lm)
