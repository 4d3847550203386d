"""Attention overlays (paper Fig. A1/A2): where do the heads look while the model writes its answer?

Detection stores, for its first few samples, every head's mean attention from the output-token queries
onto the visual tokens (``[L, H, V]``) and the original-image pixel cell of each visual token (``[V, 4]``).
Painting head-averaged attention back onto those cells shows the paper's qualitative claim directly: the
top-k VRHs concentrate on the referred object, the other heads do not.

Each attention panel has its own colour scale, from 0 to its own peak, with its own colour bar under it,
so that where a panel's heads look is readable in every panel. One scale shared by all panels (tried
before) left "all heads" and "all but top-k" blank next to the top-k's peak, their pattern visible only
in numbers; a panel normalised to its peak *without saying so* (tried before that) read as bright as the
top-k. So the scales are stated: each title says how the panel's peak compares with the top-k panel's
(``peak 0.0198 = 12% of the top-3's``), and the colour bars carry the values. A panel whose attention is
nearly even (peak below :data:`EVEN_FLOOR` times its even share, the panel's attention spread evenly over its
visual tokens) is scaled to that multiple instead of to its peak, so a flat map is drawn light, not "maximal
everywhere" (0..peak drew a map of 0.0099..0.0101 all dark); the colour bar's label says which. Low
attention is faded out so the image stays visible; each title also gives the share of attention on the
visual tokens whose cell overlaps the ground-truth box, by detection's own rule
(:func:`vrh.data.key_cells.cells_in_box`, with the run's ``--min-overlap``). Which image a sample's overlay
may show is decided by the report (:func:`vrh.report.sections.overlay_image`); this module draws the array it
is given, or an "image not found" panel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.ticker import MaxNLocator
from PIL import Image

from vrh.data.key_cells import cells_in_box, rule_words
from vrh.report.style import BASELINE_COLOR, TITLE_SIZE, new_figure, to_png, wrap_title

GT_COLOR = "#00e676"  # paper: green ground truth
# attention from light to dark grey: a scale of lightness alone (perceptually ordered) whose hues no object
# of the world has (red, green, blue, yellow, purple, orange); inferno's purple end read as a purple object
OVERLAY_CMAP = "Greys"
PRED_COLOR = "#00b0ff"  # cyan, so it is never read as "VRH red"
MAX_SIDE = 448  # pixels of the drawn image / attention raster: enough to read, small enough to embed
EVEN_FLOOR = 4.0  # a panel is drawn to full darkness only where attention reaches this multiple of its even share


# what PIL raises for a file it cannot decode: not an image (UnidentifiedImageError is an OSError),
# truncated (OSError), broken chunks (SyntaxError, EOFError in some plugins), too many pixels
UNREADABLE = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)


def load_image(path: str | Path) -> np.ndarray:
    """The image at ``path`` as ``[H, W, 3]`` uint8 RGB, decoded in full here, so that a truncated file
    fails now with a reason rather than while drawing. Raises one of :data:`UNREADABLE`."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def raster(values: np.ndarray, rects: np.ndarray, width: float, height: float, scale: float) -> np.ndarray:
    """Paint one value per visual token onto its pixel cell at ``scale``; pixels no token covers are NaN."""
    h, w = max(1, math.ceil(height * scale)), max(1, math.ceil(width * scale))
    out = np.full((h, w), np.nan)
    for v, (x1, y1, x2, y2) in zip(values, rects):
        r1, r2 = int(math.floor(y1 * scale)), int(math.ceil(y2 * scale))
        c1, c2 = int(math.floor(x1 * scale)), int(math.ceil(x2 * scale))
        out[max(r1, 0):max(r2, r1 + 1), max(c1, 0):max(c2, c1 + 1)] = v
    return out


def mass_in_box(values: np.ndarray, rects: np.ndarray, box: Sequence[float] | None, min_overlap: float = 0.0
                ) -> float | None:
    """Share of the (non-negative) attention on tokens whose cell overlaps ``box``: detection's key-set rule
    (:func:`vrh.data.key_cells.cells_in_box`, ``min_overlap`` as the run's ``--min-overlap``)."""
    if box is None or values.sum() <= 0:
        return None
    inside = cells_in_box(rects, box, min_overlap)
    return float(values[inside].sum() / values.sum())


