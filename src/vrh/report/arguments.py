"""The arguments of ``vrh report RUN... --out DIR [--k K] [--title T]``, apart from the report's builders: ``vrh
--help`` builds every command's parser, and importing :mod:`vrh.report.build` costs matplotlib and numpy
(about 0.6 s of CPU) for a command that is not run."""

from __future__ import annotations

import argparse

DEFAULT_TITLE = "Visual Retrieval Heads report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``vrh report RUN... --out DIR [--k K]`` (for the main CLI's subparser)."""
    p.add_argument("runs", nargs="+", help="run folders written by vrh commands")
    p.add_argument("--out", required=True, help="folder to write report.html, report.md and figures/ into")
    p.add_argument("--k", type=int, default=None,
                   help="top heads to mark and to average in attention overlays (default: the k the runs were made "
                        "with; 20, fewer on tiny models, when no run records one)")
    p.add_argument("--title", default=None,
                   help=f"the report's title, shown as plain text (default: 'Study report: NAME' for a study folder, "
                        f"else '{DEFAULT_TITLE}')")
