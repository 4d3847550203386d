"""``results.json`` of the characterisation commands: ``compare``, ``transfer``, ``stability``, ``text-heads``,
``compare-heads`` (the rules every kind follows, and the other kinds, are in :mod:`vrh.runs.results`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vrh.runs.results import (Block, ConditionEntry, Fractions, HeadList, JsonObject, RandomControlReport, RunResults,
                              block, block_map, optional, results_kind)


# --- compare ------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class MethodCurve(Block):
    """One method of a comparison: accuracy and parse-failure rate after masking its top-k, per k, and how many
    heads it scores above 0. Early drafts of the schema gave a method as its bare accuracy (a list, or one
    number for one k): that reads as ``accuracy``, kept as written."""

    accuracy: list[float] | None
    parse_failure_rate: list[float] | None
    n_positive_heads: int | None

    @classmethod
    def coerce(cls, value: Any) -> MethodCurve | None:
        if value is None or isinstance(value, dict):
            return super().coerce(value)
        return cls(accuracy=value, parse_failure_rate=None, n_positive_heads=None)


@dataclass(frozen=True, kw_only=True)
class CompareRandom(Block):
    """A comparison's random control per k (k random heads outside the default method's top-k): ``mean`` and
    ``std`` over seeds, ``accuracy`` per seed, the ``seeds``, the distinct head sets they drew."""

    mean: list[float | None] | None
    std: list[float | None] | None
    accuracy: list[list[float]] | None
    seeds: list[int] | None
    n_distinct_sets: list[int] | None


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
    k: list[int] | None
    methods: dict[str, MethodCurve | None] | None = block_map(MethodCurve)
    random: CompareRandom | None = block(CompareRandom)
    baseline_accuracy: float | None
    similarity: dict[str, dict[str, float | None]] | None  # correlations null where undefined; overlap_k an int
    best_method_by_k: dict[str, list[str]] | None  # str(k) -> methods
    default_method: str | None
    conditions: list[ConditionEntry] | None
    random_control: RandomControlReport | None = block(RandomControlReport)
    mask_mode: str | None
    n_eval: int | None
    n_detect: int | None
    num_heads_total: int | None
    method_options: dict[str, JsonObject | None] | None
    n_evaluations: int | None
    capture_forwards: int | None
    extra_capture_forwards: dict[str, int] | None  # capture pass -> forwards
    data: JsonObject | None
    elapsed_seconds: float | None


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

    A per-k variant is also drawn by the report: ``"k": [1, 5, 20]`` with the ``*_accuracy*`` keys as lists (no
    vrh command writes it; the annotations are what ``vrh transfer`` writes)."""

    COMMAND: ClassVar[str] = "transfer"
    model_a: str | None  # null: the detection run does not record its model
    model_b: str | None
    k: int | None
    baseline_accuracy: float | None
    own_heads_accuracy: float | None  # null without --heads-b
    transferred_heads_accuracy: float | None
    random_accuracy_mean: float | None
    random_accuracy_std: float | None
    random_accuracy: list[float] | None  # per seed
    fractions: dict[str, Fractions] | None  # baseline / transferred / own / random_mean -> outcome fractions
    spearman: float | None  # spearman, kendall, topk_overlap, similarity: null without --heads-b
    kendall: float | None
    topk_overlap: float | None
    similarity: dict[str, float | None] | None
    transferred_heads: HeadList | None
    mask_mode: str | None
    conditions: list[ConditionEntry] | None
    random_control: RandomControlReport | None = block(RandomControlReport)
    n: int | None
    elapsed_seconds: float | None


