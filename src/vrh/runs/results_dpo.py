"""``results.json`` of the DPO application (paper App. B): ``dpo-train`` (one training) and ``dpo`` (the
comparison of base / DPO-random / DPO-VRH, Fig. A3). The rules every kind follows are in :mod:`vrh.runs.results`;
the pairs' own kind (``dpo-pairs``) is :class:`vrh.runs.results.DpoPairsResults`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vrh.runs.results import RunResults, optional, results_kind


@results_kind
@dataclass(frozen=True, kw_only=True)
class DpoTrainResults(RunResults):
    """``vrh dpo-train``: where the pairs came from and how many, the base model and the trained checkpoint
    (``model_dir``, loadable with ``--model``), optimizer ``steps`` and ``epochs`` run, the mean
    ``train_loss``, the last TRL log record (``last_log``: loss, rewards/margins, rewards/accuracies, ...),
    the checkpoint a resumed run continued from, the TRL settings, the peak memory (bytes, and what was
    measured: CUDA allocations or the process's peak RSS) and TRL's version."""

    COMMAND: ClassVar[str] = "dpo-train"
    pairs: Any
    n_pairs: Any
    base_model: Any
    model_dir: Any
    steps: Any
    epochs: Any
    train_loss: Any
    last_log: Any
    resumed_from: Any
    settings: Any
    train_seconds: Any
    peak_memory_bytes: Any
    peak_memory_kind: Any
    trl_version: Any
    elapsed_seconds: Any


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
    models: Any
    benchmarks: Any
    average: Any
    pairs: Any
    training: Any
    k: Any
    settings: Any
    overlap_checked: Any
    subruns: Any
    stage_seconds: Any
    elapsed_seconds: Any
    note: Any = optional()


__all__ = ["DpoResults", "DpoTrainResults"]
