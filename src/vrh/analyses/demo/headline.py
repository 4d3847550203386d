"""The demo's headline (``vrh demo``'s top-level ``results.json``): the figures a reader opens the demo for,
each one taken from the demo's own sweeps, none recomputed.

Grounding accuracy unmasked, with the top-k detected heads masked and with k random heads outside them
(mean and std over seeds), at the headline k of the grounding sweep; the same three on VQA (the cross-task
check, from the VQA sweep at the same k); the heads masked, the sparsity of their score map and the random
controls of both sweeps. The keys are :class:`vrh.runs.DemoResults`'s (the same since v0.1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vrh.core.heads import Head
from vrh.runs import DemoKCurve, DemoResults, DemoVqa, SweepResults


def headline(g: SweepResults, v: SweepResults, k: int, seeds: Sequence[int], top_heads: Sequence[Head],
             sparsity: Mapping[str, Any], *, n_detect: int, subruns: Sequence[str], mask_mode: str) -> DemoResults:
    """The demo's results from its grounding sweep ``g`` and VQA sweep ``v`` (both swept ``k``): ``top_heads``
    are the top-k heads masked, ``sparsity`` their score map's :func:`vrh.scoring.sparsity.sparsity_summary`,
    ``subruns`` the sub-run folders. ``elapsed_seconds`` is left to the caller (None here)."""
    i, vi = g.k.index(k), v.k.index(k)
    return DemoResults(
        baseline_accuracy=g.baseline_accuracy,
        k=k,
        num_heads_total=g.num_heads_total,
        vrh_masked_accuracy=g.vrh.accuracy[i],
        random_masked_accuracy_mean=g.random.mean[i],
        random_masked_accuracy_std=g.random.std[i],
        random_seeds=list(seeds),
        vrh_parse_failure_rate=g.vrh.parse_failure_rate[i],
        random_parse_failure_rate_mean=g.random.parse_failure_rate_mean[i],
        top_k_heads=[list(h) for h in top_heads],
        sparsity=sparsity,
        vqa=DemoVqa(baseline_accuracy=v.baseline_accuracy, vrh_masked_accuracy=v.vrh.accuracy[vi],
                    random_masked_accuracy_mean=v.random.mean[vi], random_masked_accuracy_std=v.random.std[vi]),
        k_curve=DemoKCurve(k=g.k, vrh=g.vrh.accuracy, random_mean=g.random.mean),
        n_detect=n_detect,
        n_eval=g.conditions[0]["n"],
        random_control={"grounding": g.random_control, "vqa": v.random_control},
        subruns=list(subruns),
        mask_mode=mask_mode,
        elapsed_seconds=None,
    )
