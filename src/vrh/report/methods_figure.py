"""The method-comparison figure (paper Fig. 3): accuracy vs k with each method's top-k heads masked.

Ten methods' curves in one panel overlapped, and their legend was larger than the plot (issue 46 item 8).
Up to :data:`ONE_PANEL_METHODS` methods (besides the random control) stay one panel
(:func:`vrh.report.plots.curve_family`); more become small multiples: one small panel per method (methods with
identical curves share one), each with the same references drawn thin -- the default method in red, the
random-head control in grey, the unmasked model dashed -- on one shared k and accuracy scale, and one short
legend for the references under the grid. The numbers themselves are in the table beside the figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from vrh.report.plots import _curve_groups, _num, _pct_axis, curve_family, k_axis
from vrh.report.style import (BASELINE_COLOR, RANDOM_COLOR, TITLE_SIZE, VRH_COLOR, curve_style, new_figure, to_png,
                              wrap_title)

ONE_PANEL_METHODS = 4  # more methods than this (the random control aside): one small panel each
PANEL_COLUMNS = 4


def _is_random(name: str) -> bool:
    return "random" in name.lower()


def method_curves(ks: Sequence, curves: Mapping[str, Sequence[float | None]], *, title: str,
                  baseline: float | None = None, highlight: str | None = None) -> bytes:
    """Accuracy vs k per method as PNG bytes: one panel while there are at most :data:`ONE_PANEL_METHODS`
    methods, small multiples beyond (:func:`method_panels`). A curve named like ``random`` is the control."""
    n_methods = len([n for n in curves if not _is_random(n)])
    if n_methods <= ONE_PANEL_METHODS:
        return curve_family(ks, curves, title=title, baseline=baseline, highlight=highlight)
    return to_png(method_panels(ks, curves, title=title, baseline=baseline, highlight=highlight))


def method_panels(ks: Sequence, curves: Mapping[str, Sequence[float | None]], *, title: str,
                  baseline: float | None = None, highlight: str | None = None):
    """Small multiples (a matplotlib Figure, undrawn): one panel per method (identical curves merged, the
    ``highlight`` method first), each showing that method's curve with the references thin beneath it."""
    x = np.asarray([_num(k) for k in ks], dtype=float)
    n = len(x)
    random = {name: ys for name, ys in curves.items() if _is_random(name)}
    methods = {name: ys for name, ys in curves.items() if not _is_random(name)}
    groups = _curve_groups(methods, n)
    groups.sort(key=lambda g: highlight not in g[0])  # the default method's panel first, the rest in order
    ref = next(iter(random.values()), None)
    ref_ys = [_num(v) for v in list(ref)[:n]] + [float("nan")] * (n - len(list(ref)[:n])) if ref is not None else None
    hi_ys = next((ys for names, ys in groups if highlight in names), None)
    cols = min(PANEL_COLUMNS, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig = new_figure(2.45 * cols + 0.4, 2.05 * rows + 1.3)
    grid = fig.add_gridspec(rows, cols)
    first = None
    n_other = 0
    for i, (names, ys) in enumerate(groups):
        ax = fig.add_subplot(grid[i // cols, i % cols], sharex=first, sharey=first)
        first = first or ax
        if baseline is not None:
            ax.axhline(baseline, color=BASELINE_COLOR, linestyle="--", linewidth=0.9, label="unmasked")
        if ref_ys is not None:
            ax.plot(x, ref_ys, color=RANDOM_COLOR, marker="s", markersize=3, linewidth=1.2,
                    label="random heads (mean)")
        if highlight in names:
            style = dict(color=VRH_COLOR, marker="o", linewidth=2.2)
        else:
            if hi_ys is not None:
                ax.plot(x, hi_ys, color=VRH_COLOR, linewidth=1.0, alpha=0.6, label=f"{highlight} (default)")
            style = dict(curve_style(n_other), linewidth=1.8, markersize=4)
            style["linestyle"] = "-"
            n_other += 1
        ax.plot(x, ys, zorder=4, **style)
        label = " = ".join(names)
        ax.set_title(wrap_title(label, 2.3, 8), fontsize=8)
        k_axis(ax, ks, "k" if i // cols == rows - 1 or i + cols >= len(groups) else "")
        _pct_axis(ax, "accuracy (%)" if i % cols == 0 else "")
        ax.tick_params(labelsize=7)
    handles = {}
    for ax in fig.axes:
        for h, lb in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lb, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=len(handles), fontsize=8,
                   frameon=False)
    fig.suptitle(wrap_title(title + " (one panel per method; thin lines: the references)", 2.45 * cols),
                 fontsize=TITLE_SIZE)
    return fig
