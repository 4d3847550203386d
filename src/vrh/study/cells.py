"""A study's cells: one ordinary run folder each (what ``vrh detect`` / ``sweep`` / ``compare`` /
``transfer`` / ``stability`` / ``dpo-pairs`` write), plus one ``data`` cell per dataset to prepare, with the
cells each depends on and its state.

A cell is a value: ``kind``, the ``model`` it loads, its ``folder`` under the study's ``DIR``, the
``benchmark`` (or dataset) it is about, ``deps`` (cell ids) and ``settings``: its kind's settings value
(:mod:`vrh.experiments.settings`, the command's options) exactly as that type takes them, with paths inside
``DIR`` written ``@out/<relative>`` so a study folder can move. Its ``fingerprint`` hashes the kind, the
settings and the dependencies' fingerprints: a changed detection changes every cell that reads its heads.

States (:func:`cell_state`): ``done`` (finished, same fingerprint as recorded when it started), ``partial``
(started with these settings, not finished: it resumes as ``--resume`` does), ``changed`` (the folder holds
a run made with other settings, or one the study did not make: it is redone), ``missing``. The record of
what a cell was started with is ``DIR/.study/cells/<id>.json``, written before the cell runs (one file per
cell, so parallel workers never write the same file).

A kind of cell registers once (:func:`register_cell_kind`), with everything the study needs of it: a
:class:`CellKind` names its builder ``(study) -> list[Cell]``, its table in the study file with the table's
keys, defaults and bounds, and the library call its cells run with the settings type they build. The study
file's grammar (:mod:`vrh.study.spec`), the table's type (:class:`Table`, a frozen dataclass made from the
keys and defaults), the checks, the plan, states, resume, both executors and the report's sub-runs are
derived from the registrations; nothing else names a kind.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import keyword
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from vrh.options import ShareOptions

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
    benchmark: str | None = None  # the benchmark (or dataset) the cell is about
    source: str | None = None  # transfer: the model whose heads are masked in ``model``


CellBuilder = Callable[[Any], list[Cell]]
Rule = Callable[[Any], "str | None"]  # a value -> what is wrong with it (vrh.study.values)


@dataclass(frozen=True)
class Table:
    """A protocol table of the study file as read: the base of each kind's table type
    (:attr:`CellKind.table_type`), whose fields are the kind's ``keys``: a key the file does not write holds
    its default, or None when it has none (TOML has no null, so None is always "not written").

    ``written``: the keys the file wrote, in its order, so :meth:`record` gives back the dict the study has
    always recorded (config.json's ``protocol``) key for key and in the same order.
    """

    written: tuple[str, ...] = field(default=(), kw_only=True, repr=False)
    DEFAULTS: ClassVar[Mapping[str, Any]] = {}

    def record(self) -> dict[str, Any]:
        """The table as the study records it: the defaults, then the written keys that have none."""
        return {k: getattr(self, k) for k in (*self.DEFAULTS, *self.written)}


def _table_type(table: str, keys: Mapping[str, Any], defaults: Mapping[str, Any]) -> type[Table]:
    """The frozen dataclass of ``[table]``: one field per key, typed as the key's TOML type(s)."""
    def one(key: str, types: Any) -> tuple[str, Any, Any]:
        kind = functools.reduce(lambda a, b: a | b, types) if isinstance(types, tuple) else types
        value = defaults.get(key)
        # a list default is copied for each table read, as a dataclass requires of a mutable default
        return key, kind | None, field(default_factory=lambda: copy.deepcopy(value))
    name = "".join(part.title() for part in table.split("_")) + "Table"
    return dataclasses.make_dataclass(name, [one(k, t) for k, t in keys.items()], bases=(Table,), frozen=True,
                                      namespace={"DEFAULTS": dict(defaults), "__module__": __name__})


@dataclass(frozen=True)
class CellKind:
    """What the study needs of one kind of cell.

    ``build``: ``(study) -> list[Cell]``, the kind's cells in plan order (a dependency before its dependents).
    ``table``: its table in the study file (None: none) with its ``keys`` (key -> TOML type, or a tuple of
    types), ``defaults`` (the value of a key the file does not write) and ``rules`` (key -> a bound beyond the
    type, :mod:`vrh.study.values`); a table left out of the file makes no cells of the kind unless ``always``.
    ``settings`` and ``run``: the settings type a cell's settings build (with the cell's folder as ``out`` and
    ``resume`` on, so an interrupted cell continues) and the library call that runs it, ``run(settings, lm)``
    (:mod:`vrh.experiments`) -- the same call and value as the command ``settings.COMMAND``'s.

    A kind whose cells are not run folders (the datasets, :class:`vrh.study.datasets.DatasetKind`) overrides
    :meth:`execute`, :meth:`check`, :meth:`finished`, :meth:`clear` and :meth:`command_line`.
    """

    name: str
    build: CellBuilder
    table: str | None = None
    keys: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    rules: Mapping[str, Rule] = field(default_factory=dict)
    always: bool = False
    settings: type | None = None
    run: Callable[[Any, Any], Any] | None = None

    writes_run_folder: ClassVar[bool] = True  # a vrh run folder: a sub-run of the study's report

    @functools.cached_property
    def table_type(self) -> type[Table]:
        """The frozen dataclass its table is read into (:class:`Table`), made from ``keys`` and ``defaults``."""
        return _table_type(self.table or self.name, self.keys, self.defaults)

    def read_table(self, written: Mapping[str, Any]) -> Table:
        """Its table with the keys the file wrote (``written``, checked) and the defaults of the others."""
        return self.table_type(**written, written=tuple(written))

    def configure(self, cell: Cell, out: Path) -> Any:
        """``cell``'s settings value in the study folder ``out``."""
        return self.settings(**resolve(cell.settings, out), out=str(out / cell.folder), resume=True)

    def check(self, cell: Cell, out: Path) -> None:
        """Build the settings value, so its own checks run (a TypeError or ValueError names the problem)."""
        self.configure(cell, out)

    def execute(self, cell: Cell, out: Path, models: Any) -> None:
        """Run ``cell`` into ``out / cell.folder`` with the model ``models.get(name, settings)`` gives."""
        settings = self.configure(cell, out)
        self.run(settings, models.get(cell.model, settings) if cell.model is not None else None)

    def finished(self, out: Path, cell: Cell) -> bool:
        """Whether the cell's folder holds a finished result (a run's results.json)."""
        from vrh import runs

        return runs.is_finished(out / cell.folder)

    def clear(self, out: Path, cell: Cell) -> None:
        """Remove what an earlier run of ``cell`` left: only a vrh run's files (anything else is refused by
        name, :func:`vrh.runs.clear_run_folder`)."""
        from vrh.runs import clear_run_folder

        clear_run_folder(out / cell.folder)

    def command_line(self, cell: Cell, out: Path) -> list[str] | None:
        """The ``vrh`` command line that writes the same folder as ``cell``: each setting as its option
        (``ks`` -> ``--ks 0,1,3``), what is unset left to the command's default."""
        args = ["vrh", self.settings.COMMAND]
        for key, value in resolve(cell.settings, out).items():
            if value is None:
                continue
            if isinstance(value, bool):  # a switch: its flag when off a True default (--no-share-vision) or on
                field = next(f for f in dataclasses.fields(self.settings) if f.name == key)
                if value != field.default:
                    meta = field.metadata["vrh_option"]
                    args.append(meta["negate"] if field.default else meta["flag"] or "--" + key.replace("_", "-"))
                continue
            args += ["--" + key.replace("_", "-"),
                     ",".join(map(str, value)) if isinstance(value, tuple) else str(value)]
        return args + ["--out", str(out / cell.folder)]


_KINDS: dict[str, CellKind] = {}  # in registration order: the order of the study file's tables
_PLAN: list[str] = []  # the order of the plan


def register_cell_kind(kind: CellKind, *, plan_after: str | None = None) -> CellKind:
    """Register one kind of cell. Its table comes after the tables registered before it; its cells come
    after theirs in the plan too, or right after ``plan_after``'s (a kind registered before it)."""
    if kind.name in _KINDS:
        raise ValueError(f"cell kind {kind.name!r} registered twice")
    if kind.table is not None and any(k.table == kind.table for k in _KINDS.values()):
        raise ValueError(f"cell kind {kind.name!r}: the table [{kind.table}] is another kind's")
    if (kind.settings is None) != (kind.run is None) or (kind.settings is None and kind.writes_run_folder):
        raise TypeError(f"cell kind {kind.name!r}: a run-folder kind names its settings type and its library call")
    unknown = sorted((set(kind.defaults) | set(kind.rules)) - set(kind.keys))
    if unknown:
        raise ValueError(f"cell kind {kind.name!r}: defaults or rules for keys its table does not have: {unknown}")
    taken = sorted(k for k in kind.keys
                   if not k.isidentifier() or keyword.iskeyword(k) or k.startswith("_") or hasattr(Table, k))
    if taken:
        raise ValueError(f"cell kind {kind.name!r}: keys that cannot be its table type's fields: {taken}")
    if plan_after is not None and plan_after not in _KINDS:
        raise ValueError(f"cell kind {kind.name!r}: plan_after {plan_after!r} is not a registered kind")
    _KINDS[kind.name] = kind
    _PLAN.insert(_PLAN.index(plan_after) + 1 if plan_after is not None else len(_PLAN), kind.name)
    return kind


def _analyses_kinds() -> None:
    """Import the modules registered analyses name as registering their cell kinds (``Analysis.cell_kinds``:
    an analysis of a user's own package brings its kind with it)."""
    import importlib

    from vrh.analyses.registry import analyses

    for analysis in analyses().values():
        for module in analysis.cell_kinds:
            importlib.import_module(module)


def cell_kinds() -> dict[str, CellKind]:
    """kind name -> :class:`CellKind`, in plan order."""
    _analyses_kinds()
    return {name: _KINDS[name] for name in _PLAN}


def cell_kind(name: str) -> CellKind:
    _analyses_kinds()
    return _KINDS[name]


def study_tables() -> dict[str, CellKind]:
    """table name -> the kind that reads it, in the order the study file's grammar lists them."""
    _analyses_kinds()
    return {k.table: k for k in _KINDS.values() if k.table is not None}


# settings that change how a cell computes, never what (vrh.options.ShareOptions): not in its fingerprint, so
# turning them off or on does not make a finished cell run again
NOT_FINGERPRINTED = tuple(f.name for f in dataclasses.fields(ShareOptions))


def fingerprint(kind: str, settings: dict[str, Any], dep_prints: list[str]) -> str:
    settings = {k: v for k, v in settings.items() if k not in NOT_FINGERPRINTED}
    blob = json.dumps({"kind": kind, "settings": settings, "deps": dep_prints}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resolve(settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """``settings`` with every ``@out/`` path made a path inside ``out``; lists become tuples (the
    settings types' fields are tuples)."""
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
    from vrh.infra.json_text import read_json

    path = record_path(out, cell)
    try:  # a record that is not a small JSON object is no record of this study: the cell is redone
        return read_json(path, max_bytes=2**24, max_depth=64, expect=dict)
    except (OSError, ValueError):
        return None


def write_record(out: Path, cell: Cell) -> None:
    """What ``cell`` is started with (atomically: a killed write leaves the previous record)."""
    from vrh.runs import write_json

    from vrh.runs import safe_paths

    path = record_path(out, cell)
    safe_paths.mkdirs(out, path.parent)  # .study/cells below the study folder, neither of them a link
    write_json(path, {"id": cell.id, "kind": cell.kind, "fingerprint": cell.fingerprint,
                      "settings": cell.settings, "deps": list(cell.deps)}, root=out)


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
        return ("changed", diffs) if present or cell_kind(cell.kind).finished(out, cell) else ("missing", [])
    if cell_kind(cell.kind).finished(out, cell):
        return "done", []
    return ("partial", []) if present else ("missing", [])
