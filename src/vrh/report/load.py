"""Read run folders for the report, forgivingly, and only through :mod:`vrh.runs`.

A report is often built while runs are still going or after one crashed, and from runs written by older
commands. So loading never raises on a run's *content*: an unreadable results or head-score file becomes
``None`` plus a note in ``Run.problems`` that the report shows. Only a path that is not a run folder at all
(no config) is an error, because that is a typo.

Every artefact is read with the typed readers of :mod:`vrh.runs` (the run-folder contract); this package
never names an artefact file itself (a test enforces it). Results are read as the typed value of the run's
command (:attr:`Run.res`, :func:`vrh.runs.results_from_json`: a missing key is None, an unknown one kept),
head scores as :class:`vrh.runs.HeadScores`. Whether a run finished follows the contract too: the results
file is written last, so a folder without it did not finish (:attr:`Run.finished`).

Which runs a report covers (:func:`load_runs`): a run whose config or results names sub-runs (``vrh demo``'s
``subruns``, later a study's) stands for them too, so ``vrh report runs/demo`` reports everything the demo
made. Each folder is read once, however it was reached (given twice, given beside the run that names it, or
named by two runs): a report that shows one run twice reads as two results. Sub-runs are read only inside
the folder of the run naming them, as overlay images are: a results file can name any path.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from vrh import runs

# sample-record kinds written by sweeps before conditions were typed ("vrh": a sweep's top-k, "method": a
# comparison's top-k of a named method), as the kinds of vrh.experiments.conditions.KINDS
_OLD_KINDS = {"vrh": "top_k", "method": "top_k"}


def sample_kind(record: dict[str, Any]) -> str | None:
    """The condition kind of a sample record (none / top_k / random / list), old sweep kinds mapped."""
    kind = record.get("kind")
    return _OLD_KINDS.get(kind, kind) if isinstance(kind, str) else None


@dataclass(frozen=True)
class Control:
    """A run's random controls, every task's together (a demo has one per task): each per-k entry with its
    task (None for a run of one task), and every warning (prefixed by its task where there are several)."""

    per_k: list[tuple[str | None, runs.ControlEntry]]
    warnings: list[str]


@dataclass
class Run:
    path: Path
    name: str  # display label, unique within one report
    config: dict[str, Any]
    results: Any = None  # results.json as written (normally a dict), None when absent or unreadable
    head_scores: runs.HeadScores | None = None  # None: not a detection run, unfinished, or unreadable
    problems: list[str] = field(default_factory=list)
    finished: bool = True
    part_of: str | None = None  # name of the run that named this one as a sub-run
    times_given: int = 1  # how often the user passed this folder (reported once)
    model_label: str | None = None  # set by load_runs for a model another run made (a DPO training's checkpoint)
    _typed: tuple[Any, runs.RunResults] | None = field(default=None, repr=False, compare=False)

    @property
    def command(self) -> str:
        return str(self.config.get("command", "?"))

    @cached_property
    def samples(self) -> list[runs.SampleRecord]:
        try:
            return runs.read_samples(self.path)
        except (OSError, ValueError) as e:
            self.problems.append(f"{runs.SAMPLES}: {e}")
            return []

    @cached_property
    def overlays(self) -> dict[str, tuple[Any, Any]]:
        """``{sample id: ((L, H, V) attention, (V, 4) rects)}``; empty when none (or unreadable: see problems)."""
        try:
            return runs.read_overlays(self.path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:  # torn or foreign .npz
            self.problems.append(f"{runs.OVERLAYS} unreadable: {e}")
            return {}

    @cached_property
    def emergence(self) -> list[dict[str, Any]]:
        """The training log of an ``emergence`` run (:func:`vrh.runs.read_emergence`); empty when absent or
        unreadable (see problems)."""
        try:
            return runs.read_emergence(self.path)
        except FileNotFoundError as e:
            if self.command == "emergence":
                self.problems.append(str(e))
            return []
        except (OSError, ValueError, TypeError) as e:
            self.problems.append(f"{runs.EMERGENCE} unreadable: {e}")
            return []

    @property
    def model(self) -> str:
        return self.model_label or describe_model(self.config.get("model"))

    @property
    def data(self) -> str:
        d = self.config.get("data")
        if isinstance(d, dict):
            d = d.get("path")
        return Path(str(d)).name if d else "–"

    def title(self, detail: str = "") -> str:
        """Figure title: ``name: model on data (detail)``, leaving out whatever the run does not record."""
        what = " on ".join(x for x in (self.model, self.data) if x != "–")
        return f"{self.name}" + (f": {what}" if what else "") + (f" ({detail})" if detail else "")

    @property
    def res(self) -> runs.RunResults:
        """The results typed for the run's command (:func:`vrh.runs.results_from_json`), or that kind's empty
        value when there are none (every key None), so renderers read attributes freely."""
        if self._typed is None or self._typed[0] is not self.results:
            self._typed = (self.results, runs.results_from_json(self.command, self.results))
        return self._typed[1]

    @property
    def schema_version(self) -> int:
        """Schema of the results (runs without the key predate versioning: 1)."""
        v = self.res.schema_version
        return v if isinstance(v, int) and not isinstance(v, bool) else 1

    @property
    def newer_schema(self) -> bool:
        """Written by a newer vrh than this one: some keys may have moved or changed meaning."""
        return self.schema_version > runs.SCHEMA_VERSION

    @property
    def random_control(self) -> Control | None:
        """The run's random control (:func:`vrh.experiments.kcurves.random_control_report`), every task's
        together (:class:`Control`); None when the run drew no random heads or predates the block.

        A run of several tasks (the demo) has one block per task, ``{"grounding": {...}, "vqa": {...}}``: its
        entries are tagged with their ``task`` and its warnings prefixed by it. A command without a results
        kind is read the same way from the key as written."""
        return _control_of(self.res.value("random_control"))

    @property
    def subruns(self) -> list[str]:
        """The sub-run folders (relative names) that config and results name, each once, config's first."""
        named = [*(self.config.get("subruns") or []), *(self.res.value("subruns") or [])]
        return list(dict.fromkeys(str(n) for n in named if isinstance(n, str) and n))

    def progress(self) -> str:
        """What an unfinished run has written so far: sample records, by condition kind."""
        recs = self.samples
        if not recs:
            return "no sample records yet"
        kinds = Counter(sample_kind(r) for r in recs if sample_kind(r))
        conds = {r.get("condition") for r in recs if r.get("condition")}
        out = f"{len(recs)} sample records so far"
        if conds:
            out += f" over {len(conds)} conditions"
        if kinds:
            out += " (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")"
        return out


