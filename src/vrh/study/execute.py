"""Running a study's cells: what is not done, in dependency order, each through its kind's library call
(:class:`vrh.study.cells.CellKind`: ``vrh sweep``'s :func:`vrh.experiments.kcurves.run_sweep` with the same
settings value, ...) into its run folder, so a cell's folder is what that command line writes and every
command and ``vrh report`` reads it.

Sequential (:func:`run_study`, the default): one process; a model is loaded once for all of its cells (the
loaded models are kept, up to ``max_loaded``, least recently used dropped first: with 2, a transfer pair
runs without reloading either model). A cell is recorded as started (:func:`vrh.study.cells.write_record`)
before it runs and resumes with ``--resume`` semantics when it was interrupted; a cell whose settings changed
is cleared first (only what a vrh run wrote, :func:`vrh.runs.clear_run_folder`) and rerun.

Across machines (:mod:`vrh.study.cluster`): the same :func:`run_cells` runs inside each job.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh.runs import safe_paths
from vrh.study.cells import STATE_DIR, Cell, cell_kind, cell_state, write_record
from vrh.study.kinds import build_cells

STUDY_COMMAND = "study"


@dataclass
class StudyRun:
    """What one ``vrh study run`` did: cell ids by what happened, model loads, wall time."""

    ran: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    redone: dict[str, list[str]] = field(default_factory=dict)  # id -> what changed
    already_done: list[str] = field(default_factory=list)
    model_loads: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # id -> wall time of the cell
    elapsed_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def command_line(cell: Cell, out: Path) -> list[str] | None:
    """The ``vrh`` command line that writes the same folder as ``cell`` (None for a dataset cell): each
    setting as its option (``ks`` -> ``--ks 0,1,3``), what is unset left to the command's default.

    >>> command_line(Cell("sweep/A/w", "sweep", "A", "A/sweep_w", {"model": "organism", "ks": [0, 3],
    ...                   "heads": "@out/A/detect_w", "n": None}), Path("runs/s"))
    ['vrh', 'sweep', '--model', 'organism', '--ks', '0,3', '--heads', 'runs/s/A/detect_w', '--out', 'runs/s/A/sweep_w']
    """
    return cell_kind(cell.kind).command_line(cell, out)


def check_configs(cells: Sequence[Cell], out: Path) -> None:
    """Build every cell's settings value (its own checks run), before anything runs."""
    for c in cells:
        try:
            cell_kind(c.kind).check(c, out)
        except (TypeError, ValueError) as e:
            raise ValueError(f"cell {c.id}: {e}") from None


class ModelCache:
    """Loaded models by study name, at most ``max_loaded``, least recently used dropped first."""

    def __init__(self, max_loaded: int = 2):
        self.max_loaded = max(1, max_loaded)
        self.models: OrderedDict[str, Any] = OrderedDict()
        self.loads: dict[str, int] = {}

    def get(self, name: str, cfg: Any) -> Any:
        from vrh.experiments.setup import load

        if name in self.models:
            self.models.move_to_end(name)
            return self.models[name]
        while len(self.models) >= self.max_loaded:
            self.models.popitem(last=False)
            _free_memory()
        self.models[name] = lm = load(cfg)
        self.loads[name] = self.loads.get(name, 0) + 1
        return lm


def _free_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def run_cell(cell: Cell, out: Path, models: ModelCache) -> None:
    """Run one cell into ``out / cell.folder`` (recorded as started first)."""
    safe_paths.check(out, out / cell.folder)  # the cell writes into its folder: no link on the way there
    write_record(out, cell)
    cell_kind(cell.kind).execute(cell, out, models)


def clear_cell(cell: Cell, out: Path) -> None:
    """Remove what a cell's earlier run left, as its kind says (:meth:`vrh.study.cells.CellKind.clear`):
    only what vrh wrote; anything else there is refused by name."""
    folder = out / cell.folder
    if not folder.exists() and not folder.is_symlink():
        return
    safe_paths.check(out, folder)  # a link on the way would lead the removal out of the study folder
    cell_kind(cell.kind).clear(out, cell)


def order(cells: Sequence[Cell], done: set[str], max_loaded: int = 2) -> list[Cell]:
    """``cells`` (not in ``done``) in a dependency order that keeps a model's cells together: among the
    cells whose dependencies are met, one that loads no model first, then one of the model used last, then
    one of a model still loaded (the last ``max_loaded`` used), else the first in plan order.

    >>> c = lambda i, m, *d: Cell(i, "x", m, i, {}, d)
    >>> [x.id for x in order([c("dA", "A"), c("dB", "B"), c("sA", "A", "dA"), c("tB", "B", "dA", "dB")], set())]
    ['dA', 'sA', 'dB', 'tB']
    """
    left, done, out, recent = list(cells), set(done), [], []
    while left:
        ready = [c for c in left if all(d in done for d in c.deps)]
        if not ready:
            raise ValueError("study cells with unmet dependencies: " + ", ".join(c.id for c in left))
        pick = next((c for c in ready if c.model is None), None) \
            or next((c for c in ready if recent and c.model == recent[-1]), None) \
            or next((c for c in ready if c.model in recent), ready[0])
        if pick.model is not None:
            recent = [m for m in recent if m != pick.model][-(max_loaded - 1):] + [pick.model] if max_loaded > 1 \
                else [pick.model]
        out.append(pick)
        left.remove(pick)
        done.add(pick.id)
    return out


def check_study_folder(out: Path) -> None:
    """Refuse an ``--out`` that holds something other than a study (a study writes into any empty folder and
    continues its own)."""
    from vrh.runs import read_json

    if not out.is_dir() or not any(c.name != STATE_DIR for c in out.iterdir()):  # empty, or a study's own lock
        return
    try:
        command = read_json(out / "config.json", expect=dict).get("command")
    except (OSError, ValueError, AttributeError):
        command = None
    if command != STUDY_COMMAND:
        raise FileExistsError(f"--out {out} is not empty and is not a vrh study folder; choose another --out")


