"""Reports from run folders (never from models): ``build_report(run_dirs, out_dir, k=None)`` writes one
self-contained ``report.html`` plus ``report.md`` with ``figures/``. ``report_main`` / ``add_arguments``
are the ``vrh report RUN... --out DIR [--k K]`` command. Expected results formats: :mod:`vrh.report.build`.

The names are looked up on first use (PEP 562): ``vrh --help`` adds ``vrh report``'s arguments
(:mod:`vrh.report.arguments`) without importing the builders and matplotlib.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_report", "report_main", "add_arguments"]


def __getattr__(name: str) -> Any:
    if name == "add_arguments":
        from vrh.report.arguments import add_arguments

        return add_arguments
    if name in ("build_report", "report_main"):
        from vrh.report import build

        return getattr(build, name)
    raise AttributeError(f"module 'vrh.report' has no attribute {name!r}")
