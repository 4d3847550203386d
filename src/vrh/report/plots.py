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

import re
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from vrh.report.load import is_num
from vrh.report.overlay import attention_overlay
from vrh.report.style import (BASELINE_COLOR, OTHER_COLORS, OUTCOME_COLORS, OUTCOME_LABELS, RANDOM_COLOR,
                              TITLE_SIZE, VRH_COLOR, VRH_LIGHT, curve_style, new_figure, plain_log_ticks, to_png,
                              wrap_title)
from vrh.scoring.sparsity import DEFAULT_THRESHOLDS


def _pct_axis(ax, label: str = "accuracy (%)") -> None:
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}")
    ax.set_ylabel(label)
    ax.grid(axis="y", alpha=0.3)


def _num(x) -> float:
    """A plotted value: None, non-numbers and infinities become NaN (a gap in the line, no bar)."""
    ok = isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))
    return float(x) if ok and np.isfinite(x) else float("nan")


# --- head scores ------------------------------------------------------------------------------------
def score_heatmap(scores, *, title: str, top: Sequence[Sequence[int]] = ()) -> bytes:
    """Layer x head map of a ``[L, H]`` score map (0-based axes, layer 0 at the top); ``top`` heads are
    ringed so the detected set is visible even where its scores are close to the rest. The ring's legend
    sits below the axes, never on a cell; the title wraps to the figure's width instead of being clipped.

    The colour scale starts at 0 (:func:`heatmap_range`): scores are shares of attention, and a scale from
    the map's minimum drew a flat random map (0.0398-0.0401) as concentrated as a planted one."""
    arr = np.asarray(scores, dtype=float)
    L, H = arr.shape
    width = min(11.0, max(6.0, 3.0 + 0.22 * H))
    fig = new_figure(width, min(9.5, 2.9 + 0.16 * L + (0.3 if len(top) else 0.0)))
    ax = fig.add_subplot()
    lo, hi = heatmap_range(arr)
    im = ax.imshow(arr, cmap="Reds", vmin=lo, vmax=hi, aspect="auto", interpolation="nearest", origin="upper")
    fig.colorbar(im, ax=ax, label="VRH score (scale from 0)" if lo == 0 else f"VRH score (scale from {lo:.3g})",
                 shrink=0.9)
    if len(top):
        ax.scatter([h for _, h in top], [l for l, _ in top], s=40, facecolors="none", edgecolors="#1f77b4",
                   linewidths=1.2, label=f"ringed: the top-{len(top)} heads")
        fig.legend(loc="outside lower center", fontsize=8, frameon=False)
    ax.set_xlabel("head (0-based)")
    ax.set_ylabel("layer\n(0-based)" if L < 8 else "layer (0-based)")  # a short axis cannot hold one line
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=16))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=16))
    ax.set_title(wrap_title(title, width - 0.4), fontsize=TITLE_SIZE)
    return to_png(fig)


def heatmap_range(scores) -> tuple[float, float]:
    """``(vmin, vmax)`` of a score heatmap: from 0 (or the lowest score, where one is negative) to the highest.

    >>> heatmap_range([[0.0398, 0.0401]])
    (0.0, 0.0401)
    >>> heatmap_range([[-0.5, 2.0]])
    (-0.5, 2.0)
    """
    arr = np.asarray(scores, dtype=float)
    finite = arr[np.isfinite(arr)]
    lo = min(0.0, float(finite.min())) if finite.size else 0.0
    hi = float(finite.max()) if finite.size else 1.0
    return lo, (hi if hi > lo else lo + 1.0)


LOG_COUNTS_FROM = 50  # a histogram's count axis is logarithmic only when a bar holds this many heads


def score_histogram(scores, *, title: str, thresholds: Sequence[float] = DEFAULT_THRESHOLDS, bins: int = 40) -> bytes:
    """:func:`score_histogram_figure` as PNG bytes."""
    return to_png(score_histogram_figure(scores, title=title, thresholds=thresholds, bins=bins))


def axis_scales(ax, x: str = "score", y: str = "count") -> str:
    """What ``ax``'s two axes are, read from the drawn axes (so a caption cannot disagree with its plot):
    ``"score axis logarithmic, count axis linear"``."""
    words = {"log": "logarithmic", "symlog": "symmetric-logarithmic"}
    return ", ".join(f"{name} axis {words.get(scale, scale)}"
                     for name, scale in ((x, ax.get_xscale()), (y, ax.get_yscale())))


