"""Attention overlays (paper Fig. A1/A2): where do the heads look while the model writes its answer?

Detection stores, for its first few samples, every head's mean attention from the output-token queries
onto the visual tokens (``[L, H, V]``) and the original-image pixel cell of each visual token (``[V, 4]``).
Painting head-averaged attention back onto those cells shows the paper's qualitative claim directly: the
top-k VRHs concentrate on the referred object, the other heads do not. The panels of one sample share one
colour scale (the lowest to the highest head-averaged attention over all its panels, printed on the
colour bar), so a panel whose heads attend weakly looks faint: normalising each panel to its own peak made
"all but the top-k" look as bright as the top-k. Low attention is faded out so the image stays visible;
each title gives the panel's peak value and the share of attention that falls on visual tokens whose cell
centre lies inside the ground-truth box. Which image a sample's overlay may show is decided by the
report (:func:`vrh.report.sections.overlay_image`); this module draws the array it is given, or an
"image not found" panel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from PIL import Image

from vrh.report.style import BASELINE_COLOR, TITLE_SIZE, new_figure, to_png, wrap_title

GT_COLOR = "#00e676"  # paper: green ground truth
# attention from light to dark grey: a scale of lightness alone (perceptually ordered) whose hues no object
# of the world has (red, green, blue, yellow, purple, orange); inferno's purple end read as a purple object
OVERLAY_CMAP = "Greys"
PRED_COLOR = "#00b0ff"  # cyan, so it is never read as "VRH red"
MAX_SIDE = 448  # pixels of the drawn image / attention raster: enough to read, small enough to embed


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


def mass_in_box(values: np.ndarray, rects: np.ndarray, box: Sequence[float] | None) -> float | None:
    """Share of the (non-negative) attention on tokens whose cell centre is inside ``box``."""
    if box is None or values.sum() <= 0:
        return None
    cx, cy = (rects[:, 0] + rects[:, 2]) / 2, (rects[:, 1] + rects[:, 3]) / 2
    inside = (cx >= box[0]) & (cx <= box[2]) & (cy >= box[1]) & (cy <= box[3])
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


def shared_range(panels: dict[str, np.ndarray]) -> tuple[float, float]:
    """``(lo, hi)``: the colour scale shared by every panel of one sample, over their finite values."""
    vals = np.concatenate([np.ravel(v) for v in panels.values()]) if panels else np.zeros(0)
    vals = vals[np.isfinite(vals)]
    return (float(vals.min()), float(vals.max())) if vals.size else (0.0, 1.0)


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
                      gt_box: Sequence[float] | None, pred_box: Sequence[float] | None, title: str) -> bytes:
    """Input image plus three overlays (all heads / top-k VRHs / all but top-k) with GT (green, solid) and
    predicted (cyan, dashed) boxes on every panel. ``att``: ``[L, H, V]``; ``rects``: ``[V, 4]`` xyxy;
    ``image``: ``[H, W, 3]`` RGB (:func:`load_image`), or None for an "image not found" panel."""
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
    fig = new_figure(fig_w, rows * (3.3 * height / max(width, 1.0) + 0.5) + 1.2)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n:]:
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
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(subtitle, fontsize=9)
        if gt_box is not None:
            _box(ax, gt_box, GT_COLOR, "-", "ground truth")
        if pred_box is not None:
            _box(ax, pred_box, PRED_COLOR, "--", "prediction")

    base(axes[0], "input")
    cmap = colormaps[OVERLAY_CMAP]
    lo, hi = shared_range(panels)
    for ax, (name, vals) in zip(axes[1:], panels.items()):
        r = raster(vals, rects, width, height, scale)
        share = mass_in_box(np.clip(vals, 0, None), rects, gt_box)
        base(ax, name + f"\npeak {np.nanmax(vals):.3g}" +
             (f", {100 * share:.0f}% in GT box" if share is not None else ""))
        ax.imshow(scaled_rgba(r, cmap, lo, hi), extent=extent, interpolation="nearest")
    fig.colorbar(ScalarMappable(Normalize(lo, hi), cmap), ax=list(axes), orientation="horizontal",
                 fraction=0.05, shrink=0.5, aspect=40, pad=0.02,
                 label="mean attention per visual token, one scale for all panels (darker = more; each "
                       "panel's peak in its title)")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(loc="lower left", fontsize=7, framealpha=0.85)
    fig.suptitle(wrap_title(title, fig_w - 0.2), fontsize=TITLE_SIZE)
    return to_png(fig)