class StudyLock:
    """One ``vrh study run`` per study folder (``DIR/.study/lock``, flock)."""

    def __init__(self, out: Path):
        check_study_folder(out)
        # a symlinked .study (or .study/lock) would take the lock and the cell records out of the folder
        safe_paths.mkdirs(out, out / STATE_DIR)
        self.fd = safe_paths.open_fd(out, out / STATE_DIR / "lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise FileExistsError(f"study folder {out} is in use by another vrh study run") from None

    def __enter__(self) -> "StudyLock":
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


def write_study_config(study: Any, out: Path, cells: Sequence[Cell]) -> None:
    """``DIR/config.json``: the study folder as a vrh run that names every cell's folder as a sub-run, so
    ``vrh report DIR`` reads them all."""
    from vrh.runs import environment, write_json
    from vrh.runs.folder import RUN_FORMAT, RUN_MARK

    write_json(out / "config.json", root=out, obj={
        RUN_MARK: RUN_FORMAT, "command": STUDY_COMMAND, "study": str(study.path), "name": study.name,
        "models": {m.name: m.model for m in study.models}, "grids": {k: list(v) for k, v in study.grids.items()},
        "benchmarks": [b.name for b in study.benchmarks], "vqa": [v.name for v in study.vqa],
        "pairs": [list(p) for p in study.pairs], "protocol": {name: table.record() for name, table in study.protocol.items()},
        "cells": [{"id": c.id, "kind": c.kind, "model": c.model, "benchmark": c.benchmark, "folder": c.folder,
                   "source": c.source} for c in cells],
        "datasets": {d.name: d.settings() for d in (*study.benchmarks, *study.vqa)},
        "subruns": [c.folder for c in cells if cell_kind(c.kind).writes_run_folder], "environment": environment()})


def plan_states(study: Any, out: Path) -> list[tuple[Cell, str, list[str]]]:
    """Every cell with its state and what changed."""
    return [(c, *cell_state(out, c)) for c in build_cells(study)]


@contextmanager
def study_session(study: Any, out: str | Path, log: Callable[[str], None],
                  **record: Any) -> Iterator[tuple[list[Cell], StudyRun]]:
    """The frame every executor runs a study in: ``out`` locked, the cells built and checked, the study's
    config written, changed cells cleared; yields (cells to run, the run's bookkeeping), and on a clean exit
    writes ``out/results.json`` (plus ``record``'s keys, e.g. the executor)."""
    from vrh.runs import write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with StudyLock(out):
        cells = build_cells(study)
        check_configs(cells, out)
        write_study_config(study, out, cells)
        report = StudyRun()
        yield prepare_cells(cells, out, report, log), report
        report.elapsed_seconds = time.time() - t0
        write_json(out / "results.json", {"schema_version": 1, **report.to_json(),
                                          "cells": {c.id: c.folder for c in cells}, **record}, root=out)


def run_study(study: Any, out: str | Path, *, max_loaded: int = 2, log: Callable[[str], None] = print) -> StudyRun:
    """Run what is not done of ``study`` in ``out``, sequentially (see the module docstring)."""
    with study_session(study, out, log) as (todo, report):
        run_cells(todo, Path(out), report, max_loaded=max_loaded, log=log)
    return report


def _tidy_finished(folder: Path) -> None:
    """A finished cell's ``detect_state/``, left by a kill between its ``results.json`` and the clean-up, removed
    as the finished run would have (kept, it stayed for good: the cell counts as done and never runs again)."""
    from vrh import runs

    if (folder / runs.DETECT_STATE).is_dir() and runs.is_finished(folder):
        run = runs.RunFolder(folder, resume=True)  # the folder's lock: no other process is writing it
        try:
            runs.clear_batch_states(run)
        finally:
            run.release()


def prepare_cells(cells: Sequence[Cell], out: Path, report: StudyRun, log: Callable[[str], None]) -> list[Cell]:
    """The cells to run, with changed ones cleared (and said so); fills ``report``'s bookkeeping."""
    todo = []
    for c in cells:
        state, diffs = cell_state(out, c)
        if state == "done":
            report.already_done.append(c.id)
            _tidy_finished(out / c.folder)
            continue
        if state == "changed":
            report.redone[c.id] = diffs
            log(f"study: {c.id} changed ({'; '.join(diffs[:3])}{' ...' if len(diffs) > 3 else ''}): redone")
            clear_cell(c, out)
        elif state == "partial":
            report.resumed.append(c.id)
            log(f"study: {c.id} was interrupted: resumed")
        todo.append(c)
    return todo


def run_cells(todo: Sequence[Cell], out: Path, report: StudyRun, *, max_loaded: int = 2,
              log: Callable[[str], None] = print, done: set[str] | None = None) -> None:
    """Run ``todo`` in dependency order in this process; ``done``: ids whose results already exist
    (default: every cell not in ``todo`` is taken as done)."""
    models = ModelCache(max_loaded)
    ids = {c.id for c in todo}
    done = set(done) if done is not None else {d for c in todo for d in c.deps if d not in ids}
    if not todo:
        log("study: nothing to do, every cell is done")
    for i, c in enumerate(order(todo, done, max_loaded)):
        log(f"study: [{i + 1}/{len(todo)}] {c.id} -> {c.folder}")
        t = time.time()
        run_cell(c, out, models)
        report.seconds[c.id] = round(time.time() - t, 3)
        report.ran.append(c.id)
    for name, n in models.loads.items():
        report.model_loads[name] = report.model_loads.get(name, 0) + n
