"""``vrh compare``'s settings (imports only :mod:`vrh.options`, so ``vrh --help`` stays torch-free), and the
comparison's default methods."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from vrh.options import (DEFAULT_K_RULE, DataOptions, DetectOptions, GenerationOptions, MaskOptions, ModelOptions,
                         RunOptions, ShareOptions, ints, names, option)

# --- the method comparison's settings ----------------------------------------------------------------------------
DESIGN_SPACE = tuple(f"{q}/{p}/{o}" for q in ("out", "in") for p in ("sum", "argmax") for o in ("mean", "freq"))
TOKEN_CHOICE = ("rand1/sum/mean", "coord/sum/mean")  # which output tokens (Fig. 8b)
MIN_SEEDS = 3  # of the comparison's random control (a study's [compare] seeds are checked against it too)


def default_methods() -> tuple[str, ...]:
    """``--methods``' default: the design space, the token choices, then every prior method registered with a
    ``compare_order`` (:func:`vrh.scoring.registry.compare_baselines`). Read when a Config is built, not at
    import: the registry imports the scorer files (torch), and ``vrh --help`` must not."""
    from vrh.scoring.registry import compare_baselines

    return DESIGN_SPACE + TOKEN_CHOICE + compare_baselines()


@dataclass(frozen=True, kw_only=True)
class CompareSettings(ModelOptions, DataOptions, DetectOptions, MaskOptions, GenerationOptions,
                      ShareOptions, RunOptions):
    """``vrh compare``: :func:`vrh.analyses.compare.analysis.run_compare`."""

    COMMAND: ClassVar[str] = "compare"

    methods: tuple[str, ...] | None = option(None, parse=names, metavar="SPEC,SPEC",
                                             help="scorers to compare, comma-separated: QUERY/PHI/OMEGA variants and "
                                                  "prior methods (default: the 8 {out,in} x {sum,argmax} x "
                                                  "{mean,freq} variants, the token choices rand1 and coord, and "
                                                  "every prior method registered for comparison, see docs/guide.md)")
    default: str = option("out/sum/mean", metavar="SPEC",
                          help="reference method: random heads are drawn outside its top-k, similarity is measured "
                               "to it (added to --methods if missing)")
    ks: tuple[int, ...] | None = option(None, parse=ints, metavar="K,K",
                                        help="k values: mask each method's top-k heads, and k random heads outside "
                                             f"the default's top-k (default: 1, k/2, k and 2k, k = {DEFAULT_K_RULE}, "
                                             "less any k with no room for k random heads)")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help=f"random-head seeds, at least {MIN_SEEDS} distinct")
    # Derived, not options: detection's scorer list (the default first, so it ranks head_scores.json) and
    # the scorer whose top-k the random control avoids. They replace DetectOptions.scorers and
    # MaskOptions.scorer here, which --methods and --default say better for a comparison.
    scorers: tuple[str, ...] = field(init=False, default=())
    scorer: str | None = field(init=False, default=None)

    def __post_init__(self):
        if self.methods is None:
            object.__setattr__(self, "methods", default_methods())
        if len(set(self.seeds)) < MIN_SEEDS:
            raise ValueError(f"--seeds: the random control needs at least {MIN_SEEDS} distinct seeds, got "
                             f"{list(self.seeds)}")
        if self.ks is not None and (any(k < 0 for k in self.ks) or not any(k > 0 for k in self.ks)):
            raise ValueError(f"--ks: k values must be >= 0 with at least one > 0, got {list(self.ks)}")
        twice = sorted({m for m in self.methods if self.methods.count(m) > 1})
        if twice:
            raise ValueError(f"--methods lists {twice} twice")
        object.__setattr__(self, "scorers", (self.default, *[m for m in self.methods if m != self.default]))
        object.__setattr__(self, "scorer", self.default)