def head_means(att: np.ndarray, top: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """``[V]`` mean attention over all heads, over the ``top`` heads, and over every other head."""
    L, H, _ = att.shape
    mask = np.zeros((L, H), dtype=bool)
    for l, h in top:
        if 0 <= l < L and 0 <= h < H:
            mask[l, h] = True
    out = {"all heads": att.reshape(L * H, -1).mean(0)}
    if mask.any():
        out[f"top-{int(mask.sum())} VRHs"] = att[mask].mean(0)
    if (~mask).any() and mask.any():
        out[f"all but top-{int(mask.sum())}"] = att[~mask].mean(0)
    return out


def panel_range(values: np.ndarray) -> tuple[float, float]:
    """``(0, top)``: one panel's colour scale, from no attention to its highest finite value, or to
    :data:`EVEN_FLOOR` times its even share (its mean) when that is higher, so that darkness is proportional to
    attention within the panel and a nearly even map is drawn light (``(0, 1)`` when nothing is above 0).

    >>> panel_range(np.array([0.0] * 6 + [0.1, 0.9]))  # peaked (mean 0.125): 0 to the peak
    (0.0, 0.9)
    >>> panel_range(np.array([0.0099, 0.0101]))  # nearly even: 0 to 4x the mean, the cells at a quarter
    (0.0, 0.04)
    """
    vals = np.ravel(values)
    vals = vals[np.isfinite(vals)]
    peak = float(vals.max()) if vals.size else 0.0
    if peak <= 0:
        return 0.0, 1.0
    return 0.0, max(peak, round(EVEN_FLOOR * float(np.clip(vals, 0, None).mean()), 12))


def scale_words(values: np.ndarray) -> str:
    """What a panel's colour scale runs to, for its colour bar (:func:`panel_range`)."""
    vals = np.ravel(values)
    vals = vals[np.isfinite(vals)]
    peak = float(vals.max()) if vals.size else 0.0
    if peak > 0 and panel_range(values)[1] > peak:
        return f"mean attention, 0 to {EVEN_FLOOR:g}x its even share (peak below)"
    return "mean attention, this panel's scale (0 to its peak)"


def percent(ratio: float) -> str:
    """A ratio below 1 as a percent that never reads as 100% or in exponent form.

    >>> [percent(r) for r in (0.995, 0.9999, 0.5, 0.025, 0.0004, 1e-7)]
    ['99.5%', '99.99%', '50%', '2.5%', '0.04%', '<0.01%']
    """
    pct = 100 * ratio
    if pct < 0.01:
        return "<0.01%"
    if pct < 10:
        return f"{pct:.2g}%"
    for digits in range(0, 6):
        text = f"{pct:.{digits}f}"
        if float(text) < 100 and (digits or pct < 99.5):
            return f"{text}%"
    return f"{pct:.6f}%"


def peak_words(name: str, peak: float, top_name: str | None, top_peak: float | None) -> str:
    """A panel's peak, and how it compares with the top-k panel's (whose scale it is not on).

    >>> print(peak_words("all heads", 0.0198, "top-3 VRHs", 0.167))
    peak 0.0198 = 12% of the top-3's
    >>> print(peak_words("top-3 VRHs", 0.167, "top-3 VRHs", 0.167))
    peak 0.167
    """
    text = f"peak {peak:.3g}"
    if top_name is None or name == top_name or not top_peak or top_peak <= 0:
        return text
    ratio = peak / top_peak
    rel = f"{percent(ratio)} of" if ratio < 1 else (f"{ratio:.3g}x" if ratio < 1000 else f"{ratio:,.0f}x")
    return f"{text} = {rel} the {top_name.split(' ')[0]}'s"


def share_words(share: float) -> str:
    """A share of attention (0..1) as a percent: 100% only when it is all of it.

    >>> [share_words(s) for s in (1.0, 0.9996, 0.42, 0.0)]
    ['100%', '99.96%', '42%', '0%']
    """
    if share >= 1:
        return "100%"
    if share <= 0:
        return "0%"
    return percent(share)


def scaled_rgba(r: np.ndarray, cmap, lo: float, hi: float) -> np.ndarray:
    """Colour each pixel by its attention on the shared ``lo..hi`` scale, and make low attention
    transparent, so the image stays visible where the heads do not look."""
    finite = np.isfinite(r)
    rel = np.clip(np.where(finite, (r - lo) / (hi - lo) if hi > lo else 0.5, 0.0), 0.0, 1.0)
    rgba = cmap(rel)
    rgba[..., 3] = np.where(finite, 0.1 + 0.75 * rel, 0.0)
    return rgba


def _box(ax, box, color, style, label):
    from matplotlib.patches import Rectangle

    x1, y1, x2, y2 = box
    ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=color, linewidth=2,
                           linestyle=style, label=label))


