"""The design space of Eq. 1 as one registry entry: every ``QUERY/PHI/OMEGA`` name is a
:class:`vrh.scoring.base.VariantScorer` (the functions themselves live in :mod:`vrh.scoring.functions`)."""

from __future__ import annotations

from vrh.scoring.registry import Option, register_scorer
from vrh.scoring.functions import DEFAULT_M, DEFAULT_ZERO_RULE, OMEGAS, PHIS, QUERY_SETS, ZERO_RULES
from vrh.scoring.base import VARIANT_NAMES, Variant, VariantScorer

OPTIONS = (
    Option("m", int, DEFAULT_M, "OMEGA=freq: how many top heads of each sample count as selected"),
    Option("seed", int, 0, "QUERY=rand1: seed of the random output token drawn per sample"),
    Option("zeros", str, DEFAULT_ZERO_RULE, "OMEGA=freq: heads scoring <= 0 in a sample's top-m: exclude (a "
                                            "sample with fewer than m positive heads votes for fewer) or include "
                                            "(always m, ties by (layer, head))", choices=ZERO_RULES),
)

register_scorer(
    "QUERY/PHI/OMEGA", options=OPTIONS, pattern=r".*/.*", names=VARIANT_NAMES,
    canonical=lambda name: Variant.parse(name).name,
    help=f"design-space variant (Eq. 1): QUERY in {' | '.join(QUERY_SETS)}, PHI in {' | '.join(PHIS)}, "
         f"OMEGA in {' | '.join(OMEGAS)}; the paper's VRH score is out/sum/mean",
)(VariantScorer)