# --- stability ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TokenChoice(Block):
    """Fig. 8b (:func:`vrh.analyses.stability.analysis.fold_token_choice`): accuracy after masking the top-k of
    ``rand1/sum/mean`` (one random answer token), of ``out/sum/mean`` (all of them) and k random heads (mean,
    std; None when no set could be drawn), unmasked; the overlap of the two top-k sets, the head sets and
    seeds, and every condition's outcome fractions."""

    rand1_accuracy: float | None
    out_accuracy: float | None
    random_accuracy: float | None
    random_accuracy_std: float | None
    baseline_accuracy: float | None
    rand1_out_topk_overlap: float | None
    rand1_heads: HeadList | None
    out_heads: HeadList | None
    random_seeds: list[int] | None
    random_heads: list[HeadList] | None  # per seed
    fractions: dict[str, Fractions | list[Fractions]] | None  # baseline / rand1 / out, and random: one per seed


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
    scorer: str | None
    omega: str | None
    k: int | None
    bootstrap: int | None
    n_total: int | None
    n_values: list[int] | None
    n_values_dropped: list[int] | None
    topk_overlap: list[list[float]] | None  # [per draw] per n
    topk_overlap_mean: list[float] | None
    topk_overlap_std: list[float] | None
    notes: list[str] | None
    mask_mode: str | None
    reference_heads: HeadList | None
    reference_matches_head_scores: bool | None
    n_eval: int | None = optional()
    baseline_accuracy: float | None = optional()
    conditions: list[ConditionEntry] | None = optional()
    token_choice: TokenChoice | None = block(TokenChoice, optional=True)
    random_control: RandomControlReport | None = block(RandomControlReport, optional=True)
    accuracy_mean: list[float] | None = optional()
    accuracy_std: list[float] | None = optional()
    accuracy_draws: int | None = optional()
    token_choice_skipped: str | None = optional()
    elapsed_seconds: float | None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.token_choice_skipped is not None and self.token_choice is None:  # null, just before its reason
            rest = {k: out.pop(k) for k in [*out][[*out].index("token_choice_skipped"):]}
            out.update({"token_choice": None, **rest})
        return out


__all__ = ["CompareRandom", "CompareResults", "MethodCurve", "StabilityResults", "TokenChoice", "TransferResults"]


# --- text retrieval heads and head-set comparison -------------------------------------------------------
@results_kind
@dataclass(frozen=True, kw_only=True)
class TextHeadsResults(RunResults):
    """``vrh text-heads`` (:mod:`vrh.experiments.text_heads`): Retrieval Heads on text only::

        {"model": "...", "scorer": "copy_paste", "k": 3, "n": 90, "n_correct": 11,
         "recall": 0.12,                        # needles recalled exactly, unmasked
         "recall_by_depth": {"0.0": 0.22, ...}, "recall_by_context": {...}, "recall_by_length": {...},
         "text_heads_recall": 0.0,              # the top-k text heads masked
         "cross_heads_recall": 0.01,            # the top-k of --cross-heads masked (null without it)
         "random_recall_mean": 0.04, ...}"""

    COMMAND: ClassVar[str] = "text-heads"
    model: str | None
    scorer: str | None
    k: int | None
    n: int | None
    n_correct: int | None
    recall: float | None
    recall_chance: float | None  # a random item's values copied (items), a guessed code (sentences)
    copied_other_item: float | None  # unmasked answers that are another item's values
    recall_by_depth: dict[str, float] | None
    recall_by_context: dict[str, float] | None
    recall_by_length: dict[str, float] | None
    text_heads_recall: float | None
    cross_heads_recall: float | None  # null without --cross-heads
    cross_heads: str | None
    random_recall: list[float] | None  # per seed
    random_recall_mean: float | None
    random_recall_std: float | None
    conditions: list[ConditionEntry] | None  # each with its "recall"
    top_heads: HeadList | None
    random_warnings: list[str] | None
    elapsed_seconds: float | None


@results_kind
@dataclass(frozen=True, kw_only=True)
class CompareHeadsResults(RunResults):
    """``vrh compare-heads`` (:mod:`vrh.analyses.compare_heads.analysis`): two head sets' overlap with chance levels
    (``overlap``: per k, :meth:`vrh.scoring.head_overlap.TopKOverlap.to_json`; ``lists``: the whole lists,
    :meth:`vrh.scoring.head_overlap.SetOverlap.to_json`, when a side is a list), rank correlations with their
    null spread (null when a side is a list), each side (``name``, ``kind``, ``ranking``, ``map``, ``map_kind``)
    and, with ``--model``, the cross-masking ``matrix`` (``k``, ``seeds``, ``mask_mode``, ``conditions``,
    ``grounding`` and/or ``needle``: ``none``, ``a``, ``b``, ``random``, ``random_mean``, ``random_std``, ``n``)."""

    COMMAND: ClassVar[str] = "compare-heads"
    num_layers: int | None
    num_heads: int | None
    n_heads: int | None
    overlap: list[JsonObject] | None
    lists: JsonObject | None = None  # a side is a list: SetOverlap.to_json, layer_chance, layer_p_value, a/b_from
    rank_correlation: dict[str, float | None] | None
    warnings: list[str] | None
    a: JsonObject | None
    b: JsonObject | None
    matrix: JsonObject | None  # null without --model
    elapsed_seconds: float | None
