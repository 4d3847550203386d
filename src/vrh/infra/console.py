"""Terminal output: progress bars for every loop a user waits for, and small summary tables.

Nothing printed here is read as rich markup (or ``:emoji:`` codes): a line carries paths, model ids and
dataset names the user typed, and ``--out runs/exp[v2]`` must print as typed, not as ``runs/exp`` (``[v2]``
taken for a style tag) or a crash (``[/x]``, a closing tag that closes nothing). Colour is given as a
``Text`` style instead (:func:`warn`, ``Text.assemble``).
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
from contextlib import contextmanager
from datetime import timedelta
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.text import Text
from rich.table import Table

# soft_wrap: a message is one line however long (a log cut at 80 columns, with trailing blanks, breaks grep);
# markup and emoji off: a line prints its text as given (module docstring)
console = Console(stderr=True, soft_wrap=True, markup=False, emoji=False)


LOG_EVERY_S = 30.0  # without a terminal, a progress line every tenth of the work or every 30 s, the first to come


def _interactive() -> bool:
    """Whether stderr can show a live bar (a terminal, or a notebook, which rich renders as a widget)."""
    return console.is_terminal or console.is_jupyter


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # sys.stderr looked up now, so redirection and capsys apply


def _clock_text(seconds: float) -> str:
    """``H:MM:SS``, the form rich's bar columns use.

    >>> _clock_text(12.7), _clock_text(3725)
    ('0:00:12', '1:02:05')
    """
    return str(timedelta(seconds=int(max(seconds, 0.0))))


def rate_text(done: int, seconds: float) -> str:
    """Items per second, to three significant digits; ``?`` before anything finished.

    >>> rate_text(120, 15.0), rate_text(3, 40.0), rate_text(0, 5.0)
    ('8/s', '0.075/s', '?/s')
    """
    return f"{done / seconds:.3g}/s" if done > 0 and seconds > 0 else "?/s"


class LineProgress:
    """Progress as plain lines for logs (CI, ``nohup``, a redirected stderr), where a live bar is noise.

    A line is written when the done count crosses the next tenth of ``total`` or ``every_s`` seconds
    after the previous line (checked on each ``advance``; nothing runs in the background), and once more
    by :meth:`close` unless the last line already showed the final count::

        sweep grounding: 120/400 generations (30%) 0:00:12 elapsed, 10/s, ETA 0:00:28

    ``initial``: the count already done when this run started (a resumed run), left out of rate and ETA;
    ``advance(n, detail)``: ``detail`` ends the line (a training step's loss).
    """

    def __init__(self, total: int, description: str, *, unit: str = "samples",
                 clock: Callable[[], float] = time.monotonic, write: Callable[[str], None] = _stderr_line,
                 every_s: float = LOG_EVERY_S, initial: int = 0):
        self.total, self.description, self.unit = total, description, unit
        self.clock, self.write, self.every_s = clock, write, every_s
        self.done = self.initial = initial
        self.detail = ""
        self.start = self.last_time = clock()
        self.last_done: int | None = None  # done count of the last line written

    def _tenths(self, done: int) -> int:
        return int(done * 10 // self.total) if self.total > 0 else 0

    def line(self) -> str:
        elapsed = self.clock() - self.start
        total, done = self.total, self.done
        pct = min(100, int(100 * done / total)) if total > 0 else 100
        ran = done - self.initial  # in this run
        if done >= total:
            eta = "0:00:00"
        elif ran > 0:
            eta = _clock_text(elapsed / ran * (total - done))
        else:
            eta = "?"
        return (f"{self.description}: {done}/{total} {self.unit} ({pct}%) {_clock_text(elapsed)} elapsed, "
                f"{rate_text(ran, elapsed)}, ETA {eta}" + (f"; {self.detail}" if self.detail else ""))

    def _emit(self) -> None:
        self.write(self.line())
        self.last_done, self.last_time = self.done, self.clock()

    def advance(self, n: int = 1, detail: str = "") -> None:
        before, self.done, self.detail = self.done, self.done + n, detail
        crossed = self._tenths(self.done) > self._tenths(before)
        if crossed or self.clock() - self.last_time >= self.every_s:
            self._emit()

    def close(self) -> None:
        if self.last_done != self.done:
            self._emit()


class _RateColumn(ProgressColumn):
    """The bar's rate in the task's own unit (rich's speed columns speak bytes)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:.3g} {task.fields.get('unit', '')}/s" if task.speed else "?", style="progress.data.speed")


_SHOWN = contextvars.ContextVar("vrh_progress_shown", default=True)


@contextmanager
def progress_shown(show: bool = False) -> Iterator[None]:
    """``with progress_shown(False): vrh.detect_heads(...)``: no progress from any library call in the block
    (the Python side of ``VRH_NO_PROGRESS``; ``show=True`` leaves it as it is). Library functions that a
    notebook calls also take ``progress=False``, which is this block around their loop."""
    token = _SHOWN.set(_SHOWN.get() and show)
    try:
        yield
    finally:
        _SHOWN.reset(token)


def progress_enabled() -> bool:
    """Whether progress is shown at all: not inside ``progress_shown(False)``, not when ``VRH_NO_PROGRESS``
    is set, and only on rank 0 of a data-parallel run (every rank's bar would interleave)."""
    from vrh.infra.distributed import world

    return _SHOWN.get() and not os.environ.get("VRH_NO_PROGRESS") and world().is_main


@contextmanager
def progress(total: int, description: str, *, unit: str = "samples", interactive: bool | None = None,
             clock: Callable[[], float] = time.monotonic, write: Callable[[str], None] = _stderr_line
             ) -> Iterator[Callable[..., None]]:
    """``with progress(n, "detect") as advance: ... advance(k)``; ``unit`` names what is counted.

    A rich bar on a terminal (or notebook); plain :class:`LineProgress` lines when stderr is not one
    (``interactive`` overrides the check; ``clock`` and ``write`` feed those lines, for tests); silent
    when VRH_NO_PROGRESS is set and on every rank but 0 of a data-parallel run (:func:`progress_enabled`).
    The final line is written even when the loop raises, so a log shows how far a failed run got.
    """
    if not progress_enabled():
        yield lambda n=1: None
        return
    if not (_interactive() if interactive is None else interactive):
        lines = LineProgress(total, description, unit=unit, clock=clock, write=write)
        try:
            yield lines.advance
        finally:
            lines.close()
        return
    bar = Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[unit]}"), TaskProgressColumn(), _RateColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn(), console=console, transient=False)
    with bar:
        task = bar.add_task(description, total=total, unit=unit)
        yield lambda n=1: bar.advance(task, n)


def quiet_library_progress() -> None:
    """Silence transformers' and huggingface_hub's own bars ("Loading weights") when vrh shows none, or
    writes to a log rather than a terminal: one line per message there."""
    if progress_enabled() and _interactive():
        return
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
    except (ImportError, AttributeError):
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass


def head_text(head) -> str:
    """A head as the CLI writes it (``--mask-heads 3:1``), the one notation of every output: ``LAYER:HEAD``,
    0-based.

    >>> head_text((3, 1)), heads_text([(0, 5), (3, 3)])
    ('3:1', '0:5 3:3')
    """
    layer, h = head
    return f"{int(layer)}:{int(h)}"


def heads_text(heads, sep: str = " ") -> str:
    """Heads in :func:`head_text`'s notation, joined by ``sep``."""
    return sep.join(head_text(h) for h in heads)


def percent_text(x: float | None, digits: int = 1) -> str:
    """An accuracy (a fraction in results.json) as every console line prints it: a percentage.

    >>> percent_text(0.735), percent_text(None), percent_text(1.0)
    ('73.5%', '-', '100.0%')
    """
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def is_main_rank() -> bool:
    """True on rank 0 of a data-parallel run (and in any single process): results print there only."""
    from vrh.infra.distributed import world

    return world().is_main


def print_result(text: str) -> None:
    """A result line on stdout (progress and notes go to stderr: ``vrh ... | tee`` keeps the results), once:
    on rank 0 only of a data-parallel run."""
    if is_main_rank():
        print(text, flush=True)


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    """A result table on stdout (progress and notes go to stderr: ``vrh ... | tee`` keeps the results), on
    rank 0 only of a data-parallel run."""
    if not is_main_rank():
        return
    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r])
    Console(markup=False, emoji=False).print(table)  # title and cells as text (module docstring)


