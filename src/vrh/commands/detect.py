"""``vrh detect``: score every LM head on grounding samples and rank them (paper Sec. 3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrh.infra.options import DataOptions, DetectOptions, GenerationOptions, ModelOptions, RunOptions

NAME = "detect"
HELP = "score every LM head on grounding samples and rank them"
DATA_PARALLEL = True  # torchrun / accelerate launch shard its samples (vrh.infra.distributed)


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, DataOptions, DetectOptions, GenerationOptions, RunOptions):
    pass


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a detection run folder (:func:`vrh.experiments.detection.run_detection`); returns head_scores.json."""
    from dataclasses import fields

    from vrh.commands._common import load
    from vrh.experiments.detection import check_scorers, detection_split, run_detection
    from vrh.infra.options import DetectOptions

    opts = DetectOptions(**{f.name: getattr(cfg, f.name) for f in fields(DetectOptions)})
    check_scorers(opts.scorers, opts.seed)  # bad input fails before the model loads
    detection_split(cfg.data, opts)
    lm = load(cfg, lm)
    hs = run_detection(lm, cfg.data, cfg.out, opts, batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens,
                       overwrite=cfg.overwrite, resume=cfg.resume)
    return hs.to_json()
