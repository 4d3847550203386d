"""vrh: find, prove and characterize Visual Retrieval Heads (VRHs) in vision-language models.

Conventions (stated once, used everywhere):

* A head is ``(layer, head)``, both 0-based, ``layer`` indexing the language model's decoder layers and
  ``head`` the query heads of that layer's self-attention (query heads, not KV heads under GQA).
* A score map is a tensor (or nested list in JSON) of shape ``[L, H]``: ``scores[layer, head]``.
* Boxes are ``(x1, y1, x2, y2)`` in pixels of the *original* image unless a name says otherwise.
* Captured attention rows are ``[layer, head, query, key]`` per sample.

The Python API (for notebooks; ``docs/notebook.md`` walks through one session)::

    import vrh
    lm = vrh.load_model("organism")                        # or a checkpoint folder / hub id
    samples = vrh.load_dataset("data.jsonl")
    found = vrh.detect_heads(lm, samples[:100])            # -> Detection (.head_scores, .per_sample)
    top3 = vrh.conditions.top_k(found.head_scores.scores(), 3, method="out/sum/mean")
    res = vrh.run_conditions(lm, vrh.get_task("grounding"), samples[100:], [vrh.conditions.none(), top3])
    with vrh.mask_heads(lm.model, lm.adapter, top3.heads): ...
    with vrh.capture_attention_rows(lm.model, lm.adapter, query_positions) as cap: ...

Names are imported on first use, so ``import vrh`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_API = {
    "load_model": "vrh.inference",
    "LoadedModel": "vrh.inference",
    "generate_answers": "vrh.inference",
    "load_dataset": "vrh.data",
    "Sample": "vrh.data",
    "detect_heads": "vrh.detection",
    "run_detection": "vrh.detection",
    "Detection": "vrh.detection",
    "Condition": "vrh.conditions",
    "run_conditions": "vrh.runner",
    "evaluate_samples": "vrh.evaluation",
    "select_eval_samples": "vrh.evaluation",
    "get_task": "vrh.tasks",
    "make_scorer": "vrh.scorers",
    "mask_heads": "vrh.masking",
    "capture_attention_rows": "vrh.capture",
    "rank_heads": "vrh.heads",
    "top_k": "vrh.heads",
    "read_head_scores": "vrh.runs",
    "read_results": "vrh.runs",
    "read_samples": "vrh.runs",
    "read_config": "vrh.runs",
    "RunFolder": "vrh.runs",
}
_MODULES = ("conditions", "runs", "kcurves", "scoring", "tasks", "scorers")  # submodules offered as vrh.<name>

__all__ = ["__version__", *_API, *_MODULES]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    if name in _MODULES:
        return importlib.import_module(f"vrh.{name}")
    raise AttributeError(f"module 'vrh' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
