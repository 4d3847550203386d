"""``vrh dpo-train``'s settings (imports only :mod:`vrh.options`, so ``vrh --help`` stays torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vrh.options import DpoTrainOptions, ModelOptions, RunOptions, option

NAME = "dpo-train"


@dataclass(frozen=True, kw_only=True)
class DpoTrainSettings(ModelOptions, DpoTrainOptions, RunOptions):
    """``vrh dpo-train``: :func:`vrh.analyses.dpo_train.analysis.run_dpo_train`."""

    COMMAND: ClassVar[str] = NAME

    pairs: str = option(help="dpo-pairs run folder (or its pairs.jsonl) to train on")
    # training reads the pairs' prompts and answers as dpo-pairs wrote them: no --answer-format here
    answer_format: str | None = option(None, cli=False, help="not read: the pairs are text already")