def _control_of(rc: Any) -> Control | None:
    """:attr:`Run.random_control` from the typed field (a report, or a demo's report per task) or, for a
    command without a results kind, from the value as written."""
    if isinstance(rc, runs.RandomControlReport):
        return Control([(None, e) for e in rc.entries()], rc.warning_lines())
    if isinstance(rc, dict) and not {"per_k", "warnings"} & set(rc):  # one block per task, or no block at all
        blocks = {task: b if isinstance(b, runs.RandomControlReport) else runs.RandomControlReport.coerce(b)
                  for task, b in rc.items()}
        if not blocks or not all(blocks.values()):
            return Control([], [])  # nothing a control could have drawn
        return Control([(str(task), e) for task, b in blocks.items() for e in b.entries()],
                       [f"{task}: {w}" for task, b in blocks.items() for w in b.warning_lines()])
    block = runs.RandomControlReport.coerce(rc)
    return None if block is None else _control_of(block)


def describe_model(model: Any) -> str:
    """Short model label: the checkpoint folder's name (+ model type), whatever form config.json holds."""
    if isinstance(model, dict):
        name = Path(str(model.get("path") or model.get("name") or "?")).name
        mt = model.get("model_type")
        return f"{name} ({mt})" if mt and mt not in name else name
    if model is None:
        return "–"
    return Path(str(model)).name or str(model)


