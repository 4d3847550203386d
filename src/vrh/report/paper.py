"""The paper's reported numbers, shipped as data (:mod:`vrh.data.paper_numbers`, transcribed
from the paper's tables and checked against its text by ``tests/study/test_paper_numbers.py``), and the
rules that match a study's models and benchmarks to the paper's.

Keys: ``models_A7`` (layers, heads, backbone of the four main models), ``kcurves_A1`` (Tab. A1: per
grounding benchmark and model, random and VRH accuracy at k = 0, 1, 3, 5, 10, 20), ``crosstask_T3``
(Tab. 3), ``ablation_A9`` (Tab. A9: the design-space flips per k), ``heldout_A10``, ``all_models_A12``
(Tab. A12, Fig. 6), ``transfer_A13`` (Tab. A13), ``top20_D`` (App. D's lists, ``[layer, head]``, 0-based as
printed), ``hub_ids`` (the hub ids vrh takes for each paper model: the paper names models, not ids) and
``benchmark_sources`` (the ``vrh data`` source that is each paper benchmark). Accuracies are percent.

A study model matches a paper model when its ``model`` is one of that model's hub ids (case-insensitive);
a study benchmark matches a paper benchmark when it is converted from that benchmark's source (and split).
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _numbers() -> dict[str, Any]:
    from vrh.data.paper_numbers import NUMBERS

    return NUMBERS


def paper_numbers() -> dict[str, Any]:
    """A copy of the paper's numbers (callers may change theirs)."""
    return copy.deepcopy(_numbers())


def paper_model(model: str | None) -> str | None:
    """The paper's name of the model whose hub id is ``model``, or None.

    >>> paper_model("qwen/qwen2.5-vl-7b-instruct"), paper_model("organism:organism_a")
    ('Qwen2.5-VL-7B', None)
    """
    from vrh.data.paper_heads import paper_model_name

    return paper_model_name(model)


def paper_benchmark(dataset: dict[str, Any] | None) -> str | None:
    """The paper's name of the benchmark a study dataset (its settings as the study's config records them)
    is converted from, or None (a JSONL or the synthetic world is no paper benchmark).

    >>> paper_benchmark({"kind": "source", "source": "refcoco", "split": "val"})
    'RefCOCO'
    """
    from vrh.data.paper_heads import benchmark_of_source

    if not dataset or dataset.get("kind") != "source":
        return None
    return benchmark_of_source(dataset.get("source"), dataset.get("split"))