def attention_overlay(att: np.ndarray, rects: np.ndarray, top: Sequence[Sequence[int]], *, image: np.ndarray | None,
                      gt_box: Sequence[float] | None, pred_box: Sequence[float] | None, title: str,
                      min_overlap: float = 0.0) -> bytes:
    """Input image plus three overlays (all heads / top-k VRHs / all but top-k) with GT (green, solid) and
    predicted (cyan, dashed) boxes on every panel. ``att``: ``[L, H, V]``; ``rects``: ``[V, 4]`` xyxy;
    ``image``: ``[H, W, 3]`` RGB (:func:`load_image`), or None for an "image not found" panel;
    ``min_overlap``: the detection run's ``--min-overlap``, for the share "in the GT box" (:func:`mass_in_box`)."""
    att = np.asarray(att, dtype=float)
    rects = np.asarray(rects, dtype=float)
    if att.ndim != 3 or rects.shape != (att.shape[2], 4):
        raise ValueError(f"overlay needs att [L, H, V] and rects [V, 4]; got {att.shape} and {rects.shape}")
    img = None if image is None else np.asarray(image)
    if img is not None:
        height, width = img.shape[:2]
    else:
        width, height = float(rects[:, 2].max()), float(rects[:, 3].max())
    scale = min(1.0, MAX_SIDE / max(width, height, 1.0))
    if img is not None and scale < 1.0:
        step = max(1, int(1 / scale))
        img = img[::step, ::step]
    panels = head_means(att, top)
    n = len(panels) + 1
    cols = 2 if n == 4 else n  # 2 x 2 stays legible in a 700-px page; 4 in a row shrinks text to ~4 pt
    rows = math.ceil(n / cols)
    fig_w = 3.3 * cols
    panel_h, bar_h = 3.0 * height / max(width, 1.0), 0.12  # inches: an image (~3 in wide), its colour bar
    fig = new_figure(fig_w, rows * (panel_h + bar_h + 1.0) + 1.2)
    # a grid row of colour bars under each row of panels: laid out with the panels, so no label is cut or
    # drawn over the next title, and every panel (the input, which has no bar, too) keeps one size
    grid = fig.add_gridspec(2 * rows, cols, height_ratios=[panel_h, bar_h] * rows)
    axes = [fig.add_subplot(grid[2 * (i // cols), i % cols]) for i in range(rows * cols)]
    bar_axes = [fig.add_subplot(grid[2 * (i // cols) + 1, i % cols]) for i in range(rows * cols)]
    for ax in [*axes[n:], *bar_axes[n:], bar_axes[0]]:
        ax.set_axis_off()
    axes = axes[:n]
    extent = (0, width, height, 0)

    def base(ax, subtitle):
        if img is not None:
            ax.imshow(img, extent=extent)
        else:
            ax.set_facecolor("#dddddd")
            ax.text(width / 2, height / 2, "image not found", ha="center", va="center", color=BASELINE_COLOR)
        ax.set_xlim(0, width)
        ax.set_ylim(height, 0)
        ax.set_aspect("equal")  # pixels square in every panel, the "image not found" one too
        ax.set_anchor("S")  # on its colour bar, whatever room the aspect leaves above
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(subtitle, fontsize=9)
        if gt_box is not None:
            _box(ax, gt_box, GT_COLOR, "-", "ground truth")
        if pred_box is not None:
            _box(ax, pred_box, PRED_COLOR, "--", "prediction")

    base(axes[0], "input")
    cmap = colormaps[OVERLAY_CMAP]
    top_name = next((name for name in panels if name.startswith("top-")), None)
    top_peak = float(np.nanmax(panels[top_name])) if top_name else None
    for ax, cax, (name, vals) in zip(axes[1:], bar_axes[1:], panels.items()):
        lo, hi = panel_range(vals)
        r = raster(vals, rects, width, height, scale)
        share = mass_in_box(np.clip(vals, 0, None), rects, gt_box, min_overlap)
        peak = float(np.nanmax(vals)) if np.isfinite(vals).any() else 0.0
        base(ax, name + "\n" + peak_words(name, peak, top_name, top_peak) +
             (f"\n{share_words(share)} of it {rule_words(min_overlap)}" if share is not None else ""))
        ax.imshow(scaled_rgba(r, cmap, lo, hi), extent=extent, interpolation="nearest")
        bar = fig.colorbar(ScalarMappable(Normalize(lo, hi), cmap), cax=cax, orientation="horizontal",
                           label=scale_words(vals))
        bar.ax.xaxis.set_major_locator(MaxNLocator(4))
        bar.ax.tick_params(labelsize=7)
        bar.ax.xaxis.label.set_fontsize(8)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(loc="lower left", fontsize=7, framealpha=0.85)
    fig.suptitle(wrap_title(title, fig_w - 0.2), fontsize=TITLE_SIZE)
    return to_png(fig)
