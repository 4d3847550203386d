"""``vrh dpo-train``: DPO on a dpo-pairs run's pairs with TRL's ``DPOTrainer`` (paper App. B).

Full-parameter training of ``--model`` (the paper's lr 2e-7 and 4 epochs are the defaults; every TRL setting
vrh passes is an option), the reference a second load of the same checkpoint. Writes ``--out``: the trained
checkpoint in ``model/`` (``--model OUT/model`` loads it like the base), TRL's log in ``train_log.jsonl``,
``results.json``; ``--resume`` continues an interrupted training from its last complete checkpoint
(``checkpoints/``, removed once the model is saved), or only saves one that had finished. Needs TRL:
``pip install 'vrh[dpo]'``. The training itself is :mod:`vrh.experiments.dpo`; the run
:func:`vrh.analyses.dpo_train.analysis.run_dpo_train`, its options
:class:`vrh.analyses.dpo_train.settings.DpoTrainSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.analyses.dpo_train.settings import NAME
from vrh.analyses.dpo_train.settings import DpoTrainSettings as Config
from vrh.analyses.registry import Analysis, register_analysis

HELP = "DPO-train a model on a dpo-pairs run's pairs with TRL (full parameters; paper App. B defaults)"

ANALYSIS = register_analysis(Analysis(
    NAME, HELP, Config, place=110,
    run="vrh.analyses.dpo_train.analysis:run_dpo_train",
    results="vrh.runs.results_dpo:DpoTrainResults",
    report=((120, "vrh.report.dpo:dpo_section"),),
    example_argv=("--pairs", "{pairs}")))


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a dpo-train run folder; returns results.json. ``lm`` is not used: DPO loads the policy and the
    reference itself (two copies of ``--model``)."""
    return ANALYSIS.run_json(cfg, lm)