def score_histogram_figure(scores, *, title: str, thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
                           bins: int = 40) -> Figure:
    """Distribution of head scores (Fig. 5) on a log score axis, with the sparsity thresholds drawn and
    labelled with the share of heads above each; the count axis is logarithmic only when a bar holds
    :data:`LOG_COUNTS_FROM` heads or more (else linear, so a bar of one head is not a stub). The figure is
    returned undrawn so that a caption can say what its axes are (:func:`axis_scales`).

    The score axis is logarithmic because the thresholds (1e-3, 5e-3) sit two decades below the largest
    scores: on a linear axis both lines fall on the first bar and cannot be told apart. Heads scoring 0 or
    less have no place on a log axis; the legend counts them."""
    from vrh.scoring.sparsity import fraction_above

    arr = np.asarray(scores, dtype=float)
    finite = arr[np.isfinite(arr)]
    pos = finite[finite > 0]
    ends = ([float(pos.min()), float(pos.max())] if pos.size else []) + [float(t) for t in thresholds if t > 0]
    hi = max(ends, default=1.0) * 1.05
    lo = max(min(ends, default=hi / 100) / 1.5, hi * 1e-7)  # float dust (1e-30) would add decades of nothing
    edges = np.geomspace(lo, hi * 1.0001, bins + 1)
    counts, _ = np.histogram(np.clip(pos, lo, None), bins=edges)
    label = f"{pos.size} heads > 0" + (f" (those below {lo:.0e} in the first bar)" if (pos < lo).any() else "")
    if finite.size - pos.size:
        label += f"; {finite.size - pos.size} heads <= 0 not on this log axis"
    if arr.size - finite.size:
        label += f"; {arr.size - finite.size} without a score"
    fig = new_figure(6.4, 4.0 + 0.2 * len(thresholds))
    ax = fig.add_subplot()
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color=VRH_COLOR, alpha=0.75,
           edgecolor="white", linewidth=0.3, label=label)
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    if counts.size and counts.max() >= LOG_COUNTS_FROM:
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
        ax.set_ylim(0.5, counts.max() * 2)  # a count of 1 keeps a visible bar (0.5 to 1, a third of a decade)
    else:  # a few heads per bar: a log axis from 0.8 made the count-1 bars stubs
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, max(int(counts.max()) if counts.size else 1, 1) * 1.1)
    colors = [BASELINE_COLOR, "#1f77b4", "#2ca02c", "#9467bd"]
    for i, t in enumerate(thresholds):
        ax.axvline(t, color=colors[i % 4], linestyle=["--", ":", "-.", "-"][i % 4], linewidth=1.6,
                   label=f"threshold {t:g}: {100 * fraction_above(arr, t):.1f}% of heads above")
    ax.set_xlabel("head score (log scale)")
    ax.set_ylabel("number of heads" + (" (log)" if ax.get_yscale() == "log" else ""))
    ax.set_title(wrap_title(title, 6.0), fontsize=TITLE_SIZE)
    fig.legend(loc="outside lower center", fontsize=8, frameon=False)
    return fig


# --- masking effects ----------------------------------------------------------------------------------
def k_axis(ax, ks: Sequence, xlabel: str = "number of masked heads k") -> None:
    """k on a true numeric axis with a tick at every k run. Linear while the ks span at most about a
    decade; beyond that (the paper's 0, 1, 3, 5, 10, 20, 50) a symmetric-log axis, linear below 1 and
    logarithmic above, so k = 0 keeps its place and small ks are not crushed together."""
    vals = sorted({float(k) for k in ks if is_num(k)})
    nonzero = [v for v in vals if v > 0]
    if nonzero and max(nonzero) / min(nonzero) > 12:
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
        xlabel += " (symmetric log scale)"
    elif vals:
        pad = 0.05 * ((vals[-1] - vals[0]) or 1.0)
        ax.set_xlim(vals[0] - pad, vals[-1] + pad)
    if vals:
        ax.set_xticks(vals, [f"{v:g}" for v in vals])
        ax.minorticks_off()
    ax.set_xlabel(xlabel)


def k_curve(ks: Sequence[int], vrh: Sequence[float | None], random_runs: Sequence[Sequence[float]], *,
            baseline: float | None, title: str, ylabel: str = "accuracy (%)") -> bytes:
    """Accuracy vs number of masked heads (Fig. 4): VRH in red, random heads as a grey mean line with the
    min-max band and the individual seeds as dots, the unmasked model as a dashed line. k is a number on
    the x axis (:func:`k_axis`), so uneven sweeps (0, 1, 3, 6) are drawn at their true distances."""
    x = np.asarray([_num(k) for k in ks], dtype=float)
    random_runs = [[_num(v) for v in r] for r in (list(random_runs) + [[]] * len(x))[:len(x)]]  # a cut-short run
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
    ax.plot(x, [_num(v) for v in vrh][:len(x)], color=VRH_COLOR, marker="o", linewidth=2.2, label="top-k VRHs",
            zorder=4)
    k_axis(ax, ks)
    _pct_axis(ax, ylabel)
    ax.set_title(wrap_title(title, 6.0), fontsize=TITLE_SIZE)
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    return to_png(fig)


