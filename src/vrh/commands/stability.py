"""``vrh stability``: how many scoring samples detection needs, and which output tokens to score (Sec. 5.4).

The sample-size curve (Fig. 8c) is computed from a detection run's per-sample maps alone (no model). With
``--model``, the token-choice comparison (Fig. 8b: top-k of ``rand1/sum/mean`` vs ``out/sum/mean`` vs
random heads) and, with ``--accuracy-draws``, the top-k of the first draws at each n are masked on the
run's held-out samples -- all in one :func:`vrh.experiments.runner.run_conditions` call, so identical head sets are
evaluated once and ``--resume`` continues an interrupted run. The study itself (curve, conditions, run folder)
lives in :mod:`vrh.experiments.stability`; this module is its options and wiring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrh.infra.options import (DEFAULT_K_RULE, GenerationOptions, MaskOptions, ModelOptions, RunOptions, ints, option,
                               optional_int)

NAME = "stability"
HELP = "top-k stability vs number of scoring samples, and which output tokens to score"


@dataclass(frozen=True, kw_only=True)
class Config(ModelOptions, MaskOptions, GenerationOptions, RunOptions):
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


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a stability run folder; returns results.json. ``lm`` is used only when ``cfg.model`` is set."""
    from vrh import runs
    from vrh.commands._common import check_out, load
    from vrh.core.heads import check_grid
    from vrh.experiments import stability as st
    from vrh.experiments.heldout import select_eval_samples
    from vrh.infra.console import console, print_result
    from vrh.infra.options import config_record, default_k
    from vrh.tasks import get_task

    check_out(cfg)  # here too: without --model nothing loads, and the study reads the whole detection run first
    k = cfg.k
    if k is None:
        hs = runs.read_head_scores(cfg.heads)
        k = default_k(hs.num_layers, hs.num_heads)
        console.print(f"stability: k = {k} of {hs.num_layers * hs.num_heads} heads (--k default: {DEFAULT_K_RULE})")
    study = st.sample_size_study(cfg.heads, cfg.scorer, k, cfg.n_values, cfg.bootstrap, cfg.seed,
                                 mask_mode=cfg.mask_mode, has_model=cfg.model is not None)
    task = get_task("grounding")
    samples, data_info, conditions, control = [], None, [], None
    if cfg.model is not None and study.needs_model(cfg.accuracy_draws):
        data = cfg.data or runs.read_detection_split(cfg.heads).data_path
        samples, data_info = select_eval_samples(data, task.name, cfg.n_eval, [cfg.heads], disjoint=True)
        lm = load(cfg, lm)
        check_grid(study.per_sample.shape[1:], lm.num_layers, lm.num_heads, f"--heads {cfg.heads}",
                   f"--model {cfg.model}")
        conditions, control = st.stability_conditions(study, cfg.seeds, cfg.accuracy_draws,
                                                      exclude_layers=cfg.exclude_layers, mask_mode=cfg.mask_mode)
    else:
        lm = None
    config = {"command": NAME, "config": config_record(cfg), "scorer": study.scorer.name, "data": data_info,
              "model": lm.describe() if lm is not None else None, "task": task.config()}
    result = st.run_stability(lm, task, samples, study, conditions, control, cfg.out, config=config,
                              accuracy_draws=cfg.accuracy_draws, batch_size=cfg.batch_size,
                              max_new_tokens=cfg.max_new_tokens, overwrite=cfg.overwrite, resume=cfg.resume,
                              description=NAME)
    skip = study.token_choice_skipped
    means = ", ".join(f"n={n}: {m:.2f}" for n, m in zip(result.n_values, result.topk_overlap_mean))
    print_result(f"stability: top-{k} overlap {means}"  # the results: stdout
                 + (f"; token choice skipped ({skip})" if skip else "") + f" -> {cfg.out}")
    tc = result.token_choice
    if tc is not None:
        rnd = "-" if tc.random_accuracy is None else f"{tc.random_accuracy:.3f}"
        print_result(f"stability: accuracy with the top-{k} masked (Fig. 8b): rand1/sum/mean "
                     f"{tc.rand1_accuracy:.3f}, out/sum/mean {tc.out_accuracy:.3f}, {k} random heads {rnd}, "
                     f"unmasked {tc.baseline_accuracy:.3f}")
    if result.accuracy_mean is not None:
        acc = ", ".join(f"n={n}: {a:.3f}" for n, a in zip(result.n_values, result.accuracy_mean) if a is not None)
        print_result(f"stability: accuracy with the top-{k} of each draw masked (mean over draws) {acc}")
    return result.to_json()
