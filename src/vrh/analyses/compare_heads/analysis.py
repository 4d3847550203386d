"""``vrh compare-heads``: are two head sets the same heads? Overlap with chance levels, and cross-masking.

The question behind it (``vrh text-heads``): are the heads that retrieve from the image (VRHs, a detection
run or a paper list) the heads that retrieve from text (a text-heads run)? Two answers, both with their
controls:

* **Overlap** of the two rankings, no model needed: top-k intersection, fraction and Jaccard at each k of
  ``--overlap-ks`` (5, 10, 20), each beside its chance level for that many heads and the p-value of sharing
  at least as many by chance (:mod:`vrh.scoring.head_overlap`); Spearman and Kendall tau-b over all heads
  when both sides are score maps, with their null spread.
* **Cross-masking** (with ``--model``): the same masking conditions -- nothing, the top-k of A, the top-k of
  B, and k random heads drawn outside both (over ``--seeds``) -- judged on grounding (``--data``, held out
  from both runs, vrh's runner) and on the needle tests of the text-heads run among A and B (its own prompts,
  regenerated from its config). If A and B are one mechanism, each set hurts both tasks; if not, each hurts
  its own task and the other's no more than random heads do.

A side is a run folder (``head_scores.json``; ``text-heads`` runs are the ``text`` kind, detection runs
``visual``), a named set (``paper:MODEL/BENCHMARK``: ``visual``, the paper's top-20 in rank order;
``qrhead:MODEL/DATA``: ``text``, QRHead's published top-16, a set without a ranking; :mod:`vrh.data.published_heads`)
or a head list in rank order (``list``).

Lists of different lengths, and lists without a ranking, are compared as wholes (``lists``: the intersection, its
hypergeometric chance and p over the grid, the shared heads; a score map enters as its top-m, m the list's
length); the top-k figures need a ranking on both sides. A top-k never cuts through tied scores (24 of 32 heads
scored exactly 0 in a small ``text-heads`` run): k is capped at the heads above the tie, with a warning, since
inside a tie the "top" heads would be picked by (layer, head) order. The run folder: ``config.json``, ``samples.jsonl`` (the matrix's records: grounding samples and
needle tests, each tagged with its condition, labels ``none``, ``top{k}:A``, ``top{k}:B``,
``random{k}:s{seed}``), ``compare_heads.md``, ``compare_heads.png`` and, last, ``results.json``.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from vrh.analyses.compare_heads.settings import CompareHeadsSettings
from vrh.runs import safe_paths
from vrh.scoring.head_overlap import untied_k

TABLE_NAME, PLOT_NAME = "compare_heads.md", "compare_heads.png"


def head_side(spec: str, scorer: str | None, option: str) -> dict[str, Any]:
    """One side resolved: ``name``, ``kind`` (text / visual / list), ``ranking``, ``scores`` (``[L][H]`` or
    None), ``grid`` ((L, H) or None) and ``text_config`` (a text-heads run's recorded config, else None)."""
    from pathlib import Path

    from vrh import runs
    from vrh.core.heads import DuplicateHead, parse_head_list
    from vrh.data.published_heads import is_named_spec, named_heads

    if is_named_spec(spec):
        p = named_heads(spec, option=option)
        scores = [list(row) for row in p.scores] if p.scores is not None else None  # a published score map
        return {"name": p.name, "kind": p.kind, "ranking": [list(h) for h in p.heads], "scores": scores,
                "grid": (p.num_layers, p.num_heads), "text_config": None, "path": None, "ranked": p.ranked}
    if Path(spec).is_dir():
        hs = runs.read_head_scores(spec)
        cfg = runs.read_config(spec)
        text = cfg.get("command") == "text-heads"
        name = scorer if scorer and scorer in hs.variants else hs.scorer
        return {"name": spec, "kind": "text" if text else "visual", "ranking": [list(h) for h in hs.ranking(name)],
                "scores": hs.score_map(name), "grid": (hs.num_layers, hs.num_heads),
                "text_config": ({**cfg["config"], "contexts": cfg["data"]["contexts"]} if text else None),
                "path": spec, "ranked": True, "model": cfg.get("model") if isinstance(cfg.get("model"), dict) else None}
    try:
        heads = parse_head_list(spec)
    except DuplicateHead:
        raise
    except ValueError:
        raise FileNotFoundError(f"{option} {spec}: no such run folder (and not a head list LAYER:HEAD,... nor "
                                "a named set paper:MODEL/BENCHMARK, qrhead:MODEL/DATA: vrh heads list)") from None
    return {"name": spec, "kind": "list", "ranking": [list(h) for h in heads], "scores": None, "grid": None,
            "text_config": None, "path": None, "ranked": True}


def model_notes(a: dict[str, Any], b: dict[str, Any], here: dict[str, Any] | None) -> list[str]:
    """One line when the two run folders' rankings come from different models, and one per side ranked on another
    model than ``--model``'s (``here``; None without one): comparing is legitimate, masking such heads is a
    transfer, which ``vrh transfer`` measures with its controls (issue 46 item 3). Sides without a model record
    (head lists, named sets) say nothing."""
    from vrh.experiments.heads_origin import model_line, model_name, same_model

    ma, mb = a.get("model"), b.get("model")
    out = []
    if ma and mb and not same_model(ma, mb):
        out.append(f"--heads was ranked on {model_name(ma)}, --heads-b on {model_name(mb)}: heads of two models "
                   "compared (masking one model's heads in another is what vrh transfer measures)")
    for side in (a, b):
        line = model_line(side["model"], here, f"{side['name']}'s heads") if here and side.get("model") else None
        if line:
            out.append(line)
    return out


def _grid(a: dict[str, Any], b: dict[str, Any], lm: Any) -> tuple[int, int]:
    grids = {g for g in (a["grid"], b["grid"], (lm.num_layers, lm.num_heads) if lm is not None else None) if g}
    if not grids:
        raise ValueError("two head lists carry no head grid: pass --model (its layers x heads) or a run folder")
    if len(grids) > 1:
        raise ValueError(f"the head sets come from different grids {sorted(grids)} (layers, heads): heads compare "
                         "only within one layer x head grid")
    (L, H), = grids
    for s in (a, b):
        bad = [h for h in s["ranking"] if not (0 <= h[0] < L and 0 <= h[1] < H)]
        if bad:
            raise ValueError(f"{s['name']}: heads {bad[:3]} are outside the {L} x {H} grid")
    return L, H


def _map(side: dict[str, Any], L: int, H: int) -> tuple[list[list[float]], str]:
    if side["scores"] is not None:
        return side["scores"], "score"
    m = [[0.0] * H for _ in range(L)]
    n = len(side["ranking"])
    ranked = side.get("ranked", True)  # a set without a ranking is drawn as membership, not as a fake rank
    for r, (l, h) in enumerate(side["ranking"]):
        m[l][h] = 1 - r / n if ranked else 1.0
    return m, "rank" if ranked else "member"


def _sorted_scores(side: dict[str, Any]) -> list[float] | None:
    """A score side's scores in its ranking's order (best first), or None for a list."""
    if side["scores"] is None:
        return None
    return [float(side["scores"][l][h]) for l, h in side["ranking"]]


def _tie_note(side: dict[str, Any], values: list[float], k: int, capped: int) -> str:
    v = values[capped] if capped < len(values) else values[-1]
    tied = sum(1 for x in values if x == v)
    return (f"{side['name']}: {tied} of its {len(values)} heads tie at score {v:g}, so a top-{k} would pick among "
            f"them by (layer, head) order; the top-k overlaps are capped at k = {capped}, the heads scored above the "
            "tie" if capped else
            f"{side['name']}: its top-{k} cuts through {tied} heads tied at score {v:g}: no top-k up to {k} is defined")


def masked_cut_note(side: dict[str, Any], k: int) -> str | None:
    """A warning when the cross-masking's top-``k`` of a score side cuts through tied scores (some of the masked
    heads are then picked by (layer, head) order), else None.

    >>> masked_cut_note({"name": "B", "scores": [[2.0, 0.0], [0.0, 0.0]], "ranking": [[0, 0], [0, 1], [1, 0], [1, 1]]}, 2)
    "--k 2: B's top-2 cuts through 3 heads tied at score 0: 1 of the masked heads are picked by (layer, head) order"
    """
    vals = _sorted_scores(side)
    if vals is None or untied_k(vals, k) == k:
        return None
    v = vals[k - 1]
    return (f"--k {k}: {side['name']}'s top-{k} cuts through {sum(1 for x in vals if x == v)} heads tied at score {v:g}: "
            f"{k - untied_k(vals, k)} of the masked heads are picked by (layer, head) order")


def topk_ks(a: dict[str, Any], b: dict[str, Any], n: int, ks: tuple[int, ...]) -> tuple[list[int], list[str]]:
    """The ks of the top-k figures, each capped by the shorter ranking and by ties (:func:`untied_k`), and the
    warnings for every cap a tie forced. Empty when a side is a set without a ranking."""
    if not (a.get("ranked", True) and b.get("ranked", True)):
        return [], []
    cap = min(len(a["ranking"]), len(b["ranking"]), n)
    va, vb = _sorted_scores(a), _sorted_scores(b)
    kk, notes = set(), {}
    for k in sorted({min(k, cap) for k in ks if k >= 1}):
        got = min(untied_k(va, k), untied_k(vb, k))
        for side, vals in ((a, va), (b, vb)):
            if vals is not None and untied_k(vals, k) < k and any(vals) and side["name"] not in notes:
                notes[side["name"]] = _tie_note(side, vals, k, untied_k(vals, k))
        if got:
            kk.add(got)
    return sorted(kk), list(notes.values())


def whole_lists(a: dict[str, Any], b: dict[str, Any], L: int, H: int) -> dict[str, Any] | None:
    """The whole-list overlap when a side is a list (None when both are score maps: the top-k figures say it):
    a list as it is, a score map as its top-m, m the other list's length (capped by ties). Beside the uniform
    chance, the layer-matched one (each set's heads random within their own layers: heads of one kind often
    share a few middle layers, and then share more by chance)."""
    from vrh.scoring.head_overlap import layer_matched_null, set_overlap

    n = L * H
    if a["scores"] is not None and b["scores"] is not None:
        return None

    def members(side, other):
        if side["scores"] is None:
            return side["ranking"], "whole list"
        m = untied_k(_sorted_scores(side), min(len(other["ranking"]), n))
        return side["ranking"][:m], f"top {m} of its scores"

    (sa, fa), (sb, fb) = members(a, b), members(b, a)
    o = set_overlap([tuple(h) for h in sa], [tuple(h) for h in sb], n)
    layer_chance, pmf = layer_matched_null([tuple(h) for h in sa], [tuple(h) for h in sb], H)
    return {**o.to_json(), "layer_chance": layer_chance, "layer_p_value": min(1.0, sum(pmf[o.intersection:])),
            "a_from": fa, "b_from": fb}


def overlap_figures(a: dict[str, Any], b: dict[str, Any], L: int, H: int, ks: tuple[int, ...]) -> dict[str, Any]:
    """``overlap`` (one entry per distinct k, capped by the shorter ranking and by ties; none without a ranking
    on both sides), ``lists`` (:func:`whole_lists`), ``rank_correlation`` and ``tie_warnings``."""
    import torch

    from vrh.experiments.method_comparison import finite_or_none, kendall, spearman
    from vrh.scoring.head_overlap import kendall_null_sd, spearman_null_sd, topk_overlap

    n = L * H
    kk, tie_warnings = topk_ks(a, b, n, ks)
    overlap = [topk_overlap([tuple(h) for h in a["ranking"]], [tuple(h) for h in b["ranking"]], k, n).to_json()
               for k in kk]
    rc = None
    if a["scores"] is not None and b["scores"] is not None:
        ta, tb = torch.tensor(a["scores"]), torch.tensor(b["scores"])
        rc = {"spearman": finite_or_none(spearman(ta, tb)), "kendall": finite_or_none(kendall(ta, tb)),
              "spearman_null_sd": spearman_null_sd(n), "kendall_null_sd": kendall_null_sd(n)}
    return {"overlap": overlap, "lists": whole_lists(a, b, L, H), "rank_correlation": rc, "tie_warnings": tie_warnings}


def _conditions(a: dict[str, Any], b: dict[str, Any], k: int, cfg: CompareHeadsSettings, L: int, H: int):
    from vrh.experiments import conditions as cond

    conds = [cond.none(cfg.mask_mode)]
    for side, tag in ((a, "A"), (b, "B")):
        conds.append(cond.explicit([tuple(h) for h in side["ranking"][:k]], mask_mode=cfg.mask_mode,
                                   label=f"top{k}:{tag}"))
    outside = sorted({h for c in conds for h in c.heads})
    rc = cond.random_controls(L, H, k, cfg.seeds, outside=outside, exclude_layers=cfg.exclude_layers,
                              mask_mode=cfg.mask_mode, label="random{k}:s{seed}")
    return conds + rc.conditions, rc


def _column(values: dict[str, float], conds: list, n: int) -> dict[str, Any]:
    import numpy as np

    rnd = [values[c.label] for c in conds if c.kind == "random"]
    return {"none": values[conds[0].label], "a": values[conds[1].label], "b": values[conds[2].label],
            "random": rnd, "random_mean": float(np.mean(rnd)) if rnd else None,
            "random_std": float(np.std(rnd)) if rnd else None, "n": n}


def run_compare_heads(cfg: CompareHeadsSettings, lm: Any = None) -> dict[str, Any]:
    """``vrh compare-heads``: the run folder at ``cfg.out`` (module docstring); returns results.json."""
    from vrh import runs
    from vrh.infra.console import print_result, warn
    from vrh.options import config_record, default_k
    from vrh.report.head_comparison import figure, markdown
    from vrh.runs.results_characterize import CompareHeadsResults

    t0 = time.time()
    a, b = head_side(cfg.heads, cfg.scorer, "--heads"), head_side(cfg.heads_b, cfg.scorer, "--heads-b")
    if cfg.data and not cfg.model:
        raise ValueError("--data is the cross-masking matrix's grounding data: it needs --model")
    if cfg.model:
        from vrh.experiments.setup import fit_random_pool, load

        lm = load(cfg, lm)
        cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool (recorded in config.json)
    L, H = _grid(a, b, lm if cfg.model else None)
    notes = [f"{s['name']}: every head scores 0 (e.g. a text-heads run that recalled no needle), so its ranking is "
             "the (layer, head) order and the figures with it measure nothing" for s in (a, b)
             if s["scores"] is not None and not any(v for row in s["scores"] for v in row)]
    notes += model_notes(a, b, lm.describe() if cfg.model else None)
    figures = overlap_figures(a, b, L, H, cfg.overlap_ks)
    notes += figures.pop("tie_warnings")
    for n in notes:
        warn(n)
    result: dict[str, Any] = {"num_layers": L, "num_heads": H, "n_heads": L * H, **figures, "warnings": notes}
    for key, side in (("a", a), ("b", b)):
        m, kind = _map(side, L, H)
        result[key] = {"name": side["name"], "kind": side["kind"], "ranking": side["ranking"], "map": m,
                       "map_kind": kind}
    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
    record = {"command": cfg.COMMAND, "config": config_record(cfg), "a": {k: a[k] for k in ("name", "kind", "path")},
              "b": {k: b[k] for k in ("name", "kind", "path")}}
    if cfg.model:
        record["model"] = lm.describe()
    run.write_config(record)
    with run:
        result["matrix"] = _matrix(cfg, lm, a, b, L, H, run, warn, default_k) if cfg.model else None
        result["elapsed_seconds"] = time.time() - t0
        result = CompareHeadsResults(**result).to_json()  # the kind's keys, in its order
        safe_paths.write_atomic(run.path, run.path / TABLE_NAME, markdown(result))  # never through a link
        safe_paths.write_atomic(run.path, run.path / PLOT_NAME, figure(result))
        run.write_results(result)
    print(markdown(result))  # the table on stdout
    top, whole = (result["overlap"][-1] if result["overlap"] else None), result.get("lists")
    if top:
        print_result(f"compare-heads: top-{top['k']} shared {top['intersection']} (chance "
                     f"{top['chance']['intersection']:.2f}, p {top['p_value']:.2g}) -> {cfg.out}")
    elif whole:
        print_result(f"compare-heads: {whole['intersection']} of {whole['size_a']} and {whole['size_b']} heads shared "
                     f"(chance {whole['chance']:.2f}, p {whole['p_value']:.2g}) -> {cfg.out}")
    return result


def _matrix(cfg: CompareHeadsSettings, lm: Any, a: dict, b: dict, L: int, H: int, run: Any, warn, default_k
            ) -> dict[str, Any] | None:
    from vrh.experiments import conditions as cond
    from vrh.experiments.heldout import select_eval_samples
    from vrh.experiments.runner import run_conditions
    from vrh.experiments.text_heads import evaluate_needles, prepare_tests
    from vrh.tasks import task_from_settings

    sets = [s for s in (a, b) if not s.get("ranked", True)]  # a published top-16: masked whole, never a part
    k = cfg.k if cfg.k is not None else len(sets[0]["ranking"]) if sets else default_k(L, H)
    for s in sets:
        if k != len(s["ranking"]):
            raise ValueError(f"--k {k}: {s['name']} is a set of {len(s['ranking'])} heads, not a ranking, so its "
                             f"cross-masking masks all of them: use --k {len(s['ranking'])} (or omit --k)")
    cond.check_k(k, L, H)
    for note in filter(None, (masked_cut_note(s, k) for s in (a, b))):
        warn(note)
    if k > min(len(a["ranking"]), len(b["ranking"])):
        raise ValueError(f"--k {k}: a head set has only {min(len(a['ranking']), len(b['ranking']))} heads")
    conds, rc = _conditions(a, b, k, cfg, L, H)
    for w in rc.warnings:
        warn(w)
    matrix: dict[str, Any] = {"k": k, "seeds": list(cfg.seeds), "mask_mode": cfg.mask_mode,
                              "conditions": [c.to_json() for c in conds]}
    if cfg.data:
        task = task_from_settings(cfg.task, cfg.task_settings())
        dirs = [s["path"] for s in (a, b) if s["path"] and s["kind"] != "text"]  # a text run scored no image
        samples, _ = select_eval_samples(cfg.data, cfg.task, cfg.n, dirs, cfg.disjoint)
        res = run_conditions(lm, task, samples, conds, run, cfg, description="compare-heads: grounding")
        matrix["grounding"] = _column({c.label: res.summary(c.label)["accuracy"] for c in conds}, conds,
                                      len(samples))
    text = next((s for s in (a, b) if s["text_config"]), None)
    if text is not None:
        tc = SimpleNamespace(**text["text_config"])
        prompts, tests, _ = prepare_tests(lm, tc)
        done = {(r.get("condition"), r["id"]): r for r in run.finished_samples()}
        recall = evaluate_needles(lm, prompts, tests, conds, run, tc.max_new_tokens, done,
                                  description="compare-heads: needles")
        matrix["needle"] = _column(recall, conds, len(prompts))
    if "grounding" not in matrix and "needle" not in matrix:
        warn("--model without --data and without a text-heads run: no cross-masking column to measure")
        return None
    return matrix
