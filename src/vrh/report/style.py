"""The report's shared look: colours, figure size/DPI, PNG encoding.

Kept in one place so every figure uses the same colour for the same meaning (VRH red, random grey,
unmasked baseline dashed black, outcome colours) and so figure modules can share it without importing
each other. Figures use the Agg canvas directly (never pyplot): no global backend switch, no leaked
figures, headless-safe. All figure text is plain text (:data:`PLAIN_TEXT`): titles, labels and legends
carry run names and expressions, where a ``$`` is a character, not the start of mathtext.
"""

from __future__ import annotations

import io
import textwrap

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

VRH_COLOR = "#d62728"
VRH_LIGHT = "#f4a3a3"
RANDOM_COLOR = "#7f7f7f"
BASELINE_COLOR = "#222222"
OUTCOME_COLORS = {"correct": "#2e8b57", "mislocated": "#f0a030", "wrong": "#f0a030", "parse_failure": "#7b3294"}
OUTCOME_LABELS = {"correct": "correct", "mislocated": "mislocated", "wrong": "wrong answer",
                  "parse_failure": "parse failure"}
OTHER_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["D", "v", "P", "X", "<", ">", "h", "*"]
DPI = 110
TITLE_SIZE = 10
# rcParams the report's figures are built under (text artists read them when created, tick labels at draw);
# the report writes no mathtext itself, and log axes get plain labels (plain_log_ticks)
PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}


def wrap_title(text: str, width_in: float, fontsize: float = TITLE_SIZE) -> str:
    """``text`` broken into lines that fit ``width_in`` inches: a title wider than its figure is clipped at
    both edges of the PNG (matplotlib's layout engines do not shrink or wrap titles)."""
    chars = max(20, int(width_in * 72 / (0.56 * fontsize)))  # ~0.56 em per character of the sans-serif font
    return "\n".join(textwrap.wrap(text, chars, break_long_words=True, break_on_hyphens=False)) or text


def curve_style(i: int) -> dict:
    """The ``i``-th of 32 distinct (colour, line style, marker) combinations: methods beyond the colour
    cycle still differ in dash and marker, so no two curves of one figure look alike."""
    return dict(color=OTHER_COLORS[i % len(OTHER_COLORS)], linestyle=LINESTYLES[(i // len(OTHER_COLORS)) % 4],
                marker=MARKERS[(i + i // len(OTHER_COLORS)) % len(MARKERS)])


def plain_log_ticks(axis) -> None:
    """Label a log ``axis`` in plain text (``1e−03``): matplotlib's default log labels are mathtext
    (``$\\mathdefault{10^{-3}}$``), shown as those characters under :data:`PLAIN_TEXT`."""
    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))  # as the default: minor labels on short axes


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (no timestamp metadata, so the same data gives the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()
