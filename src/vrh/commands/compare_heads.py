"""``vrh compare-heads``: are two head sets the same heads (e.g. the VRHs and the text retrieval heads)? Top-k
overlap and Jaccard with chance levels, rank correlation, and, with ``--model``, the cross-masking matrix.

The run is :func:`vrh.experiments.head_comparison.run_compare_heads`; its options are
:class:`vrh.experiments.settings.CompareHeadsSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.experiments.settings import CompareHeadsSettings as Config

NAME = Config.COMMAND
HELP = "overlap of two head rankings with chance levels, and cross-masking (e.g. VRHs vs text retrieval heads)"


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a compare-heads run folder; returns results.json."""
    from vrh.experiments.head_comparison import run_compare_heads

    return run_compare_heads(cfg, lm)