def model_pair(a: Any, b: Any) -> tuple[str, str]:
    """Labels of two models (a transfer's A and B): their folder names (:func:`describe_model`), or, where
    those agree (``/ckpt/a/model`` and ``/ckpt/b/model``), their paths past the common folder. Never the
    absolute path: it says where the user keeps checkpoints, not which model ran.

    >>> model_pair("/home/me/runs/v5/organism_a", "/home/me/runs/vC/organism_c")
    ('organism_a', 'organism_c')
    >>> model_pair("/x/a/model", "/x/b/model")
    ('a/model', 'b/model')
    """
    na, nb = describe_model(a), describe_model(b)
    pa, pb = (Path(str(m.get("path") or m.get("name") or "") if isinstance(m, dict) else str(m)).parts for m in (a, b))
    if na != nb or pa == pb:
        return na, nb
    i = 0
    while i < min(len(pa), len(pb)) and pa[i] == pb[i]:
        i += 1
    return "/".join(pa[i:]) or na, "/".join(pb[i:]) or nb


def _finished(run: Run) -> bool:
    """The contract: the results file is written last. Detection runs written before detection recorded
    results (their config has no ``detect_ids``) finished when their head scores exist."""
    if runs.is_finished(run.path):
        return True
    return run.command == "detect" and run.head_scores is not None and "detect_ids" not in run.config


def load_run(path: str | Path, name: str | None = None) -> Run:
    path = Path(path)
    problems: list[str] = []
    try:
        config = runs.read_config(path)
    except FileNotFoundError:
        raise  # not a run folder at all: a typo
    except (ValueError, OSError) as e:
        problems.append(f"{runs.CONFIG} unreadable: {e}")
        config = {}
    if not isinstance(config, dict):
        problems.append(f"{runs.CONFIG} is not a JSON object")
        config = {}
    run = Run(path=path, name=name or path.name, config=config, problems=problems)
    try:
        run.results = runs.read_results(path)
    except (OSError, ValueError) as e:
        problems.append(f"{runs.RESULTS} unreadable: {e}")
    try:
        hs = runs.read_head_scores(path)
        primary = hs.variants[hs.scorer]  # the schema: the primary scorer's map and ranking, else unreadable
        if not isinstance(primary, dict) or not {"scores", "ranking"} <= primary.keys():
            raise KeyError(f"the primary scorer {hs.scorer!r} has no scores and ranking")
        run.head_scores = hs
    except FileNotFoundError:
        pass  # not a detection run, or detection did not finish
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # not the schema
        problems.append(f"{runs.HEAD_SCORES} unreadable: {e}")
    if run.command == "detect":
        _ = run.samples, run.overlays  # read now, so that a read problem is in the summary, which comes first
    if run.command == "emergence":
        _ = run.emergence
    run.finished = _finished(run)
    if not run.finished:
        problems.insert(0, f"INCOMPLETE: no results yet (no {runs.RESULTS}: still running, interrupted or "
                           f"crashed); {run.progress()}")
    if run.newer_schema:
        problems.append(f"{runs.RESULTS} has schema_version {run.schema_version}, newer than this vrh reads "
                        f"({runs.SCHEMA_VERSION}): some values may be missing or misread; upgrade vrh")
    return run


