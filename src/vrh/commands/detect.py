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
    if opts.answer == "model":
        warn_if_never_correct(cfg.out, cfg.model)
    print_top_heads(hs)
    return hs.to_json()


def warn_if_never_correct(out: str, model: str) -> None:
    """A loud line when the model answered no detection sample correctly: its heads were scored on answers
    that never found the object (the toy organism run on a user's photos scored 20 of 20 "mislocated")."""
    from vrh import runs
    from vrh.infra.console import warn

    records = runs.read_samples(out)
    if records and not any(r.get("outcome") == "correct" for r in records):
        warn(f"--model {model} answered none of the {len(records)} detection samples correctly: these head scores "
             "come from answers that never found the object; check that --model is the model you meant for this data")


TOP_SHOWN = 10  # heads of the ranking printed; the full ranking is in head_scores.json


def print_top_heads(hs: Any) -> None:
    """The primary scorer's top heads with their scores, as a table on stdout (``hs``: a
    :class:`vrh.runs.HeadScores`)."""
    from vrh.infra.console import head_text, print_table

    scores = hs.scores()  # (L, H)
    top = hs.ranking()[:TOP_SHOWN]
    print_table(f"detect: top {len(top)} of {hs.num_layers * hs.num_heads} heads by {hs.scorer} "
                f"({hs.n_scored} samples scored)", ["rank", "head (layer:head)", "score"],
                [[i + 1, head_text(h), f"{float(scores[h[0], h[1]]):.4g}"] for i, h in enumerate(top)])
