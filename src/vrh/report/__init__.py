"""Reports from run folders (never from models): ``build_report(run_dirs, out_dir, k=None)`` writes one
self-contained ``report.html`` plus ``report.md`` with ``figures/``. ``report_main`` / ``add_arguments``
are the ``vrh report RUN... --out DIR [--k K]`` command. Expected results formats: :mod:`vrh.report.build`.
"""

from vrh.report.build import add_arguments, build_report, report_main

__all__ = ["build_report", "report_main", "add_arguments"]
