"""Figure builders for the report: plain data in, PNG bytes out.

Every builder draws on a :class:`matplotlib.figure.Figure` with the Agg canvas directly (never pyplot), so
building a report changes no global matplotlib state, leaks no open figures and works headless. Builders
take already-extracted numbers, not run folders, so they can be reused from notebooks and tested alone.

One visual language throughout, mirroring the paper's figures: VRH conditions are red, random-head
controls grey (mean line plus a shaded spread over seeds), the unmasked baseline a dashed black line;
outcomes are green (correct), amber (mislocated / wrong) and purple (parse failure); see
:mod:`vrh.report.style`. Attention overlays live in :mod:`vrh.report.overlay` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.ticker import MaxNLocator

from vrh.report.overlay import attention_overlay
from vrh.report.style import (BASELINE_COLOR, OTHER_COLORS, OUTCOME_COLORS, OUTCOME_LABELS, RANDOM_COLOR,
                              VRH_COLOR, VRH_LIGHT, new_figure, to_png)


def _pct_axis(ax, label: str = "accuracy (%)") -> None:
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}")
    ax.set_ylabel(label)
    ax.grid(axis="y", alpha=0.3)


def _num(x) -> float:
    return float("nan") if x is None else float(x)


# --- head scores ------------------------------------------------------------------------------------
def score_heatmap(scores, *, title: str, top: Sequence[Sequence[int]] = ()) -> bytes:
    """Layer x head map of a ``[L, H]`` score map (0-based axes, layer 0 at the top); ``top`` heads are
    ringed so the detected set is visible even where its scores are close to the rest."""
    arr = np.asarray(scores, dtype=float)
    L, H = arr.shape
    fig = new_figure(min(11.0, 3.0 + 0.22 * H), min(9.0, 2.2 + 0.16 * L))
    ax = fig.add_subplot()
    im = ax.imshow(arr, cmap="Reds", aspect="auto", interpolation="nearest", origin="upper")
    fig.colorbar(im, ax=ax, label="VRH score", shrink=0.9)
    if len(top):
        ax.scatter([h for _, h in top], [l for l, _ in top], s=40, facecolors="none", edgecolors="#1f77b4",
                   linewidths=1.2, label=f"top-{len(top)} heads")
        ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    ax.set_xlabel("head (0-based)")
    ax.set_ylabel("layer (0-based)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=16))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=16))
    ax.set_title(title, fontsize=10)
    return to_png(fig)


def score_histogram(scores, *, title: str, thresholds: Sequence[float] = (1e-3, 5e-3), bins: int = 60) -> bytes:
    """Distribution of head scores (Fig. 5), log-count axis so the long sparse tail stays visible, with the
    paper's thresholds drawn and labelled with the fraction of heads above each."""
    from vrh.sparsity import fraction_above, histogram

    arr = np.asarray(scores, dtype=float)
    counts, edges = histogram(arr, bins=bins)
    fig = new_figure(6.4, 3.6)
    ax = fig.add_subplot()
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color=VRH_COLOR, alpha=0.75,
           edgecolor="white", linewidth=0.3, label=f"{arr.size} heads")
    if counts.size and counts.max() > 0:
        ax.set_yscale("log")
        ax.set_ylim(0.8, counts.max() * 2)
    for t, style in zip(thresholds, ["--", ":", "-."] * 4):
        ax.axvline(t, color=BASELINE_COLOR, linestyle=style, linewidth=1.2,
                   label=f"> {t:g}: {100 * fraction_above(arr, t):.1f}% of heads")
    ax.set_xlabel("head score")
    ax.set_ylabel("number of heads (log)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return to_png(fig)


# --- masking effects ----------------------------------------------------------------------------------
def k_curve(ks: Sequence[int], vrh: Sequence[float | None], random_runs: Sequence[Sequence[float]], *,
            baseline: float | None, title: str, ylabel: str = "accuracy (%)") -> bytes:
    """Accuracy vs number of masked heads (Fig. 4): VRH in red, random heads as a grey mean line with the
    min-max band and the individual seeds as dots, the unmasked model as a dashed line. k is placed on
    evenly spaced ticks because sweeps use uneven k (0, 1, 3, 5, 10, 20, 50)."""
    x = np.arange(len(ks))
    fig = new_figure(6.4, 3.8)
    ax = fig.add_subplot()
    if baseline is not None:
        ax.axhline(baseline, color=BASELINE_COLOR, linestyle="--", linewidth=1,
                   label=f"unmasked ({100 * baseline:.1f})")
    means = np.array([np.mean(r) if len(r) else np.nan for r in random_runs], dtype=float)
    lo = np.array([np.min(r) if len(r) else np.nan for r in random_runs], dtype=float)
    hi = np.array([np.max(r) if len(r) else np.nan for r in random_runs], dtype=float)
    n_seeds = max((len(r) for r in random_runs), default=0)
    if n_seeds:
        ax.fill_between(x, lo, hi, color=RANDOM_COLOR, alpha=0.2, linewidth=0)
        for i, r in enumerate(random_runs):
            ax.scatter([x[i]] * len(r), r, s=10, color=RANDOM_COLOR, alpha=0.6, zorder=3)
        ax.plot(x, means, color=RANDOM_COLOR, marker="s", markersize=4, linewidth=1.8,
                label=f"random heads (mean, min-max of {n_seeds} seed{'s' if n_seeds > 1 else ''})")
    ax.plot(x, [_num(v) for v in vrh], color=VRH_COLOR, marker="o", linewidth=2.2, label="top-k VRHs", zorder=4)
    ax.set_xticks(x, [str(k) for k in ks])
    ax.set_xlabel("number of masked heads k")
    _pct_axis(ax, ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    return to_png(fig)


def outcome_bars(labels: Sequence[str], fractions: Sequence[Mapping[str, float] | None], *, title: str) -> bytes:
    """Stacked outcome fractions per condition (Fig. 8a): correct / mislocated (or wrong) / parse failure."""
    order = [o for o in OUTCOME_COLORS if any(f and o in f for f in fractions)]
    order += sorted({k for f in fractions if f for k in f} - set(order))
    fig = new_figure(max(4.5, 1.2 + 0.55 * len(labels)), 4.2)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for j, o in enumerate(order):
        vals = np.array([(f or {}).get(o, 0.0) for f in fractions], dtype=float)
        ax.bar(x, vals, bottom=bottom, color=OUTCOME_COLORS.get(o, OTHER_COLORS[j % len(OTHER_COLORS)]),
               label=OUTCOME_LABELS.get(o, o), edgecolor="white", linewidth=0.5, width=0.7)
        bottom += vals
    ax.set_xticks(x, labels, rotation=35 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center",
                  fontsize=8)
    _pct_axis(ax, "share of samples (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_png(fig)


def transfer_bars(groups: Sequence[str], values: Sequence[Mapping[str, float | None]], *, title: str) -> bytes:
    """Cross-model masking (Fig. 7, bottom row) at one k: per model pair, accuracy unmasked, with random
    heads, with the model's own top-k VRHs and with the partner's (transferred) top-k VRHs."""
    bars = [("baseline_accuracy", "unmasked", "white", BASELINE_COLOR, None),
            ("random_accuracy_mean", "random heads", RANDOM_COLOR, RANDOM_COLOR, None),
            ("own_heads_accuracy", "own VRHs", VRH_COLOR, VRH_COLOR, None),
            ("transferred_heads_accuracy", "transferred VRHs", VRH_LIGHT, VRH_COLOR, "//")]
    fig = new_figure(max(5.0, 1.5 + 1.6 * len(groups)), 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(groups))
    w = 0.2
    for j, (key, label, face, edge, hatch) in enumerate(bars):
        vals = [_num(v.get(key)) for v in values]
        pos = x + (j - 1.5) * w
        ax.bar(pos, vals, width=w, color=face, edgecolor=edge, hatch=hatch, linewidth=1.2, label=label)
        for p, v in zip(pos, vals):
            if np.isfinite(v):
                ax.text(p, v + 0.01, f"{100 * v:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, groups, fontsize=8)
    _pct_axis(ax)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_png(fig)


def curve_family(ks: Sequence, curves: Mapping[str, Sequence[float | None]], *, title: str,
                 baseline: float | None = None, xlabel: str = "number of masked heads k") -> bytes:
    """Several accuracy-vs-k curves on one axis (Fig. 3 / Fig. 7 bottom): a curve named like ``random``
    is grey, "transfer..." red dashed, one named like VRH / ours / own red, the rest distinct colours."""
    x = np.arange(len(ks))
    fig = new_figure(6.4, 3.8)
    ax = fig.add_subplot()
    if baseline is not None:
        ax.axhline(baseline, color=BASELINE_COLOR, linestyle="--", linewidth=1, label="unmasked")
    others = iter(OTHER_COLORS * 4)
    for name, ys in curves.items():
        low = name.lower()
        if "random" in low:
            style = dict(color=RANDOM_COLOR, marker="s", linewidth=1.8)
        elif "transfer" in low:
            style = dict(color=VRH_COLOR, marker="^", linewidth=1.8, linestyle="--")
        elif any(t in low for t in ("vrh", "ours", "own")):
            style = dict(color=VRH_COLOR, marker="o", linewidth=2.2)
        else:
            style = dict(color=next(others), marker="D", linewidth=1.4, markersize=4)
        ax.plot(x, [_num(v) for v in ys][:len(x)], label=name, **style)
    ax.set_xticks(x, [str(k) for k in ks])
    ax.set_xlabel(xlabel)
    _pct_axis(ax)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_png(fig)


def stability_curve(n_values: Sequence[int], mean: Sequence[float | None], std: Sequence[float | None] | None, *,
                    k: int | None, title: str) -> bytes:
    """Top-k overlap with the full detection vs number of scoring samples n (Fig. 8c), mean with a
    +-1 std band over resamplings."""
    x = np.asarray(n_values, dtype=float)
    m = np.array([_num(v) for v in mean], dtype=float)[:len(x)]
    fig = new_figure(6.0, 3.6)
    ax = fig.add_subplot()
    if std is not None and len(std):
        s = np.array([_num(v) for v in std], dtype=float)[:len(x)]
        ax.fill_between(x, m - s, m + s, color=VRH_COLOR, alpha=0.2, linewidth=0, label="+-1 std")
    ax.plot(x, m, color=VRH_COLOR, marker="o", linewidth=2.2, label="mean overlap")
    if len(x) and x.min() > 0 and x.max() / x.min() >= 8:
        ax.set_xscale("log")
        ax.set_xticks(x, [f"{int(v)}" for v in x])
        ax.minorticks_off()
    ax.set_xlabel("scoring samples n")
    _pct_axis(ax, f"top-{k if k is not None else 'k'} overlap with the reference (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return to_png(fig)


def labelled_bars(labels: Sequence[str], values: Sequence[float | None], colors: Sequence[str], *, title: str,
                  baseline: float | None = None) -> bytes:
    """A few accuracies side by side (Fig. 8b token choice, Fig. 6 style), value printed on each bar."""
    fig = new_figure(max(4.0, 1.5 + 1.1 * len(labels)), 3.6)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    vals = [_num(v) for v in values]
    ax.bar(x, vals, color=colors, width=0.6, edgecolor=BASELINE_COLOR, linewidth=0.6)
    for xi, v in zip(x, vals):
        if np.isfinite(v):
            ax.text(xi, v + 0.01, f"{100 * v:.1f}", ha="center", va="bottom", fontsize=8)
    if baseline is not None:
        ax.axhline(baseline, color=BASELINE_COLOR, linestyle="--", linewidth=1, label="unmasked")
        ax.legend(fontsize=8)
    ax.set_xticks(x, labels, fontsize=8)
    _pct_axis(ax)
    ax.set_title(title, fontsize=10)
    return to_png(fig)

__all__ = ["score_heatmap", "score_histogram", "k_curve", "outcome_bars", "transfer_bars", "curve_family",
           "stability_curve", "labelled_bars", "attention_overlay", "to_png", "new_figure"]