def wrap_label(text: str, chars: int) -> str:
    r"""Each line of ``text`` broken into lines of at most ``chars`` characters, after a ``_``, ``-``, ``/`` or
    blank where it can (run names are snake_case), anywhere where a piece alone is longer.

    >>> print(wrap_label("eval_grounding_dpo-random\nno masking", 16))
    eval_grounding_
    dpo-random
    no masking
    """
    out = []
    for line in text.split("\n"):
        cur = ""
        for piece in re.findall(r"[^_/ -]*[_/ -]?", line):
            while len(piece) > chars:  # a piece longer than a line: cut it
                if cur:
                    out.append(cur.rstrip())
                    cur = ""
                out.append(piece[:chars])
                piece = piece[chars:]
            if cur and len(cur) + len(piece.rstrip()) > chars:
                out.append(cur.rstrip())
                cur = ""
            cur += piece
        out.append(cur.rstrip())
    return "\n".join(out)


LABEL_CHAR_IN = 0.56 * 8 / 72  # inches per character of an 8-pt tick label (sans-serif, ~0.56 em)
MAX_SLOT_IN = 1.8  # widest slot a bar's label gets before it wraps


def outcome_bars(labels: Sequence[str], fractions: Sequence[Mapping[str, float] | None], *, title: str,
                 reference: float | None = None) -> bytes:
    """Stacked outcome fractions per condition (Fig. 8a): correct / mislocated (or wrong) / parse failure.
    ``reference``: the unmasked accuracy, drawn as a dashed line across the bars (correct is the bottom
    segment, so each bar's drop is the gap below the line). Up to four labels stand upright under their
    bars, each bar given the width its longest label line needs (at most :data:`MAX_SLOT_IN`, wrapped
    beyond); more are slanted."""
    order = [o for o in OUTCOME_COLORS if any(f and o in f for f in fractions)]
    order += sorted({k for f in fractions if f for k in f} - set(order))
    upright = len(labels) <= 4
    longest = max((len(line) for lb in labels for line in str(lb).split("\n")), default=1)
    slot = min(MAX_SLOT_IN, max(0.55, LABEL_CHAR_IN * longest + 0.15))
    if upright:
        labels = [wrap_label(str(lb), int((slot - 0.15) / LABEL_CHAR_IN)) for lb in labels]
    fig = new_figure(max(4.5, 3.0 + slot * len(labels)) if upright else max(4.5, 1.2 + 0.55 * len(labels)), 4.2)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for j, o in enumerate(order):
        vals = np.array([(f or {}).get(o, 0.0) for f in fractions], dtype=float)
        ax.bar(x, vals, bottom=bottom, color=OUTCOME_COLORS.get(o, OTHER_COLORS[j % len(OTHER_COLORS)]),
               label=OUTCOME_LABELS.get(o, o), edgecolor="white", linewidth=0.5, width=0.7)
        bottom += vals
    if is_num(reference):
        ax.axhline(reference, color=BASELINE_COLOR, linestyle="--", linewidth=1, label="unmasked accuracy")
    ax.set_xticks(x, labels, rotation=0 if upright else 35, ha="center" if upright else "right", fontsize=8)
    _pct_axis(ax, "share of samples (%)")
    ax.set_title(wrap_title(title, fig.get_figwidth() - 2.0), fontsize=TITLE_SIZE)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_png(fig)


TRANSFER_BARS = [("baseline_accuracy", "unmasked", "white", BASELINE_COLOR, None),
                 ("random_accuracy_mean", "random heads", RANDOM_COLOR, RANDOM_COLOR, None),
                 ("own_heads_accuracy", "own VRHs", VRH_COLOR, VRH_COLOR, None),
                 ("transferred_heads_accuracy", "transferred VRHs", VRH_LIGHT, VRH_COLOR, "//")]


