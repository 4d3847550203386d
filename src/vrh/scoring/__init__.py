"""Scoring heads: Eq. 1's design space as pure functions on tensors (:mod:`vrh.scoring.functions`), the scorer
registry (:mod:`vrh.scoring.registry`, a leaf) and every built-in method registered into it, one file each --
the design space (:mod:`vrh.scoring.design_space`, the ``QUERY/PHI/OMEGA`` variants) and the prior methods
(Retrieval Heads, QRHead, OCR Heads, VERA, Localization Heads). Importing this package fills the registry; a
new method is one file with a ``@register_scorer`` class plus one import line here.

The pure functions are re-exported here too (``vrh.scoring.omega_mean``), as they were before the scorers
and the functions shared one package.
"""

from vrh.scoring import design_space, localization_heads, ocr_heads, qrhead, retrieval_heads, vera  # noqa: F401
from vrh.scoring.functions import (DEFAULT_M, DEFAULT_VARIANT, DEFAULT_ZERO_RULE, NULL_QUERY_PASS, OMEGAS, PHI_FUNCS,
                                   PHIS, QUERY_KINDS, QUERY_SETS, ZERO_RULES,
                                   Index, aggregate, argmax_in_region, as_index,
                                   check_rows, lcs_ratio, omega_mean,
                                   per_sample_score, query_mean, region_sum,
                                   selection_frequency, take, top_m_mask)
from vrh.scoring.base import (VARIANT_NAMES, AccumulatingScorer, SampleInfo, Scorer, Variant, VariantScorer,
                              parse_variant, select_queries)
from vrh.scoring.registry import Option, describe_scorers, make_scorer, register_scorer, scorer_names

__all__ = ["AccumulatingScorer", "Option", "SampleInfo", "describe_scorers", "make_scorer", "register_scorer",
           "scorer_names", "DEFAULT_M", "DEFAULT_VARIANT", "DEFAULT_ZERO_RULE", "NULL_QUERY_PASS", "OMEGAS",
           "PHI_FUNCS", "PHIS", "QUERY_KINDS", "QUERY_SETS", "VARIANT_NAMES", "ZERO_RULES", "Index", "Scorer",
           "Variant", "VariantScorer", "aggregate", "argmax_in_region", "as_index", "check_rows", "lcs_ratio",
           "omega_mean", "parse_variant", "per_sample_score", "query_mean", "region_sum", "select_queries",
           "selection_frequency", "take", "top_m_mask"]
