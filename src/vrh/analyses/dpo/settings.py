"""``vrh dpo``'s settings (imports only :mod:`vrh.options`, so ``vrh --help`` stays torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vrh.options import (DpoTrainOptions, GenerationOptions, MaskOptions, ModelOptions, PairOptions,
                         RunOptions, ShareOptions, names, option, optional_int)

NAME = "dpo"


@dataclass(frozen=True, kw_only=True)
class DpoSettings(ModelOptions, PairOptions, MaskOptions, DpoTrainOptions, GenerationOptions, ShareOptions,
                  RunOptions):
    """``vrh dpo``: :func:`vrh.analyses.dpo.analysis.run_dpo`."""

    COMMAND: ClassVar[str] = NAME  # named in a refused data-parallel launch (vrh.experiments.setup)

    benchmarks: tuple[str, ...] = option((), parse=names, metavar="DATA,DATA",
                                         help="grounding datasets to evaluate on, comma-separated, each on the "
                                              "samples the detection run did not score (none: its dataset)")
    n_eval: int | None = option(None, parse=optional_int,
                                help="evaluate the first N held-out samples of each benchmark (none: all)")
