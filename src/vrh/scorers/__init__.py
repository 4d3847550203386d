"""Head scorers: the registry (:mod:`vrh.scorers.registry`, a leaf) and every built-in method registered
into it, one file each -- the design space (:mod:`vrh.scorers.design_space`, the ``QUERY/PHI/OMEGA``
variants of :mod:`vrh.scoring`) and the prior methods (Retrieval Heads, QRHead, OCR Heads, VERA,
Localization Heads). Importing this package fills the registry; a new method is one file with a
``@register_scorer`` class plus one import line here.
"""

from vrh.scorers import design_space, localization_heads, ocr_heads, qrhead, retrieval_heads, vera  # noqa: F401
from vrh.scorers.registry import Option, describe_scorers, make_scorer, register_scorer, scorer_names
from vrh.scoring import AccumulatingScorer, SampleInfo

__all__ = ["AccumulatingScorer", "Option", "SampleInfo", "describe_scorers", "make_scorer", "register_scorer",
           "scorer_names"]
