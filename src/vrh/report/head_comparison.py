"""``vrh compare-heads``' figure and table, from its ``results.json`` only (torch-free, as all of the report).

The figure puts the two head maps side by side (same layer x head axes; a head list is drawn as its rank,
``1 - (rank - 1) / len``, so the first head is darkest), each with the other's top-k ringed, and, when the
run measured it, the cross-masking matrix: rows the masked head sets (none, top-k of A, top-k of B, k random
heads as mean +- std over seeds), columns the tasks (grounding accuracy, needle recall). The markdown table
gives every overlap figure beside its chance level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from vrh.report.plots import heatmap_range
from vrh.report.style import TITLE_SIZE, new_figure, to_png, wrap_title

COLUMNS = {"grounding": "grounding accuracy", "needle": "needle recall"}


def _matrix_rows(matrix: Mapping[str, Any]) -> list[tuple[str, dict[str, str]]]:
    rows = []
    for label, name in (("none", "nothing masked"), ("a", f"top-{matrix['k']} of A"), ("b", f"top-{matrix['k']} of B")):
        rows.append((name, {col: "-" if (v := matrix[col].get(label)) is None else f"{100 * v:.1f}%"
                            for col in COLUMNS if col in matrix}))
    rnd = {}
    for col in COLUMNS:
        if col in matrix:
            m, s = matrix[col].get("random_mean"), matrix[col].get("random_std")
            rnd[col] = "-" if m is None else f"{100 * m:.1f}% +- {100 * s:.1f}"
    rows.append((f"{matrix['k']} random heads (seeds {', '.join(map(str, matrix['seeds']))})", rnd))
    return rows


def markdown(res: Mapping[str, Any]) -> str:
    """The comparison as markdown: the two sets, the top-k overlaps with chance, rank correlations with their
    null spread, and the cross-masking matrix when measured."""
    a, b = res["a"], res["b"]
    lines = [f"# Head sets compared: A = {a['name']} ({a['kind']}), B = {b['name']} ({b['kind']})", "",
             f"{res['n_heads']} heads ({res['num_layers']} layers x {res['num_heads']} heads). Chance: two independent "
             "random top-k sets of as many heads (hypergeometric); p: the chance of sharing at least as many.", "",
             *[f"**Warning:** {w}.\n" for w in res.get("warnings", [])],
             "| k | shared | chance | fraction | chance | Jaccard | chance | p | shared heads |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for o in res["overlap"]:
        c = o["chance"]
        lines.append(f"| {o['k']} | {o['intersection']} | {c['intersection']:.2f} | {o['fraction']:.2f} | "
                     f"{c['fraction']:.2f} | {o['jaccard']:.3f} | {c['jaccard']:.3f} | {o['p_value']:.3g} | "
                     + " ".join(f"{l}:{h}" for l, h in o["shared"]) + " |")
    if not res["overlap"]:
        lines.append("| - | no top-k: " + ("a side is a set without a ranking (a published top-16)" if res.get("lists")
                                         else "no top-k avoids tied scores") + " | | | | | | | |")
    w = res.get("lists")
    if w:
        lines += ["", f"Whole lists: A ({w['a_from']}, {w['size_a']} heads) and B ({w['b_from']}, {w['size_b']} heads) "
                  f"share **{w['intersection']}** (chance {w['chance']:.2f}, hypergeometric p {w['p_value']:.2g} over "
                  f"the {w['n']} heads; Jaccard {w['jaccard']:.3f}"
                  + (f"; layer-matched chance {w['layer_chance']:.2f}, p {w['layer_p_value']:.2g}" if "layer_chance" in w
                     else "") + "): " + (" ".join(f"{l}:{h}" for l, h in w["shared"]) or "none") + "."]
    rc = res.get("rank_correlation")
    lines.append("")
    if rc:
        lines.append(f"Rank correlation over all {res['n_heads']} heads: Spearman {_f(rc['spearman'])} (chance 0, null "
                     f"sd {rc['spearman_null_sd']:.3f}), Kendall tau-b {_f(rc['kendall'])} (chance 0, null sd "
                     f"{rc['kendall_null_sd']:.3f}).")
    else:
        lines.append("Rank correlation: not defined (a head list has no score for every head).")
    m = res.get("matrix")
    if m:
        cols = [c for c in COLUMNS if c in m]
        lines += ["", f"Cross-masking (mask mode {m['mask_mode']}; random heads drawn outside both top-{m['k']} sets):",
                  "", "| masked | " + " | ".join(COLUMNS[c] for c in cols) + " |",
                  "| --- | " + " | ".join("---" for _ in cols) + " |"]
        for name, vals in _matrix_rows(m):
            lines.append(f"| {name} | " + " | ".join(vals.get(c, "-") for c in cols) + " |")
        lines.append("")
        lines.append("n: " + ", ".join(f"{COLUMNS[c]} {m[c]['n']}" for c in cols) + ".")
    return "\n".join(lines) + "\n"


def _f(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def figure(res: Mapping[str, Any]) -> bytes:
    """Both maps, each with the other's top-k ringed, and the cross-masking matrix when measured (PNG)."""
    m = res.get("matrix")
    k = res["overlap"][0]["k"] if res["overlap"] else 0
    whole = not k and bool(res.get("lists"))  # no top-k (a set without a ranking): ring the other whole list
    panels = 3 if m else 2
    fig = new_figure(4.2 * panels, 4.2)
    for i, side in enumerate(("a", "b")):
        s, other = res[side], res["b" if side == "a" else "a"]
        arr = np.asarray(s["map"], dtype=float)  # (L, H)
        ax = fig.add_subplot(1, panels, i + 1)
        lo, hi = heatmap_range(arr) if s["map_kind"] not in ("rank", "member") else (None, None)  # scores from 0
        im = ax.imshow(arr, cmap="Reds" if s["kind"] != "text" else "Blues", vmin=lo, vmax=hi, aspect="auto",
                       interpolation="nearest")
        fig.colorbar(im, ax=ax, shrink=0.8, label={"rank": "rank in list", "member": "in the set (no ranking)"}.get(
            s["map_kind"], "score"))
        ring = other["ranking"] if whole else other["ranking"][:k]
        ax.scatter([h for _, h in ring], [l for l, _ in ring], s=36, facecolors="none", edgecolors="black",
                   linewidths=1.0)
        ringed = f"all {len(ring)} of {other['kind']}" if whole else f"{other['kind']} top-{k}"
        ax.set_title(wrap_title(f"{side.upper()}: {s['name']} ({s['kind']}); ringed: {ringed}", 4.0),
                     fontsize=TITLE_SIZE)
        ax.set_xlabel("head (0-based)")
        ax.set_ylabel("layer (0-based)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=16))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=16))
    if m:
        ax = fig.add_subplot(1, panels, 3)
        cols = [c for c in COLUMNS if c in m]
        labels = ["none", "a", "b"]
        vals = np.array([[np.nan if m[c].get(lab) is None else m[c][lab] for c in cols] for lab in labels]
                        + [[np.nan if m[c].get("random_mean") is None else m[c]["random_mean"] for c in cols]])
        ax.imshow(vals, cmap="Greens", vmin=0, vmax=1, aspect="auto")
        for r in range(vals.shape[0]):
            for c in range(vals.shape[1]):
                sd = m[cols[c]].get("random_std") if r == 3 else None
                cell = "-" if np.isnan(vals[r, c]) else f"{100 * vals[r, c]:.0f}%" + (f" +- {100 * sd:.0f}" if sd else "")
                ax.text(c, r, cell, ha="center", va="center")
        ax.set_xticks(range(len(cols)), [COLUMNS[c] for c in cols])
        ax.set_yticks(range(4), ["none", f"A top-{m['k']}", f"B top-{m['k']}", f"{m['k']} random"])
        ax.set_title("cross-masking", fontsize=TITLE_SIZE)
    return to_png(fig)


def _complete_comparison(res: Any) -> bool:
    """Whether a compare-heads results.json has what the figure draws (a hand-edited or truncated one is left
    to the report's "Other runs" listing rather than failing the page)."""
    if not isinstance(res, dict) or not isinstance(res.get("overlap"), list):
        return False
    sides = [res.get("a"), res.get("b")]
    return all(isinstance(s, dict) and isinstance(s.get("map"), list) and isinstance(s.get("ranking"), list)
               for s in sides) and all(isinstance(o, dict) and "chance" in o for o in res["overlap"])


def head_comparison_section(runs: list, kc: object = None) -> Any:  # kc: the report's k, unread
    """``vrh compare-heads`` runs (both maps, the matrix, the overlap table) and ``vrh text-heads`` runs (needle
    recall unmasked, with the top-k text heads, the cross set and random heads masked); None without either."""
    from vrh.report.document import Fig, Section, Table, Text

    cmp = [r for r in runs if r.command == "compare-heads" and _complete_comparison(r.results)]
    text = [r for r in runs if r.command == "text-heads" and isinstance(r.results, dict)]
    unread = [r for r in runs if r.command in ("compare-heads", "text-heads") and r not in cmp and r not in text]
    if not cmp and not text and not unread:
        return None
    s = Section("Text retrieval heads and head-set comparisons")
    for r in unread:
        s.add(Text(f"{r.name}: no results to draw (the run did not finish, or its results lack the figures).",
                   warn=True))
    if text:
        rows = []
        for r in text:
            res = r.results
            pct = lambda v: f"{100 * v:.1f}%" if isinstance(v, (int, float)) else "-"  # noqa: E731
            top = res.get("top_heads") if isinstance(res.get("top_heads"), list) else []
            rows.append([r.name, str(res.get("scorer") or "copy_paste"), f"{res.get('n_correct', '-')} / {res.get('n', '-')}",
                         f"{pct(res.get('recall'))} (chance {pct(res.get('recall_chance'))})",
                         pct(res.get("text_heads_recall")), pct(res.get("cross_heads_recall")),
                         pct(res.get("random_recall_mean")),
                         " ".join(f"{h[0]}:{h[1]}" for h in top[:5] if isinstance(h, list) and len(h) == 2)])
        s.add(Table(["run", "scorer", "needles recalled", "recall", "top-k text heads masked", "cross set masked",
                     "random (mean)", "top-5 text heads"], rows,
                    caption="vrh text-heads on text only: heads scored by Retrieval Heads' copy-paste criterion "
                            "(copy_paste) or QRHead's query-focused one (qrhead), needle recall judged exactly; k "
                            "and the cross set as each run recorded them"))
    for i, r in enumerate(cmp):
        res = r.results
        sub = Section(f"{r.name}: {res['a']['name']} vs {res['b']['name']}", level=3)
        sub.add(*[Text(w, warn=True) for w in res.get("warnings", [])])
        sub.add(Fig(f"compare_heads_{i}", figure(res),
                    caption="Both maps (each with the other's top-k ringed) and, when measured, the cross-masking "
                            "matrix."))
        sub.add(Table(["k", "shared", "chance", "Jaccard", "chance", "p"],
                      [[str(o["k"]), str(o["intersection"]), f"{o['chance']['intersection']:.2f}",
                        f"{o['jaccard']:.3f}", f"{o['chance']['jaccard']:.3f}", f"{o['p_value']:.3g}"]
                       for o in res["overlap"]], caption="Top-k overlap beside its chance level"))
        w = res.get("lists")
        if isinstance(w, dict) and "p_value" in w:
            sub.add(Text(f"Whole lists ({w.get('size_a')} and {w.get('size_b')} heads): {w.get('intersection')} shared "
                         f"(chance {w.get('chance', 0):.2f}, p {w['p_value']:.2g}): "
                         + " ".join(f"{h[0]}:{h[1]}" for h in w.get("shared", []) if isinstance(h, list) and len(h) == 2)))
        rc = res.get("rank_correlation")
        if rc:
            sub.add(Text(f"Spearman {_f(rc['spearman'])} (null sd {rc['spearman_null_sd']:.3f}), Kendall "
                         f"{_f(rc['kendall'])} (null sd {rc['kendall_null_sd']:.3f}) over all {res['n_heads']} heads."))
        s.add(sub)
    return s
