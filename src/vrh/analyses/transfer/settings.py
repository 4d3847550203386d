"""``vrh transfer``'s settings (imports only :mod:`vrh.options`, so ``vrh --help`` stays torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vrh.options import (DEFAULT_K_RULE, DataOptions, EvalOptions, GenerationOptions, MaskOptions, ModelOptions,
                         RunOptions, ShareOptions, ints, option, optional_int)


@dataclass(frozen=True, kw_only=True)
class TransferSettings(ModelOptions, DataOptions, EvalOptions, MaskOptions, GenerationOptions,
                       ShareOptions, RunOptions):
    """``vrh transfer``: :func:`vrh.analyses.transfer.analysis.run_transfer`."""

    COMMAND: ClassVar[str] = "transfer"

    heads: str = option(metavar="RUN", help="model A's detection run folder: its top --k heads are masked in "
                                            "--model (model B)")
    heads_b: str | None = option(None, metavar="RUN", help="model B's own detection run folder (adds the "
                                                           "own-heads condition and the score-map similarity)")
    k: int | None = option(None, parse=optional_int,
                           help="how many of A's (and B's) top heads to mask, and random heads to draw (default: "
                                f"{DEFAULT_K_RULE} of model B)")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help="random-head seeds: one random control each")

    def __post_init__(self):
        if self.k is not None and self.k < 1:
            raise ValueError(f"--k: transfer masks at least one head, got {self.k}")
        if not self.seeds:
            raise ValueError("--seeds: transfer needs at least one random seed")
