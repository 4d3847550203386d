"""``vrh evaluate``: answer with heads masked and measure accuracy (paper Sec. 4).

One condition: no masking, the top ``--k`` heads of a detection run (or an explicit ``LAYER:HEAD`` list),
or ``--random``: k random heads drawn outside that set (the paper's control). The run is
:func:`vrh.experiments.masked_evaluation.run_evaluate`; its options are
:class:`vrh.experiments.settings.EvaluateSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.experiments.settings import EvaluateSettings as Config

NAME = Config.COMMAND
HELP = "answer with heads masked and measure accuracy (grounding: IoU >= --tau; VQA: the answer rule)"


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes an evaluation run folder; returns results.json."""
    from vrh.experiments.masked_evaluation import run_evaluate

    return run_evaluate(cfg, lm).to_json()
