"""``vrh compare-heads``' settings (imports only :mod:`vrh.options`, so ``vrh --help`` stays torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vrh.options import (DEFAULT_K_RULE, EvalOptions, GenerationOptions, MaskOptions, ModelOptions, RunOptions,
                         ShareOptions, ints, option, optional_int, positive_ints, redefault)


@dataclass(frozen=True, kw_only=True)
class CompareHeadsSettings(ModelOptions, EvalOptions, MaskOptions, GenerationOptions, ShareOptions, RunOptions):
    """``vrh compare-heads``: :func:`vrh.analyses.compare_heads.analysis.run_compare_heads`."""

    COMMAND: ClassVar[str] = "compare-heads"

    heads: str = option(metavar="A", help="head set A: a detection or text-heads run folder, a head list LAYER:HEAD,... "
                                          "(in rank order) or a named set: paper:MODEL/BENCHMARK, "
                                          "qrhead:MODEL/DATA (vrh heads list)")
    heads_b: str = option(metavar="B", help="head set B, as --heads")
    model: str | None = redefault(ModelOptions, "model", None)
    data: str | None = option(None, help="grounding dataset (with --model): the cross-masking matrix's grounding "
                                         "column (default: none)")
    k: int | None = option(None, parse=optional_int,
                           help=f"heads masked in the cross-masking matrix (default: {DEFAULT_K_RULE})")
    overlap_ks: tuple[int, ...] = option((5, 10, 20), parse=positive_ints, metavar="K,K",
                                         help="k of the top-k overlap figures (capped by the shorter set)")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help="random-head seeds of the cross-masking matrix")
