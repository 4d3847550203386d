"""Does a detection agree with the paper? The overlap of a run's top-20 with the paper's published top-20
(App. D, :mod:`vrh.data.paper_heads`) for the same checkpoint, each figure beside its chance level.

Why at the end of ``vrh detect``: a user who runs one of the paper's checkpoints should see at once whether
their heads are the paper's, without a separate step. The checkpoint is matched by hub id (the study
report's rule) or, for a local snapshot, by its ``config.json`` (model type and decoder grid), or named with
``--paper-model``; when no list applies, one line says so. The benchmark is matched by the ``vrh data convert``
summary beside the dataset file. When the
benchmark is unknown (a JSONL made by hand) every list the paper gives for that model is shown, each named:
the heads of one model agree across benchmarks in the paper, so the figures still say something, but only
the matching benchmark's row is the comparison.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.data.paper_heads import benchmark_of_data, match_paper_model, paper_head_sets, paper_heads, paper_models
from vrh.scoring.head_overlap import TopKOverlap, topk_overlap

PAPER_K = 20  # the length of the paper's lists


def named_paper_model(name: str) -> str:
    """The paper model ``--paper-model name`` names (case-insensitive), or a ValueError listing them."""
    pm = {m.lower(): m for m in paper_models()}.get(str(name).strip().lower())
    if pm is None:
        raise ValueError(f"--paper-model {name}: the paper lists heads of {', '.join(paper_models())} (or 'none')")
    return pm


def paper_agreement(ranking: list[tuple[int, int]], num_layers: int, num_heads: int, model: str | None,
                    data: str | Path | None = None, paper_model: str | None = None) -> dict[str, Any] | None:
    """``{"model", "matched_by", "benchmark" (None: unknown), "rows": {benchmark: TopKOverlap}}`` for a checkpoint
    the paper lists (by hub id, or a local folder's config.json: :func:`vrh.data.paper_heads.match_paper_model`;
    ``paper_model`` names the paper model instead), else None (also when the grid is not the paper model's: then
    it is not that checkpoint)."""
    if paper_model is not None:
        pm, how = named_paper_model(paper_model), "--paper-model"
    else:
        found = match_paper_model(model)
        if found is None:
            return None
        pm, how = found
    bench = benchmark_of_data(data) if data is not None else None
    benches = [b for b, ms in paper_head_sets().items() if pm in ms and (bench is None or b == bench)]
    rows: dict[str, TopKOverlap] = {}
    for b in benches:
        try:
            listed = paper_heads(f"paper:{pm}/{b}", num_layers, num_heads)
        except ValueError:
            return None
        k = min(PAPER_K, len(ranking), len(listed.heads))
        rows[b] = topk_overlap(ranking, listed.heads, k, num_layers * num_heads)
    return {"model": pm, "matched_by": how, "benchmark": bench, "rows": rows} if rows else None


def no_list_line(model: str | None, num_layers: int, num_heads: int, paper_model: str | None = None) -> str:
    """What ``vrh detect`` says when no paper list applies to its checkpoint (one line, stderr)."""
    if paper_model is not None:
        return (f"detect: no paper list compared: --paper-model {paper_model} has another decoder grid than this "
                f"model's {num_layers} x {num_heads} heads")
    return (f"detect: no paper list applies to {model} (the paper lists heads of {', '.join(paper_models())}; matched "
            "by hub id or a local folder's config.json; --paper-model NAME compares with one anyway)")


def print_paper_agreement(agreement: dict[str, Any] | None) -> None:
    """The agreement as a table on stdout (nothing for a checkpoint the paper does not list)."""
    from vrh.infra.console import print_table

    if agreement is None:
        return
    which = (f"on {agreement['benchmark']}" if agreement["benchmark"] else
             "benchmark of --data unknown (no vrh data convert summary): every list of this model")
    table = []
    for b, o in agreement["rows"].items():
        table.append([b, f"{o.intersection} / {o.k}", f"{o.chance.intersection:.2f}", f"{o.jaccard:.2f}",
                      f"{o.chance.jaccard:.3f}", f"{o.p_value:.2g}"])
    print_table(f"detect: top-{PAPER_K} vs the paper's list for {agreement['model']} (App. D; matched by "
                f"{agreement.get('matched_by', 'hub id')}), {which}",
                ["paper list", "shared", "chance", "Jaccard", "chance", "p (>= shared by chance)"], table)
