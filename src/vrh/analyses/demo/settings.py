"""``vrh demo``'s settings (imports only :mod:`vrh.options`, so ``vrh --help`` stays torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vrh.options import (DEFAULT_K_RULE, GenerationOptions, MaskOptions, ModelOptions, RunOptions, ShareOptions,
                         ints, option, optional_int, redefault)

# --- the demo's settings -----------------------------------------------------------------------------------------
DEMO_WORLD_SEED = 20_000  # disjoint from the organism's training streams and its held-out seed


@dataclass(frozen=True, kw_only=True)
class DemoSettings(ModelOptions, MaskOptions, GenerationOptions, ShareOptions, RunOptions):
    """``vrh demo``: :func:`vrh.analyses.demo.analysis.run_demo`."""

    COMMAND: ClassVar[str] = "demo"

    model: str = redefault(ModelOptions, "model", "organism")  # the one command that has a default model
    out: str = option("runs/demo", help="run folder to write (a non-empty one needs --overwrite, or --resume to "
                                        "continue an interrupted demo)")
    batch_size: int = redefault(GenerationOptions, "batch_size", 64)
    max_new_tokens: int = redefault(GenerationOptions, "max_new_tokens", 24)
    n_detect: int = option(200, help="grounding samples heads are detected on")
    n_eval: int = option(200, help="held-out grounding samples the k-sweep is evaluated on")
    n_vqa: int = option(200, help="VQA samples evaluated under the same masks")
    k: int | None = option(None, parse=optional_int,
                           help=f"headline k: how many top heads to mask (default: {DEFAULT_K_RULE})")
    ks: tuple[int, ...] | None = option(None, parse=ints, metavar="K,K",
                                        help="k values of the grounding sweep (none: 0, 1, k/2, k, 2k); 0 and k are "
                                             "always included")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help="random-head seeds: one random control per (k, seed)")
    world_seed: int = option(DEMO_WORLD_SEED, cli=False, help="seed of the synthetic world's samples (VQA: +1)")
    sparsity_thresholds: tuple[float, ...] = option((1e-3, 5e-3), cli=False,  # sparsity.DEFAULT_THRESHOLDS
                                                    help="score thresholds of the sparsity figure (the paper's "
                                                         "Fig. 5 ones: 0.001 non-negligible, 0.005 high)")
