"""Terminal output: progress bars for every loop a user waits for, and small summary tables."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

console = Console(stderr=True)


@contextmanager
def progress(total: int, description: str) -> Iterator["callable"]:
    """``with progress(n, "detect") as advance: ... advance(k)``; silent when VRH_NO_PROGRESS is set."""
    if os.environ.get("VRH_NO_PROGRESS"):
        yield lambda n=1: None
        return
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r])
    Console().print(table)
