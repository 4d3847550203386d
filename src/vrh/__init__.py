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
    samples = vrh.load_dataset("data.jsonl", task="grounding")  # a file may mix tasks: .report.other_tasks
    found = vrh.detect_heads(lm, samples[:100])            # -> Detection (.head_scores, .per_sample)
    top3 = vrh.conditions.top_k(found.head_scores.scores(), 3, method="out/sum/mean")
    res = vrh.run_conditions(lm, vrh.get_task("grounding"), samples[100:], [vrh.conditions.none(), top3])
    with vrh.mask_heads(lm.model, lm.adapter, top3.heads): ...
    with vrh.capture_attention_rows(lm.model, lm.adapter, query_positions) as cap: ...

Names are imported on first use, so ``import vrh`` stays light.

The layout (``docs/architecture.md``): ``core/`` the mechanisms on a model's attention (capture, masking,
heads), ``models/`` adapters, loading and generation, ``data/`` datasets and boxes, ``tasks/``, ``scoring/``
Eq. 1 and the prior methods, ``experiments/`` what runs models to measure something, ``runs/`` the
run-folder contract, ``report/``, ``commands/`` (thin CLI wiring), ``options.py`` the option groups the
command line is made from, ``infra/`` console, processes, extension discovery.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_API = {
    "load_model": "vrh.models.loading",
    "LoadedModel": "vrh.models.loading",
    "generate_answers": "vrh.models.generation",
    "load_dataset": "vrh.data",
    "Sample": "vrh.data",
    "detect_heads": "vrh.experiments.detection",
    "run_detection": "vrh.experiments.detection",
    "Detection": "vrh.experiments.detection",
    "Condition": "vrh.experiments.conditions",
    "run_conditions": "vrh.experiments.runner",
    "evaluate_samples": "vrh.experiments.evaluation",
    "select_eval_samples": "vrh.experiments.heldout",
    "get_task": "vrh.tasks",
    "make_scorer": "vrh.scoring",
    "mask_heads": "vrh.core.masking",
    "capture_attention_rows": "vrh.core.capture",
    "rank_heads": "vrh.core.heads",
    "top_k": "vrh.core.heads",
    "read_head_scores": "vrh.runs",
    "read_results": "vrh.runs",
    "read_samples": "vrh.runs",
    "read_config": "vrh.runs",
    "RunFolder": "vrh.runs",
}
# modules offered as vrh.<name> -> the module
_MODULES = {"conditions": "vrh.experiments.conditions", "runs": "vrh.runs", "kcurves": "vrh.experiments.kcurves",
            "scoring": "vrh.scoring", "tasks": "vrh.tasks"}

__all__ = ["__version__", *_API, *_MODULES]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module 'vrh' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
