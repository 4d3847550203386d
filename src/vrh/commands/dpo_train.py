"""``vrh dpo-train``: DPO on a dpo-pairs run's pairs with TRL's ``DPOTrainer`` (paper App. B).

Full-parameter training of ``--model`` (the paper's lr 2e-7 and 4 epochs are the defaults; every TRL setting
vrh passes is an option), the reference a second load of the same checkpoint. Writes ``--out``: the trained
checkpoint in ``model/`` (``--model OUT/model`` loads it like the base), TRL's log in ``train_log.jsonl``,
``results.json``; ``--resume`` continues an interrupted training from its last complete checkpoint
(``checkpoints/``, removed once the model is saved), or only saves one that had finished. Needs TRL:
``pip install 'vrh[dpo]'``. The training itself is :mod:`vrh.experiments.dpo`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrh.options import DpoTrainOptions, ModelOptions, RunOptions, option

NAME = "dpo-train"
HELP = "DPO-train a model on a dpo-pairs run's pairs with TRL (full parameters; paper App. B defaults)"


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, DpoTrainOptions, RunOptions):
    pairs: str = option(help="dpo-pairs run folder (or its pairs.jsonl) to train on")
    # training reads the pairs' prompts and answers as dpo-pairs wrote them: no --answer-format here
    answer_format: str | None = option(None, cli=False, help="not read: the pairs are text already")


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a dpo-train run folder; returns results.json. ``lm`` is not used: DPO loads the policy and the
    reference itself (two copies of ``--model``)."""
    from vrh.experiments.setup import configure_threads
    from vrh.experiments.dpo_comparison import train_run
    from vrh.infra.console import print_result
    from vrh.options import config_record

    configure_threads(cfg)
    res = train_run(cfg.model, cfg.pairs, cfg.out, cfg, device=cfg.device, dtype=cfg.dtype, adapter=cfg.adapter,
                    resume=cfg.resume, overwrite=cfg.overwrite,
                    config={"command": NAME, "config": config_record(cfg)})
    print_result(f"dpo-train: {res.steps} steps on {res.n_pairs} pairs, mean loss {res.train_loss:.4f} -> "
                 f"{res.model_dir} (use it as --model)")  # the result: stdout
    return res.to_json()
