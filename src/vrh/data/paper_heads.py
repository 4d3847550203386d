"""The paper's published head lists as named head sets: ``paper:MODEL/BENCHMARK`` (App. D, Tab. A2-A6).

Why a name: a user with one of the paper's checkpoints should be able to mask exactly the heads the paper
reports (``--mask-heads paper:Qwen2.5-VL-7B/RefCOCO``) and to see whether their own detection agrees with it,
without retyping 20 ``LAYER:HEAD`` pairs. The lists are the top-20 VRHs of the four main models on five
grounding benchmarks, ``[layer, head]``, 0-based as printed, shipped in :mod:`vrh.data.paper_numbers`
(``top20_D``) and checked against the paper's text by ``tests/study/test_paper_numbers.py``.

A set is checked twice: against the paper model's own grid (Tab. A7; a list head outside it would be a
transcription error) and against the loaded model's grid when one is given, so a paper list is never
applied to a model of another shape (the message names both shapes). Matching a checkpoint to a paper model
is by hub id (``hub_ids``, case-insensitive), the rule the study report uses, and for a local snapshot by its
``config.json`` (:func:`match_paper_model`: model type and decoder grid).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "paper:"


def _numbers() -> dict[str, Any]:
    from vrh.data.paper_numbers import NUMBERS

    return NUMBERS


@dataclass(frozen=True)
class PaperHeads:
    """One published list: the paper's model and benchmark names, its heads in the paper's rank order."""

    model: str
    benchmark: str
    heads: tuple[tuple[int, int], ...]  # (layer, head), 0-based, rank 1 first
    num_layers: int  # the paper model's grid (Tab. A7)
    num_heads: int

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.model}/{self.benchmark}"


def is_paper_spec(spec: Any) -> bool:
    """Whether a head-set option names a paper list (``paper:...``)."""
    return isinstance(spec, str) and spec.strip().startswith(PREFIX)


def paper_head_sets() -> dict[str, list[str]]:
    """Benchmark -> the paper models it lists heads for (in the paper's order)."""
    return {bench: list(models) for bench, models in _numbers()["top20_D"].items()}


def _names() -> str:
    return ", ".join(f"{PREFIX}{m}/{b}" for b, ms in paper_head_sets().items() for m in ms)


def paper_heads(spec: str, num_layers: int | None = None, num_heads: int | None = None,
                option: str = "--mask-heads") -> PaperHeads:
    """Resolve ``paper:MODEL/BENCHMARK`` (names as the paper prints them, case-insensitive), checked against
    the paper model's grid and, when given, the loaded model's ``num_layers`` x ``num_heads``.

    >>> p = paper_heads("paper:Qwen2.5-VL-7B/RefCOCO", 28, 28)
    >>> p.name, len(p.heads), p.heads[0]
    ('paper:Qwen2.5-VL-7B/RefCOCO', 20, (19, 17))
    >>> paper_heads("paper:Qwen2.5-VL-7B/RefCOCO", 4, 8)
    Traceback (most recent call last):
    ValueError: --mask-heads paper:Qwen2.5-VL-7B/RefCOCO lists heads of Qwen2.5-VL-7B (28 layers x 28 heads); this model has 4 layers x 8 heads
    """
    body = spec.strip()[len(PREFIX):] if is_paper_spec(spec) else ""
    model, _, bench = body.rpartition("/")
    nums = _numbers()
    benches = {b.lower(): b for b in nums["top20_D"]}
    b = benches.get(bench.strip().lower())
    models = {m.lower(): m for m in (nums["top20_D"][b] if b else ())}
    m = models.get(model.strip().lower())
    if b is None or m is None:
        raise ValueError(f"{option} {spec}: no such paper head list; the paper lists (App. D): {_names()}")
    pl, ph = nums["models_A7"][m]["layers"], nums["models_A7"][m]["heads"]
    heads = tuple((int(layer), int(head)) for layer, head in nums["top20_D"][b][m])
    bad = [h for h in heads if not (0 <= h[0] < pl and 0 <= h[1] < ph)]
    if bad:  # a transcription error in paper_numbers, not a user error
        raise AssertionError(f"paper list {m}/{b} has heads outside {m}'s {pl} x {ph} grid: {bad}")
    if num_layers is not None and (num_layers, num_heads) != (pl, ph):
        raise ValueError(f"{option} {spec} lists heads of {m} ({pl} layers x {ph} heads); this model has "
                         f"{num_layers} layers x {num_heads} heads")
    return PaperHeads(m, b, heads, pl, ph)


def paper_model_name(model: str | None) -> str | None:
    """The paper's name of the model whose hub id is ``model`` (case-insensitive), or None.

    >>> paper_model_name("qwen/qwen2.5-vl-7b-instruct"), paper_model_name("organism:organism_a")
    ('Qwen2.5-VL-7B', None)
    """
    if not model:
        return None
    for name, ids in _numbers()["hub_ids"].items():
        if str(model).lower() in (i.lower() for i in ids):
            return name
    return None


# What a checkpoint's config.json says of a paper model, for a local snapshot no hub id names (the usual cluster
# setup): its model type, the language model's type where one family wraps several backbones, and the decoder
# grid of Tab. A7 (a family's sizes differ in it). A fine-tune of the same architecture matches too, which the
# printed line says.
_CONFIG_MATCH = {"Qwen2.5-VL-7B": (("qwen2_5_vl",), None), "Qwen3-VL-8B": (("qwen3_vl",), None),
                 "InternVL3-8B": (("internvl", "internvl_chat"), "qwen2"),
                 "InternVL3.5-8B": (("internvl", "internvl_chat"), "qwen3")}


def paper_model_of_config(config: dict[str, Any]) -> str | None:
    """The paper model a checkpoint's ``config.json`` (as a dict) has the architecture of, or None.

    >>> paper_model_of_config({"model_type": "qwen2_5_vl", "num_hidden_layers": 28, "num_attention_heads": 28})
    'Qwen2.5-VL-7B'
    >>> paper_model_of_config({"model_type": "internvl", "text_config": {"model_type": "qwen2",
    ...                        "num_hidden_layers": 28, "num_attention_heads": 28}})
    'InternVL3-8B'
    >>> paper_model_of_config({"model_type": "qwen2_5_vl", "num_hidden_layers": 36, "num_attention_heads": 16}) is None
    True
    """
    if not isinstance(config, dict):
        return None
    text = next((c for c in (config.get("text_config"), config.get("llm_config")) if isinstance(c, dict)), config)
    grid = (text.get("num_hidden_layers"), text.get("num_attention_heads"))
    for name, (types, text_type) in _CONFIG_MATCH.items():
        a7 = _numbers()["models_A7"][name]
        if (config.get("model_type") in types and (text_type is None or text.get("model_type") == text_type)
                and grid == (a7["layers"], a7["heads"])):
            return name
    return None


def match_paper_model(model: str | None) -> tuple[str, str] | None:
    """``(paper model, how it was matched)`` for a checkpoint: by hub id (:func:`paper_model_name`), else, for a
    local folder, by its ``config.json`` (:func:`paper_model_of_config`); None when neither names one.

    >>> match_paper_model("Qwen/Qwen2.5-VL-7B-Instruct")
    ('Qwen2.5-VL-7B', 'hub id')
    """
    name = paper_model_name(model)
    if name is not None:
        return name, "hub id"
    config = Path(str(model or "")).expanduser() / "config.json"
    if not model or not config.is_file():
        return None
    from vrh.infra.json_text import read_json

    try:
        name = paper_model_of_config(read_json(config, expect=dict))
    except (OSError, ValueError):
        return None
    return (name, "config.json: model type and grid") if name else None  # a fine-tune of it matches too


def paper_models() -> list[str]:
    """The paper models that have head lists, in the paper's order."""
    return list(dict.fromkeys(m for ms in paper_head_sets().values() for m in ms))


def benchmark_of_source(source: str | None, split: str | None) -> str | None:
    """The paper's name of the benchmark that ``vrh data`` source ``source`` (and ``split``) converts, or None.

    >>> benchmark_of_source("refcoco", "val"), benchmark_of_source("refcoco", "testA"), benchmark_of_source("toloka", None)
    ('RefCOCO', None, 'Toloka')
    """
    for name, (src, sp) in _numbers()["benchmark_sources"].items():
        if source == src and (sp is None or split in (None, sp)):
            return name
    return None


def benchmark_of_data(data: str | Path) -> str | None:
    """The paper benchmark a dataset file was converted from, read from the ``vrh data convert`` summary
    beside it (``convert.json``: source and split), or None (a hand-made JSONL, another split)."""
    from vrh.data.sources.convert import SUMMARY

    summary = Path(data).parent / SUMMARY
    if not summary.is_file():
        return None
    try:
        s = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return benchmark_of_source(s.get("source"), s.get("split"))
