"""The published head atlas (``vrh heads atlas``): are the paper's visual retrieval heads its backbones' text
retrieval heads? Answered from published lists alone, no model run.

Three crossings, each a whole-list intersection with its hypergeometric chance and p over the layer x head grid
(:func:`vrh.scoring.head_overlap.set_overlap`):

* **text vs VRH**: every paper list (App. D: top-20 VRHs of 4 VLMs on 5 grounding benchmarks) against every
  published text list on the same language backbone (:mod:`vrh.data.published_heads`): Qwen2.5-VL-7B and
  InternVL3-8B (LM: Qwen2.5-7B, Tab. A7) against QRHead's Qwen2.5-7B-Instruct/NQ; Qwen3-VL-8B and InternVL3.5-8B
  (LM: Qwen3-8B) against QRHead's Qwen3-8B/NQ. The match is by backbone family and size, on one grid: the
  VLMs' LMs were trained further (multimodal training) from checkpoints of that family, while QRHead scored the
  released Qwen2.5-7B-Instruct and Qwen3-8B, so the same (layer, head) is the same position in a related
  network, not the same weights.
* **across benchmarks**: one model's lists on two benchmarks (the paper's claim that VRHs are task-general).
* **across models**: two VLMs on one backbone, the same benchmark or two (its claim that they come with the
  backbone, Fig. 7), from its own tables.

Caveats the numbers carry: QRHead scores a head by its *query tokens'* attention to the gold paragraphs (the
prompt), the paper a VRH by its *answer tokens'* attention to the target's visual tokens (the output); a
QRHead list is a top-16 set, not a ranking, so no top-k or rank correlation is defined; chance assumes every
head is equally likely, while both kinds of heads sit in the middle layers, so each pair also carries a
layer-matched chance (``layer_chance``, ``layer_p_value``: each set's heads random within their own layers,
:func:`vrh.scoring.head_overlap.layer_matched_null`), the stricter null.

The tables: ``atlas.json`` (every pair, every matrix), ``atlas.md``; the figure ``atlas.png`` (one shared-count
matrix per grid), drawn by :mod:`vrh.report.head_atlas`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

Head = tuple[int, int]


@dataclass(frozen=True)
class AtlasList:
    name: str  # paper:MODEL/BENCH or qrhead:MODEL/DATA
    kind: str  # "visual" | "text"
    model: str
    data: str  # benchmark (paper) or the text data (QRHead)
    backbone: str
    heads: tuple[Head, ...]
    grid: tuple[int, int]


def atlas_lists() -> tuple[list[AtlasList], list[dict[str, str]]]:
    """Every list the atlas crosses, and the published lists it leaves out with the reason (no paper model on
    their backbone, or a file that does not fit its model)."""
    from vrh.data.paper_heads import paper_head_sets, paper_heads
    from vrh.data.paper_numbers import NUMBERS
    from vrh.data.published_heads import PUBLISHED

    lists, left_out = [], []
    for bench, models in paper_head_sets().items():
        for m in models:
            p = paper_heads(f"paper:{m}/{bench}")
            lists.append(AtlasList(p.name, "visual", m, bench, NUMBERS["models_A7"][m]["backbone"], p.heads,
                                   (p.num_layers, p.num_heads)))
    backbones = {a.backbone for a in lists}
    for q in PUBLISHED:
        if q.outside_grid:
            left_out.append({"name": q.name, "reason": f"{len(q.outside_grid)} of its {len(q.heads)} heads lie outside "
                                                       f"{q.model}'s {q.num_layers} x {q.num_heads} grid"})
        elif q.backbone not in backbones:
            left_out.append({"name": q.name, "reason": f"no paper list on a {q.backbone} backbone"})
        else:
            lists.append(AtlasList(q.name, "text", q.model, q.data, q.backbone, q.heads, (q.num_layers, q.num_heads)))
    return lists, left_out


def relation(a: AtlasList, b: AtlasList) -> str:
    """What a pair measures: ``text vs VRH``, ``across benchmarks``, ``across models`` (same benchmark) or
    ``across models and benchmarks``."""
    if a.kind != b.kind:
        return "text vs VRH"
    if a.kind == "text":
        return "text vs text"
    if a.model == b.model:
        return "across benchmarks"
    return "across models" if a.data == b.data else "across models and benchmarks"


def build_atlas() -> dict[str, Any]:
    """The atlas as JSON: ``groups`` (one per backbone: its grid, its lists in order, the shared-count and p
    matrices), ``pairs`` (every pair within a group: relation, sizes, shared heads, chance, p), ``summary``
    (per relation and backbone: min / median / max shared and the largest p) and ``left_out``."""
    from statistics import median

    from vrh.scoring.head_overlap import layer_matched_null, set_overlap

    lists, left_out = atlas_lists()
    groups, pairs = [], []
    for backbone in dict.fromkeys(a.backbone for a in lists):
        members = sorted((a for a in lists if a.backbone == backbone), key=lambda a: (a.kind != "text", a.model))
        (L, H), = {a.grid for a in members}  # one backbone, one grid (a mismatch is a transcription error)
        n = L * H
        size = len(members)
        shared = [[0] * size for _ in range(size)]
        pv = [[1.0] * size for _ in range(size)]
        for i, j in combinations(range(size), 2):
            a, b = members[i], members[j]
            o = set_overlap(a.heads, b.heads, n)
            layer_chance, pmf = layer_matched_null(a.heads, b.heads, H)
            shared[i][j] = shared[j][i] = o.intersection
            pv[i][j] = pv[j][i] = o.p_value
            pairs.append({"backbone": backbone, "relation": relation(a, b), "a": a.name, "b": b.name,
                          **{k: v for k, v in o.to_json().items() if k != "shared"},
                          "layer_chance": layer_chance, "layer_p_value": min(1.0, sum(pmf[o.intersection:])),
                          "shared": sorted(list(h) for h in o.shared)})
        for i, a in enumerate(members):
            shared[i][i] = len(a.heads)
            pv[i][i] = None
        groups.append({"backbone": backbone, "num_layers": L, "num_heads": H, "n_heads": n,
                       "lists": [a.name for a in members], "kinds": [a.kind for a in members],
                       "sizes": [len(a.heads) for a in members], "shared": shared, "p_value": pv})
    summary = []
    for backbone in dict.fromkeys(p["backbone"] for p in pairs):
        for rel in ("text vs VRH", "across benchmarks", "across models", "across models and benchmarks"):
            sel = [p for p in pairs if p["backbone"] == backbone and p["relation"] == rel]
            if sel:
                xs = [p["intersection"] for p in sel]
                summary.append({"backbone": backbone, "relation": rel, "pairs": len(sel), "min": min(xs),
                                "median": median(xs), "max": max(xs), "max_p": max(p["p_value"] for p in sel),
                                "chance": sorted({round(p["chance"], 4) for p in sel}),
                                "layer_chance_max": max(p["layer_chance"] for p in sel),
                                "max_layer_p": max(p["layer_p_value"] for p in sel)})
    return {"groups": groups, "pairs": pairs, "summary": summary, "left_out": left_out, "text_only": text_only_pairs()}


def text_only_pairs() -> list[dict[str, Any]]:
    """Published text lists of one model on two datasets, where no paper list shares their backbone (QRHead's
    Llama-3.1-8B-Instruct on NQ and on LongMemEval): how far one method's own lists agree, for scale."""
    from vrh.data.published_heads import PUBLISHED
    from vrh.scoring.head_overlap import layer_matched_null, set_overlap

    fit = [q for q in PUBLISHED if not q.outside_grid]
    out = []
    for a, b in combinations(fit, 2):
        if a.model == b.model:
            o = set_overlap(a.heads, b.heads, a.num_layers * a.num_heads)
            chance, pmf = layer_matched_null(a.heads, b.heads, a.num_heads)
            out.append({"a": a.name, "b": b.name, **{k: v for k, v in o.to_json().items() if k != "shared"},
                        "layer_chance": chance, "layer_p_value": min(1.0, sum(pmf[o.intersection:])),
                        "shared": sorted(list(h) for h in o.shared)})
    return out


def text_vs_vrh(atlas: dict[str, Any]) -> list[dict[str, Any]]:
    """The atlas's first question in one table: each paper list against its backbone's text list."""
    return [p for p in atlas["pairs"] if p["relation"] == "text vs VRH"]