def warn(message: str, label: str = "warning:") -> None:
    """One line on stderr: ``label`` in yellow, then ``message`` as given (never markup)."""
    console.print(Text.assemble((label, "yellow"), " ", str(message)))


def report_skipped(skipped: list[dict], what: str) -> None:
    """One warning line for samples a run skips (``{"id", "reason"}`` each): how many, the first reason and
    the ids it names."""
    if not skipped:
        return
    ids = ", ".join(repr(str(r["id"]))[:60] for r in skipped[:3]) + (" ..." if len(skipped) > 3 else "")
    console.print(Text.assemble((f"{what}: {len(skipped)} sample(s) skipped", "yellow"),
                                f" ({ids}): {skipped[0]['reason']}; listed in results.json"))


_CONTROL_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")  # controls, format (bidi overrides), surrogates, separators


def printable(text: str) -> str:
    """``text`` with every character that would steer a terminal written as its escape: C0/C1 controls
    (ESC sequences, NUL, BEL, newlines), bidirectional overrides and other format characters, line and
    paragraph separators. For text a user's file supplies (a study's name) printed as one line; a
    printable string comes back unchanged.

    >>> printable("study \\x1b[31mred\\u202e\\x00"), printable("K\u00f6ln 20%")
    ('study \\\\x1b[31mred\\\\u202e\\\\x00', 'K\u00f6ln 20%')
    """
    import unicodedata

    return "".join(ch if unicodedata.category(ch) not in _CONTROL_CATEGORIES
                   else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}" if ord(ch) < 0x10000
                         else f"\\U{ord(ch):08x}")
                   for ch in text)
