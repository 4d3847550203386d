"""``vrh dpo-train``'s run: one training as a run folder (:func:`vrh.experiments.dpo_comparison.train_run`)."""

from __future__ import annotations

from typing import Any

from vrh.analyses.dpo_train.settings import NAME, DpoTrainSettings
from vrh.runs import DpoTrainResults


def run_dpo_train(cfg: DpoTrainSettings, lm: Any = None) -> DpoTrainResults:
    """Writes a dpo-train run folder; returns its results. ``lm`` is not used: DPO loads the policy and the
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
    return res
