"""A study's cells: one ordinary run folder each (what ``vrh detect`` / ``sweep`` / ``compare`` /
``transfer`` / ``stability`` / ``dpo-pairs`` write), plus one ``data`` cell per dataset to prepare, with the
cells each depends on and its state.

A cell is a value: ``kind`` (its command), the ``model`` it loads, its ``folder`` under the study's
``DIR``, ``deps`` (cell ids) and ``settings``: the command's options exactly as its ``Config`` takes them,
with paths inside ``DIR`` written ``@out/<relative>`` so a study folder can move. Its ``fingerprint`` hashes
the kind, the settings and the dependencies' fingerprints: a changed detection changes every cell that
reads its heads.

States (:func:`cell_state`): ``done`` (finished, same fingerprint as recorded when it started), ``partial``
(started with these settings, not finished: it resumes as ``--resume`` does), ``changed`` (the folder holds
a run made with other settings, or one the study did not make: it is redone), ``missing``. The record of
what a cell was started with is ``DIR/.study/cells/<id>.json``, written before the cell runs (one file per
cell, so parallel workers never write the same file).

Adding a kind of cell (e.g. DPO training, issue 28): a builder ``(study) -> list[Cell]`` registered with
:func:`register_cell_kind` under the kind's name (in :mod:`vrh.study.kinds`, or a module of its own
imported there), its ``[table]`` and keys in :data:`vrh.study.spec.PROTOCOL_KEYS` / ``DEFAULTS`` (bounds in
:data:`vrh.study.values.RULES`), and the command module that runs it in :data:`COMMANDS`; plan, states,
resume, both executors and the report's sub-runs then handle it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT = "@out/"  # prefix of a path inside the study folder, in a cell's settings
STATE_DIR = ".study"
STATES = ("done", "partial", "changed", "missing")
# the study folder's own entries beside the cells' folders (its bookkeeping, its run record, the default report)
STUDY_ENTRIES = (STATE_DIR, "config.json", "results.json", "report")


@dataclass(frozen=True)
class Cell:
    id: str  # kind/model/benchmark, e.g. "sweep/A/world"
    kind: str
    model: str | None  # the study's model name whose weights the cell loads (None: no model)
    folder: str  # relative to the study folder
    settings: dict[str, Any] = field(hash=False)
    deps: tuple[str, ...] = ()
    fingerprint: str = ""


CellBuilder = Callable[[Any], list[Cell]]
_KINDS: dict[str, CellBuilder] = {}


def register_cell_kind(kind: str) -> Callable[[CellBuilder], CellBuilder]:
    """Register the builder of one kind of cell; the order of registration is the order of the plan."""
    def deco(fn: CellBuilder) -> CellBuilder:
        if kind in _KINDS:
            raise ValueError(f"cell kind {kind!r} registered twice")
        _KINDS[kind] = fn
        return fn
    return deco


def cell_kinds() -> dict[str, CellBuilder]:
    """kind -> builder, in registration order."""
    return dict(_KINDS)


def fingerprint(kind: str, settings: dict[str, Any], dep_prints: list[str]) -> str:
    blob = json.dumps({"kind": kind, "settings": settings, "deps": dep_prints}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# cell kind -> the command module that runs it (an added kind adds its command here)
COMMANDS = {"detect": "detect", "sweep": "sweep", "crosstask": "sweep", "compare": "compare",
            "stability": "stability", "transfer": "transfer", "dpo_pairs": "dpo_pairs"}


def command_config(cell: Cell, out: Path):
    """The command module and ``Config`` of ``cell`` in the study folder ``out`` (its folder as the run's
    ``out``, ``resume`` on: an empty folder starts fresh, an interrupted one continues)."""
    import importlib

    mod = importlib.import_module(f"vrh.commands.{COMMANDS[cell.kind]}")
    return mod, mod.Config(**resolve(cell.settings, out), out=str(out / cell.folder), resume=True)


def resolve(settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """``settings`` with every ``@out/`` path made a path inside ``out``; lists become tuples (the
    commands' Config fields are tuples)."""
    def one(v: Any) -> Any:
        if isinstance(v, str) and v.startswith(OUT):
            return str(out / v[len(OUT):])
        if isinstance(v, list):
            return tuple(one(x) for x in v)
        return v
    return {k: one(v) for k, v in settings.items()}


# --- states -------------------------------------------------------------------------------------------
def record_name(cell: Cell) -> str:
    """The file name of ``cell``'s record: its id with ``/`` written ``__`` (names hold no ``__``,
    :data:`vrh.study.spec.RECORD_SEPARATOR`, so no two cells share one)."""
    return cell.id.replace("/", "__") + ".json"


def record_path(out: Path, cell: Cell) -> Path:
    return out / STATE_DIR / "cells" / record_name(cell)


def check_unique(cells: list[Cell]) -> None:
    """Refuse cells that would share a folder, a record file or an id (compared case-insensitively, as a
    macOS or Windows filesystem does), a folder inside another's, or a folder on the study folder's own
    entries (:data:`STUDY_ENTRIES`). The study's name rules make this impossible for the built-in kinds
    (docs/study.md); this guards every kind added later."""
    seen: dict[tuple[str, str], str] = {}
    for c in cells:
        if c.folder.split("/")[0].casefold() in STUDY_ENTRIES:
            raise ValueError(f"cell {c.id}: its folder {c.folder} is the study folder's own entry")
        for what, key in (("folder", c.folder.casefold()), ("record file", record_name(c).casefold()),
                          ("id", c.id.casefold())):
            other = seen.setdefault((what, key), c.id)
            if other != c.id:
                raise ValueError(f"cells {other} and {c.id} would share the {what} {key}; rename a model or dataset")
    folders = sorted((c.folder.casefold().rstrip("/") + "/", c.id) for c in cells)
    for (a, ida), (b, idb) in zip(folders, folders[1:]):
        if b.startswith(a):
            raise ValueError(f"cell {idb}'s folder {b} is inside cell {ida}'s; rename a model or dataset")


def read_record(out: Path, cell: Cell) -> dict[str, Any] | None:
    path = record_path(out, cell)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_record(out: Path, cell: Cell) -> None:
    """What ``cell`` is started with (atomically: a killed write leaves the previous record)."""
    from vrh.runs import write_json

    path = record_path(out, cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"id": cell.id, "kind": cell.kind, "fingerprint": cell.fingerprint,
                      "settings": cell.settings, "deps": list(cell.deps)})


def finished(out: Path, cell: Cell) -> bool:
    """Whether the cell's folder holds a finished result (a run's results.json; a dataset's JSONL and its
    ``data.json`` mark, written last)."""
    from vrh import runs

    folder = out / cell.folder
    if cell.kind == "data":
        return (folder / DATA_MARK).is_file()
    return runs.is_finished(folder)


DATA_MARK = "study_data.json"  # written into a data cell's folder once its dataset is complete


def cell_state(out: Path, cell: Cell) -> tuple[str, list[str]]:
    """``(state, what changed)`` of ``cell`` in the study folder ``out`` (see the module docstring)."""
    from vrh.runs import config_differences

    folder = out / cell.folder
    rec = read_record(out, cell)
    present = folder.is_dir() and any(c.name != ".lock" for c in folder.iterdir())
    if rec is None:
        return ("changed", ["not made by this study"]) if present else ("missing", [])
    if rec.get("fingerprint") != cell.fingerprint:
        diffs = config_differences(rec.get("settings") or {}, cell.settings)
        if not diffs:
            diffs = ["a cell it depends on changed"]
        return ("changed", diffs) if present or finished(out, cell) else ("missing", [])
    if finished(out, cell):
        return "done", []
    return ("partial", []) if present else ("missing", [])
