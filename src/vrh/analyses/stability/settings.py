"""``vrh stability``'s settings (imports only :mod:`vrh.options`, so ``vrh --help`` stays torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vrh.options import (DEFAULT_K_RULE, GenerationOptions, MaskOptions, ModelOptions, RunOptions, ShareOptions,
                         ints, option, optional_int)


@dataclass(frozen=True, kw_only=True)
class StabilitySettings(ModelOptions, MaskOptions, GenerationOptions, ShareOptions, RunOptions):
    """``vrh stability``: :func:`vrh.analyses.stability.analysis.run_stability`."""

    COMMAND: ClassVar[str] = "stability"

    model: str | None = option(None, help="checkpoint folder, hub id, or 'organism'; needed only for the "
                                          "token-choice comparison and --accuracy-draws (none: only the "
                                          "sample-size curve)")
    heads: str = option(help="detection run folder (its sample_scores.npz and held-out split)")
    data: str | None = option(None, help="dataset whose held-out samples are masked (none: the detection run's)")
    k: int | None = option(None, parse=optional_int,
                           help=f"size of the top-k head set compared and masked (default: {DEFAULT_K_RULE} of "
                                "the detection run's model)")
    n_values: tuple[int, ...] = option((1, 2, 5, 10, 20, 50, 100, 200), parse=ints, metavar="N,N",
                                       help="scoring-set sizes of the curve")
    bootstrap: int = option(10, help="draws (without replacement) per scoring-set size")
    seed: int = option(0, help="seed of the first draw (draw b uses seed + b)")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help="random-head seeds of the token-choice control")
    accuracy_draws: int = option(0, help="per n, also mask the top-k of this many draws and report accuracy "
                                         "(needs --model; at most --bootstrap)")
    n_eval: int | None = option(None, parse=optional_int, help="evaluate at most this many held-out samples "
                                                                "(none: all)")

    def __post_init__(self):
        if self.k is not None and self.k < 1:
            raise ValueError(f"--k must be >= 1, got {self.k}")
        if self.bootstrap < 1:
            raise ValueError(f"--bootstrap must be >= 1, got {self.bootstrap}")
        if not self.n_values or any(n < 1 for n in self.n_values):
            raise ValueError(f"--n-values must be integers >= 1, got {self.n_values}")
        if not 0 <= self.accuracy_draws <= self.bootstrap:
            raise ValueError(f"--accuracy-draws {self.accuracy_draws} must lie in [0, --bootstrap {self.bootstrap}]")
        if self.accuracy_draws and self.model is None:
            raise ValueError("--accuracy-draws masks heads and needs --model")
