"""``results.json`` of the characterisation commands: ``compare``, ``transfer``, ``stability`` (the rules every
kind follows, and the other kinds, are in :mod:`vrh.runs.results`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vrh.runs.results import RandomControlReport, RunResults, Block, block, block_map, optional, results_kind


# --- compare ------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class MethodCurve(Block):
    """One method of a comparison: accuracy and parse-failure rate after masking its top-k, per k, and how many
    heads it scores above 0. Early drafts of the schema gave a method as its bare accuracy (a list, or one
    number for one k): that reads as ``accuracy``."""

    accuracy: Any
    parse_failure_rate: Any
    n_positive_heads: Any

    @classmethod
    def coerce(cls, value: Any) -> MethodCurve | None:
        if value is None or isinstance(value, dict):
            return super().coerce(value)
        return cls(accuracy=value, parse_failure_rate=None, n_positive_heads=None)


@dataclass(frozen=True, kw_only=True)
class CompareRandom(Block):
    """A comparison's random control per k (k random heads outside the default method's top-k): ``mean`` and
    ``std`` over seeds, ``accuracy`` per seed, the ``seeds``, the distinct head sets they drew."""

    mean: Any
    std: Any
    accuracy: Any
    seeds: Any
    n_distinct_sets: Any


@results_kind
@dataclass(frozen=True, kw_only=True)
class CompareResults(RunResults):
    """``vrh compare``: every method's top-k masked on the same held-out samples::

        {"k": [5, 10, 20, 50], "methods": {"out/sum/mean": {"accuracy": [...], ...}, "qrhead": {...}},
         "random": {"mean": [...], "std": [...], ...}, "baseline_accuracy": x,
         "similarity": {name: {"spearman_vs_default", "kendall_vs_default", "top20_overlap_vs_default",
         "overlap_k"}}, "best_method_by_k": {"5": [names tied at the lowest accuracy]},
         "default_method": "out/sum/mean", ...}

    then the run's bookkeeping: conditions, the random control, mask mode, split sizes, head count, each
    method's options (``method_options``: every option, defaults included), how many distinct head sets
    were evaluated, capture forwards, the data's identity. The report draws ``default_method`` red and
    ``random`` grey; methods with identical accuracies share one line."""

    COMMAND: ClassVar[str] = "compare"
    k: Any
    methods: dict[str, MethodCurve | None] | None = block_map(MethodCurve)
    random: CompareRandom | None = block(CompareRandom)
    baseline_accuracy: Any
    similarity: Any
    best_method_by_k: Any
    default_method: Any
    conditions: Any
    random_control: RandomControlReport | None = block(RandomControlReport)
    mask_mode: Any
    n_eval: Any
    n_detect: Any
    num_heads_total: Any
    method_options: Any
    n_evaluations: Any
    capture_forwards: Any
    extra_capture_forwards: Any
    data: Any
    elapsed_seconds: Any


# --- transfer -----------------------------------------------------------------------------------------
@results_kind
@dataclass(frozen=True, kw_only=True)
class TransferResults(RunResults):
    """``vrh transfer``: heads detected in ``model_a`` masked at the same indices in ``model_b``::

        {"model_a": "qwen2.5-vl-7b", "model_b": "internvl3-8b", "k": 20,
         "baseline_accuracy": 0.93,            # model_b unmasked
         "own_heads_accuracy": 0.09,           # model_b, its own top-k masked (null without --heads-b)
         "transferred_heads_accuracy": 0.15,   # model_b, model_a's top-k masked
         "random_accuracy_mean": 0.92,         # model_b, k random heads (mean over seeds; std, per seed)
         "spearman": 0.61, "kendall": 0.45, "topk_overlap": 0.55, ...}   # score-map agreement

    A per-k variant is also drawn by the report: ``"k": [1, 5, 20]`` with the ``*_accuracy*`` keys as lists."""

    COMMAND: ClassVar[str] = "transfer"
    model_a: Any
    model_b: Any
    k: Any
    baseline_accuracy: Any
    own_heads_accuracy: Any
    transferred_heads_accuracy: Any
    random_accuracy_mean: Any
    random_accuracy_std: Any
    random_accuracy: Any
    fractions: Any
    spearman: Any
    kendall: Any
    topk_overlap: Any
    similarity: Any
    transferred_heads: Any
    mask_mode: Any
    conditions: Any
    random_control: RandomControlReport | None = block(RandomControlReport)
    n: Any
    elapsed_seconds: Any


# --- stability ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TokenChoice(Block):
    """Fig. 8b (:func:`vrh.experiments.stability.fold_token_choice`): accuracy after masking the top-k of
    ``rand1/sum/mean`` (one random answer token), of ``out/sum/mean`` (all of them) and k random heads (mean,
    std; None when no set could be drawn), unmasked; the overlap of the two top-k sets, the head sets and
    seeds, and every condition's outcome fractions."""

    rand1_accuracy: Any
    out_accuracy: Any
    random_accuracy: Any
    random_accuracy_std: Any
    baseline_accuracy: Any
    rand1_out_topk_overlap: Any
    rand1_heads: Any
    out_heads: Any
    random_seeds: Any
    random_heads: Any
    fractions: Any


@results_kind
@dataclass(frozen=True, kw_only=True)
class StabilityResults(RunResults):
    """``vrh stability``: the sample-size curve (Fig. 8c) from the detection run alone, then what the model
    measured::

        {"scorer": "out/sum/mean", "omega": "mean", "k": 20, "bootstrap": 10, "n_total": 200,
         "n_values": [5, 10, 50, 200], "n_values_dropped": [], "topk_overlap": [[per draw] per n],
         "topk_overlap_mean": [...], "topk_overlap_std": [...], "notes": [...], ...
         "accuracy_mean": [...],               # with --accuracy-draws: after masking the top-k found with n
         "token_choice": {"rand1_accuracy": x, "out_accuracy": x, "random_accuracy": x,
                          "baseline_accuracy": x}}

    With a model: ``n_eval``, ``baseline_accuracy``, ``conditions``; Fig. 8b's ``token_choice`` and its
    ``random_control``; ``accuracy_mean`` / ``accuracy_std`` / ``accuracy_draws``. Without Fig. 8b,
    ``token_choice`` is null and ``token_choice_skipped`` says why (those two keys come last, as every run
    without the comparison has written them)."""

    COMMAND: ClassVar[str] = "stability"
    scorer: Any
    omega: Any
    k: Any
    bootstrap: Any
    n_total: Any
    n_values: Any
    n_values_dropped: Any
    topk_overlap: Any
    topk_overlap_mean: Any
    topk_overlap_std: Any
    notes: Any
    mask_mode: Any
    reference_heads: Any
    reference_matches_head_scores: Any
    n_eval: Any = optional()
    baseline_accuracy: Any = optional()
    conditions: Any = optional()
    token_choice: TokenChoice | None = block(TokenChoice, optional=True)
    random_control: RandomControlReport | None = block(RandomControlReport, optional=True)
    accuracy_mean: Any = optional()
    accuracy_std: Any = optional()
    accuracy_draws: Any = optional()
    token_choice_skipped: Any = optional()
    elapsed_seconds: Any

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.token_choice_skipped is not None and self.token_choice is None:  # null, just before its reason
            rest = {k: out.pop(k) for k in [*out][[*out].index("token_choice_skipped"):]}
            out.update({"token_choice": None, **rest})
        return out


__all__ = ["CompareRandom", "CompareResults", "MethodCurve", "StabilityResults", "TokenChoice", "TransferResults"]
