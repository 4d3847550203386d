"""``results.json`` of the DPO application (paper App. B): ``dpo-train`` (one training) and ``dpo`` (the
comparison of base / DPO-random / DPO-VRH, Fig. A3). The rules every kind follows are in :mod:`vrh.runs.results`;
the pairs' own kind (``dpo-pairs``) is :class:`vrh.runs.results.DpoPairsResults`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vrh.runs.results import JsonObject, RunResults, optional, results_kind


@results_kind
@dataclass(frozen=True, kw_only=True)
class DpoTrainResults(RunResults):
    """``vrh dpo-train``: where the pairs came from and how many, the base model and the trained checkpoint
    (``model_dir``, loadable with ``--model``), optimizer ``steps`` and ``epochs`` run, the mean
    ``train_loss``, the last TRL log record (``last_log``: loss, rewards/margins, rewards/accuracies, ...),
    the checkpoint a resumed run continued from, the TRL settings, the peak memory (bytes, and what was
    measured: CUDA allocations or the process's peak RSS) and TRL's version."""

    COMMAND: ClassVar[str] = "dpo-train"
    pairs: str | None  # the pairs file
    n_pairs: int | None
    base_model: str | None
    model_dir: str | None
    steps: int | None
    epochs: float | None
    train_loss: float | None
    last_log: JsonObject | None
    resumed_from: str | None  # null: trained from the start
    settings: JsonObject | None
    train_seconds: float | None
    peak_memory_bytes: int | None  # null where it could not be measured
    peak_memory_kind: str | None
    trl_version: str | None
    elapsed_seconds: float | None


@results_kind
@dataclass(frozen=True, kw_only=True)
class DpoResults(RunResults):
    """``vrh dpo``: Fig. A3. ``models`` (``base``, ``dpo-random``, ``dpo-vrh``, in that order), then per
    benchmark (``benchmarks``: name -> ``{"data", "n", "accuracy": {model: x}, "se": {model: x},
    "differences": [{"a", "b", "diff", "se"}]}``) the held-out accuracy of each model and the paired
    differences (a - b over the same samples, with the standard error of the mean per-sample difference),
    ``average`` the same over benchmarks (mean of the benchmarks' values; se from the benchmarks' se's as
    independent), ``pairs`` per negative policy (``n_samples``, ``n_pairs``, ``dropped``), ``training`` per
    policy (steps, loss, seconds), the settings, the sub-run folders and the time per stage."""

    COMMAND: ClassVar[str] = "dpo"
    models: list[str] | None
    benchmarks: dict[str, JsonObject] | None  # name -> {"data", "n", "accuracy", "se", "differences"}
    average: JsonObject | None  # {"n_benchmarks", "accuracy", "se", "differences"}
    pairs: dict[str, JsonObject] | None  # negative policy -> its pair counts
    training: dict[str, JsonObject] | None  # negative policy -> its training's figures
    k: int | None
    settings: JsonObject | None
    overlap_checked: dict[str, int] | None
    subruns: list[str] | None
    stage_seconds: dict[str, float] | None
    elapsed_seconds: float | None
    note: str | None = optional()


__all__ = ["DpoResults", "DpoTrainResults"]