def transfer_bars(groups: Sequence[str], values: Sequence[Mapping[str, float | None]], *, title: str) -> bytes:
    """Cross-model masking (Fig. 7, bottom row) at one k: per model pair, accuracy unmasked, with random
    heads, with the model's own top-k VRHs and with the partner's (transferred) top-k VRHs. A condition
    no pair ran (``own`` needs B's own detection) gets no bar and no legend entry, rather than an empty
    slot that reads as 0 %."""
    bars = [b for b in TRANSFER_BARS if any(np.isfinite(_num(v.get(b[0]))) for v in values)]
    fig = new_figure(max(5.0, 1.5 + 0.4 * len(bars) * len(groups)), 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(groups))
    w = 0.8 / max(len(bars), 1)
    for j, (key, label, face, edge, hatch) in enumerate(bars):
        vals = [_num(v.get(key)) for v in values]
        pos = x + (j - (len(bars) - 1) / 2) * w
        ax.bar(pos, vals, width=w, color=face, edgecolor=edge, hatch=hatch, linewidth=1.2, label=label)
        for p, v in zip(pos, vals):
            if np.isfinite(v):
                ax.text(p, v + 0.01, f"{100 * v:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, groups, fontsize=8)
    _pct_axis(ax)
    ax.set_title(wrap_title(title, 4.5), fontsize=TITLE_SIZE)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_png(fig)


def _curve_groups(curves: Mapping[str, Sequence[float | None]], n: int) -> list[tuple[list[str], list[float]]]:
    """Curves with identical values (to 1e-9, NaN equal to NaN) merged, in first-seen order: on small
    models several methods pick the same heads, and identical lines drawn one over another hide all but
    the last. Returns ``[(names, values)]``."""
    groups: list[tuple[list[str], list[float]]] = []
    for name, ys in curves.items():
        vals = [_num(v) for v in list(ys)[:n]]
        vals += [float("nan")] * (n - len(vals))
        for names, ref in groups:
            if np.allclose(ref, vals, rtol=0, atol=1e-9, equal_nan=True):
                names.append(name)
                break
        else:
            groups.append(([name], vals))
    return groups


def _coincidences(groups: list[tuple[list[str], list[float]]], ks: Sequence) -> dict[str, str]:
    """For each curve drawn over an earlier one at some k (equal to 1e-9; it hides the earlier one's
    marker there), the legend note that says so, keyed by the curve's first name: ``"  (on X at k=5, 10)"``."""
    notes = {}
    for j, (names, ys) in enumerate(groups):
        hits = []
        for other, ref in groups[:j]:
            at = [str(k) for k, a, b in zip(ks, ref, ys) if np.isfinite(a) and np.isfinite(b) and abs(a - b) <= 1e-9]
            if at:
                hits.append(f"{other[0]} at k={', '.join(at)}")
        if hits:
            notes[names[0]] = "  (on " + "; ".join(hits) + ")"
    return notes


def curve_family(ks: Sequence, curves: Mapping[str, Sequence[float | None]], *, title: str,
                 baseline: float | None = None, xlabel: str = "number of masked heads k",
                 highlight: str | None = None) -> bytes:
    """Several accuracy-vs-k curves on one numeric k axis (Fig. 3 / Fig. 7 bottom).

    A curve named like ``random`` is grey, "transfer..." red dashed, ``highlight`` (or one named like VRH /
    ours / own) solid red; every other curve gets its own colour + dash + marker (:func:`style.curve_style`),
    so 15 methods stay tellable apart past the 8-colour cycle. Curves with identical values share one line
    and one legend entry listing every name (``a = b = c``), instead of hiding each other."""
    x = np.asarray([_num(k) for k in ks], dtype=float)
    groups = _curve_groups(curves, len(x))
    meets = _coincidences(groups, ks)
    n_lines = sum(len(names) for names, _ in groups) + (baseline is not None)
    fig = new_figure(8.0, max(3.8, 1.6 + 0.19 * n_lines))
    ax = fig.add_subplot()
    if baseline is not None:
        ax.axhline(baseline, color=BASELINE_COLOR, linestyle="--", linewidth=1, label="unmasked")
    n_other = 0
    for names, ys in groups:
        low = " ".join(names).lower()
        if highlight in names:
            style = dict(color=VRH_COLOR, marker="o", linewidth=2.4, linestyle="-", zorder=4)
        elif "random" in low:
            style = dict(color=RANDOM_COLOR, marker="s", linewidth=1.8, linestyle="-")
        elif "transfer" in low:
            style = dict(color=VRH_COLOR, marker="^", linewidth=1.8, linestyle="--")
        elif highlight is None and any(t in low for t in ("vrh", "ours", "own")):
            style = dict(color=VRH_COLOR, marker="o", linewidth=2.4, linestyle="-", zorder=4)
        else:
            style = dict(curve_style(n_other), linewidth=1.4, markersize=5, markerfacecolor="none")
            n_other += 1
        label = " = ".join(names) + (f"  ({len(names)} identical)" if len(names) > 2 else "")
        label += meets.get(names[0], "")
        ax.plot(x, ys, label="\n".join(wrap_title(label, 2.6, 8).split("\n")), **style)
    k_axis(ax, ks, xlabel)
    _pct_axis(ax)
    ax.set_title(wrap_title(title, 5.0), fontsize=TITLE_SIZE)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), framealpha=0.9)
    return to_png(fig)


