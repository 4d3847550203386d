"""``vrh dpo-pairs``: DPO preference pairs from VRH masking (paper App. B).

``chosen`` is the unmasked model's answer (condition ``none``), ``rejected`` the answer with the top-k
detected heads masked (``top{k}``) or, with ``--random-negatives``, with k random heads drawn per sample
(``random:s{seed}``, seed ``--seed * 1000003 + i``, outside the detected set and ``--exclude-layers``).
Every answer goes through :func:`vrh.experiments.runner.run_conditions` (tagged records in ``samples.jsonl``, so
``--resume`` redoes only what is missing); ``pairs.jsonl`` is rebuilt from those records at the end. The
pair format, the keep rule and the stage itself live in :mod:`vrh.experiments.preference_pairs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrh.infra.options import GenerationOptions, MaskOptions, ModelOptions, PairOptions, RunOptions, option

NAME = "dpo-pairs"
HELP = "build DPO preference pairs: unmasked answers (chosen) vs answers with the VRHs masked (rejected)"


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, PairOptions, MaskOptions, GenerationOptions, RunOptions):
    random_negatives: bool = option(False, help="control: mask --k random heads outside the detected set, redrawn "
                                                "for every sample, instead of the detected heads")


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a dpo-pairs run folder (samples.jsonl, pairs.jsonl); returns results.json."""
    import shlex

    from vrh import runs
    from vrh.commands._common import load
    from vrh.experiments import preference_pairs as dpo
    from vrh.infra.console import print_result
    from vrh.infra.options import config_record

    dpo.training_samples(cfg.heads, cfg.data, cfg.train, cfg.n)  # bad --heads / --data fail before the model loads
    lm = load(cfg, lm)
    result = dpo.make_pairs(lm, cfg, cfg.out, random_negatives=cfg.random_negatives, resume=cfg.resume,
                            overwrite=cfg.overwrite, config={"command": NAME, "config": config_record(cfg)},
                            description=NAME)
    drops = ", ".join(f"{v} {k}" for k, v in result.dropped.items()) or "none"
    # stdout is the result and a script: the counts as shell comments, then the next commands (shell-quoted),
    # unwrapped (no console), so ``vrh dpo-pairs ... > next.sh`` or ``| sh`` runs them as is; a newline in the
    # path would end the comment and run the rest of it, so the comment shows it as \n
    pairs = shlex.quote(f"{cfg.out}/{runs.PAIRS}").replace("\n", "\\n")
    print_result(f"# dpo-pairs: {result.n_pairs} pairs from {result.n_samples} samples (dropped: {drops}) -> "
                 f"{pairs}\n# train them and score the trained model (also in results.json):\n"
                 f"{result.training_command}")
    return result.to_json()
