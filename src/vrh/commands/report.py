"""``vrh report``: one self-contained HTML (+ Markdown) report from any run folders."""

from __future__ import annotations

import argparse

NAME = "report"
HELP = "one self-contained HTML (+ Markdown) report from any run folders"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from vrh.report.arguments import add_arguments as add

    add(p)


def main(args: argparse.Namespace) -> int:
    from vrh.analyses.reporting import report_main

    return report_main(args)  # the report with every registered analysis' sections