STD_WORDS = "population std (divided by the number of draws, not one less)"  # what every run's std is (np.std)


def split_reference(n_values: Sequence, values: Sequence, reference_n) -> tuple[list, list, list]:
    """``(ns, values, reference ns)``: the points of a stability curve with those at ``n = reference_n`` (the
    whole detection set, the reference itself, 100 % by construction) taken out, so that a curve is drawn
    only where it measures something and the reference is shown as what it is.

    >>> split_reference([1, 4, 8], [0.3, 0.7, 1.0], 8)
    ([1, 4], [0.3, 0.7], [8])
    """
    keep = [i for i, n in enumerate(n_values) if not (is_num(reference_n) and n == reference_n)]
    return ([n_values[i] for i in keep], [values[i] if i < len(values) else None for i in keep],
            [n for n in n_values if is_num(reference_n) and n == reference_n])


def stability_curve(n_values: Sequence[int], mean: Sequence[float | None], std: Sequence[float | None] | None, *,
                    k: int | None, title: str, reference_n: int | None = None) -> bytes:
    """Top-k overlap with the full detection vs number of scoring samples n (Fig. 8c), mean with a +-1 std
    band over resamplings (:data:`STD_WORDS`), cut at 0 and 100 % where it would run past them (an
    overlap never does). The point at ``n = reference_n`` (the whole detection set) is the reference
    itself: it is drawn apart, as a hollow marker, not as the end of the curve (it would read as
    convergence)."""
    ns, m_vals, ref = split_reference(list(n_values), list(mean), reference_n)
    x = np.asarray(ns, dtype=float)
    m = np.array([_num(v) for v in m_vals], dtype=float)
    fig = new_figure(6.0, 3.8)
    ax = fig.add_subplot()
    if std is not None and len(std):
        s = np.array([_num(v) for v in split_reference(list(n_values), list(std), reference_n)[1]], dtype=float)
        lo, hi = m - s, m + s
        cut = bool(np.nanmin(lo, initial=0) < 0 or np.nanmax(hi, initial=1) > 1)
        ax.fill_between(x, np.clip(lo, 0, 1), np.clip(hi, 0, 1), color=VRH_COLOR, alpha=0.2, linewidth=0,
                        label="±1 std over resamplings" + (" (cut at 0 and 100%)" if cut else ""))
    ax.plot(x, m, color=VRH_COLOR, marker="o", linewidth=2.2, label="mean overlap")
    if ref:
        ax.scatter(ref, [1.0] * len(ref), s=55, facecolors="white", edgecolors=BASELINE_COLOR, linewidths=1.4,
                   zorder=5, clip_on=False, label=f"n = {ref[0]}: the whole detection set, the reference (100% by definition)")
    every = sorted({float(v) for v in [*ns, *ref]})
    if every and every[0] > 0 and every[-1] / every[0] >= 8:
        ax.set_xscale("log")
        ax.minorticks_off()
    if every:
        ax.set_xticks(every, [f"{v:g}" for v in every])
    ax.set_xlabel("scoring samples n" + (" (log scale)" if ax.get_xscale() == "log" else ""))
    _pct_axis(ax, f"top-{k if k is not None else 'k'} overlap with the reference (%)")
    ax.set_title(wrap_title(title, 5.6), fontsize=TITLE_SIZE)
    fig.legend(loc="outside lower center", fontsize=8, frameon=False)
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
    ax.set_title(wrap_title(title, fig.get_figwidth() - 0.6), fontsize=TITLE_SIZE)
    return to_png(fig)

__all__ = ["score_heatmap", "heatmap_range", "score_histogram", "score_histogram_figure", "axis_scales", "k_curve",
           "outcome_bars", "wrap_label", "transfer_bars", "curve_family", "stability_curve", "split_reference",
           "STD_WORDS", "labelled_bars", "attention_overlay", "to_png", "new_figure"]
