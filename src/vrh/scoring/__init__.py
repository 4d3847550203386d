"""Scoring heads: Eq. 1's design space as pure functions on tensors (:mod:`vrh.scoring.functions`), the scorer
registry (:mod:`vrh.scoring.registry`, a leaf) and every built-in method registered into it, one file each --
the design space (:mod:`vrh.scoring.design_space`, the ``QUERY/PHI/OMEGA`` variants) and the prior methods
(Retrieval Heads, QRHead, OCR Heads, VERA, Localization Heads) -- plus how concentrated a score map is
(:mod:`vrh.scoring.sparsity`, numpy only).

A new method is one file with a ``@register_scorer`` class: a registry lookup (``make_scorer``,
``scorer_names``, ...) first imports every module of this package, so no import line names it. This file
imports neither the methods nor torch, so the report can read :mod:`vrh.scoring.sparsity` without them.

The pure functions and the scorer base are re-exported here too (``vrh.scoring.omega_mean``), as they were
before the scorers and the functions shared one package; they are imported on first use (they need torch).
"""

from __future__ import annotations

import importlib
from typing import Any

from vrh.scoring.registry import (Option, compare_baselines, describe_scorers, make_scorer, register_scorer,
                                  scorer_names)

__all__ = ["Option", "compare_baselines", "describe_scorers", "make_scorer", "register_scorer", "scorer_names",
           # from vrh.scoring.base
           "VARIANT_NAMES", "AccumulatingScorer", "SampleInfo", "Scorer", "Variant", "VariantScorer", "parse_variant",
           "select_queries",
           # from vrh.scoring.functions
           "DEFAULT_M", "DEFAULT_VARIANT", "DEFAULT_ZERO_RULE", "NULL_QUERY_PASS", "OMEGAS", "PHI_FUNCS", "PHIS",
           "QUERY_KINDS", "QUERY_SETS", "ZERO_RULES", "Index", "aggregate", "argmax_in_region", "as_index",
           "check_rows", "lcs_ratio", "omega_mean", "per_sample_score", "query_mean", "region_sum",
           "selection_frequency", "take", "top_m_mask"]
_LAZY_FROM = ("vrh.scoring.base", "vrh.scoring.functions")  # where the re-exported names not imported above live
_MISSING = object()


def __getattr__(name: str) -> Any:
    if name in __all__:
        for module in _LAZY_FROM:
            value = getattr(importlib.import_module(module), name, _MISSING)
            if value is not _MISSING:
                globals()[name] = value  # resolved once
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