def load_runs(paths: list[str | Path]) -> list[Run]:
    """Runs in the order given, each folder once (by resolved path; :attr:`Run.times_given` counts the
    repeats), every run followed by the sub-runs it names, recursively. A path given that is not a run folder
    raises FileNotFoundError; a named sub-run that cannot be read is a problem of the run naming it. Folders
    sharing a name are labelled ``parent/name``."""
    out: dict[Path, Run] = {}  # resolved path -> run, in report order
    parents: dict[Path, Path] = {}  # resolved path of a sub-run -> that of the (first) run naming it

    def add(given: Path) -> None:
        # depth first, each run before the sub-runs it names, with a stack of its own: 1,300 folders nested in one
        # another are as many runs, not a RecursionError
        todo: list[tuple[Path, Path | None, str]] = [(given, None, "")]  # (folder, key of the run naming it, name)
        while todo:
            path, parent, name = todo.pop()
            key = path.resolve()
            if parent is not None and key not in parents:
                parents[key] = parent
            if key in out:
                continue
            try:
                run = out[key] = load_run(path)  # not a run folder: FileNotFoundError
            except FileNotFoundError as e:
                if parent is None:
                    raise
                out[parent].problems.append(f"sub-run {name!r} not found ({e})")  # named by the run, not the user
                continue
            named = []
            for sub in run.subruns:
                if not _inside(path / sub, key):
                    run.problems.append(f"sub-run {sub!r} is no folder inside {run.name}; not read")
                else:
                    named.append((path / sub, key, sub))
            todo.extend(reversed(named))

    given = Counter(Path(p).resolve() for p in paths)  # the user's repeats, not a sub-run also given
    for p in paths:
        add(Path(p))
    for key, n in given.items():
        out[key].times_given = n
    _label(out)
    for key, parent in parents.items():
        if key in out and parent in out:
            out[key].part_of = out[parent].name
    _label_trained_models(list(out.values()))
    return [*out.values()]


def _model_path(model: Any) -> str | None:
    path = model.get("path") if isinstance(model, dict) else model
    return str(Path(str(path))) if path else None


def _label_trained_models(loaded: list[Run]) -> None:
    """Runs whose model a ``dpo-train`` run among ``loaded`` wrote are labelled ``BASE + DPO (TRAIN RUN)``:
    its checkpoint folder is ``<train run>/model``, which :func:`describe_model` calls ``model``."""
    made = {}
    for run in loaded:
        if run.command == "dpo-train" and _model_path(run.res.model_dir):
            base = describe_model(run.res.base_model or run.config.get("model"))
            made[_model_path(run.res.model_dir)] = f"{base} + DPO ({run.name})"
    for run in loaded:
        label = made.get(_model_path(run.config.get("model")))
        if label:
            run.model_label = label


def _inside(path: Path, root: Path) -> bool:
    """``path`` lies strictly inside ``root`` once ``..`` and symlinks are followed."""
    try:
        resolved = path.resolve()
    except (OSError, ValueError, RuntimeError):  # a NUL byte; a symlink loop (RuntimeError before 3.13)
        return False
    return resolved != root and resolved.is_relative_to(root)


def _label(loaded: dict[Path, Run]) -> None:
    """Unique display names: the folder's name, ``parent/name`` where names repeat, primes as a last resort
    (two folders whose last two parts agree)."""
    names = [p.name for p in loaded]
    taken: list[str] = []
    for p, run in loaded.items():
        n = f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name
        while n in taken:
            n += "'"
        taken.append(n)
        run.name = n


# --- formatting shared by every section ---------------------------------------------------------------
def or_missing(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where it is None: how a key an older or partial run lacks is shown.

    >>> or_missing(None, "?"), or_missing(0, "?")
    ('?', 0)
    """
    return default if value is None else value


def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def pct(x: Any, digits: int = 1) -> str:
    """A fraction as a percentage string; missing or non-numeric values show as an en dash."""
    return f"{100 * x:.{digits}f}" if is_num(x) else "–"


def pm(mean: Any, std: Any) -> str:
    if not is_num(mean):
        return "–"
    return f"{pct(mean)} ± {pct(std)}" if is_num(std) else pct(mean)


def num(x: Any, fmt: str = ".3g") -> str:
    return format(x, fmt) if is_num(x) else ("–" if x is None else str(x))


def short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def at(seq: Any, i: int) -> Any:
    """``seq[i]`` or None: results lists may be shorter than ``k`` when a run was cut short."""
    return seq[i] if isinstance(seq, list) and i < len(seq) else None
