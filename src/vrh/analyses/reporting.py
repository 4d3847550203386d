"""The report with every registered analysis' sections (:func:`vrh.analyses.registry.report_sections`): what
``vrh report``, ``vrh study report`` and the demo build, and the Python entry point ``build_report``. The report
itself (:mod:`vrh.report`) never imports an analysis: it is handed their sections here."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vrh.analyses.registry import report_sections


def build_report(run_dirs: Sequence[str | Path], out_dir: str | Path, **options: Any) -> dict[str, Path]:
    """:func:`vrh.report.build.build_report` with every registered section (``options``: ``k``, ``title``)."""
    from vrh.report.build import build_report as build

    return build(run_dirs, out_dir, sections=report_sections(), **options)


def build_sections(runs: list, k: Any) -> list:
    """:func:`vrh.report.build.build_sections` with every registered section."""
    from vrh.report.build import build_sections as build

    return build(runs, k, report_sections())


def report_main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """``vrh report``: :func:`vrh.report.build.report_main` with every registered section."""
    from vrh.report.build import report_main as main

    return main(args, report_sections())
