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

The layout (``docs/architecture.md``): ``core/`` the mechanisms on a model's attention (capture, masking,
heads), ``models/`` adapters, loading and generation, ``data/`` datasets and boxes, ``tasks/``, ``scoring/``
Eq. 1 and the prior methods, ``experiments/`` what runs models to measure something, ``runs/`` the
run-folder contract, ``report/``, ``commands/`` (thin CLI wiring), ``infra/`` options, console, processes.
Import paths from before this layout (``vrh.inference``, ``vrh.masking``, ``vrh.scorers``, ...) keep
working: :data:`MOVED` maps each to where it lives now, and importing the old path gives the same module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
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
            "scoring": "vrh.scoring", "tasks": "vrh.tasks", "scorers": "vrh.scoring"}

# import paths before the core/models/experiments/infra layout -> where each module lives now (a prefix
# covers its submodules: vrh.adapters.qwen_vl -> vrh.models.adapters.qwen_vl)
MOVED = {
    "vrh.attention": "vrh.core.attention", "vrh.capture": "vrh.core.capture",
    "vrh.generation_capture": "vrh.core.generation_capture", "vrh.masking": "vrh.core.masking",
    "vrh.heads": "vrh.core.heads", "vrh.regions": "vrh.core.regions",
    "vrh.adapters": "vrh.models.adapters", "vrh.inference": "vrh.models",
    "vrh.grounding": "vrh.data.boxes", "vrh.scorers": "vrh.scoring",
    "vrh.detection": "vrh.experiments.detection", "vrh.evaluation": "vrh.experiments.evaluation",
    "vrh.runner": "vrh.experiments.runner", "vrh.conditions": "vrh.experiments.conditions",
    "vrh.kcurves": "vrh.experiments.kcurves", "vrh.compare": "vrh.experiments.method_comparison",
    "vrh.stability": "vrh.experiments.stability", "vrh.sparsity": "vrh.experiments.sparsity",
    "vrh.dpo": "vrh.experiments.preference_pairs", "vrh.options": "vrh.infra.options",
    "vrh.console": "vrh.infra.console", "vrh.distributed": "vrh.infra.distributed",
}


def moved_to(name: str) -> str | None:
    """Where the module once imported as ``name`` lives now, or None when it did not move.

    >>> moved_to("vrh.adapters.qwen_vl"), moved_to("vrh.runs")
    ('vrh.models.adapters.qwen_vl', None)
    """
    old = max((o for o in MOVED if name == o or name.startswith(o + ".")), key=len, default=None)
    return None if old is None else MOVED[old] + name[len(old):]


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the module that lives at the new one (the same object, so a patch through
    either name is seen by both)."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if moved_to(fullname) else None

    def create_module(self, spec):
        return importlib.import_module(moved_to(spec.name))

    def exec_module(self, module) -> None:  # the module at the new path is already executed
        pass


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())

__all__ = ["__version__", *_API, *_MODULES]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module 'vrh' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
